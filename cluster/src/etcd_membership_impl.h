// EtcdMembership's implementation (docs/cluster.md "Membership"), shared by its three source
// files along its seams: etcd_membership.cc (start, the membership thread's loop, leaving, the
// TopologySource and status accessors), member_registration.cc (publishing this node's record:
// registration under a lease, keepalives, refreshes) and topology_poll.cc (reading the members
// back into the published views). Private to kvdepot_cluster.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvdepot/cluster/etcd_membership.h"

namespace kvdepot::cluster {

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
    options_.poll_interval = std::clamp(options_.poll_interval, std::chrono::milliseconds(10),
                                        std::chrono::milliseconds(1000));
  }

  ~Impl() { StopThread(); }

  // The first registration and read, on the caller's thread (before the membership thread runs).
  Status FirstRound();

  void StartThread();
  void StopThread();
  void Leave();
  std::shared_ptr<const Topology> Current() const;
  std::shared_ptr<const Topology> Previous() const;
  std::string SelfId() const { return options_.self.id; }
  std::uint64_t incarnation() const { return options_.self.incarnation; }
  const std::string& prefix() const { return prefix_; }

  bool Fenced() const;
  MembershipStats stats() const;
  std::vector<Member> Members() const;
  std::string HealthDetail() const;

 private:
  using Clock = std::chrono::steady_clock;

  static std::int64_t ToNanos(Clock::time_point t) { return t.time_since_epoch().count(); }

  void Log(MembershipLogLevel level, std::string_view message, MembershipLogFields fields) const;

  // Records whether etcd answered; logs each change of state once.
  void NoteEtcd(const Status& status);

  MemberRecord OwnRecord() const;

  // Grants a fresh lease and writes the record under it (create-if-absent, or replacing this
  // node's own older record). kAlreadyExists for a node-id clash.
  Status Register();

  void KeepAlive();

  // Rewrites the record with the current `used`, only while it still carries our lease.
  void RefreshRecord();

  void Poll();

  // The member set without this node: the cluster as it was before this node joined it.
  std::shared_ptr<const Topology> ViewBeforeJoining(const std::vector<Member>& members,
                                                    std::int64_t revision) const;

  bool WarnAllowed(const std::string& what, Clock::time_point now);

  void Loop();

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

}  // namespace kvdepot::cluster
