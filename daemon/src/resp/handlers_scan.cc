// resp:// command handlers for the keyspace (docs/resp.md): SCAN, DBSIZE's key count and TYPE.
#include <algorithm>
#include <charconv>

#include "resp/resp_connection.h"

namespace kvdepot::daemon::resp {
namespace {

// SCAN's COUNT is clamped to this (the work of one call).
constexpr std::int64_t kMaxScanCount = 65536;

}  // namespace

void RespConnection::Type(const Args& args) {
  if (std::string e = KeyScopeError(args[1]); !e.empty()) return ReplyError(e);
  LocateValues({args[1]}, [this](const std::vector<protocol::Tier>& tiers) {
    Out().append(tiers[0] != protocol::Tier::kNone ? "+string\r\n" : "+none\r\n");
  });
}

// key to resume after next (empty: the scan is complete). A namespace-restricted token scans
// only its namespaces' 48-byte chunk keys (other namespaces are never read).
std::vector<std::string> RespConnection::ScanKeys(const std::string& resume_after,
                                                  std::uint32_t limit, std::string& next) const {
  std::vector<std::string> keys;
  next.clear();
  const Store& store = server_.store();
  if (scope_->all) {
    auto page = store.Scan("", resume_after, limit, protocol::Tier::kNone);
    for (auto& e : page.entries) keys.push_back(std::move(e.key));
    next = page.next_cursor;
    return keys;
  }
  for (const std::string& ns : scope_->namespaces) {
    if (!resume_after.empty() && ns < resume_after.substr(0, kNamespaceIdBytes)) continue;
    std::string cursor = resume_after.rfind(ns, 0) == 0 ? resume_after : std::string();
    while (keys.size() < limit) {
      auto page = store.Scan(ns, cursor, limit - static_cast<std::uint32_t>(keys.size()),
                             protocol::Tier::kNone);
      if (page.entries.empty()) break;
      cursor = page.entries.back().key;
      for (auto& e : page.entries) {
        if (e.key.size() == 48) keys.push_back(std::move(e.key));
      }
      if (page.next_cursor.empty()) break;
    }
    if (keys.size() >= limit) {
      next = cursor;
      break;
    }
  }
  return keys;
}

// The keys this connection's scope reaches: the host tier's count when that is exact (no SSD
// tier, every namespace), else a scan.
std::uint64_t RespConnection::CountKeys() const {
  const Store& store = server_.store();
  if (scope_->all && store.ssd() == nullptr) return store.host().stats().chunks;
  std::uint64_t n = 0;
  std::string cursor, next;
  do {
    n += ScanKeys(cursor, 4096, next).size();
    cursor = next;
  } while (!cursor.empty());
  return n;
}

// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
void RespConnection::Scan(const Args& args) {
  std::uint64_t cursor_id = 0;
  {
    const auto [p, ec] =
        std::from_chars(args[1].data(), args[1].data() + args[1].size(), cursor_id);
    if (ec != std::errc() || p != args[1].data() + args[1].size()) {
      return ReplyError("ERR invalid cursor");
    }
  }
  std::optional<std::string> pattern;
  std::int64_t count = 10;
  bool strings = true;
  for (std::size_t i = 2; i < args.size(); i += 2) {
    if (i + 1 >= args.size()) return ReplyError("ERR syntax error");
    if (EqualsIgnoreCase(args[i], "match")) {
      pattern = args[i + 1];
    } else if (EqualsIgnoreCase(args[i], "count")) {
      if (!resp::ParseInt64(args[i + 1], count)) {
        return ReplyError("ERR value is not an integer or out of range");
      }
      if (count < 1) return ReplyError("ERR syntax error");
    } else if (EqualsIgnoreCase(args[i], "type")) {
      strings = EqualsIgnoreCase(args[i + 1], "string");
    } else {
      return ReplyError("ERR syntax error");
    }
  }
  std::string resume_after;
  if (cursor_id != 0) {
    auto found = server_.cursors().Find(cursor_id);
    if (!found) {
      return ReplyError("ERR invalid cursor: " + args[1] +
                        " is not one this server handed out, or was forgotten (kvdepot keeps "
                        "the last " +
                        std::to_string(kMaxScanCursors) +
                        " SCAN cursors); restart the scan from 0");
    }
    resume_after = std::move(*found);
  }
  std::string next;
  auto keys =
      ScanKeys(resume_after, static_cast<std::uint32_t>(std::min(count, kMaxScanCount)), next);
  std::erase_if(keys, [&](const std::string& k) {
    return !strings || (pattern && !resp::GlobMatch(*pattern, k));
  });
  const std::uint64_t next_id = next.empty() ? 0 : server_.cursors().Add(std::move(next));
  std::string& out = Out();
  resp::AppendArrayHeader(out, 2);
  resp::AppendBulk(out, std::to_string(next_id));
  resp::AppendArrayHeader(out, keys.size());
  for (const auto& k : keys) resp::AppendBulk(out, k);
}

}  // namespace kvdepot::daemon::resp
