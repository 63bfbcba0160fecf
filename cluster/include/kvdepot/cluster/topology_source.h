// Where a daemon (or a smart client) gets its view of the cluster from. The daemon's membership
// on etcd implements it; StaticTopologySource serves a fixed view (tests, tools handed a member
// list). Request paths only ever call these methods: they never block and never touch etcd.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kvdepot/cluster/topology.h"

namespace kvdepot::cluster {

class TopologySource {
 public:
  virtual ~TopologySource() = default;

  // The newest view; never null (an empty Topology before the first one is known).
  virtual std::shared_ptr<const Topology> Current() const = 0;
  // The view before the last membership change, while its hand-off grace period lasts (a miss at
  // a key's new owner also asks the previous owner); null otherwise.
  virtual std::shared_ptr<const Topology> Previous() const = 0;
  // This node's member id; "" for a process that is not a member (a client).
  virtual std::string SelfId() const = 0;
  // True while this node must not act as an owner: its etcd lease has expired (or was never
  // granted) and it has not re-registered. A fenced node serves no writes as owner.
  virtual bool Fenced() const = 0;
};

// A fixed view, replaceable by Set (tests use it to simulate joins and losses).
class StaticTopologySource final : public TopologySource {
 public:
  explicit StaticTopologySource(std::string self_id, Topology current = {})
      : self_id_(std::move(self_id)),
        current_(std::make_shared<const Topology>(std::move(current))) {}

  std::shared_ptr<const Topology> Current() const override {
    std::lock_guard lock(mu_);
    return current_;
  }
  std::shared_ptr<const Topology> Previous() const override {
    std::lock_guard lock(mu_);
    return previous_;
  }
  std::string SelfId() const override { return self_id_; }
  bool Fenced() const override {
    std::lock_guard lock(mu_);
    return fenced_;
  }

  // Makes `next` current and the old current the previous view (when keep_previous).
  void Set(Topology next, bool keep_previous = true) {
    std::lock_guard lock(mu_);
    previous_ = keep_previous ? current_ : nullptr;
    current_ = std::make_shared<const Topology>(std::move(next));
  }
  void SetFenced(bool fenced) {
    std::lock_guard lock(mu_);
    fenced_ = fenced;
  }

 private:
  const std::string self_id_;
  mutable std::mutex mu_;
  std::shared_ptr<const Topology> current_;
  std::shared_ptr<const Topology> previous_;
  bool fenced_ = false;
};

}  // namespace kvdepot::cluster
