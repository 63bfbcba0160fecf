#include "kvdepot/cluster/etcd_membership.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace kvdepot::cluster {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kWarnEvery = std::chrono::minutes(1);

std::int64_t ToNanos(Clock::time_point t) {
  return t.time_since_epoch().count();
}

std::string UtcText(std::int64_t unix_ms) {
  const time_t seconds = static_cast<time_t>(unix_ms / 1000);
  tm parts{};
  gmtime_r(&seconds, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

std::int64_t NowUnixMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The member fields whose change makes a new topology (`used` is not one).
bool SameMemberSet(const std::vector<Member>& a, const std::vector<Member>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    Member x = a[i];
    Member y = b[i];
    x.used_bytes = y.used_bytes = 0;
    if (!(x == y)) return false;
  }
  return true;
}

std::string IdList(const std::vector<std::string>& ids) {
  std::string out;
  for (const std::string& id : ids) out += (out.empty() ? "" : ",") + id;
  return out.empty() ? "-" : out;
}

}  // namespace

class EtcdMembership::Impl {
 public:
  Impl(MembershipOptions options, EtcdClient client, NodeIdentity identity)
      : options_(std::move(options)),
        client_(std::move(client)),
        prefix_(MembersPrefix(options_.cluster_name)),
        key_(prefix_ + identity.id),
        ttl_seconds_(std::max<std::int64_t>(2, (options_.lease_ttl.count() + 999) / 1000)),
        ttl_(std::chrono::seconds(ttl_seconds_)),
        current_(std::make_shared<const Topology>()) {
    options_.self.id = identity.id;
    options_.self.incarnation = identity.incarnation;
    options_.poll_interval =
        std::clamp(options_.poll_interval, milliseconds(10), milliseconds(1000));
  }

  ~Impl() { StopThread(); }

  // The first registration and read, on the caller's thread (before the membership thread runs).
  Status FirstRound() {
    Status registered = Register();
    if (registered.code() == StatusCode::kAlreadyExists) return registered;
    if (!registered.ok()) {
      Log(MembershipLogLevel::kWarn,
          "cannot register in the cluster yet: serving alone and fenced until etcd answers",
          {{"error", registered.message()}});
    }
    // An etcd that did not answer the registration would only make the start wait once more.
    if (registered.code() != StatusCode::kUnavailable) Poll();
    if (current_->members().size() <= 1 && registered.ok()) {
      Log(MembershipLogLevel::kInfo,
          "no other member in cluster '" + options_.cluster_name +
              "' (a new cluster, or cluster.name differs from the other nodes')",
          {{"prefix", prefix_}});
    }
    return Status::Ok();
  }

  void StartThread() {
    thread_ = std::thread([this] { Loop(); });
  }

  void StopThread() {
    {
      std::lock_guard lock(wake_mu_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void Leave() {
    StopThread();
    const std::int64_t lease = lease_id_.exchange(0);
    registered_.store(false);
    if (lease == 0) return;
    if (Status s = client_.LeaseRevoke(lease); s.ok()) {
      Log(MembershipLogLevel::kInfo, "left the cluster (lease revoked)", {{"key", key_}});
    } else {
      Log(MembershipLogLevel::kWarn,
          "could not revoke the lease on leaving; the record expires with it",
          {{"error", s.message()}, {"lease_ttl_s", std::to_string(ttl_seconds_)}});
    }
  }

  std::shared_ptr<const Topology> Current() const {
    std::lock_guard lock(mu_);
    return current_;
  }

  std::shared_ptr<const Topology> Previous() const {
    std::lock_guard lock(mu_);
    if (previous_ != nullptr && Clock::now() >= previous_until_) return nullptr;
    return previous_;
  }

  std::string SelfId() const { return options_.self.id; }
  std::uint64_t incarnation() const { return options_.self.incarnation; }
  const std::string& prefix() const { return prefix_; }

  bool Fenced() const {
    if (!registered_.load(std::memory_order_acquire)) return true;
    const Clock::time_point confirmed{Clock::duration(last_confirmed_.load())};
    return Clock::now() - confirmed >= ttl_;
  }

  MembershipStats stats() const {
    std::lock_guard lock(mu_);
    MembershipStats s = stats_;
    s.topology_revision = current_->revision();
    s.members_up = current_->members().size();
    s.fenced = Fenced();
    s.registered = registered_.load();
    return s;
  }

  std::vector<Member> Members() const {
    std::lock_guard lock(mu_);
    return polled_;
  }

  std::string HealthDetail() const {
    const MembershipStats s = stats();
    const std::string serving = "serving topology revision " + std::to_string(s.topology_revision) +
                                " (" + std::to_string(s.members_up) + " members)";
    if (!s.etcd_up && s.etcd_down_since_unix_ms != 0) {
      return "cluster: etcd unreachable since " + UtcText(s.etcd_down_since_unix_ms) + ", " +
             serving + (s.fenced ? "; fenced (lease not confirmed)" : "");
    }
    if (s.fenced) return "cluster: fenced (not registered with a live lease), " + serving;
    return "cluster: member " + options_.self.id + ", " + serving;
  }

 private:
  void Log(MembershipLogLevel level, std::string_view message, MembershipLogFields fields) const {
    if (options_.log) options_.log(level, message, fields);
  }

  // Records whether etcd answered; logs each change of state once.
  void NoteEtcd(const Status& status) {
    const bool reachable = status.ok() || status.code() != StatusCode::kUnavailable;
    std::lock_guard lock(mu_);
    if (reachable && !stats_.etcd_up) {
      const bool was_down = stats_.etcd_down_since_unix_ms != 0;
      stats_.etcd_up = true;
      stats_.etcd_down_since_unix_ms = 0;
      if (was_down) {
        Log(MembershipLogLevel::kInfo, "etcd reachable again",
            {{"endpoint", client_.current_endpoint()}});
      }
    } else if (!reachable && stats_.etcd_down_since_unix_ms == 0) {
      stats_.etcd_up = false;
      stats_.etcd_down_since_unix_ms = NowUnixMs();
      Log(MembershipLogLevel::kWarn, "etcd unreachable: serving the last topology seen, retrying",
          {{"revision", std::to_string(current_->revision())}, {"error", status.message()}});
    }
  }

  MemberRecord OwnRecord() const {
    MemberRecord r;
    r.member = options_.self;
    r.member.used_bytes = options_.used_bytes ? options_.used_bytes() : 0;
    r.version = options_.version;
    r.placement = options_.placement;
    return r;
  }

  // Grants a fresh lease and writes the record under it (create-if-absent, or replacing this
  // node's own older record). kAlreadyExists for a node-id clash.
  Status Register() {
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
        return Status(
            StatusCode::kAlreadyExists,
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

  void KeepAlive() {
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

  // Rewrites the record with the current `used`, only while it still carries our lease.
  void RefreshRecord() {
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

  void Poll() {
    auto range = client_.RangePrefix(prefix_);
    NoteEtcd(range.status());
    if (!range.ok()) return;
    const Clock::time_point now = Clock::now();
    std::vector<Member> members;
    std::uint64_t corrupt = 0;
    std::uint64_t mismatched = 0;
    for (const EtcdKeyValue& kv : range->kvs) {
      auto record = DecodeMemberRecord(kv.key, kv.value);
      if (!record.ok()) {
        ++corrupt;
        if (WarnAllowed(kv.key, now)) {
          Log(MembershipLogLevel::kWarn, "skipping a member record that cannot be read",
              {{"key", kv.key}, {"error", record.status().message()}});
        }
        continue;
      }
      if (!(record->placement == options_.placement)) {
        ++mismatched;
        if (WarnAllowed("placement:" + kv.key, now)) {
          Log(MembershipLogLevel::kError,
              "a member advertises other placement options than this node: requests may miss "
              "until cluster.replicas and cluster.group_chunks agree on every node",
              {{"key", kv.key},
               {"its_replicas", std::to_string(record->placement.replicas)},
               {"its_group_chunks", std::to_string(record->placement.group_chunks)},
               {"our_replicas", std::to_string(options_.placement.replicas)},
               {"our_group_chunks", std::to_string(options_.placement.group_chunks)}});
        }
      }
      members.push_back(std::move(record->member));
    }
    std::sort(members.begin(), members.end(),
              [](const Member& a, const Member& b) { return a.id < b.id; });
    std::vector<std::string> joined;
    std::vector<std::string> left;
    std::int64_t revision = 0;
    bool changed = false;
    {
      std::lock_guard lock(mu_);
      stats_.corrupt_records += corrupt;
      stats_.placement_mismatches += mismatched;
      polled_ = members;
      changed = !have_view_ || !SameMemberSet(members, current_->members());
      if (changed) {
        for (const Member& m : members) {
          if (current_->Find(m.id) == nullptr) joined.push_back(m.id);
        }
        for (const Member& m : current_->members()) {
          if (!std::binary_search(members.begin(), members.end(), m,
                                  [](const Member& a, const Member& b) { return a.id < b.id; })) {
            left.push_back(m.id);
          }
        }
        if (have_view_) {
          previous_ = current_;
          previous_until_ = now + options_.handoff_grace;
          ++stats_.membership_changes;
        } else if (auto before = ViewBeforeJoining(members, range->revision); !before->empty()) {
          // This node's first view: until it joined, the others owned its keys, so a miss here
          // asks them during the grace period, as after any membership change (hand-off).
          previous_ = std::move(before);
          previous_until_ = now + options_.handoff_grace;
        }
        have_view_ = true;
        current_ = std::make_shared<const Topology>(range->revision, std::move(members),
                                                    options_.placement);
        revision = range->revision;
      }
    }
    if (changed) {
      Log(MembershipLogLevel::kInfo, "cluster topology",
          {{"revision", std::to_string(revision)},
           {"members", std::to_string(Current()->members().size())},
           {"joined", IdList(joined)},
           {"left", IdList(left)}});
    }
  }

  // The member set without this node: the cluster as it was before this node joined it.
  std::shared_ptr<const Topology> ViewBeforeJoining(const std::vector<Member>& members,
                                                    std::int64_t revision) const {
    std::vector<Member> others;
    for (const Member& m : members) {
      if (m.id != options_.self.id) others.push_back(m);
    }
    return std::make_shared<const Topology>(revision, std::move(others), options_.placement);
  }

  bool WarnAllowed(const std::string& what, Clock::time_point now) {
    auto [it, inserted] = warned_.try_emplace(what, now);
    if (inserted) return true;
    if (now - it->second < kWarnEvery) return false;
    it->second = now;
    return true;
  }

  void Loop() {
    Clock::time_point last_keepalive = Clock::now();
    Clock::time_point last_refresh = Clock::now();
    bool was_fenced = Fenced();
    while (true) {
      {
        std::unique_lock lock(wake_mu_);
        wake_.wait_for(lock, options_.poll_interval, [this] { return stop_; });
        if (stop_) return;
      }
      const Clock::time_point now = Clock::now();
      if (!registered_.load()) {
        Status s = Register();
        if (s.code() == StatusCode::kAlreadyExists && !clash_logged_) {
          clash_logged_ = true;
          Log(MembershipLogLevel::kError, "cannot re-register: node-id clash; staying fenced",
              {{"error", s.message()}});
        }
        last_keepalive = last_refresh = Clock::now();
      } else {
        if (now - last_keepalive >= ttl_ / 3) {
          last_keepalive = now;
          KeepAlive();
          if (!registered_.load()) {
            (void)Register();
            last_refresh = Clock::now();
          }
        }
        if (registered_.load() && now - last_refresh >= options_.used_refresh) {
          last_refresh = now;
          RefreshRecord();
        }
      }
      Poll();
      const bool fenced = Fenced();
      if (fenced != was_fenced) {
        was_fenced = fenced;
        Log(fenced ? MembershipLogLevel::kWarn : MembershipLogLevel::kInfo,
            fenced ? "fenced: no lease confirmed by etcd within the lease TTL; not acting as owner"
                   : "no longer fenced: lease confirmed",
            {{"key", key_}, {"lease_ttl_s", std::to_string(ttl_seconds_)}});
      }
    }
  }

  MembershipOptions options_;
  EtcdClient client_;
  const std::string prefix_;
  const std::string key_;
  const std::int64_t ttl_seconds_;
  const Clock::duration ttl_;

  std::atomic<bool> registered_{false};
  std::atomic<std::int64_t> lease_id_{0};
  std::atomic<std::int64_t> last_confirmed_{0};  // steady-clock ns a confirmed call was sent at

  mutable std::mutex mu_;
  std::shared_ptr<const Topology> current_;   // guarded by mu_
  std::shared_ptr<const Topology> previous_;  // guarded by mu_
  Clock::time_point previous_until_;          // guarded by mu_
  bool have_view_ = false;                    // guarded by mu_
  std::vector<Member> polled_;                // guarded by mu_
  MembershipStats stats_;                     // guarded by mu_

  // Membership thread only (and FirstRound before it starts).
  std::map<std::string, Clock::time_point> warned_;
  bool clash_logged_ = false;

  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by wake_mu_
  std::thread thread_;
};

Result<std::unique_ptr<EtcdMembership>> EtcdMembership::Start(MembershipOptions options) {
  milliseconds timeout = options.etcd_timeout;
  if (timeout.count() <= 0) timeout = std::min(milliseconds(1000), options.lease_ttl / 3);
  auto client = EtcdClient::Create(options.etcd, timeout);
  if (!client.ok()) return client.status();
  auto identity = LoadNodeIdentity(options.data_dir);
  if (!identity.ok()) return identity.status();
  auto impl = std::make_unique<Impl>(std::move(options), std::move(*client), std::move(*identity));
  if (Status s = impl->FirstRound(); !s.ok()) return s;
  impl->StartThread();
  return std::unique_ptr<EtcdMembership>(new EtcdMembership(std::move(impl)));
}

EtcdMembership::EtcdMembership(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdMembership::~EtcdMembership() = default;

void EtcdMembership::Leave() {
  impl_->Leave();
}
std::shared_ptr<const Topology> EtcdMembership::Current() const {
  return impl_->Current();
}
std::shared_ptr<const Topology> EtcdMembership::Previous() const {
  return impl_->Previous();
}
std::string EtcdMembership::SelfId() const {
  return impl_->SelfId();
}
bool EtcdMembership::Fenced() const {
  return impl_->Fenced();
}
std::uint64_t EtcdMembership::incarnation() const {
  return impl_->incarnation();
}
std::string EtcdMembership::members_prefix() const {
  return impl_->prefix();
}
MembershipStats EtcdMembership::stats() const {
  return impl_->stats();
}
std::vector<Member> EtcdMembership::Members() const {
  return impl_->Members();
}
std::string EtcdMembership::HealthDetail() const {
  return impl_->HealthDetail();
}

}  // namespace kvdepot::cluster
