// Kernel family "leased": decoding chunks that live in another process's device memory (GPU-tier
// leases imported with cuda::IpcMapping, docs/gpu-tier.md) straight into an engine's KV layout.
//
// Two steps, so that a client pays for validation once per lease rather than once per fetch:
//  1. InspectLeasedChunks: one batch of device-to-host copies of every container's metadata (all
//     but its bulk sections), then the codec's own checks on the host, then one kernel that checks
//     the HACK chunks' scales in place (InspectHack's rule); three stream synchronisations
//     whatever the batch size. The result stays valid while the lease is held (the daemon never
//     changes a leased range), so repeated fetches of the same chunk reuse it.
//  2. LeasedDecoder: decodes a batch (any mix of raw, cachegen and hack-int2 chunks of one shape)
//     into a contiguous or a paged (vLLM-style) target: one CacheGen decode launch for all
//     CacheGen chunks, one HACK dequantize launch per HACK chunk, one row-scatter launch for the
//     raw (and, for paged targets, the dequantized HACK) chunks.
//
// Trust: a client does not trust a daemon's bytes. The bulk sections (CacheGen's rANS codes, a
// raw payload, HACK's 2-bit codes, sums and scales) never reach the host: the kernels read them
// in place and are safe on any bulk bytes (the CacheGen decoder bounds-checks its streams and
// reports corrupt ones; raw values, 2-bit codes and sums are plain data), and HACK's scales are
// checked on the device with the CPU's rule. Everything else passes the same checks as on the
// CPU, except the content checksums (which cover the bulk; the daemon verified
// them when the chunk was stored) and HACK's sums-equal-codes check (the sums feed only
// attention, never dequantization).
//
// Usable from plain C++ (g++). Thread-safety: InspectLeasedChunks is stateless; a LeasedDecoder
// serves one batch on one stream at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/cuda/cachegen.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/hack.h"

namespace kvdepot::cuda {

// A container in device memory this process may read (an imported lease: base + offset).
struct DeviceContainer {
  const std::byte* data = nullptr;  // 16-byte aligned (GPU-tier ranges are 4 KiB aligned)
  std::uint64_t bytes = 0;
};

// What InspectLeasedChunks learned from one container. Pointers point into `container.data`.
struct LeasedChunk {
  DeviceContainer container;
  CodecId codec = CodecId::kRaw;
  DType dtype = DType::kFloat16;  // the stored chunk's element type
  KvShape shape;
  std::uint64_t raw_payload_offset = 0;  // codec kRaw: the payload, shape.elements() of dtype
  CacheGenContainerInfo cachegen;        // codec kCacheGen
  HackOptions hack_options;              // codec kHackInt2, as stored
  HackDeviceSectionsView hack_sections;  // codec kHackInt2: the sections in device memory, in the
                                         // container layout the attention kernels read
};

// Validates `containers` (see the trust note above). Errors: kInvalidArgument for a null or
// misaligned container; kCorruption / kUnimplemented "leased container I: <codec check>" for the
// first container that fails (its index also goes to `*failed` when given); CUDA errors
// (StatusFromCuda). Blocks on `stream`.
Result<std::vector<LeasedChunk>> InspectLeasedChunks(std::span<const DeviceContainer> containers,
                                                     cudaStream_t stream,
                                                     std::size_t* failed = nullptr);

// Kernel parameters of the row scatter: contiguous [layers][2][tokens][row] sources -> pages.
struct ScatterRowsParams {
  const std::byte* const* sources;          // [chunks] device pointers (device array)
  const std::int32_t* const* block_tables;  // [chunks] device pointers, ceil(tokens / page_size)
  std::byte* const* caches;                 // [2 * layers]: K of layer l at [l], V at [layers + l]
  unsigned int* error;                      // set to 1 when a page number is out of range
  std::uint64_t page_stride;                // bytes
  std::uint64_t row_stride;                 // bytes
  std::uint32_t row_bytes;                  // kv_heads * head_dim * element size
  std::uint32_t page_size;                  // tokens per page
  std::uint32_t num_pages;
  std::uint32_t layers;
  std::uint32_t tokens;
  std::uint32_t chunks;
  std::uint32_t aligned16;  // 1 when every source and cache pointer is 16-byte aligned
};

// Enqueues the scatter: 16-byte words when aligned16 and every row and stride allow, else 2-byte
// words. cudaErrorInvalidValue for an empty batch or an odd row size.
cudaError_t LaunchScatterRows(const ScatterRowsParams& params, cudaStream_t stream);

class LeasedDecoder {
 public:
  LeasedDecoder() = default;
  // Room for batches of up to `max_chunks` chunks of up to `max_layers` layers. Allocates device
  // scratch (kResourceExhausted) but no per-chunk output staging until a paged HACK batch needs it.
  static Result<LeasedDecoder> Create(std::uint32_t max_chunks, std::uint32_t max_layers);

  // Enqueues the decode of `chunks` into `target` (the layouts and checks of CacheGenDecodeTarget,
  // cuda/cachegen.h). Output dtype: any for cachegen and hack-int2 chunks; the chunk's own for raw
  // ones (else kInvalidArgument). Does not block. kInvalidArgument for a second batch before
  // Finish, a batch that is empty, too large, of mixed shapes, or not from InspectLeasedChunks.
  // On an error after part of the batch was enqueued, waits for that part (no Finish needed).
  Status Enqueue(std::span<const LeasedChunk> chunks, const CacheGenDecodeTarget& target,
                 cudaStream_t stream);
  // Synchronises `stream` and reports the batch's device-side errors: a CacheGen stream that does
  // not decode (kCorruption "chunk I group G: ..."), a block table entry outside [0, num_pages)
  // (kInvalidArgument). On error the target holds partial data.
  Status Finish(cudaStream_t stream);
  // Enqueue + Finish.
  Status Decode(std::span<const LeasedChunk> chunks, const CacheGenDecodeTarget& target,
                cudaStream_t stream);

 private:
  Status EnqueueBatch(std::span<const LeasedChunk> chunks, const CacheGenDecodeTarget& target,
                      cudaStream_t stream);
  Status EnqueueScatter(std::span<const std::byte* const> sources,
                        std::span<const std::int32_t* const> block_tables, const KvShape& shape,
                        const CacheGenDecodeTarget& target, cudaStream_t stream);

  std::uint32_t max_chunks_ = 0;
  std::uint32_t max_layers_ = 0;
  bool batch_pending_ = false;  // Enqueue succeeded (or enqueued work), Finish not yet called
  bool cachegen_pending_ = false;
  bool scatter_pending_ = false;
  CacheGenDecodeWorkspace cachegen_;
  DeviceBuffer scatter_device_;    // error word | sources | block tables | cache pointers
  PinnedHostBuffer scatter_host_;  // error word read back | staging of the same layout
  DeviceBuffer staging_;           // paged HACK chunks, dequantized before the scatter
};

// The attention kernels' view of a leased hack-int2 chunk (the contiguous layout of cuda/hack.h):
// an engine attends over the daemon's memory without dequantizing. kInvalidArgument for a chunk of
// another codec.
Result<HackAttentionSeq> LeasedHackSequence(const LeasedChunk& chunk);

// Decodes one leased container into `d_out`, a contiguous [layers][2][tokens][kv_heads][head_dim]
// buffer of the container's dtype of at least `out_bytes` (InspectLeasedChunks + a one-chunk
// LeasedDecoder kept per thread and device). Synchronises `stream`. For one-off fetches; batches
// and repeated fetches of a lease go faster through the two steps above.
Status DecodeLeasedChunk(const std::byte* d_container, std::uint64_t bytes, void* d_out,
                         std::uint64_t out_bytes, cudaStream_t stream);

}  // namespace kvdepot::cuda
