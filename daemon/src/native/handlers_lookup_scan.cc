// Connection<Socket>: LOOKUP, DELETE and SCAN.
#include "native/connection.h"

namespace kvdepot::daemon::native {

template <typename Socket>
void Connection<Socket>::HandleLookup(const FrameHeader& h) {
  auto placed = SplitBody(h);
  if (!placed.ok()) return RequestError(h, placed.status());
  auto keys = protocol::DecodeKeyList(placed->rest, limits_);
  if (!keys.ok()) return RequestError(h, keys.status());
  if (Status s = MatchPlacement(h, *placed, keys->size()); !s.ok()) return RequestError(h, s);
  if (Status s = CheckKeys(*keys); !s.ok()) return RequestError(h, s);
  // In a cluster the keys held elsewhere are asked of their owners in one parallel round.
  const std::uint64_t slot = ReserveSlot();
  ++store_ops_;
  server_.store().LocateMany(
      *keys, RouteOf(h),
      [self = this->shared_from_this(), h, slot](std::vector<protocol::Tier> tiers) {
        self->OnOwnThread([self, h, slot, tiers = std::move(tiers)]() mutable {
          self->StoreDone();
          protocol::LookupResult result;
          while (result.prefix_length < tiers.size() &&
                 tiers[result.prefix_length] != protocol::Tier::kNone) {
            ++result.prefix_length;
          }
          result.tiers = std::move(tiers);
          if (RequestObserver* o = self->server_.observer()) {
            o->OnLookup(result.prefix_length, static_cast<std::uint32_t>(result.tiers.size()));
          }
          self->FillSlot(slot, BodyFrame(h, StatusCode::kOk, protocol::EncodeLookupResult(result)));
        });
      },
      placed->placement_keys);
}

template <typename Socket>
void Connection<Socket>::HandleDelete(const FrameHeader& h) {
  auto placed = SplitBody(h);
  if (!placed.ok()) return RequestError(h, placed.status());
  auto keys = protocol::DecodeKeyList(placed->rest, limits_);
  if (!keys.ok()) return RequestError(h, keys.status());
  if (Status s = MatchPlacement(h, *placed, keys->size()); !s.ok()) return RequestError(h, s);
  if (Status s = CheckKeys(*keys); !s.ok()) return RequestError(h, s);
  // In a cluster each key is erased at its owners too; the answer waits for all of them.
  struct Deletes {
    std::vector<StatusCode> codes;
    std::size_t pending = 0;
  };
  auto d = std::make_shared<Deletes>();
  d->codes.assign(keys->size(), StatusCode::kNotFound);
  d->pending = keys->size();
  const std::uint64_t slot = ReserveSlot();
  ++store_ops_;
  for (std::size_t i = 0; i < keys->size(); ++i) {
    server_.store().Delete(
        (*keys)[i], RouteOf(h),
        [self = this->shared_from_this(), h, slot, d, i](bool found) {
          self->OnOwnThread([self, h, slot, d, i, found] {
            if (found) d->codes[i] = StatusCode::kOk;
            if (--d->pending != 0) return;
            self->StoreDone();
            self->FillSlot(slot,
                           BodyFrame(h, StatusCode::kOk, protocol::EncodeStatusList(d->codes)));
          });
        },
        PlacementOf(placed->placement_keys, i));
  }
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
