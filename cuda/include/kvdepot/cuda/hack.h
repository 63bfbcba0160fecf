// Kernel family "hack": the HACK INT2 codec on the GPU (codec/include/kvdepot/codec/hack.h) and the
// quantized-attention kernels that consume its 2-bit codes without dequantizing them
// (codec/include/kvdepot/codec/hack_attention.h has the CPU references). Design, layouts, what
// bounds each kernel: docs/hack-gpu.md.
//
// Five kernels (cuda/src/hack_quantize.cu, hack_attention.cu, hack_prefill_fp16.cu,
// hack_decode_fp16.cu; the calls' host sides in hack_quantize_api.cc and hack_attention_api.cc):
//  * quantize: fp16/bf16 KV chunk -> the codes, scales, sums and tail sections of a hack-int2
//    container, byte-identical to kvdepot::EncodeHack (both roundings, sinks, every partition size
//    and orientation);
//  * dequantize: those sections -> a KV tensor, byte-identical to kvdepot::DequantizeHack (for
//    engines without HACK attention, and for transcoding);
//  * attention: decode (one query token per sequence, ragged batch, contiguous or paged KV) and
//    causal prefill over hack-int2 KV, with INT8 Q and INT8 P against the 2-bit codes on integer
//    tensor cores (mma.sync m16n8k32), equal to kvdepot::HackDecodeAttention /
//    HackPrefillAttention within the tolerance stated at HackAttentionTolerance below;
//  * dequantize-on-load prefill (HackPrefillMath::kDequantFp16): the same prefill call with the
//    codes unpacked to fp16 in shared memory and fp16 tensor-core MMAs — attention over the
//    dequantized KV, the faster path (docs/hack-gpu.md, "Prefill attention: the fp16 path").
//  * dequantize-on-load decode (HackDecodeMath::kDequantFp16): the same decode call with the codes
//    unpacked to fp16 in registers and fp16 tensor-core MMAs (docs/hack-gpu.md, "Decode attention:
//    the fp16 path").
//
// Sections in device memory are read and written in the container's own layout (docs/hack.md
// §"Container format"): a container copied to the device as it is can be attended over directly.
//
// Usable from plain C++ (g++). Thread-safety: free functions are stateless; a workspace serves one
// stream at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/cuda/device.h"

namespace kvdepot::cuda {

// ================================================================================================
// Device sections (host)
// ================================================================================================

// A chunk's layout and section lengths come from the codec: HackLayoutFor and HackSectionBytesFor
// (codec/include/kvdepot/codec/hack.h).

// The four data sections of one chunk in device memory, each in the container's layout.
struct HackDeviceSections {
  std::uint8_t* codes = nullptr;   // [codes / 4] bytes, 16-byte aligned
  std::uint8_t* scales = nullptr;  // [partitions] x {u16 fp16 scale, u16 fp16 min}, 16-byte aligned
  std::uint8_t* sums = nullptr;    // [sums] x u8 (P <= 64) or u16 (P = 128), 16-byte aligned
  void* tail = nullptr;            // [layers][2][unquantized][kv_heads][head_dim] of the chunk
                                   // dtype, 16-byte aligned; may be null when there is no tail
};
struct HackDeviceSectionsView {
  const std::uint8_t* codes = nullptr;
  const std::uint8_t* scales = nullptr;
  const std::uint8_t* sums = nullptr;
  const void* tail = nullptr;
};

// ================================================================================================
// Quantize
// ================================================================================================

// One chunk of a quantize launch: its input and the sections it is written to.
struct HackQuantizeChunk {
  const void* input = nullptr;  // [layers][2][tokens][kv_heads][head_dim] of the launch's dtype,
                                // device memory, 16-byte aligned
  HackDeviceSections out;       // codes and tail 16-byte aligned, scales 4, sums 2 (the tail is
                                // unused, and may be null, when the layout has none)
  std::uint64_t seed = 0;       // stochastic rounding's seed (the chunk's HackOptions::seed)
};

// Chunks per quantize launch: their descriptors travel in the kernel parameters.
inline constexpr std::uint32_t kHackQuantizeMaxChunks = 16;

// Kernel parameters, passed by value (__grid_constant__). Every chunk of a launch has the same
// layout. One CTA quantizes one group (chunk, layer, K|V, head, block) at a time, grid-stride
// over all chunks' groups; the tail rows are copied by the same grid after the groups. A launch
// of several chunks runs at the kernel's steady rate, where one chunk alone also pays the time
// to fill and drain the GPU (docs/hack-gpu.md, "Quantize / dequantize").
struct HackQuantizeParams {
  HackQuantizeChunk chunks[kHackQuantizeMaxChunks];  // [num_chunks]
  std::uint32_t num_chunks;                          // 1 .. kHackQuantizeMaxChunks
  std::uint32_t stochastic;                          // 1: stochastic rounding, 0: nearest
  unsigned long long* error;  // device u64, UINT64_MAX before the launch; after it the minimum
                              // over invalid input elements of (chunk * elements per chunk +
                              // flat index) * 2 + kind (kind 0: not finite, 1: |x| > 65504)
  hack::Layout layout;        // P in {32, 64, 128}, head_dim in {64, 128, 256}
};

// Enqueues the quantize kernel (grid: SM count x occupancy CTAs of 128 threads, grid-stride over
// the chunks' groups then tail rows; dynamic shared memory HackQuantizeSharedBytes(layout)) and
// returns the launch error (cudaErrorInvalidValue for a head_dim outside {64, 128, 256} or a
// chunk count outside 1 .. kHackQuantizeMaxChunks). Defined (explicitly instantiated) ONLY for In
// in {fp16, bf16}; prefer EnqueueQuantizeHack(Batch), which validate and dispatch.
template <DType In>
cudaError_t LaunchHackQuantize(const HackQuantizeParams& params, cudaStream_t stream);
std::size_t HackQuantizeSharedBytes(const hack::Layout& layout);

// Validates (dtype fp16 or bf16, ValidateShape, ValidateHackOptions, head_dim in {64, 128, 256},
// non-null aligned pointers; section sizes are the caller's duty: HackSectionBytesFor) and
// enqueues the quantization of the device tensor `d_input` into `out`, plus the reset of the
// device error word `d_error` (u64). Does not block.
// Errors: kInvalidArgument naming the field; CUDA errors via StatusFromCuda.
Status EnqueueQuantizeHack(DType dtype, const KvShape& shape, const HackOptions& options,
                           const void* d_input, const HackDeviceSections& out,
                           unsigned long long* d_error, cudaStream_t stream);

// Synchronises `stream` and reads `d_error`: OK, or kInvalidArgument naming the first invalid input
// element (non-finite value, or |x| > 65504) at the same position "[layer, kv, token, head, dim]"
// as QuantizeHack (its value is not quoted), or a CUDA error. On error the sections hold partial
// data.
Status FinishQuantizeHack(const KvShape& shape, const unsigned long long* d_error,
                          cudaStream_t stream);

// As EnqueueQuantizeHack for 1 .. kHackQuantizeMaxChunks chunks of one shape in one launch (an
// engine storing a prompt's chunks; several chunks per launch are what reaches the kernel's
// steady rate). options.seed is unused: each chunk carries its own. Validation errors name the
// chunk ("chunk 2: ...").
Status EnqueueQuantizeHackBatch(DType dtype, const KvShape& shape, const HackOptions& options,
                                std::span<const HackQuantizeChunk> chunks,
                                unsigned long long* d_error, cudaStream_t stream);

// As FinishQuantizeHack for a batch: the first invalid element of the lowest-numbered chunk that
// has one, named "chunk i: ...". On error every chunk's sections may hold partial data.
Status FinishQuantizeHackBatch(const KvShape& shape, const unsigned long long* d_error,
                               cudaStream_t stream);

// Convenience (tests, tools; allocates and synchronises): uploads `tensor` (fp16 or bf16),
// quantizes it on the current device and assembles the container on the host. Byte-identical to
// kvdepot::EncodeHack(tensor, options), with the same status codes for invalid input.
Result<std::vector<std::byte>> EncodeHackGpu(const KvTensorView& tensor,
                                             const HackOptions& options = {});

// ================================================================================================
// Dequantize
// ================================================================================================

struct HackDequantizeParams {
  const std::uint8_t* codes;   // codes section, 16-byte aligned
  const std::uint8_t* scales;  // scales section, 4-byte aligned
  const std::uint8_t* sums;    // unused (the sums are not needed to dequantize)
  const void* tail;            // tail section of the chunk dtype, aligned to its element size
  void* out;                   // [layers][2][tokens][kv_heads][head_dim] of Out, 16-byte aligned
  hack::Layout layout;         // P in {32, 64, 128}, head_dim in {64, 128, 256}
  std::uint32_t tail_dtype;    // DType of the chunk (the tail's element type), as an integer
};

// Defined ONLY for Out in {fp16, bf16, fp32}. Grid: SM count x occupancy CTAs of 128 threads,
// grid-stride over groups then tail rows. Prefer EnqueueDequantizeHack.
template <DType Out>
cudaError_t LaunchHackDequantize(const HackDequantizeParams& params, cudaStream_t stream);

// Enqueues the dequantization of a chunk's sections (`chunk_dtype` is the container's dtype; the
// sections must have passed UnpackHack's checks or come from the quantizer: the kernel trusts
// them) into `d_out` ([layers, 2, tokens, kv_heads, head_dim] of `out_dtype`). Byte-identical to
// DequantizeHack. Errors: kInvalidArgument for a bad dtype, shape, options, unsupported
// head_dim, null or misaligned pointer.
Status EnqueueDequantizeHack(DType chunk_dtype, const KvShape& shape, const HackOptions& options,
                             const HackDeviceSectionsView& in, DType out_dtype, void* d_out,
                             cudaStream_t stream);

// Convenience: parses and validates `container` on the host (ParseContainer + UnpackHack), uploads
// its sections, dequantizes on the current device into `out_dtype`, downloads. Same tensor as
// kvdepot::DequantizeHack(UnpackHack(view), out_dtype), same status codes for bad containers.
Result<KvTensor> DecodeHackGpu(std::span<const std::byte> container, DType out_dtype);

// ================================================================================================
// Attention
// ================================================================================================
//
// Closed set of the attention kernels: partition P = 64, K in the channel orientation (the
// defaults, docs/hack.md), head_dim 64 or 128, 1..8 query heads per KV head, fp16 or bf16 tail,
// fp32, fp16 or bf16 queries and outputs (io_dtype). Anything else is kUnimplemented (or
// kInvalidArgument for values the codec itself rejects).
//
// The KV of a sequence of T tokens with S sinks is laid out as one hack-int2 chunk of T tokens
// (hack::Layout{layers, T, kv_heads, head_dim, 64, S}): S unquantized sink tokens at positions
// 0..S-1, B = (T - S) / 64 quantized blocks at positions S + 64 j, then the unquantized tail. Two
// ways to find block j:
//  * contiguous: the codes / scales / sums sections of the sequence's own chunk (a container of
//    that chunk, copied to the device as it is);
//  * paged: a pool of pages, each the codes / scales / sums sections of a chunk of
//    page_blocks * 64 tokens without sinks (so a full 256-token container chunk is a page as it
//    is); block j is slot j % page_blocks of page block_tables[seq][j / page_blocks].
// The unquantized tokens (sinks, then tail) are always a tail section of the sequence's layout:
// [layers][2][U][kv_heads][head_dim], U = T - 64 B.

// One sequence (device memory, an array of them for decode).
struct HackAttentionSeq {
  const std::uint8_t* codes = nullptr;   // contiguous: the chunk's codes section (16-byte
                                         // aligned); paged: ignored
  const std::uint8_t* scales = nullptr;  // contiguous: scales section (16-byte aligned)
  const std::uint8_t* sums = nullptr;    // contiguous: sums section (16-byte aligned)
  const void* tail = nullptr;            // tail section (16-byte aligned); null iff U == 0
  std::uint32_t tokens = 0;              // T >= 1
  std::uint32_t sinks = 0;               // S <= T
};

// What every sequence of a call shares.
struct HackKvCache {
  DType dtype = DType::kFloat16;  // the tail's element type: fp16 or bf16
  std::uint32_t layers = 0;       // layers of every chunk / page layout
  std::uint32_t layer = 0;        // the layer attended (< layers)
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;                         // 64 or 128
  std::uint32_t partition = hack::kDefaultPartition;  // must be 64
  // Paged layout (page_blocks > 0); all null / 0 for contiguous sequences.
  std::uint32_t page_blocks = 0;             // quantized blocks per page (page tokens / 64)
  std::uint32_t num_pages = 0;               // pages in the pool (block table entries must be less)
  const std::uint8_t* page_codes = nullptr;  // page i's codes section at + i * page_codes_bytes
  const std::uint8_t* page_scales = nullptr;  // page i's scales section at + i * page_scales_bytes
  const std::uint8_t* page_sums = nullptr;    // page i's sums section at + i * page_sums_bytes
  std::uint64_t page_codes_bytes = 0;         // strides, multiples of 16, >= the section sizes of a
  std::uint64_t page_scales_bytes = 0;        // page (HackSectionBytesFor of its layout)
  std::uint64_t page_sums_bytes = 0;
  const std::int32_t* block_tables = nullptr;  // device [num_seqs][max_pages_per_seq]
  std::uint32_t max_pages_per_seq = 0;
};

// What a decode call computes (docs/hack-gpu.md, "Decode attention: the fp16 path"; docs/hack.md,
// "Which attention path to call").
enum class HackDecodeMath : std::uint8_t {
  // HACK's homomorphic math: INT8 Q' and INT8 P against the 2-bit codes on integer tensor cores.
  // Equals HackDecodeAttentionBatch (int8_q = int8_p = true) within kHackAttention*Tolerance. Not
  // reproducible bit for bit: where a warp takes more than two blocks of a split, the blocks are
  // dealt at run time, so two calls can differ in the last bits of the fp32 sums.
  kHomomorphicInt8 = 0,
  // Attention over the dequantized KV on fp16 tensor cores: the 2-bit codes enter the MMAs as
  // fp16 values themselves, K's (scale, min) pairs are folded into the query per block (q * scale
  // in fp16, normalised by powers of two per head and per block; the mins through one more MMA)
  // and V's into the output; fp32 accumulation and online softmax. Equal to DecodeAttention over
  // DequantizeHack(chunk, fp32) within kHackDequantDecode*Tolerance, closer to exact attention
  // than kHomomorphicInt8 (no INT8 Q or P), and the same bits from call to call. On the H200
  // (docs/benchmarks.md, 2026-12-04, session 24) faster than kHomomorphicInt8 wherever a decode
  // step has unquantized tokens (its unfinished block, sinks) and from 32K tokens or at batch 16
  // without; slower only at 4K batch 1 with none. docs/hack.md ("Which attention path to call")
  // says which to use. No range limit on q beyond |q * softmax_scale| < 2^100; unquantized
  // tokens are attended in runs of 8, fp16 ones as they are, bf16 ones scaled by a power of two
  // per run before they are rounded to fp16. lse is written; outputs of a query head with NaN /
  // Inf values are not specified (untested). At most kHackDecodeFp16MaxWarps warps per CTA.
  kDequantFp16 = 1,
};
inline constexpr std::uint32_t kHackDecodeFp16MaxWarps = 12;
// Warps per CTA the decode call gives the kDequantFp16 kernel where a split sequence has at most 16
// blocks per warp at this count (128K tokens at batch 1) and a whole one at most 32 (batch 16 up
// to 16K tokens); more blocks get kHackDecodeFp16MaxWarps.
inline constexpr std::uint32_t kHackDecodeFp16FullWarps = 8;

// Decode: query b ([q_heads][head_dim] at q + b * q_heads * head_dim) attends to every token of
// sequence b. out: [num_seqs][q_heads][head_dim]; lse (optional): [num_seqs][q_heads], the natural
// log of the softmax normaliser of the scaled scores.
struct HackDecodeArgs {
  const HackAttentionSeq* seqs = nullptr;  // device [num_seqs]
  std::uint32_t num_seqs = 0;
  std::uint32_t max_tokens = 0;  // host-known bound of every seqs[i].tokens (sizes the grid)
  std::uint32_t q_heads = 0;
  float softmax_scale = 0;  // 0: 1 / sqrt(head_dim)
  const void* q = nullptr;  // device [num_seqs][q_heads][head_dim] of io_dtype, 16-byte aligned
  void* out = nullptr;      // device [num_seqs][q_heads][head_dim] of io_dtype, aligned to it
  float* lse = nullptr;     // device [num_seqs][q_heads] fp32, or null
  HackDecodeMath math = HackDecodeMath::kHomomorphicInt8;
  // Element type of q and out: kFloat32, or what an engine's activations are, kFloat16 /
  // kBFloat16 (both maths; kInvalidArgument for a value that is no DType). The kernels read a
  // 16-bit query as its exact float value and round each output once (to nearest even), so a call
  // over 16-bit q computes what the fp32 call over the same values computes: with kDequantFp16 its
  // out is that call's out rounded to io_dtype, bit for bit, and the same lse; with
  // kHomomorphicInt8 the same up to that math's run-to-run variation (above). lse stays fp32.
  DType io_dtype = DType::kFloat32;
};

// What a prefill call computes (docs/hack-gpu.md, "Prefill attention: the fp16 path"; docs/hack.md,
// "Which attention path to call").
enum class HackPrefillMath : std::uint8_t {
  // HACK's homomorphic math: INT8 Q' and INT8 P against the 2-bit codes on integer tensor cores.
  // Equals HackPrefillAttention (int8_q = int8_p = true) within kHackAttention*Tolerance. Not
  // reproducible bit for bit (blocks dealt to warps at run time, as HackDecodeMath's).
  kHomomorphicInt8 = 0,
  // Dequantize on load: the codes are unpacked to fp16 in shared memory (min + code * scale,
  // rounded once) and both products run on fp16 tensor cores with fp32 accumulation and an fp32
  // online softmax: attention over the dequantized KV, equal to PrefillAttention over
  // DequantizeHack(chunk, fp32) within kHackDequantPrefill*Tolerance. Several times faster than
  // kHomomorphicInt8 (docs/benchmarks.md) and closer to exact attention (no INT8 Q or P): the path
  // an engine should call for prefill. Queries times the softmax scale must be within fp16's range
  // (|q * scale| <= 65504); bf16 unquantized tokens are converted to fp16 (exact for magnitudes
  // >= 2^-14). lse is written as for kHomomorphicInt8 (checked finite by the tests, not against a
  // reference); outputs of a query head with NaN / Inf values are not specified (untested).
  kDequantFp16 = 1,
};

// Causal prefill: query i ([q_heads][head_dim] at q + i * q_heads * head_dim) sits at position
// first_position + i and attends to positions 0 .. first_position + i of `seq`. Chunked prefill
// after a prefix hit: first_position = the cached tokens, queries = the new tokens, `seq` = the
// cached blocks plus the new tokens' (their unfinished last block unquantized in the tail;
// docs/hack-gpu.md, "Prefill attention").
struct HackPrefillArgs {
  HackAttentionSeq seq;       // host copy of the one sequence (its pointers are device memory)
  std::uint32_t queries = 0;  // >= 1, first_position + queries <= seq.tokens
  std::uint32_t first_position = 0;
  std::uint32_t q_heads = 0;
  float softmax_scale = 0;
  const void* q = nullptr;  // [queries][q_heads][head_dim] of io_dtype, 16-byte aligned
  void* out = nullptr;      // [queries][q_heads][head_dim] of io_dtype, 16-byte aligned
  float* lse = nullptr;     // [queries][q_heads] fp32, or null
  HackPrefillMath math = HackPrefillMath::kHomomorphicInt8;
  // Element type of q and out: kFloat32, or what an engine's activations are, kFloat16 / kBFloat16
  // (both maths; kInvalidArgument for a value that is no DType). The kernels read a 16-bit query
  // as its exact float value and round each output once (to nearest even), so a call over 16-bit q
  // computes what the fp32 call over the same values computes: with kDequantFp16 its out is that
  // call's out rounded to io_dtype, bit for bit, and the same lse; with kHomomorphicInt8 the same
  // up to that math's run-to-run variation (HackPrefillMath).
  DType io_dtype = DType::kFloat32;
  // Staging scratch ("dequantize once"; docs/hack-gpu.md, "Prefill attention: the fp16 path",
  // staged path): device memory, 16-byte aligned, of staging_bytes bytes, or null. Used only where
  // HackPrefillStagingBytes(kv, args) > 0 (kDequantFp16 at head_dim 128), and then staging_bytes
  // must be at least that (kInvalidArgument naming both sizes otherwise; never a silent fallback).
  // With it, on a compute-capability-9.0 device, the call runs two kernels on `stream`: one that
  // unpacks every key tile of the call once per KV head into the scratch (the fp16 stage images
  // the warp-specialised kernel's producer builds in shared memory, bit for bit), then the
  // warp-specialised kernel whose producer only copies each image into its shared stage (one bulk
  // asynchronous copy per tile) instead of unpacking it in every CTA that reads it, and whose
  // consumers take 128 keys per softmax step (64 without the scratch): the same attention within
  // kHackDequantPrefillRelL2Tolerance, not the unstaged call's bits. Elsewhere (head_dim 64,
  // kHomomorphicInt8, or a device whose kernel is not the warp-specialised one) it is ignored. The
  // scratch is written and read by this call only (stream-ordered): one scratch may serve every
  // call on one stream.
  void* staging = nullptr;
  std::uint64_t staging_bytes = 0;
};

// Bytes of the staging scratch (HackPrefillArgs::staging) the call `args` on `kv` needs: kv_heads x
// the key tiles of positions 0 .. first_position + queries - 1 (64 keys each: the sink tiles, the
// quantized blocks, the tail's runs) x 32 KiB (a 64-key fp16 K tile and its Vᵀ) for kDequantFp16
// at head_dim 128; 0 where the call does not stage (kHomomorphicInt8, head_dim 64, queries 0).
// Host only, device-independent, touches no device: an engine sizes one scratch for its longest
// call (4K prompt, 8 KV heads: 16 MiB; 32K tokens: 128 MiB).
std::uint64_t HackPrefillStagingBytes(const HackKvCache& kv, const HackPrefillArgs& args);
inline constexpr std::uint64_t kHackPrefillStageBytes = 32768;  // one staged tile (head_dim 128)

// Kernel parameters, passed by value (built by the Enqueue functions).
struct HackAttentionParams {
  const void* q;                     // [queries][q_heads][head_dim] of io_dtype
  void* out;                         // [queries][q_heads][head_dim] of io_dtype
  float* lse;                        // [queries][q_heads] fp32, or null
  const HackAttentionSeq* seqs;      // decode: [num_seqs] device; prefill: null
  HackAttentionSeq prefill_seq;      // prefill: the sequence
  const std::int32_t* block_tables;  // paged: [num_seqs][max_pages_per_seq]; else null
  const std::uint8_t* page_codes;    // paged pool (see HackKvCache)
  const std::uint8_t* page_scales;
  const std::uint8_t* page_sums;
  std::uint64_t page_codes_bytes;
  std::uint64_t page_scales_bytes;
  std::uint64_t page_sums_bytes;
  float* partials;            // [slots][8 rows][head_dim + 2] split partials
  unsigned int* counters;     // [tiles * kv_heads] split arrival counters, 0 between
                              // launches
  unsigned long long* error;  // device u64: min over errors of seq << 8 | kind
  float scale_log2;           // softmax scale * log2(e)
  std::uint32_t layers;
  std::uint32_t layer;
  std::uint32_t kv_heads;
  std::uint32_t q_heads;
  std::uint32_t group;        // q_heads / kv_heads, 1..8
  std::uint32_t tail_bf16;    // 1: tail is bf16, 0: fp16
  std::uint32_t page_blocks;  // 0: contiguous
  std::uint32_t num_pages;
  std::uint32_t max_pages_per_seq;
  std::uint32_t max_tokens;
  std::uint32_t tiles;             // decode: sequences; prefill: query tiles
  std::uint32_t queries;           // decode: sequences; prefill: queries
  std::uint32_t queries_per_tile;  // decode: 1; prefill: 8 / group
  std::uint32_t first_position;    // prefill
  std::uint32_t prefill;           // 1: causal prefill
  std::uint32_t splits;            // CTAs per (tile, KV head), 1..16
  std::uint32_t units_per_split;   // work units (64-token blocks) per split
  std::uint32_t warps;             // warps per CTA, 1..16
  std::uint32_t twin_warps;        // 1: two warps per block, each half of head_dim (decode, 128;
                                   // warps is then even)
  std::uint8_t* prefill_stages;  // fp16 prefill staging scratch (HackPrefillArgs::staging) or null
  std::uint32_t prefill_stage_tiles;  // its key tiles per KV head (images of 32 KiB each)
  // The DType value of q's and out's elements (HackDecodeArgs / HackPrefillArgs::io_dtype), which
  // picks the attention kernel's instantiation (float, __half or __nv_bfloat16 elements).
  std::uint32_t io_dtype;
};

// Enqueues the attention kernel (grid: tiles * kv_heads * splits CTAs of `warps` warps; dynamic
// shared memory HackAttentionSharedBytes<HeadDim>(warps)). Defined ONLY for HeadDim in {64, 128}.
// Prefer the Enqueue functions below.
template <int HeadDim>
cudaError_t LaunchHackAttention(const HackAttentionParams& params, cudaStream_t stream);
template <int HeadDim>
std::size_t HackAttentionSharedBytes(std::uint32_t warps);

// The dequantize-on-load prefill kernels (HackPrefillMath::kDequantFp16; grid: ceil(queries /
// (128 / group)) x kv_heads CTAs. At head_dim 128 on a compute-capability-9.0 device: the
// warp-specialised kernel, 384 threads, 3 x 32 KiB stages (+ 1 KiB alignment) of dynamic shared
// memory, sm_90a SASS needed (a build without it reports through the error word); otherwise 256
// threads, 2 x 64 x head_dim x 4 bytes (+ 1 KiB)). Reads q, out, io_dtype, lse, prefill_seq, the
// paged fields, error, scale_log2, layers, layer, kv_heads, q_heads, group, tail_bf16, queries and
// first_position of `params`, and prefill_stages / prefill_stage_tiles: when prefill_stages is
// non-null and the warp-specialised kernel runs, the staging kernel (grid prefill_stage_tiles x
// kv_heads CTAs of 128 threads, 32 KiB of dynamic shared memory) runs first and the
// warp-specialised kernel copies its images (prefill_stage_tiles must be the call's tile count, as
// HackPrefillStagingBytes counts them; the scratch that many 32 KiB images per KV head). Defined
// ONLY for HeadDim in {64, 128}; prefer EnqueueHackPrefillAttention with args.math = kDequantFp16.
template <int HeadDim>
cudaError_t LaunchHackPrefillFp16(const HackAttentionParams& params, cudaStream_t stream);
// The staging kernel alone (what LaunchHackPrefillFp16 runs first with prefill_stages set).
cudaError_t LaunchHackPrefillFp16Staging(const HackAttentionParams& params, cudaStream_t stream);

// The dequantize-on-load decode kernel (HackDecodeMath::kDequantFp16; grid: tiles * kv_heads *
// splits CTAs of `warps` (1..kHackDecodeFp16MaxWarps) warps, sized as for the homomorphic decode
// kernel). Reads the decode fields of `params` (seqs, max_tokens, tiles, splits, units_per_split,
// warps, partials, counters, error and the KV fields). With programmatic dependent launch; with
// at most kHackDecodeFp16FullWarps warps or more than one split, its CTAs read the descriptors and
// ask L2 for their first blocks before waiting for the previous grid (hints only: no result
// depends on what they read), and let the next grid launch once they have waited. Defined ONLY for
// HeadDim in {64, 128}; prefer EnqueueHackDecodeAttention with args.math = kDequantFp16.
template <int HeadDim>
cudaError_t LaunchHackDecodeFp16(const HackAttentionParams& params, cudaStream_t stream);

namespace internal {
struct HackWorkspaceAccess;  // hack_attention_api.cc: the attention calls' view of the buffer
}  // namespace internal

// Device scratch of the attention kernels: split partials, arrival counters, the error word.
// Sized for the current device; one workspace per stream (calls on one stream are serialised).
class HackAttentionWorkspace {
 public:
  HackAttentionWorkspace() = default;
  static Result<HackAttentionWorkspace> Create();
  int sm_count() const { return sm_count_; }

 private:
  friend struct internal::HackWorkspaceAccess;
  int sm_count_ = 0;
  std::uint32_t max_counters_ = 0;
  DeviceBuffer device_;  // error word | counters | partials
};

// Validates the call (kInvalidArgument naming the field; kUnimplemented outside the closed set
// above) and enqueues decode attention on `stream`. Does not block. Per-sequence descriptors live
// in device memory and are checked by the kernel: a sequence with tokens outside [1, max_tokens],
// sinks > tokens, a missing section or tail, or a block table entry outside [0, num_pages) is
// reported by FinishHackAttention (its outputs are NaN or partial).
// NaN / Inf in a query head: that head's outputs and lse are NaN; other heads are unaffected.
Status EnqueueHackDecodeAttention(const HackKvCache& kv, const HackDecodeArgs& args,
                                  HackAttentionWorkspace& workspace, cudaStream_t stream);

// The same for causal prefill over one sequence (its descriptor is validated on the host). With
// args.staging (kDequantFp16, head_dim 128): see HackPrefillArgs::staging.
Status EnqueueHackPrefillAttention(const HackKvCache& kv, const HackPrefillArgs& args,
                                   HackAttentionWorkspace& workspace, cudaStream_t stream);

// Only the first of a staged call's two kernels: validates as EnqueueHackPrefillAttention (args
// must carry a large enough staging scratch; kInvalidArgument when the call does not stage) and
// enqueues the staging kernel, which fills the scratch (on any device; only a compute-capability-
// 9.0 device's attention kernel reads it). For benchmarks timing the staging alone.
Status EnqueueHackPrefillStaging(const HackKvCache& kv, const HackPrefillArgs& args,
                                 HackAttentionWorkspace& workspace, cudaStream_t stream);

// Synchronises `stream` and reports descriptor errors found by the kernels since the last Finish
// (kInvalidArgument naming the sequence and what is wrong), or a CUDA error.
Status FinishHackAttention(HackAttentionWorkspace& workspace, cudaStream_t stream);

// Agreement with the CPU references (HackDecodeAttention / HackPrefillAttention with
// int8_q = int8_p = true, on the same chunks), as tests/cuda/hack_attention_gpu_test.cc checks
// it: relative L2 error over all outputs of a call <= 1e-3, and over any single (query, head) <=
// 1e-2. Q's INT8 codes are bit-identical to the reference's; P's can differ by one where the
// kernel's float weight and the reference's double weight fall on either side of a rounding
// boundary (each such flip moves one output by at most scale_p * |v| / normaliser).
// docs/hack-gpu.md derives this.
inline constexpr double kHackAttentionRelL2Tolerance = 1e-3;
inline constexpr double kHackAttentionHeadTolerance = 1e-2;

// Agreement of HackPrefillMath::kDequantFp16 with PrefillAttention over DequantizeHack(chunk,
// fp32), as tests/cuda/hack_prefill_fp16_gpu_test.cc checks it: relative L2 error over all
// outputs of a call <= 4e-3, over any single (query, head) <= 2e-2. The kernel rounds four things
// to fp16 (unit roundoff u = 2^-11 = 4.9e-4): each dequantized K and V value, each scaled query
// element, and each softmax weight before P·V; every other step is fp32. A score q·k then carries a
// relative error of about 2u (q and k each rounded once), its weight the same relative error times
// the score's magnitude in log2 units (a few), and the output a weighted average of the V values,
// each off by u: a few u in all (measured on the H200: docs/hack-gpu.md), 4e-3 ~ 8u leaves a
// margin; a single head (fewer terms to average the roundings out) gets 40u.
inline constexpr double kHackDequantPrefillRelL2Tolerance = 4e-3;
inline constexpr double kHackDequantPrefillHeadTolerance = 2e-2;

// Agreement of HackDecodeMath::kDequantFp16 with DecodeAttention over DequantizeHack(chunk, fp32),
// as tests/cuda/hack_decode_fp16_gpu_test.cc checks it: the prefill path's bounds, by the same
// argument. The decode kernel rounds K and V values twice (min / 4 - scale, then the value / 4:
// two roundings of at most u relative to |min| / 4 + scale and to the value, against one in the
// prefill path) and otherwise the same four things; that adds about u to each product's error,
// inside the 8u / 40u margins.
inline constexpr double kHackDequantDecodeRelL2Tolerance = kHackDequantPrefillRelL2Tolerance;
inline constexpr double kHackDequantDecodeHeadTolerance = kHackDequantPrefillHeadTolerance;

}  // namespace kvdepot::cuda
