// Kernel family "hack", attention half (see kvdepot/cuda/hack.h, docs/hack-gpu.md): decode and
// causal prefill attention over hack-int2 KV with INT8 Q and INT8 P against the 2-bit codes.
// Params -> kernel -> launcher here; the dispatchers (validation, grid sizing, the kernel chosen)
// are hack_attention_api.cc. Two instantiations: head_dim 64 and 128.
//
// Work decomposition. A CTA owns one (query tile, KV head, split): a tile is the `group` query
// heads of one query token (decode) or of 8 / group consecutive query tokens (prefill) — the 8
// rows of the MMA's head dimension. The tile's keys are cut into units (a 64-token quantized block,
// or a run of up to 64 unquantized sink/tail tokens); a split is a contiguous range of units. Its
// quantized blocks are dealt to the CTA's warps at run time (a shared counter: a warp claims the
// next block whenever it frees a stage), its unquantized units round-robin. Each warp streams its
// blocks through a 2-stage pipeline of
// cp.async.bulk copies (K codes, V codes, K and V scales, V sums: 5.1 KiB per block at head_dim
// 128) completed on an mbarrier, and keeps its own online-softmax state; the CTA merges its warps
// in shared memory, and the last CTA of a (tile, KV head) to finish merges the splits' partials
// (log-sum-exp) and writes the output.
//
// Per block, in registers (lane = 4 g + tq; g = the head row it owns):
//   1. Q' = q * K's per-channel scales, INT8-quantized per 64-dim group exactly as the reference
//      (hack::Int8Params, hack::QuantizeInt8: one subtraction and one fused multiply-add with a
//      rounding constant, which also yields code - 128 as an s8).
//   2. S = Q' K^T on mma.sync m16n8k32 s8 x u8 -> s32: A = the 8 head rows (rows 8..15 all ones,
//      which makes the idle half of the MMA produce K's per-(token, group) code sums for free),
//      B = K's 2-bit codes expanded to bytes with one shift and one mask per 4 codes. The token
//      order of the B columns is chosen so that (a) the K code loads are bank-conflict free and
//      (b) each lane ends up holding the 16 scores of exactly the tokens whose V codes it loads
//      for step 4 — no shuffles between the two products.
//   3. score = sum_g [s_g * dot_g + (m_g + 128 s_g) * ksum_g] + sum_d q_d kmin_d; online softmax
//      in base 2; P INT8-quantized per (row, block) (hack::Int8Params).
//   4. O += P V on mma.sync m16n8k32 u8 x u8 (M = head_dim, N = 8 head rows, K = 64 tokens),
//      corrected per element with V's scales, mins and stored code sums (hack::HomomorphicDot,
//      regrouped).
// Unquantized tokens (sinks, tail) are exact q.k and p.v in float.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "fast_exp2.cuh"
#include "hack_attention_shared.h"
#include "io_element.cuh"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/cuda/hack.h"
#include "launch.h"

namespace kvdepot::cuda {

namespace {

using internal::ConfigureSharedMemory;
using internal::CpAsync16;
using internal::CpAsyncCommit;
using internal::CpAsyncWaitAll;
using internal::DispatchIo;
using internal::Exp2;
using internal::FloatToIo;
using internal::kErrPage;
using internal::kErrSection;
using internal::kErrSinks;
using internal::kErrTail;
using internal::kErrTokens;
using internal::kIoIndex;
using internal::kIoTypes;
using internal::kMaxDevices;
using internal::kMaxSplits;
using internal::kP;
using internal::kRows;
using internal::LoadIo4;

using hack::Layout;

constexpr std::uint32_t kMaxWarps = internal::kHomomorphicMaxWarps;
constexpr std::uint32_t kStages = 2;
constexpr std::uint32_t kNoUnit = 0xffffffffu;
constexpr unsigned kFull = 0xffffffffu;
constexpr std::uint32_t kOnes = 0x01010101u;
constexpr std::uint32_t kLow2 = 0x03030303u;
constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: x + kMagic holds rint(x) in its low bits
// kMagic + 128: for x in [0, 255.5), the low byte of fl(x + kMagicS8) is rint(x) - 128 as an s8
// (both constants are even, so a tie rounds to the even integer as rint does).
constexpr float kMagicS8 = 12583040.0f;
constexpr std::uint32_t kMagicBits = 0x4b400000u;

template <int D>
struct Geo {
  static constexpr std::uint32_t KW = D / 64;  // 64-dim groups = K code words per lane per row
  static constexpr std::uint32_t MT = D / 16;  // m-tiles of the P.V product
  static constexpr std::uint32_t kCodes = kP * D / 4;
  static constexpr std::uint32_t kScales = D * 4;
  static constexpr std::uint32_t kOffK = 0;
  static constexpr std::uint32_t kOffV = kCodes;
  static constexpr std::uint32_t kOffKS = 2 * kCodes;
  static constexpr std::uint32_t kOffVS = kOffKS + kScales;
  static constexpr std::uint32_t kOffVSum = kOffVS + kScales;
  static constexpr std::uint32_t kStageBytes = kOffVSum + D;  // V sums: u8 at P = 64
  static constexpr std::uint32_t kVTable = D * 16;            // float4 {scale, min, sum, 0} per d
  static constexpr std::uint32_t kWarpBytes = kStages * kStageBytes + kVTable + 16;
  static_assert(kStageBytes % 16 == 0, "stages must stay 16-byte aligned");
};

// ---- PTX wrappers ----

__device__ __forceinline__ void MbarInit(std::uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void MbarInval(std::uint32_t bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void MbarInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void MbarExpectTx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Waits for the phase of `parity` to complete. A copy that never lands (which would be a bug)
// traps after 2^26 polls (seconds) instead of hanging the device.
__device__ __forceinline__ void MbarWait(std::uint32_t bar, std::uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred P1;\n\t.reg .u32 n;\n\t"
      "mov.u32 n, 0;\n"
      "LAB_WAIT:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
      "@P1 bra DONE;\n\t"
      "add.u32 n, n, 1;\n\t"
      "setp.eq.u32 P1, n, 67108864;\n\t"
      "@P1 trap;\n\t"
      "bra LAB_WAIT;\n"
      "DONE:\n\t}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void ProxyFence() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Asks L2 to fetch [src, src + bytes) (16-byte aligned, a multiple of 16): a hint, nothing waits
// for it.
__device__ __forceinline__ void PrefetchL2(const void* src, std::uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void BulkCopy(std::uint32_t dst, const void* src, std::uint32_t bytes,
                                         std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void MmaS8U8(int (&c)[4], std::uint32_t a0, std::uint32_t a1,
                                        std::uint32_t a2, std::uint32_t a3, std::uint32_t b0,
                                        std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void MmaU8U8(int (&c)[4], std::uint32_t a0, std::uint32_t a1,
                                        std::uint32_t a2, std::uint32_t a3, std::uint32_t b0,
                                        std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// An MMA accumulator started at kMagicBits holds kMagicBits + dot, i.e. the float kMagic + dot
// (|dot| < 2^22): one exact subtraction converts it, without the quarter-rate conversion unit.
constexpr int kBiasInit = static_cast<int>(kMagicBits);
__device__ __forceinline__ float Unbias(int biased) {
  return __int_as_float(biased) - kMagic;
}
// Low bytes of four registers -> one word (byte i from x_i).
__device__ __forceinline__ std::uint32_t Pack4(std::uint32_t a, std::uint32_t b, std::uint32_t c,
                                               std::uint32_t d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}
__device__ __forceinline__ float H2F(std::uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFull, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFull, v, 2));
}
__device__ __forceinline__ float QuadMin(float v) {
  v = fminf(v, __shfl_xor_sync(kFull, v, 1));
  return fminf(v, __shfl_xor_sync(kFull, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(kFull, v, 1);
  return v + __shfl_xor_sync(kFull, v, 2);
}
__device__ __forceinline__ std::uint32_t QuadSumU(std::uint32_t v) {
  v += __shfl_xor_sync(kFull, v, 1);
  return v + __shfl_xor_sync(kFull, v, 2);
}

// Token (within a block) of column c of QK n-tile nt. For fixed nt the 8 columns' rows fall on
// distinct bank groups (row residues mod 4 distinct within c < 4 and within c >= 4); the 16
// (nt, e) of lane tq (columns 2 tq + e) are tokens 16 tq .. 16 tq + 15, the V word it loads.
__device__ __forceinline__ std::uint32_t Sigma(std::uint32_t nt, std::uint32_t c) {
  return 16 * (c >> 1) + 4 * (nt >> 1) + ((2 * (nt & 1) + (c & 1) + 2 * ((c >> 1) & 1)) & 3);
}

// Index of q[row r][dim d] in the CTA's query tile: lane (4 r + tq) finds its 16 dims
// 64 kw + 16 tq + [0, 16) as 4 consecutive 16-byte chunks, XOR-swizzled so that the 8 lanes of a
// shared-memory phase hit 8 distinct bank groups.
__device__ __forceinline__ std::uint32_t QIndex(std::uint32_t r, std::uint32_t d) {
  const std::uint32_t kw = d / 64, tq = (d % 64) / 16, c = (d % 16) / 4;
  const std::uint32_t lane = 4 * r + tq;
  return ((kw * 32 + lane) * 4 + (c ^ ((lane >> 1) & 3u))) * 4 + d % 4;
}

// 8 consecutive tail elements from a 16-byte aligned position, and their values.
__device__ __forceinline__ uint4 LoadTail8(const void* tail, std::uint64_t i) {
  return *reinterpret_cast<const uint4*>(static_cast<const unsigned short*>(tail) + i);
}

__device__ __forceinline__ void TailValues(uint4 raw, std::uint32_t bf16, float (&v)[8]) {
  const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (bf16) {
      v[2 * k] = __uint_as_float(w[k] << 16);
      v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    } else {
      v[2 * k] = H2F(w[k] & 0xffffu);
      v[2 * k + 1] = H2F(w[k] >> 16);
    }
  }
}

__device__ __forceinline__ void ReportError(const HackAttentionParams& p, std::uint32_t seq,
                                            std::uint32_t kind) {
  atomicMin(p.error, (static_cast<unsigned long long>(seq) << 8) | kind);
}

bool __device__ __forceinline__ Aligned16(const void* ptr) {
  return (reinterpret_cast<std::uintptr_t>(ptr) & 15u) == 0;
}

// Online-softmax state and output accumulator of one warp: kMt m-tiles of 16 dims (all of
// head_dim, or one half of it for a warp of a twin, mt0 = its first m-tile).
template <std::uint32_t kMt>
struct WarpState {
  float m;            // running max of row g (log2 domain), quad-uniform
  float lsum;         // this lane's part of row g's normaliser
  float acc[kMt][4];  // O[d][h]: d = 16 (mt0 + mt) + g (+8 for [2], [3]), h = 2 tq (+1 odd)
};

// Softmax update of row g over the lane's 16 scores (log2 domain; -inf = masked): returns the
// weights in place and the rescale factor of the previous state.
template <std::uint32_t kMt>
__device__ __forceinline__ float SoftmaxUpdate(WarpState<kMt>& st, float (&s)[16]) {
  float bm = s[0];
#pragma unroll
  for (int i = 1; i < 16; ++i) bm = fmaxf(bm, s[i]);
  bm = QuadMax(bm);
  const float m_new = fmaxf(st.m, bm);
  float alpha = 1.0f, sum = 0.0f;
  if (m_new == -INFINITY) {
#pragma unroll
    for (int i = 0; i < 16; ++i) s[i] = 0.0f;
  } else {
    alpha = Exp2(st.m - m_new);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      s[i] = Exp2(s[i] - m_new);
      sum += s[i];
    }
  }
  st.m = m_new;
  st.lsum = st.lsum * alpha + sum;
  return alpha;
}

// Rescales the accumulator by the factors of its two head columns (from rows 2 tq, 2 tq + 1).
template <std::uint32_t kMt>
__device__ __forceinline__ void Rescale(WarpState<kMt>& st, float alpha, std::uint32_t tq) {
  const float a0 = __shfl_sync(kFull, alpha, 8 * tq);
  const float a1 = __shfl_sync(kFull, alpha, 8 * tq + 4);
  if (__any_sync(kFull, a0 != 1.0f || a1 != 1.0f)) {
#pragma unroll
    for (int mt = 0; mt < static_cast<int>(kMt); ++mt) {
      st.acc[mt][0] *= a0;
      st.acc[mt][1] *= a1;
      st.acc[mt][2] *= a0;
      st.acc[mt][3] *= a1;
    }
  }
}

// Where block j of the sequence lies (global memory).
struct BlockSrc {
  const std::uint8_t* kcodes;
  const std::uint8_t* vcodes;
  const std::uint8_t* kscales;
  const std::uint8_t* vscales;
  const std::uint8_t* vsums;
};

template <int D>
__device__ __forceinline__ BlockSrc LocateBlock(const HackAttentionParams& p,
                                                const HackAttentionSeq& seq, const Layout& lay,
                                                std::uint32_t seq_index, std::uint32_t kvh,
                                                std::uint32_t j, bool report) {
  Layout pl = lay;
  std::uint32_t slot = j;
  const std::uint8_t* codes = seq.codes;
  const std::uint8_t* scales = seq.scales;
  const std::uint8_t* sums = seq.sums;
  if (p.page_blocks != 0) {
    pl.tokens = p.page_blocks * kP;
    pl.sinks = 0;
    slot = j % p.page_blocks;
    const std::uint32_t entry = j / p.page_blocks;
    std::int32_t page = 0;
    if (entry < p.max_pages_per_seq) {
      page = __ldg(p.block_tables + std::uint64_t{seq_index} * p.max_pages_per_seq + entry);
    } else {
      page = -1;
    }
    if (page < 0 || static_cast<std::uint32_t>(page) >= p.num_pages) {
      if (report) ReportError(p, seq_index, kErrPage);
      page = 0;  // stays in bounds; the call reports the error
    }
    codes = p.page_codes + static_cast<std::uint64_t>(page) * p.page_codes_bytes;
    scales = p.page_scales + static_cast<std::uint64_t>(page) * p.page_scales_bytes;
    sums = p.page_sums + static_cast<std::uint64_t>(page) * p.page_sums_bytes;
  }
  BlockSrc s;
  s.kcodes = codes + pl.code_base(pl.group(p.layer, 0, kvh, slot)) / 4;
  s.vcodes = codes + pl.code_base(pl.group(p.layer, 1, kvh, slot)) / 4;
  s.kscales = scales + pl.partition_base(p.layer, 0, kvh, slot) * 4;
  s.vscales = scales + pl.partition_base(p.layer, 1, kvh, slot) * 4;
  s.vsums = sums + pl.sum_base(p.layer, 1, kvh, slot);
  return s;
}

// Block j of a contiguous sequence: every section is linear in the block index, so its sources are
// block 0's plus j times the per-block sizes (no layout arithmetic per block).
template <int D>
__device__ __forceinline__ BlockSrc ContiguousBlock(const BlockSrc& block0, std::uint32_t j) {
  using G = Geo<D>;
  BlockSrc s;
  s.kcodes = block0.kcodes + std::uint64_t{j} * G::kCodes;
  s.vcodes = block0.vcodes + std::uint64_t{j} * G::kCodes;
  s.kscales = block0.kscales + std::uint64_t{j} * G::kScales;
  s.vscales = block0.vscales + std::uint64_t{j} * G::kScales;
  s.vsums = block0.vsums + std::uint64_t{j} * D;
  return s;
}

// What block 0's sources were computed from before the kernel's dependency wait (tokens 0: none).
struct PreSeq {
  const std::uint8_t* codes;
  const std::uint8_t* scales;
  const std::uint8_t* sums;
  std::uint32_t tokens;
  std::uint32_t sinks;
};

template <int D>
__device__ __forceinline__ void IssueBlock(const BlockSrc& src, std::uint8_t* stage,
                                           std::uint32_t bar) {
  using G = Geo<D>;
  ProxyFence();
  MbarExpectTx(bar, G::kStageBytes);
  BulkCopy(internal::SharedAddress(stage + G::kOffK), src.kcodes, G::kCodes, bar);
  BulkCopy(internal::SharedAddress(stage + G::kOffV), src.vcodes, G::kCodes, bar);
  BulkCopy(internal::SharedAddress(stage + G::kOffKS), src.kscales, G::kScales, bar);
  BulkCopy(internal::SharedAddress(stage + G::kOffVS), src.vscales, G::kScales, bar);
  BulkCopy(internal::SharedAddress(stage + G::kOffVSum), src.vsums, D, bar);
}

// A worker's first copies, issued by its issuer alone: block unit[k] into stage k for every stage
// that has one (kNoUnit: none). block0 is block 0's sources, used for a contiguous layout; a paged
// one is located per block, reporting a bad block-table entry.
template <int D>
__device__ __forceinline__ void IssueFirstBlocks(const HackAttentionParams& p,
                                                 const HackAttentionSeq& seq, const Layout& lay,
                                                 std::uint32_t seq_index, std::uint32_t kvh,
                                                 const std::uint32_t (&unit)[kStages],
                                                 const BlockSrc& block0, std::uint8_t* wbase,
                                                 std::uint32_t bar0) {
#pragma unroll
  for (std::uint32_t k = 0; k < kStages; ++k) {
    if (unit[k] != kNoUnit) {
      const BlockSrc src = p.page_blocks == 0
                               ? ContiguousBlock<D>(block0, unit[k])
                               : LocateBlock<D>(p, seq, lay, seq_index, kvh, unit[k], true);
      IssueBlock<D>(src, wbase + k * Geo<D>::kStageBytes, bar0 + 8 * k);
    }
  }
}

// Named barrier of the two warps of twin `twin` (ids 1.., 0 is __syncthreads).
__device__ __forceinline__ void TwinSync(std::uint32_t twin) {
  asm volatile("bar.sync %0, 64;" ::"r"(twin + 1) : "memory");
}

// Twin warps (decode, head_dim 128, few blocks per warp): the two warps of a twin process the same
// block, warp `half` the 64-dim K group `half` of Q'K^T (its Q' quantization, code unpacking and
// MMAs) and the head dims [64 half, 64 half + 64) of P.V; they add their partial scores through
// shared memory (xchg: [2 halves][4][32 lanes] float4) and both run the same softmax, so both hold
// the same weights and P codes. This halves the chain of work one block puts on one warp, which
// bounds a call where every warp has about one block (4K tokens, batch 1).
struct Twin {
  std::uint32_t half;  // 0 or 1
  std::uint32_t id;    // twin index in the CTA (named barrier id - 1)
  float4* xchg;
};

// One quantized block in shared memory `st` (positions pos0 .. pos0 + 63): updates the warp state.
// kMasked: some position of the block is beyond some row's limit (row_limit: the last position
// row g may attend to); decode never masks, so its loop carries no masking code. kTwin: this warp
// is half `tw.half` of a twin (see Twin).
template <int D, bool kMasked, bool kTwin>
__device__ __forceinline__ void ProcessBlock(const std::uint8_t* st, float4* vtab, const float* qsm,
                                             WarpState<kTwin ? Geo<D>::MT / 2 : Geo<D>::MT>& ws,
                                             float scale_log2, std::uint32_t pos0,
                                             std::uint32_t row_limit, const Twin& tw) {
  using G = Geo<D>;
  static_assert(!kTwin || (G::KW == 2 && !kMasked), "twin warps: decode at head_dim 128 only");
  constexpr std::uint32_t KW = kTwin ? 1 : G::KW;           // K groups of this warp
  constexpr std::uint32_t MTW = kTwin ? G::MT / 2 : G::MT;  // P.V m-tiles of this warp
  const std::uint32_t kw0 = kTwin ? tw.half : 0, mt0 = kTwin ? tw.half * MTW : 0;
  const std::uint32_t lane = threadIdx.x & 31u, g = lane >> 2, tq = lane & 3u;

  // 1. V's per-channel scale, min and the block's dequantized channel sum, as floats.
  __syncwarp();
  for (std::uint32_t d = 16 * mt0 + lane; d < 16 * (mt0 + MTW); d += 32) {
    const std::uint32_t e = *reinterpret_cast<const std::uint32_t*>(st + G::kOffVS + 4 * d);
    const float vs = H2F(e & 0xffffu), vm = H2F(e >> 16);
    const float vsum = static_cast<float>(st[G::kOffVSum + d]);
    vtab[d] = make_float4(vs, vm, fmaf(vs, vsum, static_cast<float>(kP) * vm), 0.0f);
  }

  // 2. Q' of row g on the lane's dims 64 kw + 16 tq + l, INT8 per 64-dim group
  //    (hack::QuantizeInt8: (q' - min) * inv rounded once, here by the fused multiply-add with the
  //    rounding constant, which also turns the code into code - 128 as an s8, ready to pack).
  float mins0 = 0.0f, mins1 = 0.0f;
  std::uint32_t aq[KW][2][2];
  float sq[KW], cq[KW];
#pragma unroll
  for (std::uint32_t kw = 0; kw < KW; ++kw) {
    const std::uint32_t kg = kw0 + kw;  // the K group
    const uint4* kse = reinterpret_cast<const uint4*>(st + G::kOffKS + 4 * (64 * kg + 16 * tq));
    std::uint32_t ent[16];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint4 v = kse[c];
      ent[4 * c] = v.x;
      ent[4 * c + 1] = v.y;
      ent[4 * c + 2] = v.z;
      ent[4 * c + 3] = v.w;
    }
    float qv[16];
#pragma unroll
    for (std::uint32_t c = 0; c < 4; ++c) {
      const float4 v = *reinterpret_cast<const float4*>(
          qsm + ((kg * 32 + lane) * 4 + (c ^ ((lane >> 1) & 3u))) * 4);
      qv[4 * c] = v.x;
      qv[4 * c + 1] = v.y;
      qv[4 * c + 2] = v.z;
      qv[4 * c + 3] = v.w;
    }
    float qp[16];
    float mn = 0, mx = 0;
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      const float ksc = H2F(ent[l] & 0xffffu), kmn = H2F(ent[l] >> 16);
      qp[l] = __fmul_rn(qv[l], ksc);  // never contracted: the reference rounds q * scale
      if (l & 1) {
        mins1 = fmaf(qv[l], kmn, mins1);
      } else {
        mins0 = fmaf(qv[l], kmn, mins0);
      }
      mn = l == 0 ? qp[l] : fminf(mn, qp[l]);
      mx = l == 0 ? qp[l] : fmaxf(mx, qp[l]);
    }
    mn = QuadMin(mn);
    mx = QuadMax(mx);
    const hack::Int8Quant iq = hack::Int8Params(mn, mx);
    std::uint32_t cb[16];
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      cb[l] = __float_as_uint(__fmaf_rn(__fsub_rn(qp[l], mn), iq.inv, kMagicS8));
    }
#pragma unroll
    for (int hk = 0; hk < 2; ++hk) {
      aq[kw][hk][0] = Pack4(cb[2 * hk], cb[4 + 2 * hk], cb[8 + 2 * hk], cb[12 + 2 * hk]);
      aq[kw][hk][1] = Pack4(cb[2 * hk + 1], cb[5 + 2 * hk], cb[9 + 2 * hk], cb[13 + 2 * hk]);
    }
    // Scores in base 2 directly: q' ~ sc (code - 128) + (mn + 128 sc), times scale_log2.
    sq[kw] = iq.scale * scale_log2;
    cq[kw] = fmaf(128.0f, iq.scale, mn) * scale_log2;
  }
  const float mins = QuadSum(mins0 + mins1) * scale_log2;

  // 3. Scores of the lane's 16 tokens (n-tile nt, column 2 tq + e), log2 domain.
  float s[16];
#pragma unroll
  for (std::uint32_t nt = 0; nt < 8; ++nt) {
    const std::uint8_t* krow = st + G::kOffK + Sigma(nt, g) * (D / 4);
    std::uint32_t w[KW];
    if constexpr (kTwin) {
      w[0] = *reinterpret_cast<const std::uint32_t*>(krow + 4 * (tq + 4 * kw0));
    } else if constexpr (KW == 2) {
      const std::uint32_t sw = g >= 4 ? 4u : 0u;
      const std::uint32_t x = *reinterpret_cast<const std::uint32_t*>(krow + 4 * (tq + sw));
      const std::uint32_t y = *reinterpret_cast<const std::uint32_t*>(krow + 4 * (tq + 4 - sw));
      w[0] = g >= 4 ? y : x;
      w[1] = g >= 4 ? x : y;
    } else {
      w[0] = *reinterpret_cast<const std::uint32_t*>(krow + 4 * tq);
    }
    float s0 = mins, s1 = mins;
#pragma unroll
    for (std::uint32_t kw = 0; kw < KW; ++kw) {
      int c[4] = {kBiasInit, kBiasInit, kBiasInit, kBiasInit};
      MmaS8U8(c, aq[kw][0][0], kOnes, aq[kw][0][1], kOnes, w[kw] & kLow2, (w[kw] >> 2) & kLow2);
      MmaS8U8(c, aq[kw][1][0], kOnes, aq[kw][1][1], kOnes, (w[kw] >> 4) & kLow2,
              (w[kw] >> 6) & kLow2);
      s0 = fmaf(sq[kw], Unbias(c[0]), fmaf(cq[kw], Unbias(c[2]), s0));
      s1 = fmaf(sq[kw], Unbias(c[1]), fmaf(cq[kw], Unbias(c[3]), s1));
    }
    s[2 * nt] = s0;
    s[2 * nt + 1] = s1;
    if constexpr (kMasked) {
      if (pos0 + Sigma(nt, 2 * tq) > row_limit) s[2 * nt] = -INFINITY;
      if (pos0 + Sigma(nt, 2 * tq + 1) > row_limit) s[2 * nt + 1] = -INFINITY;
    }
  }

  // The twins' partial scores, added in the same order by both (half 0's + half 1's), so both
  // warps see the same scores.
  if constexpr (kTwin) {
    float4* own = tw.xchg + tw.half * 128;
#pragma unroll
    for (std::uint32_t c = 0; c < 4; ++c) {
      own[32 * c + lane] = make_float4(s[4 * c], s[4 * c + 1], s[4 * c + 2], s[4 * c + 3]);
    }
    TwinSync(tw.id);
    const float4* other = tw.xchg + (tw.half ^ 1u) * 128;
#pragma unroll
    for (std::uint32_t c = 0; c < 4; ++c) {
      const float4 o = other[32 * c + lane];
      const float ov[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
      for (std::uint32_t e = 0; e < 4; ++e) {
        s[4 * c + e] = tw.half == 0 ? s[4 * c + e] + ov[e] : ov[e] + s[4 * c + e];
      }
    }
  }

  // 4. Softmax, INT8 P per (row, block) (hack::QuantizeInt8; the weights are in [0, 1], so the
  //    product is at most 255 (1 + 2^-22) and rounds to at most 255).
  const float alpha = SoftmaxUpdate(ws, s);
  float pmn = s[0], pmx = s[0];
#pragma unroll
  for (int i = 1; i < 16; ++i) {
    pmn = fminf(pmn, s[i]);
    pmx = fmaxf(pmx, s[i]);
  }
  pmn = QuadMin(pmn);
  pmx = QuadMax(pmx);
  const hack::Int8Quant ip = hack::Int8Params(pmn, pmx);
  std::uint32_t pb[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    pb[i] = __float_as_uint(__fmaf_rn(__fsub_rn(s[i], pmn), ip.inv, kMagic));
  }
  // B operand of P.V: b0(ks) byte i = token 16 tq + 4 i + 2 ks, b1(ks) = that + 1.
  const std::uint32_t x0 = Pack4(pb[0], pb[4], pb[8], pb[12]);   // n-tiles 0, 2, 4, 6; e = 0
  const std::uint32_t x1 = Pack4(pb[1], pb[5], pb[9], pb[13]);   // e = 1
  const std::uint32_t y0 = Pack4(pb[2], pb[6], pb[10], pb[14]);  // n-tiles 1, 3, 5, 7
  const std::uint32_t y1 = Pack4(pb[3], pb[7], pb[11], pb[15]);
  const std::uint32_t psum =
      QuadSumU(__dp4a(x0, kOnes, __dp4a(x1, kOnes, __dp4a(y0, kOnes, __dp4a(y1, kOnes, 0u)))));
  const bool odd = (tq & 1) != 0;
  const std::uint32_t b00 = odd ? y0 : x0, b01 = odd ? y1 : x1;
  const std::uint32_t b10 = odd ? x0 : y0, b11 = odd ? x1 : y1;

  // Per-head factors of the accumulator's two head columns (rows 2 tq and 2 tq + 1).
  Rescale(ws, alpha, tq);
  const float sp_row = ip.scale, spsum_row = ip.scale * static_cast<float>(psum);
  const float sp0 = __shfl_sync(kFull, sp_row, 8 * tq),
              sp1 = __shfl_sync(kFull, sp_row, 8 * tq + 4);
  const float ss0 = __shfl_sync(kFull, spsum_row, 8 * tq);
  const float ss1 = __shfl_sync(kFull, spsum_row, 8 * tq + 4);
  const float mp0 = __shfl_sync(kFull, pmn, 8 * tq), mp1 = __shfl_sync(kFull, pmn, 8 * tq + 4);
  __syncwarp();  // vtab written

  // 5. O += P V, corrected: sp (vs dot + vm psum) + mp (vs vsum + P vm).
#pragma unroll
  for (std::uint32_t mt = 0; mt < MTW; ++mt) {
    const std::uint32_t d0 = 16 * (mt0 + mt) + g, d1 = d0 + 8;
    const std::uint32_t w0 =
        *reinterpret_cast<const std::uint32_t*>(st + G::kOffV + d0 * 16 + 4 * tq);
    const std::uint32_t w1 =
        *reinterpret_cast<const std::uint32_t*>(st + G::kOffV + d1 * 16 + 4 * tq);
    int c[4] = {kBiasInit, kBiasInit, kBiasInit, kBiasInit};
    MmaU8U8(c, w0 & kLow2, w1 & kLow2, (w0 >> 2) & kLow2, (w1 >> 2) & kLow2, b00, b01);
    MmaU8U8(c, (w0 >> 4) & kLow2, (w1 >> 4) & kLow2, (w0 >> 6) & kLow2, (w1 >> 6) & kLow2, b10,
            b11);
    const float4 v0 = vtab[d0], v1 = vtab[d1];
    ws.acc[mt][0] = fmaf(v0.z, mp0, fmaf(v0.y, ss0, fmaf(v0.x, sp0 * Unbias(c[0]), ws.acc[mt][0])));
    ws.acc[mt][1] = fmaf(v0.z, mp1, fmaf(v0.y, ss1, fmaf(v0.x, sp1 * Unbias(c[1]), ws.acc[mt][1])));
    ws.acc[mt][2] = fmaf(v1.z, mp0, fmaf(v1.y, ss0, fmaf(v1.x, sp0 * Unbias(c[2]), ws.acc[mt][2])));
    ws.acc[mt][3] = fmaf(v1.z, mp1, fmaf(v1.y, ss1, fmaf(v1.x, sp1 * Unbias(c[3]), ws.acc[mt][3])));
  }
}

// 8 tokens' rows (u0 + t, t < 8) of K (kv 0) or V (kv 1) from the tail into `rows` ([8][D + 4]
// floats: the padding puts the 4 rows a quad reads at once in distinct banks), zeros past u1. The
// warp's loads are all issued before any is used (one memory round trip per 8 tokens).
template <int D>
__device__ __forceinline__ void StageTailRows(const HackAttentionParams& p, const Layout& lay,
                                              const void* tail, std::uint32_t kv, std::uint32_t kvh,
                                              std::uint32_t u0, std::uint32_t u1, float* rows) {
  constexpr std::uint32_t kLoads = D / 32;  // 16-byte words per lane: 8 rows x D / 8 / 32
  const std::uint32_t lane = threadIdx.x & 31u;
  uint4 raw[kLoads];
#pragma unroll
  for (std::uint32_t i = 0; i < kLoads; ++i) {
    const std::uint32_t w = lane + 32 * i, t = w / (D / 8), c = w % (D / 8);
    raw[i] = u0 + t < u1 ? LoadTail8(tail, lay.unquantized_offset(p.layer, kv, u0 + t, kvh, 8 * c))
                         : make_uint4(0, 0, 0, 0);
  }
  __syncwarp();  // every lane is done reading the previous rows
#pragma unroll
  for (std::uint32_t i = 0; i < kLoads; ++i) {
    const std::uint32_t w = lane + 32 * i, t = w / (D / 8), c = w % (D / 8);
    float v[8];
    TailValues(raw[i], p.tail_bf16, v);
    auto* dst = reinterpret_cast<float4*>(rows + t * (D + 4) + 8 * c);
    dst[0] = make_float4(v[0], v[1], v[2], v[3]);
    dst[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
  __syncwarp();
}

// Unquantized tokens a worker takes at a time (the kernel deals them round-robin).
constexpr std::uint32_t kTailPiece = 8;

// Unquantized tokens u in [u0, u1) (< 64 of them): exact q.k and p.v in float. `scratch` is the
// warp's (idle) stage memory: 8 tail rows [8][D + 4] floats, then P [64][8] floats. The tail is
// read 8 tokens at a time into shared memory, each lane then computes the scores of its row g
// and tokens tq, tq + 4 of the 8 (d in order, as the CPU reference). The warp accumulates the kMt
// m-tiles from mt0 (a twin: the scores are computed by both warps alike).
template <int D, std::uint32_t kMt>
__device__ void ProcessUnquantized(const HackAttentionParams& p, const Layout& lay,
                                   const void* tail, std::uint32_t kvh, std::uint32_t u0,
                                   std::uint32_t u1, std::uint8_t* scratch, const float* qsm,
                                   WarpState<kMt>& ws, std::uint32_t mt0, std::uint32_t row_limit) {
  static_assert((8 * (D + 4) + 64 * kRows) * 4 <= kStages * Geo<D>::kStageBytes,
                "the tail's rows and P must fit the warp's stages");
  const std::uint32_t lane = threadIdx.x & 31u, g = lane >> 2, tq = lane & 3u;
  float* rows = reinterpret_cast<float*>(scratch);
  float* ps = reinterpret_cast<float*>(scratch + 8 * (D + 4) * 4);
  for (std::uint32_t sub = 0; u0 + sub < u1; sub += 8) {
    StageTailRows<D>(p, lay, tail, 0, kvh, u0 + sub, u1, rows);
    const float4* k0 = reinterpret_cast<const float4*>(rows + tq * (D + 4));
    const float4* k1 = reinterpret_cast<const float4*>(rows + (tq + 4) * (D + 4));
    float dot0 = 0.0f, dot1 = 0.0f;
#pragma unroll 8
    for (std::uint32_t d = 0; d < static_cast<std::uint32_t>(D); d += 4) {
      const float4 q = *reinterpret_cast<const float4*>(qsm + QIndex(g, d));
      const float4 a = k0[d / 4], b = k1[d / 4];
      dot0 = fmaf(q.w, a.w, fmaf(q.z, a.z, fmaf(q.y, a.y, fmaf(q.x, a.x, dot0))));
      dot1 = fmaf(q.w, b.w, fmaf(q.z, b.z, fmaf(q.y, b.y, fmaf(q.x, b.x, dot1))));
    }
    const std::uint32_t ua = u0 + sub + tq, ub = ua + 4;
    const bool va = ua < u1 && lay.unquantized_token(ua) <= row_limit;
    const bool vb = ub < u1 && lay.unquantized_token(ub) <= row_limit;
    ps[(sub + tq) * kRows + g] = va ? dot0 * p.scale_log2 : -INFINITY;
    ps[(sub + tq + 4) * kRows + g] = vb ? dot1 * p.scale_log2 : -INFINITY;
  }
  // Lane (g, tq) wrote exactly the scores it reads: tokens tq + 4 k of row g.
  float s[16];
#pragma unroll
  for (std::uint32_t k = 0; k < 16; ++k) {
    s[k] = u0 + tq + 4 * k < u1 ? ps[(tq + 4 * k) * kRows + g] : -INFINITY;
  }
  const float alpha = SoftmaxUpdate(ws, s);
  Rescale(ws, alpha, tq);
#pragma unroll
  for (std::uint32_t k = 0; k < 16; ++k) ps[(tq + 4 * k) * kRows + g] = s[k];
  __syncwarp();
  for (std::uint32_t sub = 0; sub < 64 && u0 + sub < u1; sub += 8) {
    StageTailRows<D>(p, lay, tail, 1, kvh, u0 + sub, u1, rows);
    for (std::uint32_t t = 0; t < 8; ++t) {
      const float2 pp = *reinterpret_cast<const float2*>(ps + (sub + t) * kRows + 2 * tq);
      const float* vs = rows + t * (D + 4);
#pragma unroll
      for (std::uint32_t mt = 0; mt < kMt; ++mt) {
        const float v0 = vs[16 * (mt0 + mt) + g], v1 = vs[16 * (mt0 + mt) + g + 8];
        ws.acc[mt][0] = fmaf(pp.x, v0, ws.acc[mt][0]);
        ws.acc[mt][1] = fmaf(pp.y, v0, ws.acc[mt][1]);
        ws.acc[mt][2] = fmaf(pp.x, v1, ws.acc[mt][2]);
        ws.acc[mt][3] = fmaf(pp.y, v1, ws.acc[mt][3]);
      }
    }
  }
  __syncwarp();  // the caller reuses the stage memory
}

// A sequence descriptor checked against the call (the one check, before and after the dependency
// wait): returns 0 and the sequence's layout in `lay`, or the error kind (kErrTokens, kErrSinks,
// kErrSection, kErrTail); `lay` is meaningful only when 0 is returned. Section pointers are checked
// only for the contiguous layout (paged blocks are located through the page table), the tail
// pointer only if the sequence has unquantized tokens.
template <int D>
__device__ __forceinline__ std::uint32_t SeqLayout(const HackAttentionParams& p,
                                                   const HackAttentionSeq& seq, Layout& lay) {
  std::uint32_t bad = 0;
  if (seq.tokens == 0 || seq.tokens > p.max_tokens) {
    bad = kErrTokens;
  } else if (seq.sinks > seq.tokens) {
    bad = kErrSinks;
  }
  lay.layers = p.layers;
  lay.tokens = bad == 0 ? seq.tokens : 0;
  lay.heads = p.kv_heads;
  lay.dim = D;
  lay.partition = kP;
  lay.sinks = bad == 0 ? seq.sinks : 0;
  lay.orientation = hack::kOrientChannel;
  if (bad == 0 && lay.blocks() > 0 && p.page_blocks == 0 &&
      (seq.codes == nullptr || seq.scales == nullptr || seq.sums == nullptr ||
       !Aligned16(seq.codes) || !Aligned16(seq.scales) || !Aligned16(seq.sums))) {
    bad = kErrSection;
  }
  if (bad == 0 && lay.unquantized_tokens() > 0 && (seq.tail == nullptr || !Aligned16(seq.tail))) {
    bad = kErrTail;
  }
  return bad;
}

// Before a decode kernel's dependency wait (warp 0, contiguous layout): reads the sequence's
// descriptor as it stands (the kernel before this one may still be writing it) and, if it is
// valid, locates block 0 (pre_block0, with the descriptor fields it came from in pre_seq;
// pre_seq.tokens = 0 if invalid) and asks L2 to prefetch the blocks the CTA's `workers` copy first
// (their first two stages). A hint only: nothing here writes global memory, a prefetch of a stale
// or unmapped address does not fault (seen on the H200, docs/hack-gpu.md), and block 0 is used
// after the wait only if the fields it was computed from are the ones read then.
template <int D>
__device__ __forceinline__ void PrefetchFirstBlocks(const HackAttentionParams& p,
                                                    std::uint32_t seq_index, std::uint32_t kvh,
                                                    std::uint32_t split, std::uint32_t workers,
                                                    PreSeq& pre_seq, BlockSrc& pre_block0) {
  using G = Geo<D>;
  const std::uint32_t lane = threadIdx.x & 31u;
  const HackAttentionSeq pre = p.seqs[seq_index];
  Layout pl;
  const bool ok = SeqLayout<D>(p, pre, pl) == 0 && pl.blocks() > 0;
  if (lane == 0) pre_seq = PreSeq{pre.codes, pre.scales, pre.sums, ok ? pre.tokens : 0u, pre.sinks};
  if (!ok) return;
  const BlockSrc b0 = LocateBlock<D>(p, pre, pl, seq_index, kvh, 0, false);
  if (lane == 0) pre_block0 = b0;
  const std::uint32_t first = split * p.units_per_split;
  const std::uint32_t end = min(pl.blocks(), first + min(p.units_per_split, kStages * workers));
  if (first + lane < end) {
    const BlockSrc src = ContiguousBlock<D>(b0, first + lane);
    PrefetchL2(src.kcodes, G::kCodes);
    PrefetchL2(src.vcodes, G::kCodes);
    PrefetchL2(src.kscales, G::kScales);
    PrefetchL2(src.vscales, G::kScales);
    PrefetchL2(src.vsums, D);
  }
}

// kTwin: each block is processed by a twin of warps (see Twin); the CTA has an even warp count.
// IoT: q's and out's element (io_element.cuh); the queries are widened to fp32 in shared memory,
// so the rest of the kernel is the same code for every IoT.
template <int D, bool kTwin, typename IoT>
__global__ void __launch_bounds__(kMaxWarps * 32, 1)
    HackAttentionKernel(const __grid_constant__ HackAttentionParams p) {
  using G = Geo<D>;
  constexpr std::uint32_t MTW = kTwin ? G::MT / 2 : G::MT;
  extern __shared__ uint4 smem_raw[];
  auto* smem = reinterpret_cast<std::uint8_t*>(smem_raw);
  __shared__ std::uint32_t s_bad_rows;
  __shared__ std::uint32_t s_last;
  __shared__ std::uint32_t s_next;  // next unclaimed quantized block
  __shared__ float s_m[kMaxSplits][kRows];
  __shared__ float s_l[kMaxSplits][kRows];
  __shared__ std::uint32_t s_claim[kMaxWarps / 2];  // twin t's claim for the stage it frees next
  __shared__ BlockSrc s_block0;  // contiguous layout: block 0's sources (ContiguousBlock)
  __shared__ float s_row_m[kRows];
  __shared__ float s_row_l[kRows];

  const std::uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
  const std::uint32_t g = lane >> 2, tq = lane & 3u;
  const std::uint32_t W = blockDim.x >> 5;
  // Workers: the warps, or the twins (warps 2 t and 2 t + 1); a worker owns the stages, mbarriers
  // and blocks, the warps of a twin share its blocks (the even warp's stages).
  const std::uint32_t worker = kTwin ? warp >> 1 : warp, workers = kTwin ? W >> 1 : W;
  const std::uint32_t half = kTwin ? warp & 1u : 0u;
  const bool issuer = lane == 0 && half == 0;
  std::uint32_t cta = blockIdx.x;
  const std::uint32_t split = cta % p.splits;
  cta /= p.splits;
  const std::uint32_t kvh = cta % p.kv_heads;
  const std::uint32_t tile = cta / p.kv_heads;
  const std::uint32_t pair = tile * p.kv_heads + kvh;
  const std::uint32_t seq_index = p.prefill ? 0u : tile;
  // Before the wait below (decode, contiguous layout; see PrefetchFirstBlocks): with programmatic
  // dependent launch this runs while the previous call's last CTAs still merge, so the first
  // copies after the wait find their blocks in L2, and block 0 is already located. Not in the
  // head_dim-128 single-warp kernel: there it makes ptxas spill at 128 registers.
  constexpr bool kPrefetch = kTwin || D == 64;
  __shared__ PreSeq s_pre_seq;
  __shared__ BlockSrc s_pre_block0;
  if constexpr (kPrefetch) {
    if (p.prefill == 0 && p.page_blocks == 0 && warp == 0) {
      PrefetchFirstBlocks<D>(p, seq_index, kvh, split, kTwin ? W >> 1 : W, s_pre_seq, s_pre_block0);
    }
  }
  // Per-warp shared memory: stages, V table, mbarriers. A twin uses its even warp's stages and
  // mbarriers, each warp its own V table, and the odd warp's stages as the score exchange.
  std::uint8_t* wown = smem + warp * G::kWarpBytes;
  std::uint8_t* wbase = kTwin ? smem + (warp & ~1u) * G::kWarpBytes : wown;
  float4* vtab = reinterpret_cast<float4*>(wown + kStages * G::kStageBytes);
  const std::uint32_t bar0 = internal::SharedAddress(wbase + kStages * G::kStageBytes + G::kVTable);
  const Twin tw{half, worker,
                kTwin ? reinterpret_cast<float4*>(smem + (warp | 1u) * G::kWarpBytes) : nullptr};
  float* qsm = reinterpret_cast<float*>(smem + W * G::kWarpBytes);
  // kPrefetch kernels set up their shared memory before the wait (the mbarriers, s_bad_rows and
  // warp 0's s_pre_*, published by one barrier there), so that after the wait each worker's
  // issuer can issue its first copies as soon as it has the descriptor, with no barrier between.
  // (In the head_dim-128 single-warp kernel the same makes ptxas spill at 128 registers: it keeps
  // the barrier after the wait.)
  if constexpr (kPrefetch) {
    if (issuer) {
      MbarInit(bar0);
      MbarInit(bar0 + 8);
      MbarInitFence();
    }
    if (tid == 0) s_bad_rows = 0;
    __syncthreads();
  }
  // Programmatic dependent launch (decode, see LaunchHackAttention): nothing in global memory is
  // read or written before the grid this one depends on has completed (its outputs, the
  // workspace's partials and counters), except warp 0's read of the descriptor and the prefetch
  // hint above (used only as said there); then the next decode call may be launched, its CTAs
  // waiting here on the SMs this call frees.
  internal::GridDependencyWait();
  internal::GridDependencyLaunchDependents();

  // The tile's query rows go to shared memory first (zero for rows outside the tile), 16 bytes per
  // cp.async (QIndex keeps 4 consecutive dims together): issued before the block copies, these
  // loads do not queue behind them. They do not depend on the descriptor (a bad one zeroes them
  // below), so kPrefetch kernels issue them while its load is in flight.
  auto copy_queries = [&](std::uint32_t rows) {
    const std::uint32_t q_first0 = tile * p.queries_per_tile;
    for (std::uint32_t i = tid; i < kRows * D / 4; i += blockDim.x) {
      const std::uint32_t r = i / (D / 4), d = i % (D / 4) * 4;
      float* dst = qsm + QIndex(r, d);
      if (r < rows) {
        const std::uint32_t qi = q_first0 + r / p.group, h = kvh * p.group + r % p.group;
        const IoT* src = static_cast<const IoT*>(p.q) + (std::uint64_t{qi} * p.q_heads + h) * D + d;
        if constexpr (sizeof(IoT) == 4) {
          CpAsync16(internal::SharedAddress(dst), src);
        } else {
          *reinterpret_cast<float4*>(dst) = LoadIo4(src);  // exact; read back by this thread
        }
      } else {
        *reinterpret_cast<float4*>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
    CpAsyncCommit();
  };
  const HackAttentionSeq seq = p.prefill ? p.prefill_seq : p.seqs[seq_index];
  if constexpr (kPrefetch) {
    copy_queries(min(p.queries_per_tile, p.queries - tile * p.queries_per_tile) * p.group);
  }

  // The sequence's layout; a bad descriptor gives no work and NaN outputs.
  Layout lay;
  const std::uint32_t bad_kind = SeqLayout<D>(p, seq, lay);
  const bool seq_ok = bad_kind == 0;
  if (!seq_ok) {
    if (tid == 0 && kvh == 0 && split == 0) ReportError(p, seq_index, bad_kind);
    if constexpr (kPrefetch) {
      if (tid == 0) atomicOr(&s_bad_rows, 0xffu);
    }
  }

  // Rows: row r = query (tile * qpt + r / group), head kvh * group + r % group.
  const std::uint32_t qpt = p.queries_per_tile;
  const std::uint32_t q_first = tile * qpt;
  const std::uint32_t q_count = min(qpt, p.queries - q_first);
  const std::uint32_t r_query = q_first + g / p.group;
  const bool row_valid = g < q_count * p.group;
  const std::uint32_t max_pos =
      seq_ok ? (p.prefill ? p.first_position + q_first + q_count - 1 : lay.tokens - 1) : 0;
  const std::uint32_t row_limit = row_valid && p.prefill ? p.first_position + r_query : max_pos;
  const std::uint32_t min_limit = p.prefill ? p.first_position + q_first : max_pos;

  // Units: visible quantized blocks, then runs of 64 visible unquantized tokens.
  std::uint32_t nb = 0, u_vis = 0;
  if (seq_ok) {
    const std::uint32_t S = lay.sinks, B = lay.blocks(), tail_begin = lay.tail_begin();
    nb = max_pos >= S ? min(B, (max_pos - S) / kP + 1) : 0;
    const std::uint32_t U = lay.unquantized_tokens();
    u_vis =
        max_pos + 1 >= tail_begin ? S + min(U - S, max_pos + 1 - tail_begin) : min(S, max_pos + 1);
  }
  const std::uint32_t units = nb + (u_vis + kP - 1) / kP;
  const std::uint32_t ub = min(units, split * p.units_per_split);
  const std::uint32_t ue = min(units, ub + p.units_per_split);

  if constexpr (!kPrefetch) {
    copy_queries(seq_ok ? q_count * p.group : 0);
    if (issuer) {
      MbarInit(bar0);
      MbarInit(bar0 + 8);
      MbarInitFence();
    }
  }
  // Quantized blocks [ub, qe) are dealt at run time: a worker starts with blocks
  // ub + worker + k workers (k < kStages) and claims the next unclaimed one (s_next) whenever it
  // frees a stage, so that workers which start late or run slow take fewer. Unquantized units
  // [max(ub, nb), ue) are dealt round-robin and done after the blocks (their scratch memory is the
  // warp's own stages).
  static_assert(kStages == 2, "the stage bookkeeping below is written for two stages");
  const std::uint32_t qe = min(ue, nb);
  std::uint32_t unit[kStages];  // block in each stage, kNoUnit for none
#pragma unroll
  for (std::uint32_t k = 0; k < kStages; ++k) {
    const std::uint32_t u = ub + worker + k * workers;
    unit[k] = u < qe ? u : kNoUnit;
  }
  if constexpr (kPrefetch) {
    // Each worker's issuer takes block 0's sources itself (located by warp 0 before the wait if
    // the descriptor is the same) and issues its first copies at once; tid 0 (worker 0's issuer)
    // also keeps them in s_block0 for the claims, which come after the barrier below.
    if (tid == 0) s_next = ub + kStages * workers;
    if (issuer && unit[0] != kNoUnit) {
      BlockSrc b0{};
      if (p.page_blocks == 0) {
        const bool same = p.prefill == 0 && s_pre_seq.tokens == seq.tokens &&
                          s_pre_seq.sinks == seq.sinks && s_pre_seq.codes == seq.codes &&
                          s_pre_seq.scales == seq.scales && s_pre_seq.sums == seq.sums;
        b0 = same ? s_pre_block0 : LocateBlock<D>(p, seq, lay, seq_index, kvh, 0, false);
        if (tid == 0) s_block0 = b0;
      }
      IssueFirstBlocks<D>(p, seq, lay, seq_index, kvh, unit, b0, wbase, bar0);
    }
  } else {
    if (tid == 0) {
      s_bad_rows = seq_ok ? 0u : 0xffu;
      s_next = ub + kStages * workers;
      if (p.page_blocks == 0 && qe > ub) {
        s_block0 = LocateBlock<D>(p, seq, lay, seq_index, kvh, 0, false);
      }
    }
    __syncthreads();
    if (issuer) IssueFirstBlocks<D>(p, seq, lay, seq_index, kvh, unit, s_block0, wbase, bar0);
  }

  // Non-finite query rows are zeroed and flagged (their outputs become NaN). Each thread checks
  // the 16-byte pieces it copied itself (visible to it once its cp.async copies completed), so one
  // barrier publishes the queries, the flags, s_next and s_block0.
  CpAsyncWaitAll();
  for (std::uint32_t i = tid; i < kRows * D / 4; i += blockDim.x) {
    const float4 v = *reinterpret_cast<const float4*>(qsm + QIndex(i / (D / 4), i % (D / 4) * 4));
    if (!(isfinite(v.x) && isfinite(v.y) && isfinite(v.z) && isfinite(v.w))) {
      atomicOr(&s_bad_rows, 1u << (i / (D / 4)));
    }
  }
  __syncthreads();
  if (s_bad_rows != 0) {
    for (std::uint32_t i = tid; i < kRows * D / 4; i += blockDim.x) {
      if ((s_bad_rows >> (i / (D / 4))) & 1u) {
        *reinterpret_cast<float4*>(qsm + QIndex(i / (D / 4), i % (D / 4) * 4)) =
            make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
    __syncthreads();
  }

  WarpState<MTW> ws;
  ws.m = -INFINITY;
  ws.lsum = 0.0f;
#pragma unroll
  for (std::uint32_t mt = 0; mt < MTW; ++mt) {
    ws.acc[mt][0] = ws.acc[mt][1] = ws.acc[mt][2] = ws.acc[mt][3] = 0.0f;
  }

  std::uint32_t phases = 0;  // bit k: parity of stage k's next mbarrier phase
  for (std::uint32_t k = 0;; k ^= 1u) {
    const std::uint32_t u = k == 0 ? unit[0] : unit[1];
    if (u == kNoUnit) {
      if ((k == 0 ? unit[1] : unit[0]) == kNoUnit) break;
      continue;
    }
    MbarWait(bar0 + 8 * k, (phases >> k) & 1u);
    phases ^= 1u << k;
    const std::uint32_t pos0 = lay.sinks + u * kP;
    std::uint8_t* stage = wbase + k * G::kStageBytes;
    std::uint32_t next = 0;
    if constexpr (kTwin) {
      // The even warp claims the next block now; the odd one reads the claim after the score
      // exchange's barrier, and the stage is refilled once both passed the barrier below.
      if (issuer) s_claim[worker] = atomicAdd(&s_next, 1u);
      ProcessBlock<D, false, true>(stage, vtab, qsm, ws, p.scale_log2, pos0, row_limit, tw);
      next = s_claim[worker];
      TwinSync(worker);
    } else {
      if (pos0 + kP - 1 > min_limit) {
        ProcessBlock<D, true, false>(stage, vtab, qsm, ws, p.scale_log2, pos0, row_limit, tw);
      } else {
        ProcessBlock<D, false, false>(stage, vtab, qsm, ws, p.scale_log2, pos0, row_limit, tw);
      }
      __syncwarp();
      if (lane == 0) next = atomicAdd(&s_next, 1u);
      next = __shfl_sync(kFull, next, 0);
    }
    if (next < qe) {
      const BlockSrc src = p.page_blocks == 0
                               ? ContiguousBlock<D>(s_block0, next)
                               : LocateBlock<D>(p, seq, lay, seq_index, kvh, next, issuer);
      if (issuer) IssueBlock<D>(src, stage, bar0 + 8 * k);
    }
    if (k == 0) {
      unit[0] = next < qe ? next : kNoUnit;
    } else {
      unit[1] = next < qe ? next : kNoUnit;
    }
  }
  // The split's unquantized tokens [t0, t1) are dealt to the workers in pieces of 8 (one round of
  // StageTailRows: one memory round trip for K, one for V), round-robin: a decode step's tail (up
  // to 63 tokens, 8 pieces) is spread over the workers instead of costing one worker eight K and
  // eight V round trips in a row (docs/hack-gpu.md, "Unquantized units").
  if (ue > nb) {
    const std::uint32_t t0 = (max(ub, nb) - nb) * kP, t1 = min((ue - nb) * kP, u_vis);
    for (std::uint32_t u0 = t0 + kTailPiece * worker; u0 < t1; u0 += kTailPiece * workers) {
      ProcessUnquantized<D, MTW>(p, lay, seq.tail, kvh, u0, min(u0 + kTailPiece, t1), wown, qsm, ws,
                                 half * MTW, row_limit);
    }
  }
  ws.lsum = QuadSum(ws.lsum);
  if (issuer) {  // every issued copy has been waited for; the memory is reused below
    MbarInval(bar0);
    MbarInval(bar0 + 8);
  }

  // CTA merge of the workers. Each warp writes its accumulator [8][D] (a twin's warp: its half of
  // the dims) into its own stages, which no other warp reads once it has left its block loop, and
  // its row maxima and normalisers to s_wm / s_wl (a twin's even warp); one barrier, then every
  // thread sums four dims of a row at a time over the workers, with the row's weights
  // 2^(m_w - M) (0 for a worker that saw no key of the row) and normaliser computed by the thread
  // itself (every thread of the row computes the same values, in the same order).
  __shared__ float s_wm[kMaxWarps][kRows];
  __shared__ float s_wl[kMaxWarps][kRows];
  if (tq == 0 && half == 0) {
    s_wm[worker][g] = ws.m;
    s_wl[worker][g] = ws.lsum;
  }
  float* wacc = reinterpret_cast<float*>(wown);
#pragma unroll
  for (std::uint32_t mt = 0; mt < MTW; ++mt) {
    const std::uint32_t d0 = 16 * (half * MTW + mt) + g, d1 = d0 + 8;
    wacc[(2 * tq) * D + d0] = ws.acc[mt][0];
    wacc[(2 * tq + 1) * D + d0] = ws.acc[mt][1];
    wacc[(2 * tq) * D + d1] = ws.acc[mt][2];
    wacc[(2 * tq + 1) * D + d1] = ws.acc[mt][3];
  }
  __syncthreads();

  // Output dims d .. d + 3 of row r (a / L; NaN for a row with a non-finite query) and, with d = 0,
  // the row's log-sum-exp.
  auto write_out = [&](std::uint32_t r, std::uint32_t d, float4 a, float M, float L) {
    if (r >= q_count * p.group) return;  // not a row of the tile
    const std::uint64_t row =
        (std::uint64_t{q_first + r / p.group} * p.q_heads + kvh * p.group + r % p.group) * D;
    const bool nan = ((s_bad_rows >> r) & 1u) != 0;
    IoT* o = static_cast<IoT*>(p.out) + row + d;
    o[0] = FloatToIo<IoT>(nan ? NAN : a.x / L);
    o[1] = FloatToIo<IoT>(nan ? NAN : a.y / L);
    o[2] = FloatToIo<IoT>(nan ? NAN : a.z / L);
    o[3] = FloatToIo<IoT>(nan ? NAN : a.w / L);
    if (d == 0 && p.lse != nullptr) {
      p.lse[row / D] = nan ? NAN : (M + log2f(L)) * 0.69314718055994531f;
    }
  };
  // Sum of four dims over the warps (or, below, the splits): a += weight * x, in order.
  auto accumulate = [](float4& a, float weight, float4 x) {
    a.x = fmaf(x.x, weight, a.x);
    a.y = fmaf(x.y, weight, a.y);
    a.z = fmaf(x.z, weight, a.z);
    a.w = fmaf(x.w, weight, a.w);
  };

  // Split partial: [slot] = accumulator [8][D], then the 8 maxima, then the 8 normalisers.
  constexpr std::uint32_t kSlot = kRows * (D + 2);
  float* part = p.partials + (std::uint64_t{pair} * p.splits + split) * kSlot;
  for (std::uint32_t i = tid; i < kRows * D / 4; i += blockDim.x) {
    const std::uint32_t r = i / (D / 4), d = i % (D / 4) * 4;
    float M = -INFINITY;
    for (std::uint32_t w = 0; w < workers; ++w) M = fmaxf(M, s_wm[w][r]);
    float L = 0.0f;
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (std::uint32_t w = 0; w < workers; ++w) {
      const float weight = M == -INFINITY ? 0.0f : Exp2(s_wm[w][r] - M);
      L += s_wl[w][r] * weight;
      const std::uint32_t wp = kTwin ? 2 * w + (d >= D / 2 ? 1u : 0u) : w;  // the dims' warp
      accumulate(a, weight,
                 *reinterpret_cast<const float4*>(smem + wp * G::kWarpBytes + (r * D + d) * 4));
    }
    if (p.splits == 1) {
      write_out(r, d, a, M, L);
    } else {
      __stcg(reinterpret_cast<float4*>(part + r * D + d), a);
      if (d == 0) {
        __stcg(part + kRows * D + r, M);
        __stcg(part + kRows * D + kRows + r, L);
      }
    }
  }
  if (p.splits == 1) return;
  // Arrival: the CTA's partial stores happen before thread 0's fence and atomic (the barrier), and
  // the last CTA's thread 0 fences again after its arrival, before the barrier that orders its
  // threads' loads (the pattern of cooperative groups' grid sync).
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    s_last = atomicAdd(p.counters + pair, 1u) == p.splits - 1 ? 1u : 0u;
    if (s_last != 0) __threadfence();
  }
  __syncthreads();
  if (s_last == 0) return;

  // The last split to arrive merges all of them: row r's thread turns the splits' maxima into
  // weights as above, then the loads of one element's splits are independent, so many are in
  // flight at once (this merge is on the critical path of every split launch).
  const float* parts = p.partials + std::uint64_t{pair} * p.splits * kSlot;
  for (std::uint32_t i = tid; i < p.splits * kRows; i += blockDim.x) {
    const std::uint32_t sp = i / kRows, r = i % kRows;
    s_m[sp][r] = __ldcg(parts + sp * kSlot + kRows * D + r);
    s_l[sp][r] = __ldcg(parts + sp * kSlot + kRows * D + kRows + r);
  }
  __syncthreads();
  if (tid < kRows) {
    float M = -INFINITY;
    for (std::uint32_t sp = 0; sp < p.splits; ++sp) M = fmaxf(M, s_m[sp][tid]);
    float L = 0.0f;
    for (std::uint32_t sp = 0; sp < p.splits; ++sp) {
      const float m = s_m[sp][tid];
      const float weight = m == -INFINITY || M == -INFINITY ? 0.0f : Exp2(m - M);
      s_m[sp][tid] = weight;
      L += s_l[sp][tid] * weight;
    }
    s_row_m[tid] = M;
    s_row_l[tid] = L;
  }
  __syncthreads();
  for (std::uint32_t i = tid; i < kRows * D / 4; i += blockDim.x) {
    const std::uint32_t r = i / (D / 4), d = i % (D / 4) * 4;
    const float* src = parts + r * D + d;
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 16
    for (std::uint32_t sp = 0; sp < p.splits; ++sp) {
      accumulate(a, s_m[sp][r], __ldcg(reinterpret_cast<const float4*>(src + sp * kSlot)));
    }
    write_out(r, d, a, s_row_m[r], s_row_l[r]);
  }
  if (tid == 0) p.counters[pair] = 0;  // ready for the next launch
}

// ---- launcher ----

// Shared-memory opt-in per kernel: [head_dim 64, 128, 128 with twin warps][kIoIndex].
std::atomic<std::size_t> g_attn_smem[3][kIoTypes][kMaxDevices];

}  // namespace

template <int HeadDim>
std::size_t HackAttentionSharedBytes(std::uint32_t warps) {
  return std::size_t{warps} * Geo<HeadDim>::kWarpBytes + kRows * HeadDim * sizeof(float);
}

template <int HeadDim>
cudaError_t LaunchHackAttention(const HackAttentionParams& params, cudaStream_t stream) {
  static_assert(HeadDim == 64 || HeadDim == 128);
  const std::size_t smem = HackAttentionSharedBytes<HeadDim>(params.warps);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(params.tiles * params.kv_heads * params.splits);
  config.blockDim = dim3(params.warps * 32);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  // Decode: programmatic dependent launch. A call launched right after another (an engine's layer
  // loop, a CUDA graph of them) is placed on the SMs while the previous one's last CTAs merge,
  // and starts when it completes (the kernel waits before touching memory), which hides the
  // launch gap. Prefill launches as before.
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (params.prefill == 0) {
    config.attrs = &attr;
    config.numAttrs = 1;
  }
  auto launch = [&](auto kernel, std::atomic<std::size_t>(&configured)[kMaxDevices]) {
    const cudaError_t err =
        ConfigureSharedMemory(kernel, HackAttentionSharedBytes<HeadDim>(kMaxWarps), configured);
    return err != cudaSuccess ? err : cudaLaunchKernelEx(&config, kernel, params);
  };
  return DispatchIo(params.io_dtype, [&](auto tag) {
    using IoT = typename decltype(tag)::type;
    constexpr int io = kIoIndex<IoT>;
    if constexpr (HeadDim == 128) {
      if (params.twin_warps != 0)
        return launch(HackAttentionKernel<128, true, IoT>, g_attn_smem[2][io]);
    }
    return launch(HackAttentionKernel<HeadDim, false, IoT>, g_attn_smem[HeadDim == 64 ? 0 : 1][io]);
  });
}

template cudaError_t LaunchHackAttention<64>(const HackAttentionParams&, cudaStream_t);
template cudaError_t LaunchHackAttention<128>(const HackAttentionParams&, cudaStream_t);
template std::size_t HackAttentionSharedBytes<64>(std::uint32_t);
template std::size_t HackAttentionSharedBytes<128>(std::uint32_t);
}  // namespace kvdepot::cuda
