// Same-host GPU fetch from a kvdepot daemon (docs/gpu-tier.md): leases chunks over the daemon's
// Unix socket, imports its GPU pool once (CUDA IPC) and its host arena once (shared memory), and
// decodes the leased chunks with the codec kernels straight from the daemon's memory into the
// engine's KV layout (cuda/leased.h). Built only with CUDA (library kvdepot_client_gpu).
//
// Flow: Lease(keys) once per set of chunks (LEASE_GET + the metadata checks), Decode(held, target)
// as often as needed while they are held, Release(held). A chunk leased from the GPU tier is read
// in place; one leased from the host arena is first copied to a device staging buffer owned by the
// HeldChunks (one host-to-device copy of its compressed bytes). Keys in neither shared tier come
// back with their status (not_found, or unavailable: read them with Connection::Get).
//
// Thread-safety: one thread at a time (it drives one Connection and one decoder).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/client/client.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/gpu_tier.h"
#include "kvdepot/cuda/leased.h"

namespace kvdepot::client {

// Chunks held by a GpuFetcher: for each requested key its status; for the ok ones, in key order,
// the lease and what InspectLeasedChunks learned (valid until Release).
struct HeldChunks {
  std::vector<StatusCode> status;         // [keys]
  std::vector<std::size_t> key_index;     // [held]: position of each held chunk among the keys
  std::vector<protocol::Lease> leases;    // [held]
  std::vector<cuda::LeasedChunk> chunks;  // [held]
  std::shared_ptr<cuda::DeviceBuffer> staging;  // device copies of the host-tier chunks, if any
};

struct GpuFetchStats {
  std::uint64_t leased_gpu = 0;    // chunks leased from the GPU tier (read in place)
  std::uint64_t leased_host = 0;   // chunks leased from the host arena (copied to the device)
  std::uint64_t staged_bytes = 0;  // bytes copied host arena -> device
};

class GpuFetcher {
 public:
  // MAP on `connection` (Unix socket; kUnavailable over TCP or when the daemon shares neither a
  // GPU pool nor a host arena), imports what it shares on CUDA device `device` (the daemon's own
  // device when -1), and creates a decoder for batches of up to max_chunks chunks of up to
  // max_layers layers. The connection must outlive the fetcher; its leases die with it.
  static Result<std::unique_ptr<GpuFetcher>> Open(Connection& connection, std::uint32_t max_chunks,
                                                  std::uint32_t max_layers, int device = -1);
  ~GpuFetcher();
  GpuFetcher(const GpuFetcher&) = delete;
  GpuFetcher& operator=(const GpuFetcher&) = delete;

  // LEASE_GET of `keys` (at most max_chunks), then the checks of InspectLeasedChunks. On an error
  // after the leases were granted they are released before returning. kCorruption names the key
  // whose container fails the checks.
  Result<HeldChunks> Lease(std::span<const std::string> keys, cudaStream_t stream);
  // Decodes every held chunk into `target` (one entry per held chunk, in key order; the layouts of
  // cuda::CacheGenDecodeTarget). Synchronises `stream`.
  Status Decode(const HeldChunks& held, const cuda::CacheGenDecodeTarget& target,
                cudaStream_t stream);
  // RELEASE of the held leases; `held` is emptied. Call after the last Decode.
  Status Release(HeldChunks& held);

  const protocol::MapInfo& info() const { return info_; }
  GpuFetchStats stats() const { return stats_; }

 private:
  GpuFetcher() = default;
  Connection* connection_ = nullptr;
  protocol::MapInfo info_;
  std::unique_ptr<SharedArena> arena_;  // null without a host arena
  cuda::IpcMapping pool_;               // base() null without a GPU pool
  cuda::LeasedDecoder decoder_;
  std::uint32_t max_chunks_ = 0;
  GpuFetchStats stats_;
};

}  // namespace kvdepot::client
