// The daemon's storage tiers, as the store and the front ends see them (docs/architecture.md):
//   host memory  HostTier (host_tier.h): every value passes through it; its eviction order
//   SSD          SsdTier (ssd_tier.h): RocksDB index + append-only segments, optional
//   GPU          DeviceTier (below): an inclusive cache of hot host values in one device pool,
//                implemented over kvdepot::cuda::GpuTier (daemon/src/gpu_device_tier.cc) when
//                built with CUDA
// and the Store (store.h) in front of them. The tiers' names and wire numbers (Tier) and what a
// scan lists (ScanEntry, ScanResult) are kvdepot/protocol/tier.h, shared with the client.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/protocol/tier.h"

namespace kvdepot::daemon {

using protocol::Tier;

// One tier's state in the terms every tier shares: what STATS (tiers.*), the Prometheus tier
// series (kvdepot_tier_*{tier}) and resp:// INFO render, all from Store::TierStatsOf. Counters
// only grow; gauges are current values. A tier's own details (SsdTierStats, ...) come on top.
struct TierStats {
  std::uint64_t bytes = 0;       // gauge: bytes charged (stored and in flight)
  std::uint64_t capacity = 0;    // gauge: byte capacity
  std::uint64_t chunks = 0;      // gauge: entries held
  std::uint64_t hits = 0;        // counter: reads that found the key in this tier
  std::uint64_t misses = 0;      // counter: reads that did not
  std::uint64_t evictions = 0;   // counter: entries dropped to make room
  std::uint64_t demotions = 0;   // counter: entries moved down from this tier to a lower one
  std::uint64_t promotions = 0;  // counter: entries copied up into this tier from a lower one
  std::uint64_t inserts = 0;     // counter: entries written
  std::uint64_t rejected = 0;    // counter: writes refused for lack of room
  std::vector<NamespaceUsage> namespaces;  // those with a quota
};

// The bytes of a cudaIpcMemHandle_t.
inline constexpr std::size_t kDeviceIpcHandleBytes = 64;

// The GPU tier's pool as MAP hands it to same-host clients.
struct DevicePool {
  std::uint64_t bytes = 0;
  std::int32_t device = -1;
  std::array<std::byte, kDeviceIpcHandleBytes> ipc_handle{};
};

struct DeviceTierStats {
  std::uint64_t bytes = 0;     // pool bytes in live ranges (stored + evicted but still leased)
  std::uint64_t capacity = 0;  // the pool
  std::uint64_t chunks = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t promotions = 0;
  std::uint64_t rejected = 0;  // promotions that found no room (everything left is leased)
  std::int32_t device = 0;
};

// The GPU tier as the store and the server see it: an inclusive cache of hot host-tier values in
// one device-memory pool (docs/gpu-tier.md). Implemented over kvdepot::cuda::GpuTier in
// gpu_device_tier.cc when the daemon is built with CUDA; tests may substitute their own.
// Every method may be called from any thread and none blocks on the GPU: copies run on the
// implementation's own worker.
class DeviceTier {
 public:
  virtual ~DeviceTier() = default;
  virtual bool Contains(std::string_view key) const = 0;
  // A host-tier hit on `key`: the tier may queue a promotion (e.g. on the second hit).
  virtual void OnHostHit(std::string_view key, const ValueRef& value) = 0;
  // For a key held only here: copies it into a host value from `allocate` on the tier's worker
  // and calls `done` there (NotFound when it is gone meanwhile). False (nothing queued) when the
  // key is not here.
  using Allocator = std::function<Result<std::shared_ptr<Value>>(std::size_t)>;
  virtual bool FetchToHost(std::string_view key, Allocator allocate,
                           std::function<void(Result<ValueRef>)> done) = 0;
  // A lease: pool offset and length of the key's bytes; `hold` keeps the range from being freed
  // or reused until it is dropped. nullopt when absent.
  struct DeviceLease {
    std::shared_ptr<const void> hold;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
  };
  virtual std::optional<DeviceLease> Lease(std::string_view key) = 0;
  virtual bool Erase(std::string_view key) = 0;
  // For MAP: the pool's size, device ordinal and cudaIpcMemHandle_t bytes.
  virtual DevicePool Pool() const = 0;
  virtual DeviceTierStats stats() const = 0;
};

}  // namespace kvdepot::daemon
