#include <time.h>

#include "etcd_membership_impl.h"

namespace kvdepot::cluster {
namespace {

using std::chrono::milliseconds;

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

}  // namespace

Status EtcdMembership::Impl::FirstRound() {
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

void EtcdMembership::Impl::StartThread() {
  thread_ = std::thread([this] { Loop(); });
}

void EtcdMembership::Impl::StopThread() {
  {
    std::lock_guard lock(wake_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EtcdMembership::Impl::Leave() {
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

std::shared_ptr<const Topology> EtcdMembership::Impl::Current() const {
  std::lock_guard lock(mu_);
  return current_;
}

std::shared_ptr<const Topology> EtcdMembership::Impl::Previous() const {
  std::lock_guard lock(mu_);
  if (previous_ != nullptr && Clock::now() >= previous_until_) return nullptr;
  return previous_;
}

bool EtcdMembership::Impl::Fenced() const {
  if (!registered_.load(std::memory_order_acquire)) return true;
  const Clock::time_point confirmed{Clock::duration(last_confirmed_.load())};
  return Clock::now() - confirmed >= ttl_;
}

MembershipStats EtcdMembership::Impl::stats() const {
  std::lock_guard lock(mu_);
  MembershipStats s = stats_;
  s.topology_revision = current_->revision();
  s.members_up = current_->members().size();
  s.fenced = Fenced();
  s.registered = registered_.load();
  return s;
}

std::vector<Member> EtcdMembership::Impl::Members() const {
  std::lock_guard lock(mu_);
  return polled_;
}

std::string EtcdMembership::Impl::HealthDetail() const {
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

void EtcdMembership::Impl::Log(MembershipLogLevel level, std::string_view message,
                               MembershipLogFields fields) const {
  if (options_.log) options_.log(level, message, fields);
}

void EtcdMembership::Impl::NoteEtcd(const Status& status) {
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

void EtcdMembership::Impl::Loop() {
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
