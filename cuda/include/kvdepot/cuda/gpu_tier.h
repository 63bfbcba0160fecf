// The GPU tier's core (docs/gpu-tier.md), usable without the daemon (the GPU-only test and bench
// binaries link only kvdepot_codec and kvdepot_cuda):
//
//  * DevicePool: one cudaMalloc'd pool carved by a RangeAllocator (4 KiB granularity), exported to
//    other processes of the host with cudaIpcGetMemHandle;
//  * IpcMapping: a client's cudaIpcOpenMemHandle of that pool (opened once, closed on destruction);
//  * GpuTier: an LRU index of chunk bytes in the pool under a capacity that holds; entries are
//    handed out as shared GpuBlocks, whose range is freed only when the last holder (the index, a
//    lease) drops it, so a leased range is never reused;
//  * DecodeLeasedChunk: decodes a container lying in device memory (e.g. an imported lease) into
//    an engine-layout device buffer with the codec kernels.
//
// Plain C++ header (g++ can include it). Thread-safety: DevicePool and GpuTier methods may be
// called concurrently; IpcMapping is a value.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include <cuda_runtime_api.h>

#include "kvdepot/base/range_allocator.h"
#include "kvdepot/base/status.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/transcode.h"

namespace kvdepot::cuda {

using IpcHandle = std::array<std::byte, 64>;  // the bytes of a cudaIpcMemHandle_t
static_assert(sizeof(cudaIpcMemHandle_t) == 64);

class DevicePool {
 public:
  static constexpr std::uint64_t kGranularity = 4096;
  // cudaSetDevice(device) then one cudaMalloc of `bytes` (rounded up to 4 KiB) and its IPC handle.
  // kUnavailable without a usable GPU, kResourceExhausted when the device has not that much free.
  static Result<std::unique_ptr<DevicePool>> Create(int device, std::uint64_t bytes);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  std::byte* base() const { return base_; }
  std::uint64_t size() const { return size_; }
  int device() const { return device_; }
  const IpcHandle& ipc_handle() const { return handle_; }
  RangeAllocator& allocator() { return *alloc_; }
  const RangeAllocator& allocator() const { return *alloc_; }

 private:
  DevicePool() = default;
  int device_ = 0;
  std::byte* base_ = nullptr;
  std::uint64_t size_ = 0;
  IpcHandle handle_{};
  std::unique_ptr<RangeAllocator> alloc_;
};

class IpcMapping {
 public:
  IpcMapping() = default;
  // cudaSetDevice(device), cudaIpcOpenMemHandle(handle). Must run in another process than the
  // pool's owner (CUDA refuses the owner's own handle).
  static Result<IpcMapping> Open(int device, const IpcHandle& handle);
  ~IpcMapping();
  IpcMapping(IpcMapping&& other) noexcept;
  IpcMapping& operator=(IpcMapping&& other) noexcept;
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;

  std::byte* base() const { return base_; }

 private:
  std::byte* base_ = nullptr;
};

// A chunk's bytes in the pool. Frees its range when destroyed.
class GpuBlock {
 public:
  GpuBlock(DevicePool* pool, std::uint64_t offset, std::uint64_t length)
      : pool_(pool), offset_(offset), length_(length) {}
  ~GpuBlock() { (void)pool_->allocator().Free(offset_); }
  GpuBlock(const GpuBlock&) = delete;
  GpuBlock& operator=(const GpuBlock&) = delete;
  std::uint64_t offset() const { return offset_; }
  std::uint64_t length() const { return length_; }
  const std::byte* data() const { return pool_->base() + offset_; }

 private:
  DevicePool* pool_;
  std::uint64_t offset_;
  std::uint64_t length_;
};
using GpuBlockRef = std::shared_ptr<const GpuBlock>;

struct GpuTierOptions {
  int device = 0;
  std::uint64_t capacity = 1ull << 30;
  std::uint32_t promote_after_hits = 2;  // host hits before RecordHostHit says "promote"
};

struct GpuTierStats {
  std::uint64_t bytes = 0;  // pool bytes in live ranges (indexed + evicted-but-leased)
  std::uint64_t capacity = 0;
  std::uint64_t chunks = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t promotions = 0;  // successful Insert calls
  std::uint64_t rejected = 0;    // Insert calls that found no room
};

class GpuTier {
 public:
  // Creates the pool (DevicePool::Create errors) and a non-blocking stream for the copies.
  static Result<std::unique_ptr<GpuTier>> Create(const GpuTierOptions& options);
  ~GpuTier();

  // Counts a host-tier hit on `key`; true exactly when it reaches promote_after_hits and the key
  // is not here (the caller then promotes it with Insert, off any I/O thread).
  bool RecordHostHit(std::string_view key);

  // Copies `bytes` (host memory) into the pool under `key`, replacing an older entry, evicting
  // least recently used entries until it fits; `on_evict` gets each evicted entry (after the lock
  // is released) so the caller can move it to host memory. Blocks on the copy (call it from a
  // worker). kResourceExhausted when even an empty index leaves no room (the rest is leased);
  // kOutOfRange when it could never fit.
  using EvictFn = std::function<void(std::string_view key, GpuBlockRef block)>;
  Status Insert(std::string_view key, std::span<const std::byte> bytes, const EvictFn& on_evict);

  // The entry (marking it used), or null; counts a hit or a miss.
  GpuBlockRef Get(std::string_view key);
  bool Contains(std::string_view key) const;
  bool Erase(std::string_view key);
  // Copies a block to host memory (out.size() == block.length()); blocks on the copy.
  Status CopyToHost(const GpuBlock& block, std::span<std::byte> out);

  DevicePool& pool() { return *pool_; }
  const DevicePool& pool() const { return *pool_; }
  GpuTierStats stats() const;

 private:
  GpuTier() = default;
  struct Entry {
    GpuBlockRef block;
    std::list<std::string>::iterator pos;
  };
  GpuTierOptions options_;
  std::unique_ptr<DevicePool> pool_;
  cudaStream_t stream_ = nullptr;
  std::mutex copy_mu_;  // serialises use of stream_
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> index_;
  std::list<std::string> lru_;                                // front = most recent
  std::unordered_map<std::string, std::uint32_t> host_hits_;  // bounded: cleared when large
  std::uint64_t hits_ = 0, misses_ = 0, evictions_ = 0, promotions_ = 0, rejected_ = 0;
};

// The GPU path of kvdepot::TranscodeChunk: the same bytes, with cachegen and hack-int2 decoded and
// encoded by the CUDA kernels on the current device (raw needs no kernel). Errors as
// TranscodeChunk, plus CUDA errors (kDeviceError / kUnavailable / kResourceExhausted).
Result<std::vector<std::byte>> TranscodeGpu(std::span<const std::byte> container, CodecId target,
                                            const EncodeOptions& options = {},
                                            TranscodeTimings* timings = nullptr);

// Decoding leased GPU-tier chunks in a client process: kvdepot/cuda/leased.h.

}  // namespace kvdepot::cuda
