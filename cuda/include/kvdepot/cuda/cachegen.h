// Kernel family "cachegen": GPU encode and decode of the CacheGen codec (codec/include/kvdepot/
// cachegen.h), batched over many chunks per launch. Design and measurements: docs/cachegen-gpu.md.
//
// Bit-exactness contract: for every input the GPU encoder writes exactly the container bytes of
// the CPU reference kvdepot::EncodeCacheGen (once SealCacheGenContainer has filled in the
// checksums), and the GPU decoder writes exactly the elements of kvdepot::DecodeCacheGen. Both
// call the KVD_HOST_DEVICE math of kvdepot/cachegen_format.h and numeric.h, and both .cu files are
// compiled with -fmad=false (no fused multiply-add contraction).
//
// Two levels of API:
//  * convenience (tests, tools; allocates and synchronises): EncodeCacheGenGpu, DecodeCacheGenGpu;
//  * batched, device-resident (the data path): a workspace object owns the scratch memory, an
//    Enqueue* call validates arguments and enqueues the kernels on a stream without blocking, and
//    the matching Finish* call synchronises that stream and turns the device-side error report
//    into a Status. *Device = Enqueue* + Finish*.
//
// Usable from plain C++ (g++); the kernels live in cuda/src/cachegen_{encode,decode}.cu.
// Thread-safety: the free functions are stateless. A workspace is used by one thread at a time and
// holds at most one batch in flight: call Finish* before the next Enqueue* on the same workspace
// (its pinned staging buffers are rewritten by Enqueue*). Distinct workspaces may run concurrently
// on distinct streams.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/cachegen.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/cuda/device.h"

namespace kvdepot::cuda {

// ================================================================================================
// Container layout
// ================================================================================================

// Where the sections of one cachegen container lie, from its header alone (ParseCacheGenContainer)
// or from the shape (encoder). Offsets are bytes from the container start.
struct CacheGenContainerInfo {
  DType dtype = DType::kFloat16;  // original element type (header)
  KvShape shape;                  // [layers, 2, tokens, kv_heads, head_dim]
  std::uint8_t scale_dtype = 0;   // cachegen::kScaleFp16 or cachegen::kScaleFp32
  std::uint64_t params_offset = 0;
  std::uint64_t tables_offset = 0;
  std::uint64_t tables_entries = 0;  // u16 frequencies (sum of the bins)
  std::uint64_t scales_offset = 0;
  std::uint64_t index_offset = 0;
  std::uint64_t codes_offset = 0;
  std::uint64_t codes_words = 0;  // u16 words in the codes section
  std::uint64_t total_bytes = 0;
};

// Parses and validates a cachegen container on the host: ParseContainer (checksums per
// `options`), then every structural check of the CPU decoder that does not need the rANS streams
// (params, table sums, finite positive scales, index monotonic and ending at the codes' end), with
// the same status codes (kCorruption, kUnimplemented, kInvalidArgument for another codec).
// Precondition for the device decoder: it only reads chunks that passed this check.
Result<CacheGenContainerInfo> ParseCacheGenContainer(std::span<const std::byte> container,
                                                     const ParseOptions& options = {});

// Upper bound of the byte size of a cachegen container of `shape` (fp32 scales, every rANS step
// emitting a word): what a caller allocates per chunk for the device encoder. 0 for a shape that
// ValidateShape rejects.
std::uint64_t CacheGenMaxContainerBytes(const KvShape& shape);

// Fills in the section and header checksums of a container written by the device encoder (which
// writes every other byte). `container` is the whole container (its size from FinishEncode*).
// kCorruption when the header or section table is not the canonical layout of a container of
// this size.
Status SealCacheGenContainer(std::span<std::byte> container);

// ================================================================================================
// Decode
// ================================================================================================

// Per-chunk kernel descriptor (kernel parameters or device memory, built by EnqueueDecodeCacheGen).
struct CacheGenDecodeChunkDesc {
  const std::uint8_t* bins;    // [2 * layers] u8, the params section's bins (layer-major, K|V)
  const std::uint16_t* freq;   // [tables_entries] u16 frequencies, concatenated per (layer, K|V)
  const void* scales;          // [2 * layers][channels] pairs (lo, step) of u16 (fp16 bits) or
                               // f32, 4-byte aligned
  const std::uint32_t* index;  // [groups] u32 end word of each group, groups ordered lk-major
  const std::uint16_t* codes;  // [codes_words] u16 rANS words, 16-byte aligned
  void* out;                   // contiguous output [layers][2][tokens][channels] of the output
                               // dtype; unused (null) for paged output
  const std::int32_t* block_table;  // paged output: [ceil(tokens / page_size)] page numbers;
                                    // null for contiguous output
  std::uint32_t tables_entries;     // u16 entries at freq
  std::uint32_t codes_words;        // u16 words at codes
  std::uint32_t scale_fp32;         // 1: scales are f32 pairs, 0: fp16 pairs
  std::uint32_t reserved;           // 0
};

// Batches of up to this many chunks (and paged targets of up to this many layers) pass their
// descriptors inside the kernel parameters; larger ones through device memory.
inline constexpr std::uint32_t kCacheGenInlineChunks = 16;
inline constexpr std::uint32_t kCacheGenInlineLayers = 32;

// Kernel parameters, passed by value (__grid_constant__). All chunks of a launch share one shape.
struct CacheGenDecodeParams {
  const CacheGenDecodeChunkDesc* chunks;  // [num_chunks] device memory; null: inline_chunks
  void* const* k_cache;       // paged: [layers] device array of layer l's K cache; null when
                              // inline_cache holds the pointers, or for contiguous output
  void* const* v_cache;       // paged: [layers] device array of layer l's V cache (or null)
  unsigned long long* error;  // device u64, 0 before the launch; holds ~(first error key) after
  unsigned int* error_flag;   // host-mapped pinned u32, set to 1 by any error
  std::uint64_t page_stride;  // paged: elements between consecutive pages
  std::uint64_t row_stride;   // paged: elements between consecutive rows (tokens) of a page
  std::uint32_t num_pages;    // paged: pages per layer cache (block table entries must be less)
  std::uint32_t page_size;    // paged: tokens per page (>= 1)
  std::uint32_t num_chunks;
  std::uint32_t layers;
  std::uint32_t tokens;
  std::uint32_t channels;  // kv_heads * head_dim
  std::uint32_t channels_per_lane;
  std::uint32_t groups_per_lk;    // groups per (layer, K|V)
  std::uint32_t warps_per_block;  // groups decoded by one block (all of one (layer, K|V))
  std::uint32_t blocks_per_lk;    // ceil(groups_per_lk / warps_per_block)
  std::uint32_t stage_words;  // per-warp shared-memory staging of a group's words (multiple of 8)
  std::uint32_t lut_elem_bytes;  // per-warp output table [64][32] of this element size (0: none)
  CacheGenDecodeChunkDesc inline_chunks[kCacheGenInlineChunks];  // when chunks is null
  void* inline_cache[2 * kCacheGenInlineLayers];  // paged, k_cache null: K of layer l at [l],
                                                  // V at [layers + l]
};

// Enqueues the decode kernel on `stream` (grid: num_chunks * 2 * layers * blocks_per_lk blocks of
// warps_per_block warps; dynamic shared memory CacheGenDecodeSharedBytes(params)) and returns the
// launch error. Defined (explicitly instantiated in cachegen_decode.cu) ONLY for Out in {fp16,
// bf16, fp32} x Paged in {false, true}; prefer EnqueueDecodeCacheGen, which validates and
// dispatches.
template <DType Out, bool Paged>
cudaError_t LaunchCacheGenDecode(const CacheGenDecodeParams& params, cudaStream_t stream);
std::size_t CacheGenDecodeSharedBytes(const CacheGenDecodeParams& params);

// One chunk of a decode batch: a container in device memory and what the host learned from it.
struct CacheGenDecodeChunk {
  const std::byte* container = nullptr;  // device memory, info.total_bytes, 16-byte aligned
  CacheGenContainerInfo info;            // ParseCacheGenContainer over the same bytes
};

// Where the decoded elements of a batch go. Exactly one of the two layouts:
//  * contiguous (contiguous non-empty): chunk i's tensor [layers][2][tokens][kv_heads][head_dim]
//    at contiguous[i] (device memory, aligned to the element size);
//  * paged, vLLM style (contiguous empty): token t of chunk i, layer l, K (V) goes to
//    k_cache[l] (v_cache[l]) + page * page_stride + (t % page_size) * row_stride elements, with
//    page = block_tables[i][t / page_size] in [0, num_pages); the row's kv_heads * head_dim
//    elements are contiguous. k_cache/v_cache are host arrays of device pointers ([layers] each),
//    block_tables a host array of device pointers ([chunks], ceil(tokens / page_size) int32 each).
//    Distinct (chunk, token) pairs must map to distinct rows, rows must not overlap.
struct CacheGenDecodeTarget {
  DType dtype = DType::kFloat16;  // output element type (the containers' dtype reproduces the CPU)
  std::span<void* const> contiguous;
  std::span<void* const> k_cache;
  std::span<void* const> v_cache;
  std::span<const std::int32_t* const> block_tables;
  std::uint32_t page_size = 0;
  std::uint32_t num_pages = 0;
  std::uint64_t page_stride = 0;  // elements
  std::uint64_t row_stride = 0;   // elements, >= kv_heads * head_dim
};

// The checks EnqueueDecodeCacheGen makes on `target` for a batch of `chunks` chunks of `shape`
// (valid dtype; exactly one layout, complete, sized and with non-null aligned pointers); shared by
// every decoder that writes these layouts (cuda/leased.h). kInvalidArgument naming the field,
// prefixed with `caller`.
Status ValidateDecodeTarget(const KvShape& shape, std::size_t chunks,
                            const CacheGenDecodeTarget& target, std::string_view caller);

// Device scratch of the decoder: per-chunk descriptors, the paged layer pointers, the error word.
class CacheGenDecodeWorkspace {
 public:
  CacheGenDecodeWorkspace() = default;
  // Room for batches of up to max_chunks chunks of up to max_layers layers.
  static Result<CacheGenDecodeWorkspace> Create(std::uint32_t max_chunks, std::uint32_t max_layers);
  std::uint32_t max_chunks() const { return max_chunks_; }
  std::uint32_t max_layers() const { return max_layers_; }

 private:
  friend Status EnqueueDecodeCacheGen(std::span<const CacheGenDecodeChunk>,
                                      const CacheGenDecodeTarget&, CacheGenDecodeWorkspace&,
                                      cudaStream_t);
  friend Status FinishDecodeCacheGen(CacheGenDecodeWorkspace&, cudaStream_t);
  std::uint32_t max_chunks_ = 0;
  std::uint32_t max_layers_ = 0;
  std::uint32_t pending_chunks_ = 0;           // chunks of the batch in flight (0: none)
  unsigned int* error_flag_device_ = nullptr;  // device view of the pinned error flag
  DeviceBuffer device_;    // error word | descriptors | K pointers, V pointers (large batches)
  PinnedHostBuffer host_;  // error flag (device-written) | staging of the same layout
};

// Validates the batch (same shape for every chunk, containers aligned, target complete and sized:
// kInvalidArgument naming the field) and enqueues the decode kernel on `stream` (descriptors go in
// the kernel parameters; batches above kCacheGenInlineChunks chunks, or paged targets above
// kCacheGenInlineLayers layers, first upload them). Does not block. The output is complete once
// the stream has passed; call FinishDecodeCacheGen before reading it.
Status EnqueueDecodeCacheGen(std::span<const CacheGenDecodeChunk> chunks,
                             const CacheGenDecodeTarget& target, CacheGenDecodeWorkspace& workspace,
                             cudaStream_t stream);

// Synchronises `stream` and reports the batch: OK, kCorruption naming the first corrupt
// (chunk, group) and what is wrong with it (a rANS stream that ends early, has trailing words or
// does not end in the initial state; checks the host did not make are repeated on the device, so
// a bad container can never make the kernel read or write out of bounds), kInvalidArgument for a
// block table entry outside [0, num_pages), or a CUDA error. On error the output holds partial
// data. Not calling it after an Enqueue leaves the workspace busy.
Status FinishDecodeCacheGen(CacheGenDecodeWorkspace& workspace, cudaStream_t stream);

// EnqueueDecodeCacheGen + FinishDecodeCacheGen.
Status DecodeCacheGenDevice(std::span<const CacheGenDecodeChunk> chunks,
                            const CacheGenDecodeTarget& target, CacheGenDecodeWorkspace& workspace,
                            cudaStream_t stream);

// Convenience: parses `container` on the host, uploads, decodes on the current device into a
// tensor of the container's dtype, downloads. Same result as kvdepot::DecodeCacheGen over
// ParseContainer(container) (same status codes; messages may differ), plus CUDA errors.
Result<KvTensor> DecodeCacheGenGpu(std::span<const std::byte> container,
                                   cudaStream_t stream = nullptr);

// ================================================================================================
// Encode
// ================================================================================================

// Per-chunk kernel descriptor (kernel parameters or device memory, built by EnqueueEncodeCacheGen).
struct CacheGenEncodeChunkDesc {
  const void* input;  // [layers][2][tokens][channels] of the input dtype, device memory
  std::byte* output;  // CacheGenMaxContainerBytes(shape) bytes, device memory, 16-byte aligned
};

// Kernel parameters of the encode pipeline, passed by value; per-chunk scratch arrays are
// chunk-major (chunk i's part starts at i * its per-chunk size).
struct CacheGenEncodeParams {
  const CacheGenEncodeChunkDesc* chunks;  // [num_chunks] device memory; null: inline_chunks
  const std::uint8_t* bins;               // [2 * layers] bins per (layer, K|V), device memory
  const std::uint32_t* table_start;       // [2 * layers] first table entry of each (layer, K|V)
  std::uint8_t* symbols;                  // [chunks][2 * layers][tokens][channels] u8
  float* scales32;                        // [chunks][2 * layers][channels][2] (lo, step) f32
  std::uint32_t* hist;                    // [chunks][2 * layers][64] symbol counts, fp16 scales
  std::uint32_t* hist32;                  // [chunks][2 * layers][64] counts with fp32 scales
                                          // (both 0 at launch; Normalize re-zeroes them)
  std::uint32_t* packed;                  // [chunks][2 * layers][64] freq | cum << 16
  std::uint16_t* streams;                 // [chunks][groups][stream_cap] scratch rANS words
  std::uint32_t* lengths;                 // [chunks][groups] words of each group's stream
  std::uint32_t* offsets;                 // [chunks][groups] first codes word of each group
  unsigned long long* status;             // [chunks][8] device: fp16-failed flag, ~first
                                          // non-finite element, ~first fp32-overflow channel (these
                                          // three 0 at launch; Finalize re-zeroes them), -, the
                                          // chunk's final fp32-scales flag (for Compact), -, -, -
  unsigned long long* host_status;        // [chunks][4] host-mapped pinned: fp16-failed,
                                          // ~non-finite, ~overflow, container bytes (Finalize)
  std::uint64_t params_offset;            // container layout (section offsets, bytes), the same
  std::uint64_t tables_offset;            // for every chunk up to the scale dtype
  std::uint64_t scales_offset;
  std::uint64_t scales_bytes16;  // scales section bytes with fp16 scales
  std::uint32_t num_chunks;
  std::uint32_t layers;
  std::uint32_t tokens;
  std::uint32_t kv_heads;
  std::uint32_t head_dim;
  std::uint32_t channels;  // kv_heads * head_dim
  std::uint32_t channels_per_lane;
  std::uint32_t groups_per_lk;
  std::uint32_t table_entries;  // sum of bins
  std::uint32_t stream_cap;     // 2 * 32 + channels_per_lane * tokens * 32
  std::uint32_t vec;            // elements per vector load: 8 (channels % 8 == 0 and
                                // every input 16-byte aligned) or 1
  std::uint32_t input_dtype;    // DType of the input (as its stored value)
  CacheGenEncodeChunkDesc inline_chunks[kCacheGenInlineChunks];  // when chunks is null
};

// Enqueues the encode pipeline (scan + scales + quantize + histogram, fp32-scale fallback,
// frequency tables, rANS, scan + container assembly, compaction) on `stream`; returns the first
// launch error. Defined
// (explicitly instantiated in cachegen_encode.cu) ONLY for In in {fp16, bf16, fp32}; prefer
// EnqueueEncodeCacheGen.
template <DType In>
cudaError_t LaunchCacheGenEncode(const CacheGenEncodeParams& params, cudaStream_t stream);

// Device scratch of the encoder for batches of up to max_chunks chunks of one shape: about
// elements + groups * stream_cap * 2 bytes per chunk (Llama-8B chunk [32, 2, 256, 8, 128]: 50 MB).
class CacheGenEncodeWorkspace {
 public:
  CacheGenEncodeWorkspace() = default;
  static Result<CacheGenEncodeWorkspace> Create(const KvShape& shape, std::uint32_t max_chunks);
  const KvShape& shape() const { return shape_; }
  std::uint32_t max_chunks() const { return max_chunks_; }

 private:
  friend Status EnqueueEncodeCacheGen(DType, const KvShape&, std::span<const void* const>,
                                      std::span<std::byte* const>, const CacheGenOptions&,
                                      CacheGenEncodeWorkspace&, cudaStream_t);
  friend Result<std::vector<std::uint64_t>> FinishEncodeCacheGen(CacheGenEncodeWorkspace&,
                                                                 cudaStream_t);
  KvShape shape_;
  std::uint32_t max_chunks_ = 0;
  std::uint32_t pending_chunks_ = 0;
  bool dirty_ = true;                      // counters/flags need clearing before the next batch
  std::vector<std::uint8_t> device_bins_;  // the bins profile currently in device memory
  unsigned long long* host_status_device_ = nullptr;  // device view of the pinned status
  DeviceBuffer device_;                               // descriptors | bins | scratch arrays
  PinnedHostBuffer host_;  // staging: descriptors | bins | status (written by the device)
};

// Validates (dtype, shape == workspace shape, 1 <= inputs.size() == outputs.size() <= max_chunks,
// non-null aligned pointers, bins profile as EncodeCacheGen: kInvalidArgument) and enqueues the
// encoding of inputs[i] (device tensor [layers, 2, tokens, kv_heads, head_dim] of `dtype`) into
// outputs[i] (device, CacheGenMaxContainerBytes(shape) bytes, 16-byte aligned) on `stream`.
// Does not block. Every byte of the container except the checksums is written on the device.
Status EnqueueEncodeCacheGen(DType dtype, const KvShape& shape, std::span<const void* const> inputs,
                             std::span<std::byte* const> outputs, const CacheGenOptions& options,
                             CacheGenEncodeWorkspace& workspace, cudaStream_t stream);

// Synchronises `stream` and returns each container's byte size, or the first chunk's error as
// EncodeCacheGen reports it (kInvalidArgument for a non-finite input value, naming the chunk and
// the first position, or for a channel range that overflows float), or a CUDA error. The
// containers still need SealCacheGenContainer (on the host) after download.
Result<std::vector<std::uint64_t>> FinishEncodeCacheGen(CacheGenEncodeWorkspace& workspace,
                                                        cudaStream_t stream);

// EnqueueEncodeCacheGen + FinishEncodeCacheGen.
Result<std::vector<std::uint64_t>> EncodeCacheGenDevice(DType dtype, const KvShape& shape,
                                                        std::span<const void* const> inputs,
                                                        std::span<std::byte* const> outputs,
                                                        const CacheGenOptions& options,
                                                        CacheGenEncodeWorkspace& workspace,
                                                        cudaStream_t stream);

// Convenience: uploads `host_tensor`, encodes it on the current device, downloads and seals the
// container. Byte-identical to kvdepot::EncodeCacheGen(host_tensor, options), with the same
// status codes for invalid input, plus CUDA errors.
Result<std::vector<std::byte>> EncodeCacheGenGpu(const KvTensorView& host_tensor,
                                                 const CacheGenOptions& options = {},
                                                 cudaStream_t stream = nullptr);

}  // namespace kvdepot::cuda
