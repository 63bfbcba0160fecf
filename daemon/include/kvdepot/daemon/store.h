// The store: the daemon's tiers (host memory, then SSD when configured) behind one interface that
// every front end (the native protocol server, the lm:// listener) uses.
//
// Asynchrony: Put() and Get() report through a callback, which runs either inline (before the
// call returns: a host-tier hit, a memory-only PUT) or later on one of the SSD tier's threads.
// Callers that must continue on their own thread post from the callback (e.g. asio::post to a
// connection's executor); a callback must be short and must not block or call back into the
// store synchronously with a lock held.
//
// Thread-safety: every method may be called concurrently from any thread. No method blocks on
// disk I/O: SSD reads and writes are queued to the SSD tier's own threads.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/tier.h"

namespace kvdepot::daemon {

class SsdTier;
struct SsdTierStats;
class KvEventPublisher;
class ClusterRouter;

// Whether a request may be routed to the key's owners in a cluster (docs/cluster.md): kCluster
// for what a client sent (the default), kLocal for what another member forwarded
// (protocol::kFlagFromPeer) and for paths that need this node's own copy (LEASE_GET).
enum class Route { kCluster, kLocal };

// A value found by Get(), and the tier that served it.
struct Found {
  ValueRef value;
  protocol::Tier tier = protocol::Tier::kNone;
};

class Store {
 public:
  using PutCallback = std::function<void(Status)>;
  using GetCallback = std::function<void(Result<Found>)>;

  // `ssd` may be null (no SSD tier). Both tiers must outlive the store.
  Store(HostTier& host, SsdTier* ssd);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // A writable buffer for a value arriving for `key`, charged to the host tier (see
  // HostTier::Allocate for the errors). Fill it, then Put() it.
  Result<std::shared_ptr<Value>> Allocate(std::string_view key, std::size_t size);

  // Publishes `value` under `key` (replacing any previous value in every tier). `done` runs once
  // the value is as durable as configured: at once for memory-only or write-back, after the
  // payload and its index entry reached the disk under `ssd.durability: sync`. A durable write
  // that fails reports its error; the value stays served from memory either way.
  //
  // With a router (SetRouter) and Route::kCluster, Put, Get, Delete and LocateMany go through the
  // router (cluster_router.h says what each does); without one they are local, as documented here.
  // `placement_key` (Put, Get, Delete; per key for LocateMany) is the request's explicit placement
  // key (protocol::kFlagPlacement): the router finds the key's owners by it instead of the key
  // itself; empty: by the key. Without a router, and with Route::kLocal, it is ignored.
  void Put(std::string_view key, ValueRef value, PutCallback done, Route route = Route::kCluster,
           std::string_view placement_key = {});

  // Publishes KV events (docs/events.md) for what becomes readable or stops being readable in the
  // host and GPU tiers (the SSD tier reports its own through SsdTierOptions::on_index_change).
  // May be null; must outlive the store. Call before use.
  void SetEvents(KvEventPublisher* events);
  KvEventPublisher* events() const { return events_; }

  // Adds the GPU tier (may be null; must outlive the store). Call before use.
  void SetDeviceTier(DeviceTier* device) { device_ = device; }
  DeviceTier* device() const { return device_; }

  // Finds `key`: a host hit calls `done` inline (and tells the GPU tier, which may promote it); a
  // key only in the GPU tier is copied back to host memory on the GPU tier's worker; an SSD hit
  // reads the value (verifying its checksum) and calls `done` from the SSD tier's thread. NotFound
  // when absent in every tier or when the SSD copy failed verification (that copy is then removed
  // and counted).
  void Get(std::string_view key, GetCallback done, Route route = Route::kCluster,
           std::string_view placement_key = {});

  // The highest tier holding `key` here, or kNone; counts nothing and moves nothing.
  protocol::Tier Locate(std::string_view key) const;
  // Locate for every key (LOOKUP); in a cluster, keys held elsewhere are asked of their owners in
  // one parallel round trip. `done` gets one tier per key, in key order; it runs inline when every
  // key was answered here. `placement_keys`: empty, or one per key (an empty one: by the key).
  void LocateMany(std::span<const std::string_view> keys, Route route,
                  std::function<void(std::vector<protocol::Tier>)> done,
                  std::span<const std::string_view> placement_keys = {});

  // Removes `key` from every tier here; false when no tier had it.
  bool Erase(std::string_view key);
  // Erase, and in a cluster also at the key's owners; `done` (inline when answered here) gets
  // whether any of them had the key.
  void Delete(std::string_view key, Route route, std::function<void(bool found)> done,
              std::string_view placement_key = {});

  // Routes requests in a cluster (may be null: a single daemon; must outlive the store). Call
  // before use.
  void SetRouter(ClusterRouter* router) { router_ = router; }
  ClusterRouter* router() const { return router_; }

  // Keys starting with `prefix` after `cursor`, in byte order, across the tiers selected by
  // `tier` (kNone: all; a key in several tiers is listed once, with its highest tier).
  protocol::ScanResult Scan(std::string_view prefix, std::string_view cursor, std::uint32_t limit,
                            protocol::Tier tier) const;

  // The tiers present, top first (gpu when set, host, ssd when set), and one tier's statistics
  // in the shared terms (tier_stats.cc): the one source of STATS, Prometheus and INFO figures.
  std::vector<Tier> Tiers() const;
  TierStats TierStatsOf(Tier tier) const;  // all zero for a tier not present

  HostTier& host() { return host_; }
  const HostTier& host() const { return host_; }
  SsdTier* ssd() { return ssd_; }
  const SsdTier* ssd() const { return ssd_; }

 private:
  HostTier& host_;
  SsdTier* ssd_;
  DeviceTier* device_ = nullptr;
  KvEventPublisher* events_ = nullptr;
  ClusterRouter* router_ = nullptr;
  // Demotes evicted values to the SSD tier and announces their removal, as configured.
  void InstallEvictionListener();
};

// A tier's own statistics in the shared terms (Store::TierStatsOf fills in what depends on the
// tiers around it, e.g. the host tier's demotions to and promotions from the SSD).
TierStats ToTierStats(const HostTierStats& host);
TierStats ToTierStats(const SsdTierStats& ssd);
TierStats ToTierStats(const DeviceTierStats& gpu);

}  // namespace kvdepot::daemon
