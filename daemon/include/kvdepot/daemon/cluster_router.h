// Requests in a cluster (docs/cluster.md, "Requests"): any node answers anything. The Store
// consults its ClusterRouter (Store::SetRouter) for every request a client sent it; a request that
// another member forwarded (protocol::kFlagFromPeer) is answered from this node's tiers only, so a
// request makes at most one hop whatever the members' views.
//
// Ownership: a key's owners are Owners(PlacementKey(p)) of the source's Current() view, p the
// request's explicit placement key for the item (protocol::kFlagPlacement: a prefix chain's
// group anchor) or else the key itself; a fenced node (TopologySource::Fenced) owns nothing.
// Requests sent to peers carry kFlagFromPeer and no placement section: the peer answers them
// from its own tiers, so it never needs to place them.
//   GET     this node's tiers first (an owner's copy or one held here); on a miss the owners that
//           are not this node, best first; on a miss there too, while a Previous() view exists,
//           its owners that are no longer owners — a hit there (a "hand-off hit") is copied to
//           the current owners and answered.
//   PUT     stored here when this node owns the key, and sent to every other owner (replica
//           writes); a non-owner only sends it to the owners. Ok when an owner stored it.
//   DELETE  erased here and at every other owner; found when any of them had the key.
//   LOOKUP  LocateMany: the keys this node holds or owns are answered here; the others are
//           grouped by owner (and by previous owner during a hand-off) into one LOOKUP per peer,
//           all sent at once: one parallel round trip. A peer that cannot answer passes its keys
//           to their next owner (cluster.replicas > 1) in one more round.
// A peer that is down or slow (PeerPoolOptions::timeout) gives a miss for GET and LOOKUP (after
// the key's other owners were asked) and an error for a PUT no owner stored; nothing waits on one
// peer longer than the timeout.
//
// Thread-safety: every method may be called from any thread; callbacks run on the calling
// thread (local answers) or on the peer pool's thread, and must not block.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/cluster/topology_source.h"
#include "kvdepot/daemon/store.h"
#include "kvdepot/protocol/protocol.h"

namespace boost::asio::ssl {
class context;
}

namespace kvdepot::daemon {

namespace cluster_peer {
class PeerPool;
}

struct ClusterRouterOptions {
  std::string peer_token;  // the daemon's auth token when auth is on ("" otherwise)
  std::chrono::milliseconds peer_timeout{2000};  // per forwarded request
  std::uint32_t connections_per_peer = 4;
  std::uint32_t max_queued_per_peer = 1024;
  protocol::Limits limits;  // the daemon's limits (forwarded requests stay within them)
  // Non-null: peers are reached over TLS with this client context (net/tls_context.h,
  // TlsRole::kPeerClient), each peer's certificate checked against the host of its advertised
  // address; `peer_tls_trust` names the CA setting and file in errors. Null: plain TCP.
  std::shared_ptr<boost::asio::ssl::context> peer_tls;
  std::string peer_tls_trust;
};

// Counters, per native op where labelled (index: the protocol::Op value).
struct ClusterRouterStats {
  std::array<std::uint64_t, protocol::kMaxOp + 1> forwarded{};       // requests sent to peers
  std::array<std::uint64_t, protocol::kMaxOp + 1> forward_errors{};  // of those, failed
  std::uint64_t handoff_hits = 0;    // misses answered by a previous owner (and copied over)
  std::uint64_t handoff_bytes = 0;   // value bytes of those
  std::uint64_t replica_writes = 0;  // PUTs an owner sent on to the other owners
};

class ClusterRouter {
 public:
  // `store` and `source` must outlive the router. Starts the peer pool's thread.
  ClusterRouter(Store& store, const cluster::TopologySource& source, ClusterRouterOptions options);
  // Fails forwarded requests still in flight (their callbacks run) and stops the pool.
  ~ClusterRouter();
  ClusterRouter(const ClusterRouter&) = delete;
  ClusterRouter& operator=(const ClusterRouter&) = delete;

  // `placement_key`: the item's explicit placement key, empty to place by `key`.
  void Get(std::string_view key, std::string_view placement_key, Store::GetCallback done);
  void Put(std::string_view key, std::string_view placement_key, ValueRef value,
           Store::PutCallback done);
  void Delete(std::string_view key, std::string_view placement_key,
              std::function<void(bool found)> done);
  // `placement_keys`: empty, or one per key.
  void LocateMany(std::span<const std::string_view> keys,
                  std::span<const std::string_view> placement_keys,
                  std::function<void(std::vector<protocol::Tier>)> done);

  // CLUSTER_INFO's document (docs/protocol.md): this node's view.
  std::string InfoJson() const;
  ClusterRouterStats stats() const;

  struct Counters;  // cluster_router.cc

 private:
  struct Placement;   // a key's owners as this node sees them
  struct GetPlan;     // a GET asking one node after another
  struct LocatePlan;  // a LOOKUP's keys asked of peers, round after round
  Placement Place(std::string_view key, std::string_view placement_key) const;
  void AskNextForGet(const std::shared_ptr<GetPlan>& plan);
  // Sends plan->round (one LOOKUP per peer, all at once); the last answer sends the next round
  // or calls plan->done.
  void AskLocateRound(const std::shared_ptr<LocatePlan>& plan);
  void CopyToOwners(const std::string& key, const Placement& placement, const ValueRef& value);
  // A one-item PUT to a peer; `done` (may be null) gets the item's status.
  void SendPut(const std::string& address, const std::string& key, const ValueRef& value,
               std::function<void(StatusCode)> done);

  Store& store_;
  const cluster::TopologySource& source_;
  ClusterRouterOptions options_;
  std::shared_ptr<Counters> counters_;
  std::unique_ptr<cluster_peer::PeerPool> peers_;
};

// CLUSTER_INFO's document for a daemon that is not in a cluster.
std::string NotClusteredInfoJson();

}  // namespace kvdepot::daemon
