#include "kvdepot/client/cluster_routes.h"

#include "kvdepot/cluster/cluster_info.h"

#include <algorithm>
#include <utility>

namespace kvdepot::client {

ClusterRoutes::ClusterRoutes(ClientOptions options) : options_(std::move(options)) {}

ClusterRoutes::~ClusterRoutes() = default;

std::shared_ptr<const cluster::Topology> ClusterRoutes::View() {
  const auto due = [this](Clock::time_point now) {
    if (!fetched_) return true;
    const bool gap_passed = now - fetched_at_ >= kMinRefreshGap;
    return (stale_ && gap_passed) || now - fetched_at_ >= options_.cluster_refresh;
  };
  bool first = false;
  {
    std::lock_guard lock(mu_);
    if (!due(Clock::now())) return view_;
    first = !fetched_;
  }
  std::unique_lock refresh(refresh_mu_, std::defer_lock);
  if (first) {
    refresh.lock();  // the first fetch is waited for
  } else if (!refresh.try_lock()) {
    std::lock_guard lock(mu_);  // another thread refreshes: route by what we have
    return view_;
  }
  {
    std::lock_guard lock(mu_);
    if (!due(Clock::now())) return view_;  // refreshed while this thread waited
  }
  Refresh();
  std::lock_guard lock(mu_);
  return view_;
}

void ClusterRoutes::Refresh() {
  std::vector<std::string> candidates = {options_.address};
  {
    std::lock_guard lock(mu_);
    if (view_ != nullptr) {
      for (const cluster::Member& m : view_->members()) {
        if (m.id != seed_self_) candidates.push_back(m.native_addr);
      }
    }
  }
  for (const std::string& address : candidates) {
    // A connection of its own with a short timeout: a hung member must not hold the request that
    // happens to refresh for the whole I/O timeout.
    ClientOptions o = OptionsFor(address);
    o.timeout = std::min(options_.timeout, kInfoTimeout);
    auto conn = Connection::Connect(o);
    if (!conn.ok()) continue;  // unreachable: ask the next one
    const Result<std::string> text = (*conn)->ClusterInfo();
    if (!text.ok() && text.status().code() == StatusCode::kUnavailable) continue;
    Result<cluster::ClusterInfo> info =
        text.ok() ? cluster::ParseClusterInfo(*text) : Result<cluster::ClusterInfo>(text.status());
    std::lock_guard lock(mu_);
    fetched_ = true;
    stale_ = false;
    fetched_at_ = Clock::now();
    ++refreshes_;
    if (!info.ok() || !info->clustered || info->topology.empty()) {
      // Not clustered, too old to know CLUSTER_INFO, or no member up: a plain client.
      view_ = nullptr;
      seed_self_.clear();
    } else {
      seed_self_ = address == options_.address ? info->self : std::string();
      view_ = std::make_shared<const cluster::Topology>(std::move(info->topology));
    }
    return;
  }
  // Nobody answered: keep the last view (nullptr before the first answer) and try again after
  // kMinRefreshGap.
  std::lock_guard lock(mu_);
  fetched_ = true;
  stale_ = true;
  fetched_at_ = Clock::now();
}

std::string ClusterRoutes::AddressOf(const cluster::Member& m) const {
  return !seed_self_.empty() && m.id == seed_self_ ? options_.address : m.native_addr;
}

ClientOptions ClusterRoutes::OptionsFor(const std::string& address) const {
  ClientOptions o = options_;
  o.address = address;
  if (address != options_.address) o.tls_server_name.clear();
  return o;
}

std::vector<std::string> ClusterRoutes::Targets(const cluster::Topology& view, std::string_view key,
                                                std::string_view placement_key) const {
  constexpr std::size_t kOtherMembers = 2;
  // As the daemon places it: an explicit placement key goes through the hash-tag rule too.
  const std::string_view by = cluster::PlacementKey(placement_key.empty() ? key : placement_key);
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  const auto add = [&out](std::string address) {
    if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(std::move(address));
  };
  for (const cluster::Member* m : view.Owners(by)) add(AddressOf(*m));
  const std::size_t owners = out.size();
  for (const cluster::Member& m : view.members()) {
    if (out.size() >= owners + kOtherMembers) break;
    add(AddressOf(m));
  }
  add(options_.address);
  const Clock::time_point now = Clock::now();
  std::stable_partition(out.begin(), out.end(), [&](const std::string& address) {
    const auto it = down_until_.find(address);
    return it == down_until_.end() || it->second <= now;
  });
  return out;
}

void ClusterRoutes::ReportFailure(const std::string& address) {
  std::lock_guard lock(mu_);
  down_until_[address] = Clock::now() + kDownBackoff;
  stale_ = true;
  idle_.erase(address);  // its other pooled connections are likely dead too
}

void ClusterRoutes::MarkStale() {
  std::lock_guard lock(mu_);
  stale_ = true;
}

Result<std::unique_ptr<Connection>> ClusterRoutes::Acquire(const std::string& address, bool* reused,
                                                           bool fresh) {
  if (!fresh) {
    std::lock_guard lock(mu_);
    auto it = idle_.find(address);
    if (it != idle_.end() && !it->second.empty()) {
      std::unique_ptr<Connection> conn = std::move(it->second.back());
      it->second.pop_back();
      *reused = true;
      return conn;
    }
  }
  *reused = false;
  return Connection::Connect(OptionsFor(address));
}

void ClusterRoutes::Release(const std::string& address, std::unique_ptr<Connection> connection) {
  if (connection == nullptr || connection->broken()) return;
  std::lock_guard lock(mu_);
  auto& pool = idle_[address];
  if (pool.size() < options_.pool_size) pool.push_back(std::move(connection));
}

std::uint64_t ClusterRoutes::refreshes() const {
  std::lock_guard lock(mu_);
  return refreshes_;
}

}  // namespace kvdepot::client
