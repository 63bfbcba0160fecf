// Connection<Socket>: same-host zero-copy (docs/gpu-tier.md) — MAP, LEASE_GET, RELEASE.
#include "native/connection.h"

namespace kvdepot::daemon::native {

template <typename Socket>
void Connection<Socket>::HandleMap(const FrameHeader& h) {
  if (!kIsUnix) {
    return RequestError(h, Unavailable("map: shared memory is offered on the Unix socket only"));
  }
  if (!scope_->all) {
    // The arena and the GPU pool hold every namespace's values: only an unrestricted token
    // may map them (docs/security.md).
    return RequestError(h, PermissionDenied("map: the shared arena spans every namespace; "
                                            "this token is restricted to some"));
  }
  protocol::MapInfo info;
  const auto& arena = server_.store().host().arena();
  if (arena) info.host_arena_bytes = arena->size();
  if (DeviceTier* d = server_.store().device()) info = MergeGpu(info, d->Pool());
  if (info.host_arena_bytes == 0 && info.gpu_pool_bytes == 0) {
    return RequestError(h, Unavailable("map: this daemon has no shared host arena "
                                       "(host.shared_memory) and no GPU tier"));
  }
  Outgoing out = BodyFrame(h, StatusCode::kOk, protocol::EncodeMapInfo(info));
  if (arena) out.pass_fd = arena->fd();
  Enqueue(std::move(out));
}

template <typename Socket>
protocol::MapInfo Connection<Socket>::MergeGpu(protocol::MapInfo info, const DevicePool& gpu) {
  static_assert(kDeviceIpcHandleBytes == protocol::kIpcHandleBytes);
  info.gpu_pool_bytes = gpu.bytes;
  info.gpu_device = gpu.device;
  info.ipc_handle = gpu.ipc_handle;
  return info;
}

template <typename Socket>
void Connection<Socket>::HandleLeaseGet(const FrameHeader& h) {
  if (!kIsUnix) {
    return RequestError(h, Unavailable("lease_get: shared memory is offered on the Unix socket "
                                       "only"));
  }
  auto q = protocol::DecodeLeaseGetRequest(body_, limits_);
  if (!q.ok()) return RequestError(h, q.status());
  if (Status s = CheckKeys(q->keys); !s.ok()) return RequestError(h, s);
  auto batch = std::make_shared<LeaseBatch>();
  batch->header = h;
  batch->leases.resize(q->keys.size());
  batch->holds.resize(q->keys.size());
  batch->state.assign(q->keys.size(), LeaseBatch::kResolved);
  batch->slot = ReserveSlot();
  Store& store = server_.store();
  for (std::uint32_t i = 0; i < q->keys.size(); ++i) {
    const std::string_view key = q->keys[i];
    protocol::Lease& l = batch->leases[i];
    std::shared_ptr<const void> hold;
    DeviceTier* device = store.device();
    if (device != nullptr && q->tier != protocol::Tier::kHost) {
      if (auto d = device->Lease(key)) {
        l.tier = protocol::Tier::kGpu;
        l.offset = d->offset;
        l.length = d->length;
        hold = std::move(d->hold);
      }
    }
    if (!hold && q->tier != protocol::Tier::kGpu) {
      if (store.ssd() != nullptr && store.Locate(key) == protocol::Tier::kSsd) {
        // Only on the SSD tier: read it into host memory (GrantLeases answers it).
        batch->state[i] = LeaseBatch::kReading;
        get_backlog_.push_back({h, std::string(key), i, false, 0, -1, batch, {}});
        continue;
      }
      if (ValueRef v = store.host().Get(key)) {
        if (!LeaseHostValue(std::move(v), l, hold)) {
          l.status = StatusCode::kUnavailable;  // in private memory: use GET
        }
      }
    }
    if (!hold && l.status == StatusCode::kOk) {
      // Absent from the shared tiers: unavailable when another tier has it (use GET).
      l.status = store.Locate(key) == protocol::Tier::kNone ? StatusCode::kNotFound
                                                            : StatusCode::kUnavailable;
    }
    batch->holds[i] = std::move(hold);
  }
  GrantLeases(*batch);
  PumpGets();
}

template <typename Socket>
bool Connection<Socket>::LeaseHostValue(ValueRef v, protocol::Lease& l,
                                        std::shared_ptr<const void>& hold) {
  if (!v->arena_offset()) return false;
  l.tier = protocol::Tier::kHost;
  l.offset = *v->arena_offset();
  l.length = v->bytes().size();
  hold = std::move(v);
  return true;
}

template <typename Socket>
void Connection<Socket>::OnLeaseRead(const PendingGet& g, Result<Found> found) {
  StoreDone();
  LeaseBatch& b = *g.lease;
  protocol::Lease& l = b.leases[g.index];
  if (!found.ok()) {
    l.status = found.status().code();
  } else if (!LeaseHostValue(std::move(found->value), l, b.holds[g.index])) {
    l.status = StatusCode::kUnavailable;  // the arena had no range for it: use GET
  }
  b.state[g.index] = LeaseBatch::kReadDone;
  GrantLeases(b);
  PumpGets();
}

template <typename Socket>
void Connection<Socket>::GrantLeases(LeaseBatch& b) {
  while (b.granted < b.leases.size() && b.state[b.granted] != LeaseBatch::kReading) {
    const std::size_t i = b.granted++;
    if (b.state[i] == LeaseBatch::kReadDone) --outstanding_gets_;
    std::shared_ptr<const void> hold = std::move(b.holds[i]);
    protocol::Lease& l = b.leases[i];
    if (!hold || closed_) continue;
    if (leased_bytes_ + l.length > server_.options().max_lease_bytes) {
      l = protocol::Lease{};
      l.status = StatusCode::kResourceExhausted;
      continue;  // `hold` goes: the value is freed unless something else holds it
    }
    l.lease_id = ++last_lease_id_;
    leased_bytes_ += l.length;
    leases_.emplace(l.lease_id, HeldLease{std::move(hold), l.length});
  }
  if (b.granted == b.leases.size()) {
    FillSlot(b.slot, BodyFrame(b.header, StatusCode::kOk, protocol::EncodeLeases(b.leases)));
  }
}

template <typename Socket>
void Connection<Socket>::HandleRelease(const FrameHeader& h) {
  auto ids = protocol::DecodeLeaseIds(body_, limits_);
  if (!ids.ok()) return RequestError(h, ids.status());
  std::vector<StatusCode> codes;
  codes.reserve(ids->size());
  for (std::uint64_t id : *ids) {
    auto it = leases_.find(id);
    if (it == leases_.end()) {
      codes.push_back(StatusCode::kNotFound);
      continue;
    }
    leased_bytes_ -= it->second.length;
    leases_.erase(it);  // the last reference may free the value's range
    codes.push_back(StatusCode::kOk);
  }
  SendBody(h, StatusCode::kOk, protocol::EncodeStatusList(codes));
}

template class Connection<TcpSocket>;
template class Connection<UnixSocket>;
template class Connection<TlsSocket>;

}  // namespace kvdepot::daemon::native
