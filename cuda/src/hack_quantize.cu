// Kernel family "hack", codec half (see kvdepot/cuda/hack.h, docs/hack-gpu.md): quantize and
// dequantize of hack-int2 chunks, byte-identical to the CPU reference (codec/src/hack.cc).
// Params -> kernel -> launcher here; the dispatchers (validation, the error word's message,
// EncodeHackGpu / DecodeHackGpu) are hack_quantize_api.cc. Eleven instantiations: quantize In
// {fp16, bf16} x {general, channel partitions with round-to-nearest at head_dim 64, 128, 256}
// (HackQuantizeKernel's kDim), dequantize Out {fp16, bf16, fp32}.
//
// Quantize: one launch for 1 .. kHackQuantizeMaxChunks chunks of one shape (their descriptors in
// the __grid_constant__ parameters); one CTA of 128 threads per group (chunk, layer, K|V, head,
// block), grid-stride over every chunk's groups, 7 or 8 CTAs per SM. (A) the group's P tokens x
// head_dim are copied into shared memory with cp.async (issued by the previous group's
// iteration once its words are in shared memory); (B) every
// partition's min and max (channel partitions: paired half-precision min/max per (channel pair,
// token slice), then across slices, NaN-propagating, so that a channel whose range is not finite
// (or, for bf16, beyond fp16's) is scanned for its first invalid element; token partitions: each
// thread first checks the elements it copied, then 8-element chunks reduced over a partition's
// lanes), hack::PartitionQuant, the scales entry, and for channel partitions with
// round-to-nearest the partition's three code thresholds (CodeThreshold); (C) the code words in
// container order into shared memory: channel partitions with round-to-nearest by paired
// half-precision comparisons against the thresholds, token partitions from the reciprocal of the
// scale, a word redone with hack::QuantizeNearest when one of its elements lies within 2^-19 of a
// rounding boundary (NearestCode), stochastic codes always with hack::QuantizeStochastic; (D) the
// words stored with 16-byte stores, the code sums from the words. The tail rows are copied by the
// same grid after the groups. Every stored value is the one hack_format.h's functions give (IEEE
// division, rintf): byte-identical to the CPU, with or without fused multiply-add (docs/hack.md).
//
// Bit-exactness detail: the CPU's min/max scan keeps the first element on ties, which only
// matters for signed zeros (PartitionQuant(+0, ..) and (-0, ..) store different min bits); the
// kernel reproduces it by taking a zero min or max's sign from the partition's first zero.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "kvdepot/codec/hack_format.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/cuda/hack.h"
#include "launch.h"

namespace kvdepot::cuda {

namespace {

using internal::ConfigureSharedMemory;
using internal::kMaxDevices;
using internal::Stored;
using internal::ToStored;

using hack::Layout;
using hack::Quant;

constexpr int kThreads = 128;       // dequantize
constexpr int kQuantThreads = 128;  // quantize
// Resident quantize CTAs per SM the registers must allow: the general kernel's (<= 64
// registers); the channel / round-to-nearest kernels take one fewer (<= 72 registers), which
// they need to run without spills (docs/hack-gpu.md: 19.2 us per Llama-8B chunk, 21.3 us with
// spills at 64). Many single-stage CTAs hide the staging latency better than fewer CTAs that
// double-buffer (2 stages, 6 CTAs: 46.7 us; 1 stage, 8 CTAs: 40.4 us per Llama-8B chunk in the
// fourth session; sixth session, kernel alone: 2 stages, 5 CTAs 22.9 us; 1 stage, 8 CTAs 20.5).
constexpr int kQuantMinBlocks = 8;
// |t - rint(t)| above this marks a code whose reciprocal-based rounding may differ from the
// division's (NearestCode): 0.5 - 2^-19, twice the margin the error bound needs.
constexpr float kRoundingMargin = 0.5f - 0x1p-19f;
constexpr std::uint32_t kTilePad = 8;  // 16-byte pad per staged row (conflict-free row walks)
constexpr unsigned kFull = 0xffffffffu;

// ---- element access ----

template <DType D>
__device__ __forceinline__ float BitsToValue(std::uint32_t bits) {
  if constexpr (D == DType::kFloat16) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  } else {
    return __uint_as_float(bits << 16);
  }
}

// Per 16-bit lane of a 32-bit word: high bit set when the element is invalid for hack-int2
// (fp16: Inf/NaN; bf16: |x| >= 65536, Inf or NaN; every finite fp16 is within 65504).
template <DType D>
__device__ __forceinline__ std::uint32_t InvalidMask(std::uint32_t w) {
  const std::uint32_t abs = w & 0x7fff7fffu;
  return (abs + (D == DType::kFloat16 ? 0x04000400u : 0x38803880u)) & 0x80008000u;
}

// 0 for a non-finite element, 1 for a finite one beyond 65504 (QuantizeHack's two messages).
template <DType D>
__device__ __forceinline__ std::uint32_t InvalidKind(std::uint32_t bits) {
  const std::uint32_t abs = bits & 0x7fffu;
  return D == DType::kFloat16 ? 0u : (abs >= 0x7f80u ? 0u : 1u);
}

// The error key of an invalid element at flat index `index`: the atomic minimum over the keys
// names the first invalid element and its kind (QuantizeHack's message).
template <DType D>
__device__ __forceinline__ unsigned long long InvalidKey(std::uint64_t index, std::uint32_t bits) {
  return index * 2 + InvalidKind<D>(bits);
}

// Reports the first invalid element of 8 consecutive ones (flat index first_index ..).
template <DType D>
__device__ void ReportInvalid(unsigned long long* error, std::uint64_t first_index, uint4 v) {
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
  unsigned long long key = ~0ull;
#pragma unroll
  for (int i = 7; i >= 0; --i) {
    const std::uint32_t bits = (w[i / 2] >> (16 * (i % 2))) & 0xffffu;
    if ((InvalidMask<D>(bits) & 0x8000u) != 0) {
      key = InvalidKey<D>(first_index + static_cast<std::uint64_t>(i), bits);
    }
  }
  atomicMin(error, key);
}

// Zero-sign tracker: 0 no zero seen yet, 1 first zero was +0, 2 first zero was -0.
__device__ __forceinline__ std::uint32_t TrackZero(std::uint32_t zs, float v) {
  return (zs == 0 && v == 0.0f) ? (signbit(v) ? 2u : 1u) : zs;
}
__device__ __forceinline__ float FixZero(float v, std::uint32_t zs) {
  return v == 0.0f ? (zs == 2 ? -0.0f : 0.0f) : v;
}

// Shared-memory plan of the quantize kernel for a layout: the staged group, its quantizers,
// partial min/max and code words.
struct QuantSmem {
  std::uint32_t row_halves;  // staged row stride in 16-bit elements
  std::size_t tile;          // offset 0: [P][row_halves] u16
  std::size_t quants;        // float2 {min, 1 / scale (0 for scale 0)} [max partitions per group]
  std::size_t scales;        // float [max partitions per group]
  std::size_t red;           // uint2 [kQuantThreads]: half2 bits of a slice's min and max
  std::size_t words;         // u32 [P * D / 16]: the group's code words in container order
  std::size_t thresholds;    // u16 [3][D]: channel partitions, nearest rounding (CodeThreshold)
  std::size_t total;
};

KVD_HOST_DEVICE std::size_t Align16(std::size_t n) {
  return (n + 15) & ~std::size_t{15};
}

KVD_HOST_DEVICE QuantSmem PlanQuantSmem(const Layout& lay) {
  QuantSmem s{};
  s.row_halves = lay.dim + kTilePad;
  s.tile = 0;
  s.quants = Align16(std::size_t{lay.partition} * s.row_halves * 2);
  const std::uint32_t max_parts =
      lay.partition * lay.dim_groups() > lay.dim ? lay.partition * lay.dim_groups() : lay.dim;
  s.scales = s.quants + std::size_t{max_parts} * 8;
  s.red = Align16(s.scales + std::size_t{max_parts} * 4);
  s.words = s.red + kQuantThreads * 8;
  s.thresholds = Align16(s.words + std::size_t{lay.partition} * lay.dim / 4);
  s.total = Align16(s.thresholds + std::size_t{3} * lay.dim * 2);
  return s;
}

__device__ __forceinline__ std::uint32_t Log2(std::uint32_t power_of_two) {
  return static_cast<std::uint32_t>(__ffs(static_cast<int>(power_of_two)) - 1);
}

// Sum of the 16 two-bit codes of a word.
__device__ __forceinline__ std::uint32_t CodeSum(std::uint32_t word) {
  return __popc(word & 0x55555555u) + 2u * __popc(word & 0xaaaaaaaau);
}

__device__ __forceinline__ void StoreScaleEntry(std::uint8_t* scales, std::uint64_t index,
                                                Quant q) {
  const std::uint32_t entry = static_cast<std::uint32_t>(FloatToHalfBits(q.scale)) |
                              (static_cast<std::uint32_t>(FloatToHalfBits(q.min)) << 16);
  reinterpret_cast<std::uint32_t*>(scales)[index] = entry;
}

// Records partition `part`'s quantizer for the code pass and stores its scales entry. The
// reciprocal of the scale (NearestCode's) only when `reciprocal`, 0 otherwise.
__device__ __forceinline__ void SetQuant(float2* quants, float* scales, std::uint8_t* out,
                                         std::uint64_t pbase, std::uint32_t part, Quant q,
                                         bool reciprocal) {
  quants[part] = make_float2(q.min, reciprocal && q.scale > 0.0f ? 1.0f / q.scale : 0.0f);
  scales[part] = q.scale;
  StoreScaleEntry(out, pbase + part, q);
}

// Round-to-nearest code from the reciprocal of the scale. hack::QuantizeNearest rounds
// fl(fl(x - min) / scale); fl(fl(x - min) * fl(1 / scale)) is within 1.5 * 2^-23 relative of
// it, so the two round to different codes only when t lies within 2^-20 of a rounding boundary
// (0.5, 1.5, 2.5; t >= 0 because min <= x). Such an element sets `ambiguous`, and the caller
// redoes the word with hack::QuantizeNearest. `q` = {min, 1 / scale or 0}.
__device__ __forceinline__ std::uint32_t NearestCode(float x, float2 q, bool& ambiguous) {
  const float t = (x - q.x) * q.y;
  const float r = rintf(t);
  ambiguous |= fabsf(t - r) > kRoundingMargin;
  return min(__float2uint_rz(r), hack::kMaxCode);
}

// What the quantize kernel's helpers see: the launch (its parameters stay in the constant bank),
// the layout with the specialised kernels' constants folded in, and the chunk being quantized.
struct QuantCtx {
  const HackQuantizeParams& launch;
  Layout layout;
  std::uint32_t stochastic;
  std::uint32_t chunk = 0;
  // Stochastic rounding: the chunk's generator state for element 0 (seed + kStochasticStep);
  // element i's is state0 + i * kStochasticStep (hack::StochasticUniform).
  std::uint64_t state0 = 0;

  __device__ const HackQuantizeChunk& c() const { return launch.chunks[chunk]; }
  __device__ const void* input() const { return c().input; }
  __device__ std::uint8_t* codes() const { return c().out.codes; }
  __device__ std::uint8_t* scales() const { return c().out.scales; }
  __device__ std::uint8_t* sums() const { return c().out.sums; }
  __device__ void* tail() const { return c().out.tail; }
  __device__ unsigned long long* error() const { return launch.error; }
  // The error key's index of flat index `i` of the chunk: chunk * elements per chunk + i
  // (computed only when an invalid element is reported, so it holds no register).
  __device__ std::uint64_t ErrorIndex(std::uint64_t i) const {
    return chunk * layout.element_index(layout.layers, 0, 0, 0, 0) + i;
  }
};

// The exact code of element x of partition `part` (hack_format.h's functions); `state` is the
// stochastic generator's state for the element (QuantCtx::state0 + index * kStochasticStep).
__device__ __forceinline__ std::uint32_t ExactCode(const QuantCtx& p, float x, const float2* quants,
                                                   const float* scales, std::uint32_t part,
                                                   std::uint64_t state) {
  const Quant q{scales[part], quants[part].x};
  return p.stochastic != 0 ? hack::QuantizeStochastic(x, q, hack::StochasticUniformOfState(state))
                           : hack::QuantizeNearest(x, q);
}

// Copies tail row (layer, kv, u) of the input into the tail section, checking its elements.
template <DType In>
__device__ void CopyTailRow(const QuantCtx& p, std::uint64_t row) {
  const Layout& lay = p.layout;
  const std::uint32_t U = lay.unquantized_tokens();
  const auto u = static_cast<std::uint32_t>(row % U);
  const std::uint64_t lk = row / U;
  const auto kv = static_cast<std::uint32_t>(lk % 2);
  const auto layer = static_cast<std::uint32_t>(lk / 2);
  const std::uint64_t src = lay.element_index(layer, kv, lay.unquantized_token(u), 0, 0);
  const std::uint64_t dst = lay.unquantized_offset(layer, kv, u, 0, 0);
  const std::uint32_t chunks = lay.heads * lay.dim / 8;
  const uint4* in =
      reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(p.input()) + src);
  uint4* out = reinterpret_cast<uint4*>(static_cast<std::uint16_t*>(p.tail()) + dst);
  for (std::uint32_t c = threadIdx.x; c < chunks; c += kQuantThreads) {
    const uint4 v = __ldg(in + c);
    const std::uint32_t bad =
        InvalidMask<In>(v.x) | InvalidMask<In>(v.y) | InvalidMask<In>(v.z) | InvalidMask<In>(v.w);
    if (bad != 0) ReportInvalid<In>(p.error(), p.ErrorIndex(src + std::uint64_t{c} * 8), v);
    out[c] = v;
  }
}

// A quantized group (chunk, layer, kv, head, block) and the flat index of its first element in
// its chunk.
struct GroupAt {
  std::uint32_t chunk, layer, kv, head, block;
  std::uint64_t e_base;
};

// The group of index (lk * H + head) * B + block, where lk = (chunk * layers + layer) * 2 + kv.
template <typename Index>
KVD_HOST_DEVICE GroupAt LocateGroupAs(const Layout& lay, Index item) {
  GroupAt g;
  const Index B = lay.blocks(), H = lay.heads;
  const Index rest = item / B;
  g.block = static_cast<std::uint32_t>(item - rest * B);
  const Index lk = rest / H;
  g.head = static_cast<std::uint32_t>(rest - lk * H);
  g.kv = static_cast<std::uint32_t>(lk & 1u);
  const Index layer = lk >> 1;  // counting the chunks' layers one after another
  g.chunk = static_cast<std::uint32_t>(layer / lay.layers);
  g.layer = static_cast<std::uint32_t>(layer - Index{g.chunk} * lay.layers);
  g.e_base = lay.element_index(g.layer, g.kv, lay.sinks + g.block * lay.partition, g.head, 0);
  return g;
}

// 32-bit division whenever the group index fits (64-bit division is a long software sequence).
__device__ __forceinline__ GroupAt LocateGroup(const Layout& lay, std::uint64_t item) {
  return item <= 0xffffffffu ? LocateGroupAs(lay, static_cast<std::uint32_t>(item))
                             : LocateGroupAs(lay, item);
}

// The grid stride (gridDim.x groups) as group-index digits, computed on the host (GridStrideOf) so
// that they stay in the constant bank rather than in registers.
struct GroupStride {
  std::uint32_t block, head, lk, chunk;
};

GroupStride GridStrideOf(const Layout& lay, unsigned blocks) {
  if (lay.blocks() == 0) return {};  // no groups: the cursor never moves
  const GroupAt g = LocateGroupAs(lay, std::uint64_t{blocks});
  return {g.block, g.head, g.layer * 2 + g.kv, g.chunk};
}

// A CTA's grid-stride walk over the groups of all chunks without a division per group: the group
// index's digits (chunk, lk = layer * 2 + kv, head, block), to which the stride's are added with
// carries.
struct GroupCursor {
  std::uint32_t block = 0, head = 0, lk = 0, chunk = 0;

  __device__ void Advance(const Layout& lay, const GroupStride& step) {
    block += step.block;
    const std::uint32_t carry_block = block >= lay.blocks() ? 1u : 0u;
    block -= carry_block * lay.blocks();
    head += step.head + carry_block;
    const std::uint32_t carry_head = head >= lay.heads ? 1u : 0u;
    head -= carry_head * lay.heads;
    lk += step.lk + carry_head;
    const std::uint32_t carry_lk = lk >= 2 * lay.layers ? 1u : 0u;
    lk -= carry_lk * 2 * lay.layers;
    chunk += step.chunk + carry_lk;
  }
  __device__ GroupAt Group(const Layout& lay) const {
    GroupAt g;
    g.chunk = chunk;
    g.layer = lk >> 1;
    g.kv = lk & 1u;
    g.head = head;
    g.block = block;
    g.e_base = lay.element_index(g.layer, g.kv, lay.sinks + block * lay.partition, head, 0);
    return g;
  }
};

// The cursor at group `first` (digits only when there are groups).
__device__ __forceinline__ GroupCursor StartCursor(const Layout& lay, std::uint64_t groups,
                                                   std::uint32_t first) {
  GroupCursor c;
  if (first >= groups) return c;
  const GroupAt g = LocateGroup(lay, first);
  c.block = g.block;
  c.head = g.head;
  c.lk = g.layer * 2 + g.kv;
  c.chunk = g.chunk;
  return c;
}

// Starts the asynchronous copy of a group's P rows of D elements into `tile` (16 bytes per
// copy; chunk c = tid + k * kQuantThreads, the chunks CheckStaged later reads back).
__device__ __forceinline__ void StageGroup(const QuantCtx& p, std::uint64_t e_base,
                                           std::uint16_t* tile, std::uint32_t rh) {
  const Layout& lay = p.layout;
  const std::uint32_t row_shift = Log2(lay.dim / 8);               // chunks per row: 8, 16 or 32
  const std::uint32_t rows_per_pass = kQuantThreads >> row_shift;  // chunk c + kQuantThreads
  const std::uint32_t t0 = threadIdx.x >> row_shift, cc = threadIdx.x & ((1u << row_shift) - 1u);
  const std::uint64_t src_step = std::uint64_t{rows_per_pass} * lay.heads * lay.dim;
  const auto* src = static_cast<const std::uint16_t*>(p.input()) + e_base +
                    std::uint64_t{t0} * lay.heads * lay.dim + cc * 8;
  std::uint32_t dst = internal::SharedAddress(tile + t0 * rh + cc * 8);
  for (std::uint32_t t = t0; t < lay.partition; t += rows_per_pass) {
    internal::CpAsync16(dst, src);
    src += src_step;
    dst += rows_per_pass * rh * 2;
  }
}

// Checks the elements this thread staged (after its copies have landed).
template <DType In>
__device__ __forceinline__ void CheckStaged(const QuantCtx& p, std::uint64_t e_base,
                                            const std::uint16_t* tile, std::uint32_t rh) {
  const Layout& lay = p.layout;
  const std::uint32_t row_shift = Log2(lay.dim / 8);
  const std::uint32_t chunks = lay.partition * lay.dim / 8;
  for (std::uint32_t c = threadIdx.x; c < chunks; c += kQuantThreads) {
    const std::uint32_t t = c >> row_shift, cc = c & ((1u << row_shift) - 1u);
    const uint4 v = *reinterpret_cast<const uint4*>(tile + t * rh + cc * 8);
    const std::uint32_t bad =
        InvalidMask<In>(v.x) | InvalidMask<In>(v.y) | InvalidMask<In>(v.z) | InvalidMask<In>(v.w);
    if (bad != 0) {
      ReportInvalid<In>(p.error(),
                        p.ErrorIndex(e_base + t * std::uint64_t{lay.heads} * lay.dim + cc * 8), v);
    }
  }
}

template <DType In>
using Pair = std::conditional_t<In == DType::kFloat16, __half2, __nv_bfloat162>;

template <DType In>
__device__ __forceinline__ Pair<In> AsPair(std::uint32_t bits) {
  Pair<In> v;
  std::memcpy(&v, &bits, sizeof(bits));
  return v;
}
template <DType In>
__device__ __forceinline__ std::uint32_t PairBits(Pair<In> v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// ---- round-to-nearest codes by comparison ----
//
// With round-to-nearest, a partition's code is a non-decreasing function of its element, so the
// code of x is the number of thresholds t_1 <= t_2 <= t_3 with x >= t_k, where t_k is the least
// 16-bit value of the input type whose code (hack::QuantizeNearest, evaluated exactly) is >= k.
// The code pass then compares pairs of elements with paired half-precision comparisons instead of
// dividing every element: CPU bytes, without per-element arithmetic. Candidates are evaluated with
// hack::NearestCodeAtLeast (QuantizeNearest(x, q) >= k without the division).

// Unsigned key with the numeric order of a 16-bit float's bits (fp16 and bf16 are both
// sign-magnitude); -0 sorts just below +0.
__device__ __forceinline__ std::uint32_t Key16(std::uint32_t bits) {
  return (bits & 0x8000u) != 0 ? (~bits & 0xffffu) : (bits | 0x8000u);
}
__device__ __forceinline__ std::uint32_t Unkey16(std::uint32_t key) {
  return (key & 0x8000u) != 0 ? (key & 0x7fffu) : (~key & 0xffffu);
}

template <DType In>
__device__ __forceinline__ std::uint32_t NearestBits(float v) {
  if constexpr (In == DType::kFloat16) {
    return __half_as_ushort(__float2half_rn(v));
  } else {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

template <DType In>
constexpr std::uint32_t kInfBits = In == DType::kFloat16 ? 0x7c00u : 0x7f80u;

// t_k of partition quantizer q as bits of the input type (+Inf when no finite value reaches code
// k: scale 0, or k = 3 when min + 2.5 scale rounds past the largest finite value), by search: a
// few steps from the estimate min + (k - 1/2) scale rounded to the type (one code evaluation
// each), then a bisection over all keys. CodeThreshold's rare slow path.
template <DType In>
__device__ __noinline__ std::uint32_t CodeThresholdSearch(Quant q, std::uint32_t k) {
  if (!(q.scale > 0.0f)) return kInfBits<In>;
  // code(+Inf) = 3 >= k, so the least key with code >= k is at most inf_key.
  const std::uint32_t inf_key = Key16(kInfBits<In>), bottom = Key16(kInfBits<In> | 0x8000u) + 1;
  const auto reaches = [&](std::uint32_t key) {  // QuantizeNearest(x, q) >= k, division-free
    return hack::NearestCodeAtLeast(BitsToValue<In>(Unkey16(key)), q, k);
  };
  std::uint32_t key = Key16(NearestBits<In>(q.min + (static_cast<float>(k) - 0.5f) * q.scale));
  key = min(max(key, bottom), inf_key);
  if (reaches(key)) {
    for (int step = 0; step < 4; ++step, --key) {
      if (key == bottom || !reaches(key - 1)) return Unkey16(key);
    }
  } else {
    for (int step = 0; step < 4 && key < inf_key; ++step) {
      if (reaches(++key)) return Unkey16(key);
    }
  }
  std::uint32_t lo = bottom - 1, hi = inf_key;  // reaches(hi); lo stands below every finite key
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (reaches(mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return Unkey16(hi);
}

// t_K of partition quantizer q (scale > 0), as CodeThresholdSearch. The estimate's key e is t_K
// or the key above it almost always (the estimate is the real boundary min + (K - 1/2) scale
// rounded to the type): t_K = e when e reaches K and e - 1 does not, e + 1 when e + 1 reaches K
// and e does not. Two code evaluations decide both cases (e, then e - 1 or e + 1; reaching K is
// monotone in the key); anything else goes to the search. (e - 1 is at least -Inf's key, which
// never reaches K; +Inf's key always does.)
template <DType In, std::uint32_t K>
__device__ __forceinline__ std::uint32_t CodeThreshold(Quant q) {
  const std::uint32_t inf_key = Key16(kInfBits<In>), bottom = Key16(kInfBits<In> | 0x8000u) + 1;
  const auto reaches = [&](std::uint32_t key) {  // QuantizeNearest(x, q) >= K, division-free
    return hack::NearestCodeAtLeast(BitsToValue<In>(Unkey16(key)), q, K);
  };
  std::uint32_t key = Key16(NearestBits<In>(q.min + (static_cast<float>(K) - 0.5f) * q.scale));
  key = min(max(key, bottom), inf_key);
  const bool at = reaches(key);
  if (at == reaches(at ? key - 1 : min(key + 1, inf_key))) return CodeThresholdSearch<In>(q, K);
  return Unkey16(at ? key : key + 1);
}

// The codes of the two elements of `x` against their thresholds (t1, t2, t3 in the same pair
// layout), per 16-bit half as all-ones masks: bit 0 of the code in b0, bit 1 in b1. Thresholds
// are ordered, so the code is the number of comparisons that hold: bit 0 = their parity.
template <DType In>
__device__ __forceinline__ void PairCodeBits(std::uint32_t x, std::uint32_t t1, std::uint32_t t2,
                                             std::uint32_t t3, std::uint32_t& b0,
                                             std::uint32_t& b1) {
  const Pair<In> v = AsPair<In>(x);
  const std::uint32_t m1 = __hge2_mask(v, AsPair<In>(t1));
  const std::uint32_t m2 = __hge2_mask(v, AsPair<In>(t2));
  const std::uint32_t m3 = __hge2_mask(v, AsPair<In>(t3));
  b0 = m1 ^ m2 ^ m3;
  b1 = m2;
}

// ORs the code bits of a pair into `acc` at bit `lo` of the low half and `hi` of the high half.
__device__ __forceinline__ std::uint32_t PlaceCodes(std::uint32_t acc, std::uint32_t b0,
                                                    std::uint32_t b1, std::uint32_t lo,
                                                    std::uint32_t hi) {
  const std::uint32_t at = (1u << lo) | (1u << (16 + hi));
  return acc | (b0 & at) | (b1 & (at << 1));
}

// Sign of the first zero among P elements `stride` apart (1: +0, 2: -0, 0: none).
template <DType In>
__device__ std::uint32_t FirstZero(const std::uint16_t* first, std::uint32_t stride,
                                   std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t zs = TrackZero(0, BitsToValue<In>(first[i * stride]));
    if (zs != 0) return zs;
  }
  return 0;
}

// Reports the first invalid element of a channel (P elements `stride` apart in the tile; flat
// indices e0 + t * heads * dim), as CheckStaged would.
template <DType In>
__device__ void ReportFirstInvalid(const QuantCtx& p, std::uint64_t e0, const std::uint16_t* first,
                                   std::uint32_t stride, std::uint32_t n) {
  const std::uint64_t row_step = std::uint64_t{p.layout.heads} * p.layout.dim;
  for (std::uint32_t t = 0; t < n; ++t) {
    const std::uint32_t bits = first[t * stride];
    if ((InvalidMask<In>(bits) & 0x8000u) != 0) {
      atomicMin(p.error(), InvalidKey<In>(p.ErrorIndex(e0 + t * row_step), bits));
      return;
    }
  }
}

// Channel partitions (V; K in the channel orientation): min/max of each channel over the block's
// P tokens, a thread per (channel pair, token slice) with paired half-precision min/max (exact:
// the values are compared, not rounded), then a thread per channel across the slices.
// The range check replaces CheckStaged: a channel whose min or max is NaN, infinite or a bf16
// beyond fp16's range holds an element hack-int2 rejects, and that channel is scanned for its
// first one.
template <DType In>
__device__ void ChannelQuantizers(const QuantCtx& p, const std::uint16_t* tile, std::uint32_t rh,
                                  uint2* red, float2* quants, float* scales,
                                  std::uint16_t* thresholds, std::uint64_t pbase,
                                  std::uint64_t e_base) {
  const Layout& lay = p.layout;
  const std::uint32_t tid = threadIdx.x, P = lay.partition, D = lay.dim;
  const std::uint32_t pairs = D / 2, pair_shift = Log2(pairs);
  const std::uint32_t slices = kQuantThreads >> pair_shift;  // 4, 2, 1 for D = 64, 128, 256
  const std::uint32_t pair = tid & (pairs - 1u), slice = tid >> pair_shift;
  const std::uint32_t tlen = P / slices, t0 = slice * tlen;
  const auto* col = reinterpret_cast<const std::uint32_t*>(tile + t0 * rh) + pair;
  Pair<In> mn = AsPair<In>(col[0]), mx = mn;
  for (std::uint32_t t = 1; t < tlen; ++t) {
    const Pair<In> v = AsPair<In>(col[t * (rh / 2)]);
    mn = __hmin2_nan(mn, v);  // NaN propagates: the range check below sees every element
    mx = __hmax2_nan(mx, v);
  }
  red[tid] = make_uint2(PairBits<In>(mn), PairBits<In>(mx));
  __syncthreads();
  for (std::uint32_t d = tid; d < D; d += kQuantThreads) {
    const std::uint32_t shift = 16 * (d & 1u);
    float lo = 0, hi = 0;
    bool bad = false;
    for (std::uint32_t s = 0; s < slices; ++s) {
      const uint2 r = red[(s << pair_shift) + d / 2];
      const float smn = BitsToValue<In>((r.x >> shift) & 0xffffu);
      const float smx = BitsToValue<In>((r.y >> shift) & 0xffffu);
      bad |= !(smn > -65536.0f && smx < 65536.0f);  // NaN, Inf, or a bf16 beyond fp16's range
      lo = s == 0 ? smn : fminf(lo, smn);
      hi = s == 0 ? smx : fmaxf(hi, smx);
    }
    if (bad) ReportFirstInvalid<In>(p, e_base + d, tile + d, rh, P);
    if (lo == 0.0f || hi == 0.0f) {
      const std::uint32_t zs = FirstZero<In>(tile + d, rh, P);
      lo = FixZero(lo, zs);
      hi = FixZero(hi, zs);
    }
    const Quant q = hack::PartitionQuant(lo, hi);
    SetQuant(quants, scales, p.scales(), pbase, d, q, /*reciprocal=*/false);
    if (p.stochastic == 0) {
      const bool reached = q.scale > 0.0f;  // scale 0: every code is 0
      thresholds[d] = static_cast<std::uint16_t>(reached ? CodeThreshold<In, 1>(q) : kInfBits<In>);
      thresholds[D + d] =
          static_cast<std::uint16_t>(reached ? CodeThreshold<In, 2>(q) : kInfBits<In>);
      thresholds[2 * D + d] =
          static_cast<std::uint16_t>(reached ? CodeThreshold<In, 3>(q) : kInfBits<In>);
    }
  }
}

// Token partitions (K in the token orientation): the gs channels of a (token, dim group) are
// contiguous in a staged row; a thread per 8-element chunk, reduced over the gs / 8 lanes of a
// partition.
template <DType In>
__device__ void TokenQuantizers(const QuantCtx& p, const std::uint16_t* tile, std::uint32_t rh,
                                float2* quants, float* scales, std::uint64_t pbase) {
  const Layout& lay = p.layout;
  const std::uint32_t P = lay.partition, D = lay.dim, G = lay.dim_groups();
  const std::uint32_t gs = P < D ? P : D;  // elements of a token partition (groups are full)
  const std::uint32_t row_chunks = D / 8, cpp = gs / 8;  // cpp in {4, 8, 16}
  const std::uint32_t chunks = P * row_chunks;           // a multiple of kQuantThreads
  const std::uint32_t lane = threadIdx.x & 31u;
  const std::uint32_t seg_lane = lane & ~(cpp - 1);
  const std::uint32_t seg_mask = (cpp == 32 ? kFull : ((1u << cpp) - 1u)) << seg_lane;
  for (std::uint32_t c = threadIdx.x; c < chunks; c += kQuantThreads) {
    const std::uint32_t t = c / row_chunks, cc = c % row_chunks;
    const uint4 v = *reinterpret_cast<const uint4*>(tile + t * rh + cc * 8);
    std::uint16_t e[8];
    std::memcpy(e, &v, sizeof(e));
    float mn = BitsToValue<In>(e[0]), mx = mn;
    std::uint32_t zs = TrackZero(0, mn);
#pragma unroll
    for (int i = 1; i < 8; ++i) {
      const float x = BitsToValue<In>(e[i]);
      mn = fminf(mn, x);
      mx = fmaxf(mx, x);
      zs = TrackZero(zs, x);
    }
    for (std::uint32_t off = 1; off < cpp; off <<= 1) {
      mn = fminf(mn, __shfl_xor_sync(kFull, mn, off));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, off));
    }
    // The partition's first zero: from the lowest lane of the segment that saw one.
    const std::uint32_t zlanes = __ballot_sync(kFull, zs != 0) & seg_mask;
    const std::uint32_t zsrc = zlanes != 0 ? __ffs(zlanes) - 1 : lane;
    zs = __shfl_sync(kFull, zs, zsrc);
    if (lane == seg_lane) {
      SetQuant(quants, scales, p.scales(), pbase, t * G + cc * 8 / gs,
               hack::PartitionQuant(FixZero(mn, zs), FixZero(mx, zs)), /*reciprocal=*/true);
    }
  }
}

// K codes, token-major: word (t, c) = channels 16c .. 16c + 15 of token t.
template <DType In>
__device__ void KWords(const QuantCtx& p, const std::uint16_t* tile, std::uint32_t rh,
                       const float2* quants, const float* scales, const std::uint16_t* thresholds,
                       std::uint32_t* words, std::uint64_t e_base, bool token_parts) {
  const Layout& lay = p.layout;
  const std::uint32_t P = lay.partition, D = lay.dim, G = lay.dim_groups();
  const std::uint32_t p_shift = Log2(P), n = P * D / 16;
  for (std::uint32_t w = threadIdx.x; w < n; w += kQuantThreads) {
    // t varies fastest across threads: the channel quantizers are broadcast reads.
    const std::uint32_t t = w & (P - 1u), c = w >> p_shift;
    const uint4 lo = *reinterpret_cast<const uint4*>(tile + t * rh + 16 * c);
    const uint4 hi = *reinterpret_cast<const uint4*>(tile + t * rh + 16 * c + 8);
    std::uint16_t e[16];
    std::memcpy(e, &lo, 16);
    std::memcpy(e + 8, &hi, 16);
    std::uint32_t word = 0;
    bool ambiguous = p.stochastic != 0;
    if (!ambiguous && !token_parts) {
      // Channel pair (16c + 2i, 16c + 2i + 1) = code positions 2i, 2i + 1 of the word: pairs
      // 0..3 fill the low half (odd channels staged in the high half, then shifted down),
      // pairs 4..7 the high half.
      const std::uint32_t x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      std::uint32_t acc[2] = {0, 0};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        std::uint32_t th[3][4];
#pragma unroll
        for (int k = 0; k < 3; ++k) {
          const uint4 a = reinterpret_cast<const uint4*>(thresholds + k * D + 16 * c)[h];
          th[k][0] = a.x, th[k][1] = a.y, th[k][2] = a.z, th[k][3] = a.w;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          std::uint32_t b0, b1;
          PairCodeBits<In>(x[4 * h + i], th[0][i], th[1][i], th[2][i], b0, b1);
          acc[h] = PlaceCodes(acc[h], b0, b1, 4 * i, 4 * i + 2);
        }
      }
      word = __byte_perm((acc[0] & 0xffffu) | (acc[0] >> 16), (acc[1] & 0xffffu) | (acc[1] >> 16),
                         0x5410);
    } else if (!ambiguous) {
      const float2 q = quants[t * G + ((16 * c) >> p_shift)];  // 16 | P: one partition per word
#pragma unroll
      for (int i = 0; i < 16; ++i)
        word |= NearestCode(BitsToValue<In>(e[i]), q, ambiguous) << (2 * i);
    }
    if (ambiguous) {
      word = 0;
      const std::uint64_t e0 = e_base + t * std::uint64_t{lay.heads} * D + 16 * c;
      const std::uint64_t s0 = p.state0 + e0 * hack::kStochasticStep;
      for (std::uint32_t i = 0; i < 16; ++i) {
        const std::uint32_t d = 16 * c + i;
        const std::uint32_t part = token_parts ? t * G + d / P : d;
        word |= ExactCode(p, BitsToValue<In>(e[i]), quants, scales, part,
                          s0 + i * hack::kStochasticStep)
                << (2 * i);
      }
    }
    words[t * (D / 16) + c] = word;
  }
}

// V codes, channel-major: word (d, tw) = tokens 16 tw .. 16 tw + 15 of channel d; a thread per
// channel pair and token word (both channels come from one 32-bit read per token).
template <DType In>
__device__ void VWords(const QuantCtx& p, const std::uint16_t* tile, std::uint32_t rh,
                       const float2* quants, const float* scales, const std::uint16_t* thresholds,
                       std::uint32_t* words, std::uint64_t e_base) {
  const Layout& lay = p.layout;
  const std::uint32_t P = lay.partition, D = lay.dim;
  const std::uint32_t pair_shift = Log2(D / 2), n = (D / 2) * (P / 16);
  const std::uint64_t row_step = std::uint64_t{lay.heads} * D;
  for (std::uint32_t w = threadIdx.x; w < n; w += kQuantThreads) {
    const std::uint32_t pair = w & (D / 2 - 1u), tw = w >> pair_shift, d = 2 * pair;
    const auto* col = reinterpret_cast<const std::uint32_t*>(tile + 16 * tw * rh) + pair;
    std::uint32_t w0 = 0, w1 = 0;
    const bool stochastic = p.stochastic != 0;
    if (!stochastic) {
      // Token i of channels d (low half) and d + 1 (high half): tokens 0..7 in acc[0] at bit 2i
      // of each half, tokens 8..15 in acc[1] at bit 2 (i - 8); then one byte permute per word.
      const auto* th = reinterpret_cast<const std::uint32_t*>(thresholds) + pair;
      const std::uint32_t t1 = th[0], t2 = th[D / 2], t3 = th[D];
      std::uint32_t acc[2] = {0, 0};
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        std::uint32_t b0, b1;
        PairCodeBits<In>(col[i * (rh / 2)], t1, t2, t3, b0, b1);
        acc[i / 8] = PlaceCodes(acc[i / 8], b0, b1, 2 * (i % 8), 2 * (i % 8));
      }
      w0 = __byte_perm(acc[0], acc[1], 0x5410);
      w1 = __byte_perm(acc[0], acc[1], 0x7632);
    } else {
      const std::uint64_t e0 = e_base + (16 * tw) * row_step + d;
      const std::uint64_t step = row_step * hack::kStochasticStep;  // one token further
      std::uint64_t state = p.state0 + e0 * hack::kStochasticStep;
      for (std::uint32_t i = 0; i < 16; ++i, state += step) {
        const std::uint32_t bits = col[i * (rh / 2)];
        w0 |= ExactCode(p, BitsToValue<In>(bits & 0xffffu), quants, scales, d, state) << (2 * i);
        w1 |= ExactCode(p, BitsToValue<In>(bits >> 16), quants, scales, d + 1,
                        state + hack::kStochasticStep)
              << (2 * i);
      }
    }
    words[d * (P / 16) + tw] = w0;
    words[(d + 1) * (P / 16) + tw] = w1;
  }
}

// Stores a group's code words (16 bytes per thread) and its sums: K per (token, dim group) = a
// run of gs / 16 words; V per channel = P / 16 words.
__device__ void StoreGroup(const QuantCtx& p, const GroupAt& g, const std::uint32_t* words) {
  const Layout& lay = p.layout;
  const std::uint32_t P = lay.partition, D = lay.dim;
  const std::uint32_t vecs = P * D / 64;
  auto* codes_out = reinterpret_cast<uint4*>(
      p.codes() + lay.code_base(lay.group(g.layer, g.kv, g.head, g.block)) / 4);
  for (std::uint32_t i = threadIdx.x; i < vecs; i += kQuantThreads) {
    codes_out[i] = reinterpret_cast<const uint4*>(words)[i];
  }
  const std::uint32_t gs = P < D ? P : D;
  const std::uint32_t nsums = lay.sums_per_group(g.kv);
  const std::uint32_t run = g.kv == 0 ? gs / 16 : P / 16;
  const std::uint64_t sbase = lay.sum_base(g.layer, g.kv, g.head, g.block);
  for (std::uint32_t j = threadIdx.x; j < nsums; j += kQuantThreads) {
    std::uint32_t s = 0;
    for (std::uint32_t r = 0; r < run; ++r) s += CodeSum(words[j * run + r]);
    if (hack::SumBytes(P) == 1) {
      p.sums()[sbase + j] = static_cast<std::uint8_t>(s);
    } else {
      reinterpret_cast<std::uint16_t*>(p.sums())[sbase + j] = static_cast<std::uint16_t>(s);
    }
  }
}

// kDim 0: the general kernel (any head_dim, orientation and rounding). kDim 64, 128 or 256: the
// kernel for channel partitions only (K in the channel orientation) with round-to-nearest and
// that head_dim: the token-partition and stochastic paths fold away and every shared-memory
// stride is a constant, so the hot loops are shorter and the kernel's code much smaller.
template <DType In, std::uint32_t kDim>
__global__ void __launch_bounds__(kQuantThreads, kDim == 0 ? kQuantMinBlocks : kQuantMinBlocks - 1)
    HackQuantizeKernel(const __grid_constant__ HackQuantizeParams params, const GroupStride step) {
  QuantCtx p{params, params.layout, params.stochastic};
  if constexpr (kDim != 0) {
    p.layout.dim = kDim;
    p.layout.orientation = hack::kOrientChannel;
    p.stochastic = 0;
  }
  extern __shared__ uint4 smem_raw[];
  auto* smem = reinterpret_cast<std::uint8_t*>(smem_raw);
  const Layout& lay = p.layout;
  const QuantSmem plan = PlanQuantSmem(lay);
  auto* quants = reinterpret_cast<float2*>(smem + plan.quants);
  auto* scales = reinterpret_cast<float*>(smem + plan.scales);
  auto* red = reinterpret_cast<uint2*>(smem + plan.red);
  auto* words = reinterpret_cast<std::uint32_t*>(smem + plan.words);
  auto* thresholds = reinterpret_cast<std::uint16_t*>(smem + plan.thresholds);
  auto* tile = reinterpret_cast<std::uint16_t*>(smem + plan.tile);
  const std::uint32_t rh = plan.row_halves;
  const std::uint64_t groups = params.num_chunks * 2 * lay.groups_per_kv();
  const std::uint64_t tail_rows = std::uint64_t{lay.layers} * 2 * lay.unquantized_tokens();
  const std::uint64_t items = groups + params.num_chunks * tail_rows;

  GroupCursor cursor = StartCursor(lay, groups, blockIdx.x);
  if (blockIdx.x < groups) {
    const GroupAt first = cursor.Group(lay);
    p.chunk = first.chunk;
    StageGroup(p, first.e_base, tile, rh);
  }
  for (std::uint64_t item = blockIdx.x; item < items;
       item += gridDim.x, cursor.Advance(lay, step)) {
    if (item >= groups) {
      const std::uint64_t row = item - groups;
      p.chunk = static_cast<std::uint32_t>(row / tail_rows);
      CopyTailRow<In>(p, row - p.chunk * tail_rows);
      continue;
    }
    const GroupAt g = cursor.Group(lay);
    p.chunk = g.chunk;
    if (p.stochastic != 0) p.state0 = params.chunks[g.chunk].seed + hack::kStochasticStep;
    internal::CpAsyncCommit();
    internal::CpAsyncWait<0>();  // this thread's copies of the group have landed
    const bool token_parts = g.kv == 0 && lay.orientation == hack::kOrientToken;
    if (token_parts) CheckStaged<In>(p, g.e_base, tile, rh);  // channel ones check their range
    __syncthreads();

    // Partition quantizers.
    const std::uint64_t pbase = lay.partition_base(g.layer, g.kv, g.head, g.block);
    if (token_parts) {
      TokenQuantizers<In>(p, tile, rh, quants, scales, pbase);
    } else {
      ChannelQuantizers<In>(p, tile, rh, red, quants, scales, thresholds, pbase, g.e_base);
    }
    __syncthreads();

    // Code words, in container order, into shared memory.
    if (g.kv == 0) {
      KWords<In>(p, tile, rh, quants, scales, thresholds, words, g.e_base, token_parts);
    } else {
      VWords<In>(p, tile, rh, quants, scales, thresholds, words, g.e_base);
    }
    __syncthreads();

    // The stage is free: the next group's copies fly while this one's words are stored.
    if (item + gridDim.x < groups) {
      GroupCursor next = cursor;
      next.Advance(lay, step);
      const GroupAt n = next.Group(lay);
      QuantCtx next_chunk = p;
      next_chunk.chunk = n.chunk;
      StageGroup(next_chunk, n.e_base, tile, rh);
    }
    StoreGroup(p, g, words);
    __syncthreads();  // the next group rewrites the quantizers and the words
  }
}

// ---- dequantize ----

__device__ __forceinline__ float LoadTail(const void* tail, std::uint32_t dtype, std::uint64_t i) {
  switch (static_cast<DType>(dtype)) {
    case DType::kFloat16:
      return __half2float(__ushort_as_half(__ldg(static_cast<const unsigned short*>(tail) + i)));
    case DType::kBFloat16:
      return __uint_as_float(
          static_cast<std::uint32_t>(__ldg(static_cast<const unsigned short*>(tail) + i)) << 16);
    case DType::kFloat32: return __ldg(static_cast<const float*>(tail) + i);
  }
  return 0.0f;
}

template <DType Out>
__global__ void __launch_bounds__(kThreads) HackDequantizeKernel(const HackDequantizeParams p) {
  using Elem = Stored<Out>;
  extern __shared__ uint4 smem_raw[];
  auto* quants = reinterpret_cast<float2*>(smem_raw);
  const Layout& lay = p.layout;
  const std::uint32_t tid = threadIdx.x;
  const std::uint32_t P = lay.partition, D = lay.dim, H = lay.heads, B = lay.blocks();
  const std::uint32_t U = lay.unquantized_tokens();
  const std::uint64_t groups = 2 * lay.groups_per_kv();
  const std::uint64_t items = groups + std::uint64_t{lay.layers} * 2 * U;
  const std::uint64_t row_step = std::uint64_t{H} * D;
  Elem* out = static_cast<Elem*>(p.out);

  for (std::uint64_t item = blockIdx.x; item < items; item += gridDim.x) {
    if (item >= groups) {
      const std::uint64_t row = item - groups;
      const auto u = static_cast<std::uint32_t>(row % U);
      const std::uint64_t lk = row / U;
      const auto kv = static_cast<std::uint32_t>(lk % 2),
                 layer = static_cast<std::uint32_t>(lk / 2);
      const std::uint64_t src = lay.unquantized_offset(layer, kv, u, 0, 0);
      const std::uint64_t dst = lay.element_index(layer, kv, lay.unquantized_token(u), 0, 0);
      for (std::uint32_t i = tid; i < row_step; i += kThreads) {
        out[dst + i] = ToStored<Out>(LoadTail(p.tail, p.tail_dtype, src + i));
      }
      continue;
    }
    const auto b = static_cast<std::uint32_t>(item % B);
    std::uint64_t rest = item / B;
    const auto h = static_cast<std::uint32_t>(rest % H);
    rest /= H;
    const auto kv = static_cast<std::uint32_t>(rest % 2);
    const auto layer = static_cast<std::uint32_t>(rest / 2);
    const std::uint32_t token0 = lay.sinks + b * P;
    const std::uint64_t e_base = lay.element_index(layer, kv, token0, h, 0);

    const std::uint32_t nparts = lay.partitions_per_group(kv);
    const auto* entries =
        reinterpret_cast<const std::uint32_t*>(p.scales) + lay.partition_base(layer, kv, h, b);
    for (std::uint32_t i = tid; i < nparts; i += kThreads) {
      const std::uint32_t e = __ldg(entries + i);
      quants[i] =
          make_float2(__half2float(__ushort_as_half(static_cast<unsigned short>(e & 0xffffu))),
                      __half2float(__ushort_as_half(static_cast<unsigned short>(e >> 16))));
    }
    __syncthreads();

    const auto* words_in = reinterpret_cast<const std::uint32_t*>(
        p.codes + lay.code_base(lay.group(layer, kv, h, b)) / 4);
    const std::uint32_t words = P * D / 16;
    for (std::uint32_t w = tid; w < words; w += kThreads) {
      const std::uint32_t word = __ldg(words_in + (kv == 0 ? w : (w % D) * (P / 16) + w / D));
      if (kv == 0) {
        const std::uint32_t t = w / (D / 16), c = w % (D / 16);
        Elem v[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const std::uint32_t d = 16 * c + i;
          const float2 qf = quants[lay.partition_offset(0, t, d)];
          v[i] = ToStored<Out>(hack::Dequantize((word >> (2 * i)) & 3u, Quant{qf.x, qf.y}));
        }
        uint4* dst = reinterpret_cast<uint4*>(out + e_base + t * row_step + 16 * c);
        constexpr int kVecs = static_cast<int>(sizeof(v) / 16);
        uint4 packed[kVecs];
        std::memcpy(packed, v, sizeof(v));
#pragma unroll
        for (int k = 0; k < kVecs; ++k) dst[k] = packed[k];
      } else {
        const std::uint32_t d = w % D, tw = w / D;
        const float2 qf = quants[d];
        const Quant q{qf.x, qf.y};
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          out[e_base + (16 * tw + i) * row_step + d] =
              ToStored<Out>(hack::Dequantize((word >> (2 * i)) & 3u, q));
        }
      }
    }
    __syncthreads();
  }
}

// Launches `kernel(params, extra(blocks)...)` on a grid-stride grid of `blocks` = SM count x
// occupancy CTAs (at most `items`); `extra` gives the arguments that depend on the grid.
template <typename Kernel, typename Params, typename Extra>
cudaError_t LaunchGridStride(Kernel kernel, const Params& params, std::uint64_t items, int threads,
                             std::size_t smem, std::atomic<std::size_t> (&configured)[kMaxDevices],
                             cudaStream_t stream, Extra extra) {
  cudaError_t err = ConfigureSharedMemory(kernel, smem, configured);
  if (err != cudaSuccess) return err;
  unsigned blocks = 0;
  err = internal::GridStrideBlocks(kernel, items * threads, threads, smem, &blocks);
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  return std::apply(
      [&](const auto&... rest) { return cudaLaunchKernelEx(&config, kernel, params, rest...); },
      extra(blocks));
}

std::atomic<std::size_t> g_quant_smem[8][kMaxDevices];  // [dtype][kernel kind]
std::atomic<std::size_t> g_dequant_smem[3][kMaxDevices];

// Grid-stride work items of a layout: its groups (K and V), then its tail rows.
std::uint64_t Items(const Layout& lay) {
  return 2 * lay.groups_per_kv() + std::uint64_t{lay.layers} * 2 * lay.unquantized_tokens();
}

}  // namespace

// ================================================================================================
// Quantize
// ================================================================================================

std::size_t HackQuantizeSharedBytes(const hack::Layout& layout) {
  return PlanQuantSmem(layout).total;
}

template <DType In>
cudaError_t LaunchHackQuantize(const HackQuantizeParams& params, cudaStream_t stream) {
  static_assert(In == DType::kFloat16 || In == DType::kBFloat16);
  const std::uint32_t dim = params.layout.dim;
  const bool channel_nearest =
      params.stochastic == 0 && params.layout.orientation == hack::kOrientChannel;
  const int kind = !channel_nearest ? 0 : dim == 64 ? 1 : dim == 128 ? 2 : dim == 256 ? 3 : 0;
  const auto launch = [&](auto kernel) {
    return LaunchGridStride(
        kernel, params, params.num_chunks * Items(params.layout), kQuantThreads,
        HackQuantizeSharedBytes(params.layout),
        g_quant_smem[(In == DType::kFloat16 ? 0 : 4) + kind], stream,
        [&](unsigned blocks) { return std::make_tuple(GridStrideOf(params.layout, blocks)); });
  };
  if (dim != 64 && dim != 128 && dim != 256) return cudaErrorInvalidValue;
  if (params.num_chunks == 0 || params.num_chunks > kHackQuantizeMaxChunks) {
    return cudaErrorInvalidValue;
  }
  switch (kind) {
    case 1: return launch(HackQuantizeKernel<In, 64>);
    case 2: return launch(HackQuantizeKernel<In, 128>);
    case 3: return launch(HackQuantizeKernel<In, 256>);
    default: return launch(HackQuantizeKernel<In, 0>);
  }
}

template cudaError_t LaunchHackQuantize<DType::kFloat16>(const HackQuantizeParams&, cudaStream_t);
template cudaError_t LaunchHackQuantize<DType::kBFloat16>(const HackQuantizeParams&, cudaStream_t);

// ================================================================================================
// Dequantize
// ================================================================================================

template <DType Out>
cudaError_t LaunchHackDequantize(const HackDequantizeParams& params, cudaStream_t stream) {
  const int slot = Out == DType::kFloat16 ? 0 : Out == DType::kBFloat16 ? 1 : 2;
  const std::size_t smem =
      std::size_t{8} *
      std::max(params.layout.dim, params.layout.partition * params.layout.dim_groups());
  return LaunchGridStride(HackDequantizeKernel<Out>, params, Items(params.layout), kThreads, smem,
                          g_dequant_smem[slot], stream, [](unsigned) { return std::tuple<>(); });
}

template cudaError_t LaunchHackDequantize<DType::kFloat16>(const HackDequantizeParams&,
                                                           cudaStream_t);
template cudaError_t LaunchHackDequantize<DType::kBFloat16>(const HackDequantizeParams&,
                                                            cudaStream_t);
template cudaError_t LaunchHackDequantize<DType::kFloat32>(const HackDequantizeParams&,
                                                           cudaStream_t);

}  // namespace kvdepot::cuda
