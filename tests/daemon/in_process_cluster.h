// N in-process daemons forming one cluster (docs/cluster.md, "Requests"): each node has its own
// host tier, store, ClusterRouter and server on an ephemeral loopback port; every node's
// StaticTopologySource serves the view the test sets (SetView), as etcd membership would.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kvdepot/client/client.h"
#include "kvdepot/cluster/topology.h"
#include "kvdepot/cluster/topology_source.h"
#include "kvdepot/daemon/auth.h"
#include "kvdepot/daemon/cluster_router.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"

namespace kvdepot::daemon {

class InProcessCluster {
 public:
  struct Node {
    std::string id;
    std::string addr;  // "127.0.0.1:PORT"
    std::unique_ptr<HostTier> host;
    std::unique_ptr<Store> store;
    std::unique_ptr<cluster::StaticTopologySource> source;
    std::unique_ptr<ClusterRouter> router;
    std::unique_ptr<Server> server;
    bool stopped = false;
  };

  // The member id of node `i`: 32 hex digits.
  static std::string IdOf(std::size_t i) {
    char id[33];
    std::snprintf(id, sizeof id, "%032zx", i + 1);
    return id;
  }

  // Starts `n` nodes and gives every one the view "all n up" with `placement`. With `token`,
  // every server requires it (a `*` token) and the nodes present it to each other.
  void Start(std::size_t n, cluster::PlacementOptions placement,
             ClusterRouterOptions router_options = DefaultRouterOptions(),
             const std::string& token = "") {
    placement_ = placement;
    token_ = token;
    std::shared_ptr<const Authenticator> auth;
    if (!token.empty()) {
      auto parsed = Authenticator::Parse(token + " *\n", "test tokens");
      ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
      auth = *parsed;
      router_options.peer_token = token;
    }
    for (std::size_t i = 0; i < n; ++i) {
      auto node = std::make_unique<Node>();
      node->id = IdOf(i);
      HostTierOptions host;
      host.capacity_bytes = 64ull << 20;
      node->host = std::make_unique<HostTier>(host);
      node->store = std::make_unique<Store>(*node->host, nullptr);
      node->source = std::make_unique<cluster::StaticTopologySource>(node->id);
      node->router = std::make_unique<ClusterRouter>(*node->store, *node->source, router_options);
      node->store->SetRouter(node->router.get());
      ServerOptions o;
      o.listen = "127.0.0.1:0";
      o.drain_timeout = std::chrono::milliseconds(500);
      o.auth = auth;
      node->server = std::make_unique<Server>(o, *node->store, nullptr);
      const Status s = node->server->Start();
      ASSERT_TRUE(s.ok()) << s.ToString();
      node->addr = "127.0.0.1:" + std::to_string(node->server->tcp_port());
      nodes_.push_back(std::move(node));
    }
    std::vector<std::size_t> all;
    for (std::size_t i = 0; i < n; ++i) all.push_back(i);
    SetView(View(all), /*keep_previous=*/false);
  }

  static ClusterRouterOptions DefaultRouterOptions() {
    ClusterRouterOptions o;
    o.peer_timeout = std::chrono::milliseconds(500);
    return o;
  }

  ~InProcessCluster() {
    for (auto& n : nodes_) {
      if (!n->stopped) n->server->Stop();
    }
    for (auto& n : nodes_) n->router.reset();  // fails what is still in flight
    for (auto& n : nodes_) {
      n->server.reset();
      n->store.reset();
    }
  }

  // A view whose members are the nodes `members` (equal capacities) plus `extra` (e.g. a fake
  // peer), at the next revision.
  cluster::Topology View(const std::vector<std::size_t>& members,
                         std::vector<cluster::Member> extra = {}) {
    for (std::size_t i : members) {
      cluster::Member m;
      m.id = nodes_[i]->id;
      m.native_addr = nodes_[i]->addr;
      m.capacity_bytes = 64ull << 20;
      extra.push_back(std::move(m));
    }
    return cluster::Topology(++revision_, std::move(extra), placement_);
  }

  // Every node gets `view` as its current view (the old one as previous when `keep_previous`).
  void SetView(const cluster::Topology& view, bool keep_previous) {
    for (auto& n : nodes_) n->source->Set(view, keep_previous);
  }

  // Stops node `i`'s server (a dead peer: connections to it are refused).
  void StopNode(std::size_t i) {
    nodes_[i]->server->Stop();
    nodes_[i]->stopped = true;
  }

  // The node of `id`; its index.
  std::size_t IndexOf(const std::string& id) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i]->id == id) return i;
    }
    return nodes_.size();
  }

  Node& node(std::size_t i) { return *nodes_[i]; }
  std::size_t size() const { return nodes_.size(); }

  client::ClientOptions ClientFor(std::size_t i) const {
    client::ClientOptions o;
    o.address = nodes_[i]->addr;
    o.timeout = std::chrono::milliseconds(10000);
    o.token = token_;
    return o;
  }

  // Requests all nodes forwarded to a peer, any op: 0 when every request reached its owner.
  std::uint64_t Forwarded() const {
    std::uint64_t sum = 0;
    for (const auto& n : nodes_) {
      for (std::uint64_t f : n->router->stats().forwarded) sum += f;
    }
    return sum;
  }

  // Whether node `i` holds `key` in its own tiers.
  bool Holds(std::size_t i, const std::string& key) const {
    return nodes_[i]->store->Locate(key) != protocol::Tier::kNone;
  }

 private:
  cluster::PlacementOptions placement_;
  std::string token_;
  std::int64_t revision_ = 0;
  std::vector<std::unique_ptr<Node>> nodes_;
};

}  // namespace kvdepot::daemon
