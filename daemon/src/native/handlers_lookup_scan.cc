// Connection<Socket>: LOOKUP, DELETE and SCAN.
#include "native/connection.h"

namespace kvdepot::daemon::native {

template <typename Socket>
void Connection<Socket>::HandleLookup(const FrameHeader& h) {
  auto keys = protocol::DecodeKeyList(body_, limits_);
  if (!keys.ok()) return RequestError(h, keys.status());
  if (Status s = CheckKeys(*keys); !s.ok()) return RequestError(h, s);
  protocol::LookupResult result;
  bool prefix = true;
  for (std::string_view key : *keys) {
    const protocol::Tier tier = server_.store().Locate(key);
    result.tiers.push_back(tier);
    const bool present = tier != protocol::Tier::kNone;
    prefix = prefix && present;
    if (prefix) ++result.prefix_length;
  }
  if (RequestObserver* o = server_.observer()) {
    o->OnLookup(result.prefix_length, static_cast<std::uint32_t>(keys->size()));
  }
  SendBody(h, StatusCode::kOk, protocol::EncodeLookupResult(result));
}

template <typename Socket>
void Connection<Socket>::HandleDelete(const FrameHeader& h) {
  auto keys = protocol::DecodeKeyList(body_, limits_);
  if (!keys.ok()) return RequestError(h, keys.status());
  if (Status s = CheckKeys(*keys); !s.ok()) return RequestError(h, s);
  std::vector<StatusCode> codes;
  for (std::string_view key : *keys) {
    codes.push_back(server_.store().Erase(key) ? StatusCode::kOk : StatusCode::kNotFound);
  }
  SendBody(h, StatusCode::kOk, protocol::EncodeStatusList(codes));
}

template <typename Socket>
void Connection<Socket>::HandleScan(const FrameHeader& h) {
  auto q = protocol::DecodeScanRequest(body_, limits_);
  if (!q.ok()) return RequestError(h, q.status());
  if (!scope_->all) return HandleScopedScan(h, *q);
  const protocol::ScanResult result = server_.store().Scan(q->prefix, q->cursor, q->limit, q->tier);
  SendBody(h, StatusCode::kOk, protocol::EncodeScanResult(result));
}

template <typename Socket>
void Connection<Socket>::HandleScopedScan(const FrameHeader& h, const protocol::ScanRequest& q) {
  if (q.prefix.size() >= kNamespaceIdBytes &&
      !scope_->AllowsNamespace(std::string_view(q.prefix).substr(0, kNamespaceIdBytes))) {
    return RequestError(h, PermissionDenied("scan: the prefix names a namespace this token "
                                            "may not use"));
  }
  protocol::ScanResult out;
  for (const std::string& ns : scope_->namespaces) {
    const std::string_view want(q.prefix);
    if (want.size() >= ns.size() ? want.substr(0, ns.size()) != ns
                                 : std::string_view(ns).substr(0, want.size()) != want) {
      continue;
    }
    if (!q.cursor.empty() && std::string_view(q.cursor).substr(0, ns.size()) > ns) continue;
    if (out.entries.size() == q.limit) {  // more namespaces follow: resume after the last key
      out.next_cursor = out.entries.back().key;
      break;
    }
    const std::string& prefix = want.size() > ns.size() ? q.prefix : ns;
    protocol::ScanResult part = server_.store().Scan(
        prefix, q.cursor, q.limit - static_cast<std::uint32_t>(out.entries.size()), q.tier);
    for (auto& e : part.entries) {
      if (e.key.size() == 48) out.entries.push_back(std::move(e));
    }
    if (!part.next_cursor.empty()) {
      out.next_cursor = std::move(part.next_cursor);
      break;
    }
  }
  SendBody(h, StatusCode::kOk, protocol::EncodeScanResult(out));
}

template class Connection<TcpSocket>;
template class Connection<UnixSocket>;
template class Connection<TlsSocket>;

}  // namespace kvdepot::daemon::native
