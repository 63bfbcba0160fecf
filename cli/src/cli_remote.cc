// `kvdepot [--addr ADDR] COMMAND`: commands that talk to a running kvdepotd.
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iomanip>
#include <iostream>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_args.h"
#include "cli_commands.h"
#include "cli_internal.h"
#include "cli_json.h"
#include "kvdepot/base/file_io.h"
#include "kvdepot/base/hex.h"
#include "kvdepot/client/client.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/protocol/chunk_key.h"

namespace kvdepot::cli {
namespace {}  // namespace

std::string KeyFromArg(std::string_view arg) {
  if (arg.size() == 2 * kChunkKeyBytes) {
    if (std::optional<std::string> key = HexDecode(arg)) return *std::move(key);
  }
  return std::string(arg);
}

std::string KeyForDisplay(std::string_view key) {
  const bool printable = std::all_of(key.begin(), key.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  return printable ? std::string(key) : HexLower(key);
}

Result<std::unique_ptr<client::Connection>> Connect(const client::ClientOptions& remote) {
  const client::ClientOptions& o = remote;
  auto c = client::Connection::Connect(o);
  if (!c.ok()) return c.status().WithContext("kvdepotd at " + remote.address);
  return c;
}

namespace {

Status CheckKey(const std::string& key) {
  if (key.empty() || key.size() > protocol::Limits{}.max_key_bytes) {
    return UsageError("a KEY must be 1 to " + std::to_string(protocol::Limits{}.max_key_bytes) +
                      " bytes");
  }
  return Status::Ok();
}

Status Ping(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("ping")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({}));
  const auto start = std::chrono::steady_clock::now();
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_RETURN_IF_ERROR(c->Ping().WithContext(remote.address));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (args.Has("--json")) {
    PrintJson({{"address", remote.address}, {"ms", ms}}, io.out);
    return Status::Ok();
  }
  io.out << "pong from " << remote.address << " in " << std::fixed << std::setprecision(2) << ms
         << " ms\n";
  return Status::Ok();
}

// The scan prefix that --namespace NSID (32 hex digits: a chunk key's first 16 bytes) or
// --prefix P names; empty when neither is given. `command` labels errors.
Result<std::string> ScanPrefix(const Args& args, const std::string& command) {
  if (args.Has("--namespace") && args.Has("--prefix")) {
    return UsageError(command + ": give --namespace or --prefix, not both");
  }
  if (const auto ns = args.Get("--namespace")) {
    std::optional<std::string> id = HexDecode(*ns);
    if (ns->size() != 32 || !id) {
      return UsageError(command + " --namespace " + *ns +
                        ": expected a namespace id, 32 hex characters (the first 16 bytes of a "
                        "chunk key; 'kvdepot ls' shows keys in hex)");
    }
    return *std::move(id);
  }
  return args.Get("--prefix").value_or("");
}

// Scans the pages of `q` (its prefix and tier) and keeps the entries `keep` accepts, at most
// `limit` of them. `*truncated` tells whether more may exist.
Result<std::vector<protocol::ScanEntry>> ScanMatching(
    client::Connection& c, protocol::ScanRequest q, std::uint64_t limit,
    const std::function<bool(const protocol::ScanEntry&)>& keep, bool* truncated) {
  std::vector<protocol::ScanEntry> entries;
  *truncated = false;
  while (true) {
    q.limit = 1000;
    KVD_ASSIGN_OR_RETURN(protocol::ScanResult page, c.Scan(q));
    for (auto& e : page.entries) {
      if (!keep(e)) continue;
      if (entries.size() == limit) {
        *truncated = true;
        return entries;
      }
      entries.push_back(std::move(e));
    }
    if (page.next_cursor.empty() || page.entries.empty()) return entries;
    q.cursor = page.next_cursor;
  }
}

bool IsGlob(std::string_view pattern) {
  return pattern.find_first_of("*?[\\") != std::string_view::npos;
}

// An idle time for people: "850ms", "12.3s", "7m", "5h", "3d".
std::string HumanIdle(std::uint64_t ms) {
  std::ostringstream s;
  if (ms < 1000) {
    s << ms << "ms";
  } else if (ms < 60'000) {
    s << std::fixed << std::setprecision(1) << static_cast<double>(ms) / 1000 << "s";
  } else if (ms < 3'600'000) {
    s << ms / 60'000 << "m";
  } else if (ms < 86'400'000) {
    s << ms / 3'600'000 << "h";
  } else {
    s << ms / 86'400'000 << "d";
  }
  return s.str();
}

// Orders `entries` as --sort asks: key (byte order), size (largest first), tier (gpu, host,
// ssd), idle (longest idle first); ties in key order.
Status SortEntries(std::vector<protocol::ScanEntry>& entries, const std::string& by) {
  using E = protocol::ScanEntry;
  std::function<bool(const E&, const E&)> less;
  if (by == "key") {
    less = [](const E& a, const E& b) { return a.key < b.key; };
  } else if (by == "size") {
    less = [](const E& a, const E& b) {
      return a.value_bytes != b.value_bytes ? a.value_bytes > b.value_bytes : a.key < b.key;
    };
  } else if (by == "tier") {
    less = [](const E& a, const E& b) {
      return a.tier != b.tier ? a.tier < b.tier : a.key < b.key;
    };
  } else if (by == "idle") {
    less = [](const E& a, const E& b) {
      return a.idle_ms != b.idle_ms ? a.idle_ms > b.idle_ms : a.key < b.key;
    };
  } else {
    return UsageError("--sort " + by + ": expected key, size, tier or idle");
  }
  std::stable_sort(entries.begin(), entries.end(), less);
  return Status::Ok();
}

Status Ls(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("ls")));
  if (args.positional().size() > 1) {
    return UsageError("ls takes one PATTERN (quote a glob: 'model-*'), got '" +
                      args.positional()[1] + "' too");
  }
  protocol::ScanRequest q;
  KVD_ASSIGN_OR_RETURN(q.prefix, ScanPrefix(args, "ls"));
  std::string pattern;
  if (!args.positional().empty()) {
    if (args.Has("--namespace") || args.Has("--prefix")) {
      return UsageError("ls: give a PATTERN or --namespace/--prefix, not both");
    }
    pattern = args.positional()[0];
    // The scan starts at the pattern's literal head; a glob then filters what it returns.
    q.prefix = IsGlob(pattern) ? pattern.substr(0, pattern.find_first_of("*?[\\")) : pattern;
  }
  if (const auto tier = args.Get("--tier")) {
    KVD_ASSIGN_OR_RETURN(q.tier, ParseFlagValue("--tier", *tier, protocol::ParseTierName));
  }
  KVD_ASSIGN_OR_RETURN(std::uint64_t limit, args.GetUint("--limit", 100, 1, 1000000));
  const std::string sort = args.Get("--sort").value_or("key");
  std::vector<protocol::ScanEntry> probe;
  KVD_RETURN_IF_ERROR(SortEntries(probe, sort));  // checks the --sort value before connecting
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  const bool glob = IsGlob(pattern);
  bool truncated = false;
  KVD_ASSIGN_OR_RETURN(std::vector<protocol::ScanEntry> entries,
                       ScanMatching(
                           *c, q, limit,
                           [&](const protocol::ScanEntry& e) {
                             return !glob || ::fnmatch(pattern.c_str(),
                                                       KeyForDisplay(e.key).c_str(), 0) == 0;
                           },
                           &truncated));
  KVD_RETURN_IF_ERROR(SortEntries(entries, sort));
  if (args.Has("--json")) {
    Json json = Json::array();
    for (const auto& e : entries) {
      json.push_back({{"key", KeyForDisplay(e.key)},
                      {"bytes", e.value_bytes},
                      {"tier", std::string(protocol::TierName(e.tier))},
                      {"idle_ms", e.idle_ms}});
    }
    PrintJson(json, io.out);
    return Status::Ok();
  }
  std::uint64_t total = 0;
  io.out << std::left << std::setw(5) << "TIER" << std::right << std::setw(12) << "SIZE"
         << std::setw(9) << "IDLE"
         << "  KEY\n";
  for (const auto& e : entries) {
    io.out << std::left << std::setw(5) << protocol::TierName(e.tier) << std::right << std::setw(12)
           << HumanBytes(static_cast<double>(e.value_bytes)) << std::setw(9) << HumanIdle(e.idle_ms)
           << "  " << KeyForDisplay(e.key) << "\n";
    total += e.value_bytes;
  }
  io.out << entries.size() << (entries.size() == 1 ? " key, " : " keys, ")
         << HumanBytes(static_cast<double>(total))
         << (truncated ? " (more match: raise --limit)" : "") << "\n";
  return Status::Ok();
}
Status Get(const client::ClientOptions& remote, std::span<const char* const> argv, Io io,
           const Terminals& terminals) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("get")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"KEY"}));
  const std::string key = KeyFromArg(args.positional()[0]);
  KVD_RETURN_IF_ERROR(CheckKey(key));
  auto out = args.Get("-o") ? args.Get("-o") : args.Get("--output");
  if (!out && args.Has("--json")) {
    return UsageError("get --json prints what was written: it needs -o FILE");
  }
  if (!out && terminals.stdout_is_terminal) {
    return UsageError("get needs -o FILE when stdout is a terminal (-o - writes to stdout anyway)");
  }
  if (!out) out = "-";
  if (*out == "-" && args.Has("--json")) {
    return UsageError("get --json prints its report on stdout: use -o FILE, not -o -");
  }
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_ASSIGN_OR_RETURN(auto value, c->Get(key));
  if (!value) return NotFound("key '" + args.positional()[0] + "' is not in the cache");
  if (*out == "-") {
    io.out.write(reinterpret_cast<const char*>(value->data()),
                 static_cast<std::streamsize>(value->size()));
    return Status::Ok();
  }
  KVD_RETURN_IF_ERROR(WriteFileAtomic(*out, *value));
  if (args.Has("--json")) {
    PrintJson({{"key", args.positional()[0]}, {"file", *out}, {"bytes", value->size()}}, io.out);
    return Status::Ok();
  }
  io.out << "wrote " << *out << ": " << value->size() << " bytes\n";
  return Status::Ok();
}

// Standard input to its end, at most kCliMaxValueBytes.
Result<std::vector<std::byte>> ReadStdin() {
  std::vector<std::byte> bytes;
  std::byte buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof(buffer));
    if (n == 0) return bytes;
    if (n < 0) {
      if (errno == EINTR) continue;
      return StatusFromErrno(errno, "reading standard input");
    }
    if (bytes.size() + static_cast<std::size_t>(n) > kCliMaxValueBytes) {
      return OutOfRange("standard input holds more than " + std::to_string(kCliMaxValueBytes) +
                        " bytes");
    }
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
}

// A number of the daemon's STATS document at `pointer` (e.g. "/limits/max_value_bytes").
std::optional<std::uint64_t> JsonNumber(const std::string& stats, const char* pointer) {
  const Json doc = Json::parse(stats, nullptr, /*allow_exceptions=*/false);
  const Json::json_pointer at(pointer);
  if (doc.is_discarded() || !doc.contains(at) || !doc.at(at).is_number_unsigned()) {
    return std::nullopt;
  }
  return doc.at(at).get<std::uint64_t>();
}

// A PUT the server refused, explained: its status, what it means, the limit that applies and the
// setting that changes it (read from the server's STATS; best effort).
Status ExplainPutRefusal(const client::ClientOptions& remote, const Status& refusal,
                         std::string_view key_arg, std::uint64_t value_bytes,
                         std::uint64_t key_bytes) {
  std::string stats;
  if (auto c = client::Connection::Connect(remote); c.ok()) {
    if (auto s = (*c)->Stats(); s.ok()) stats = std::move(*s);
  }
  const auto quote = [&](const char* field) {
    const auto v = JsonNumber(stats, field);
    return v ? std::to_string(*v) : std::string("(unknown: STATS failed)");
  };
  std::string why;
  switch (refusal.code()) {
    case StatusCode::kOutOfRange:
      if (const auto max_key = JsonNumber(stats, "/limits/max_key_bytes");
          max_key && key_bytes > *max_key) {
        why = "the key is " + std::to_string(key_bytes) + " bytes, over the server's limit of " +
              std::to_string(*max_key) + " (limits.max_key_bytes, kvdepotd --limits-max-key-bytes)";
      } else {
        why = "the value is " + std::to_string(value_bytes) +
              " bytes, over the server's limit of " + quote("/limits/max_value_bytes") +
              " bytes (limits.max_value_bytes, kvdepotd --limits-max-value-bytes; at most "
              "host.capacity)";
      }
      break;
    case StatusCode::kResourceExhausted:
      why = "the host tier has no room for " + std::to_string(value_bytes) +
            " bytes right now: host.capacity is " + quote("/tiers/host/capacity") +
            " bytes and what is left is in use (being read, or waiting for the SSD's write "
            "buffer); retry, or raise host.capacity (--host-capacity) or ssd.write_buffer";
      break;
    case StatusCode::kPermissionDenied:
      why =
          "the token's scope does not cover this key's namespace (auth.token_file on the "
          "server; --token-file here)";
      break;
    case StatusCode::kUnavailable:
      why =
          "the daemon is a cluster member that cannot store it now — fenced (its cluster lease "
          "lapsed, or etcd was unreachable since it started: its /healthz says which) or none of "
          "the key's owners answered; send the write to another member (kvdepot cluster status "
          "lists them)";
      break;
    default: why = "see the daemon's log";
  }
  return Status(refusal.code(), "kvdepotd refused the value for '" + std::string(key_arg) + "': " +
                                    std::string(StatusCodeName(refusal.code())) + ": " + why);
}

Status Put(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("put")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"KEY", "FILE"}));
  const std::string key = KeyFromArg(args.positional()[0]);
  KVD_RETURN_IF_ERROR(CheckKey(key));
  const std::string& file = args.positional()[1];
  // No limit of the CLI's own: the server refuses what exceeds its limits.max_value_bytes.
  KVD_ASSIGN_OR_RETURN(auto bytes, file == "-" ? ReadStdin() : ReadFile(file, kCliMaxValueBytes));
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  if (Status s = c->Put(key, bytes); !s.ok()) {
    if (s.message().rfind("server refused the value", 0) != 0) return s;
    return ExplainPutRefusal(remote, s, args.positional()[0], bytes.size(), key.size());
  }
  if (args.Has("--json")) {
    PrintJson({{"key", args.positional()[0]}, {"bytes", bytes.size()}}, io.out);
    return Status::Ok();
  }
  io.out << "stored " << bytes.size() << " bytes under " << args.positional()[0] << "\n";
  return Status::Ok();
}

// `del --prefix P` / `del --namespace NSID`: scans for the matching keys, asks (on a terminal,
// unless --yes), then deletes them in batches and reports how many keys and bytes went.
Status Purge(const client::ClientOptions& remote, const Args& args, Io io,
             const Terminals& terminals) {
  if (!args.positional().empty()) {
    return UsageError("del: give KEYs or --prefix/--namespace, not both");
  }
  KVD_ASSIGN_OR_RETURN(const std::string prefix, ScanPrefix(args, "del"));
  const std::string flag = args.Has("--namespace") ? "--namespace" : "--prefix";
  const std::string what = args.Has("--namespace") ? "namespace " + *args.Get("--namespace")
                                                   : "prefix '" + KeyForDisplay(prefix) + "'";
  if (prefix.empty()) {
    return UsageError("del --prefix needs a non-empty prefix (it would delete every key)");
  }
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  protocol::ScanRequest q;
  q.prefix = prefix;
  bool truncated = false;
  KVD_ASSIGN_OR_RETURN(
      std::vector<protocol::ScanEntry> entries,
      ScanMatching(
          *c, q, UINT64_MAX, [](const protocol::ScanEntry&) { return true; }, &truncated));
  std::uint64_t bytes = 0;
  for (const auto& e : entries) bytes += e.value_bytes;
  const std::string found = std::to_string(entries.size()) +
                            (entries.size() == 1 ? " key (" : " keys (") +
                            HumanBytes(static_cast<double>(bytes)) + ")";
  if (!entries.empty() && !args.Has("--yes")) {
    if (!terminals.stdin_is_terminal) {
      return UsageError("del " + flag + ": " + found + " under " + what +
                        "; not deleting without confirmation, and stdin is not a terminal to "
                        "ask on: add --yes");
    }
    io.err << "delete " << found << " under " << what << "? [y/N] " << std::flush;
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "Y" && answer != "yes") {
      return Status(StatusCode::kCancelled,
                    "not confirmed: nothing deleted (answer y to delete, or pass --yes)");
    }
  }
  constexpr std::size_t kBatch = 1000;  // keys per DELETE request, well under limits.max_batch
  std::uint64_t deleted = 0, deleted_bytes = 0, gone = 0;
  for (std::size_t i = 0; i < entries.size(); i += kBatch) {
    const std::size_t n = std::min(kBatch, entries.size() - i);
    std::vector<std::string> keys;
    for (std::size_t j = 0; j < n; ++j) keys.push_back(entries[i + j].key);
    KVD_ASSIGN_OR_RETURN(auto codes, c->Delete(keys));
    for (std::size_t j = 0; j < codes.size(); ++j) {
      if (codes[j] == StatusCode::kOk) {
        ++deleted;
        deleted_bytes += entries[i + j].value_bytes;
      } else {
        ++gone;  // removed or evicted since the scan
      }
    }
  }
  if (args.Has("--json")) {
    PrintJson({{flag.substr(2), args.Get(flag).value_or("")},
               {"keys_deleted", deleted},
               {"bytes_deleted", deleted_bytes},
               {"keys_already_gone", gone}},
              io.out);
    return Status::Ok();
  }
  io.out << "deleted " << deleted << (deleted == 1 ? " key (" : " keys (")
         << HumanBytes(static_cast<double>(deleted_bytes)) << ") under " << what;
  if (gone > 0) io.out << "; " << gone << " were gone already";
  io.out << "\n";
  return Status::Ok();
}

Status Del(const client::ClientOptions& remote, std::span<const char* const> argv, Io io,
           const Terminals& terminals) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("del")));
  if (args.Has("--prefix") || args.Has("--namespace")) {
    return Purge(remote, args, io, terminals);
  }
  if (args.Has("--yes")) return UsageError("del --yes goes with --prefix or --namespace");
  if (args.positional().empty()) {
    return UsageError("del needs KEYs, --prefix P or --namespace NSID");
  }
  std::vector<std::string> keys;
  for (const auto& k : args.positional()) {
    keys.push_back(KeyFromArg(k));
    KVD_RETURN_IF_ERROR(CheckKey(keys.back()));
  }
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_ASSIGN_OR_RETURN(auto codes, c->Delete(keys));
  std::size_t missing = 0;
  Json json = Json::array();
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const bool deleted = codes[i] == StatusCode::kOk;
    if (args.Has("--json")) {
      json.push_back({{"key", args.positional()[i]}, {"deleted", deleted}});
    } else {
      io.out << args.positional()[i] << ": " << (deleted ? "deleted" : "not found") << "\n";
    }
    missing += !deleted;
  }
  if (args.Has("--json")) PrintJson(json, io.out);
  if (missing == codes.size()) return NotFound("no key was present");
  return Status::Ok();
}

Status Lookup(const client::ClientOptions& remote, std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("lookup")));
  if (args.positional().empty()) return UsageError("lookup needs KEYs in prefix order");
  std::vector<std::string> keys;
  for (const auto& k : args.positional()) {
    keys.push_back(KeyFromArg(k));
    KVD_RETURN_IF_ERROR(CheckKey(keys.back()));
  }
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_ASSIGN_OR_RETURN(auto r, c->Lookup(keys));
  if (args.Has("--json")) {
    Json tiers = Json::array();
    for (auto t : r.tiers) tiers.push_back(std::string(protocol::TierName(t)));
    PrintJson({{"prefix_length", r.prefix_length}, {"tiers", std::move(tiers)}}, io.out);
  } else {
    io.out << "longest cached prefix: " << r.prefix_length << " of " << keys.size() << "\n";
    for (std::size_t i = 0; i < r.tiers.size(); ++i) {
      io.out << "  " << std::left << std::setw(5) << protocol::TierName(r.tiers[i]) << " "
             << args.positional()[i] << "\n";
    }
  }
  return Status::Ok();
}

Status InspectRemote(const client::ClientOptions& remote, std::span<const char* const> argv,
                     Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("inspect")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"KEY"}));
  const std::string key = KeyFromArg(args.positional()[0]);
  KVD_RETURN_IF_ERROR(CheckKey(key));
  KVD_ASSIGN_OR_RETURN(auto c, Connect(remote));
  KVD_ASSIGN_OR_RETURN(auto value, c->Get(key));
  if (!value) return NotFound("key '" + args.positional()[0] + "' is not in the cache");
  return InspectContainerBytes(args.positional()[0], *value, args.Has("--json"), io);
}

}  // namespace

Status RunRemoteCommand(const client::ClientOptions& remote, std::string_view command,
                        std::span<const char* const> argv, Io io, bool* handled,
                        const Terminals& terminals) {
  *handled = true;
  if (command == "ping") return Ping(remote, argv, io);
  if (command == "stats") return RunStats(remote, argv, io);
  if (command == "top") return RunTop(remote, argv, io);
  if (command == "ls") return Ls(remote, argv, io);
  if (command == "get") return Get(remote, argv, io, terminals);
  if (command == "put") return Put(remote, argv, io);
  if (command == "del") return Del(remote, argv, io, terminals);
  if (command == "lookup") return Lookup(remote, argv, io);
  if (command == "inspect") return InspectRemote(remote, argv, io);
  if (command == "bench") return RunBench(remote, argv, io, terminals);
  if (command == "cluster") return RunClusterCommand(remote, argv, io);
  *handled = false;
  return Status::Ok();
}

}  // namespace kvdepot::cli
