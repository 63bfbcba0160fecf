// Publishing this node's member record in etcd: registration under a fresh lease, keepalives and
// refreshes of its `used` (etcd_membership_impl.h).
#include "etcd_membership_impl.h"

namespace kvdepot::cluster {

MemberRecord EtcdMembership::Impl::OwnRecord() const {
  MemberRecord r;
  r.member = options_.self;
  r.member.used_bytes = options_.used_bytes ? options_.used_bytes() : 0;
  r.version = options_.version;
  r.placement = options_.placement;
  return r;
}

Status EtcdMembership::Impl::Register() {
  const Clock::time_point sent = Clock::now();
  auto lease = client_.LeaseGrant(ttl_seconds_);
  NoteEtcd(lease.status());
  if (!lease.ok()) return lease.status();
  const std::string value = EncodeMemberRecord(OwnRecord());
  std::vector<EtcdCompare> compares{{key_, EtcdCompare::Target::kCreateRevision, 0}};
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto txn = client_.PutIf(compares, key_, value, lease->id);
    NoteEtcd(txn.status());
    if (!txn.ok()) {
      (void)client_.LeaseRevoke(lease->id);
      return txn.status();
    }
    if (txn->succeeded) {
      const std::int64_t old = lease_id_.exchange(lease->id);
      if (old != 0 && old != lease->id) (void)client_.LeaseRevoke(old);
      last_confirmed_.store(ToNanos(sent));
      registered_.store(true, std::memory_order_release);
      {
        std::lock_guard lock(mu_);
        ++stats_.registrations;
      }
      clash_logged_ = false;
      Log(MembershipLogLevel::kInfo, "registered in the cluster",
          {{"key", key_},
           {"incarnation", std::to_string(options_.self.incarnation)},
           {"native", options_.self.native_addr},
           {"lease_ttl_s", std::to_string(lease->ttl_seconds)},
           {"revision", std::to_string(txn->revision)}});
      return Status::Ok();
    }
    if (!txn->current) {  // deleted in between: create it
      compares = {{key_, EtcdCompare::Target::kCreateRevision, 0}};
      continue;
    }
    auto existing = DecodeMemberRecord(key_, txn->current->value);
    const bool ours = !existing.ok() ||  // an unreadable record under our own id: ours to replace
                      (existing->member.native_addr == options_.self.native_addr &&
                       existing->member.incarnation <= options_.self.incarnation);
    if (!ours) {
      (void)client_.LeaseRevoke(lease->id);
      {
        std::lock_guard lock(mu_);
        ++stats_.id_clashes;
      }
      return Status(StatusCode::kAlreadyExists,
                    "node id " + options_.self.id + " (from " + options_.data_dir +
                        "/cluster-node-id) is already registered by a live member at " +
                        existing->member.native_addr + " (incarnation " +
                        std::to_string(existing->member.incarnation) +
                        "; this node: " + options_.self.native_addr + ", incarnation " +
                        std::to_string(options_.self.incarnation) +
                        "): two daemons share one identity. Give this daemon its own data_dir, or "
                        "delete its cluster-node-id to join as a new node");
    }
    compares = {{key_, EtcdCompare::Target::kModRevision, txn->current->mod_revision}};
  }
  (void)client_.LeaseRevoke(lease->id);
  return Unavailable("the member record at " + key_ + " kept changing while registering");
}

void EtcdMembership::Impl::KeepAlive() {
  const std::int64_t lease = lease_id_.load();
  const Clock::time_point sent = Clock::now();
  auto ttl = client_.LeaseKeepAlive(lease);
  NoteEtcd(ttl.status());
  if (!ttl.ok()) return;
  if (*ttl > 0) {
    last_confirmed_.store(ToNanos(sent));
    return;
  }
  registered_.store(false, std::memory_order_release);
  lease_id_.store(0);
  {
    std::lock_guard lock(mu_);
    ++stats_.lease_expiries;
  }
  Log(MembershipLogLevel::kWarn,
      "etcd lease expired: fenced (acting as owner of nothing) until re-registered",
      {{"key", key_}});
}

void EtcdMembership::Impl::RefreshRecord() {
  const std::int64_t lease = lease_id_.load();
  auto txn = client_.PutIf({{key_, EtcdCompare::Target::kLease, lease}}, key_,
                           EncodeMemberRecord(OwnRecord()), lease);
  NoteEtcd(txn.status());
  if (txn.ok() && !txn->succeeded) {
    registered_.store(false, std::memory_order_release);
    {
      std::lock_guard lock(mu_);
      ++stats_.lease_expiries;
    }
    Log(MembershipLogLevel::kWarn,
        "the member record no longer carries this node's lease: fenced until re-registered",
        {{"key", key_}});
  }
}

}  // namespace kvdepot::cluster
