// Kernel family "hack", decode over the dequantized KV (see kvdepot/cuda/hack.h, HackDecodeMath::
// kDequantFp16; docs/hack-gpu.md, "Decode attention: the fp16 path"): decode attention over
// hack-int2 KV on fp16 tensor cores (mma.sync m16n8k16, fp32 accumulation) with the blocks'
// (scale, min) pairs folded out of the per-code work. It computes attention over the dequantized
// KV — not HACK's homomorphic INT8 math — so its reference is kvdepot::DecodeAttention over
// kvdepot::DequantizeHack (tolerance at kHackDequantDecodeRelL2Tolerance in hack.h).
//
// The math, per 64-token block and query head h (K_td = min_d + code_td scale_d, likewise V):
//   S_t = sum_d q_d K_td = sum_d q_d min_d + sum_d (q_d scale_d) code_td
//   O_c = sum_t p_t V_tc = min_c sum_t p_t + scale_c sum_t p_t code_tc
// so a code is never dequantized: it enters the tensor core as itself. A code pair (j, j + 8) of a
// 16-code word becomes an fp16 pair with one LOP3 (the word shifted right by 10 once for j >= 5):
// the code in mantissa bits 2 k, 2 k + 1 of a zero exponent, the subnormal code * 4^k * 2^-24
// (k = j for j < 5, j - 5 above; tensor cores take fp16 subnormals exactly). The 4^-k and 2^-24
// go elsewhere:
//   * Q Kᵀ as Sᵀ = K Q''ᵀ (A = the codes, keys as rows; B = Q'' = q̂ ⊙ scale 2^n per block, one
//     HMUL2 per pair), where q̂_d = q_d * softmax_scale * log2(e) * 2^(14 - a_h) * 4^-k(d) is fixed
//     per call (2^-a_h, a power of two per query head, brings max |q̂| to [2^12, 2^13)) and 2^n
//     per block brings the block's largest K scale to [1, 2): Q'' < 2^15 whatever q and the
//     scales, and far from fp16's subnormals. S = 2^(a_h + 10 - n) acc + bias, where bias =
//     2^a_h sum_d (q_d * softmax_scale * log2(e) 2^-a_h) min_d is one more MMA per k-step (A =
//     the mins, B = that).
//   * O += P V as Oᵀ = Vᵀ Pᵀ (A = the V codes, channels as rows; B = Pᵀ): P's rows (keys) are
//     multiplied by 2^(8 - 2 k(key)) when packed (an exact HMUL2 by a constant), so the product is
//     2^-16 sum_t p_t code_tc for every key; per block and channel O' = O' corr + scale_c * that +
//     min_c * 2^-16 sum_t p_t, with O' = O / 2^16 (put back when the output is normalised). That
//     2^-16 sum_t p_t, and the softmax normaliser, come from 4 more MMAs against codes that are all
//     1 (constant A fragments), not from a shuffle reduction.
//   * Pᵀ comes from Sᵀ's accumulators by movmatrix (the key order of the S rows is V's word
//     order: S m-tile mt row g is key 8 g + 2 mt, row g + 8 key 8 g + 2 mt + 1).
//
// Work decomposition. A CTA owns (sequence, KV head, split) with the homomorphic decode kernel's
// grid sizing and split merge; its W warps take the split's units (64-token blocks, then runs of
// up to kRunKeys = 8 unquantized sink / tail tokens) round-robin — a split is a contiguous range
// of the sequence's units, or, in the split 12-warp kernel, every S-th unit (S splits) — each warp
// with its own online-softmax state (lane (g, tq): query heads 2 tq, 2 tq + 1), and the warps merge
// in shared memory. Each warp streams its blocks through a ring of kStages shared-memory stages
// with cp.async (a block's 5,440 bytes at head_dim 128 copied kStages - 1 blocks ahead), laid out
// so that the fragment loads are free of bank conflicts. An unquantized run is read from global
// memory straight into MMA fragments (all its loads in flight at once); bf16 runs are scaled by a
// power of two as they are rounded to fp16. Calls follow each other by programmatic dependent
// launch; in calls on at most 8 warps and in those of split sequences (short calls, where the
// first blocks' latency and the call's end weigh most), the kernel asks L2 for its first blocks
// before it waits for the previous call, and lets the next call launch once it has waited, so that
// the next call's prefetch overlaps this call's end.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "fast_exp2.cuh"
#include "hack_attention_shared.h"
#include "io_element.cuh"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/cuda/hack.h"
#include "launch.h"
#include "mma_sync.cuh"

namespace kvdepot::cuda {

namespace {

using internal::ConfigureSharedMemory;
using internal::DispatchIo;
using internal::Exp2;
using internal::FloatToIo;
using internal::IoToFloat;
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
using internal::LoadIo;
using internal::MmaF16;

// Unquantized sink / tail tokens are attended in runs of up to kRunKeys (a unit of work): 8 or 16
// (the MMA's 16 rows; a 16-key run's fragments spill registers at head_dim 128, and 8-key runs
// spread a decode step's tail over twice the warps).
constexpr std::uint32_t kRunKeys = 8;
// The CTA merge's rows of O' in shared memory are D + kMergePad floats apart: a lane's fragment
// stores (rows 2 tq, 2 tq + 1; channels 16 mt + g, + 8) then fall in 32 distinct banks, where rows
// D apart put the four tq in one bank (4-way conflicts on 32 stores per lane).
constexpr std::uint32_t kMergePad = 4;
// Shared-memory stages per warp: a block is copied kStages - 1 blocks ahead of the one computed.
constexpr std::uint32_t kStages = 3;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ void ReportError(const HackAttentionParams& p, std::uint32_t seq,
                                            std::uint32_t kind) {
  atomicMin(p.error, (static_cast<unsigned long long>(seq) << 8) | kind);
}
__device__ __forceinline__ bool Aligned16(const void* ptr) {
  return (reinterpret_cast<std::uintptr_t>(ptr) & 15u) == 0;
}
__device__ __forceinline__ __half2 AsHalf2(std::uint32_t u) {
  return *reinterpret_cast<const __half2*>(&u);
}
__device__ __forceinline__ std::uint32_t AsU32(__half2 h) {
  return *reinterpret_cast<const std::uint32_t*>(&h);
}
__device__ __forceinline__ std::uint32_t PackHalf2(float lo, float hi) {
  return AsU32(__floats2half2_rn(lo, hi));
}
// The power of four a code pair j (0..7) carries: pairs 0..4 are read in place, 5..7 from the
// word shifted right by 10.
__device__ __forceinline__ constexpr std::uint32_t PairShift(std::uint32_t j) {
  return j < 5u ? j : j - 5u;
}
// Codes j and j + 8 of a 16-code word x (bits 2 j and 2 j + 16; x10 = x >> 10) as the fp16
// subnormal pair code * 4^PairShift(j) * 2^-24: one LOP3 (j is a constant once unrolled).
__device__ __forceinline__ std::uint32_t CodePair(std::uint32_t x, std::uint32_t x10,
                                                  std::uint32_t j) {
  return (j < 5u ? x : x10) & (0x00030003u << (2u * PairShift(j)));
}
// 2^n (n in -14..15) in both halves.
__device__ __forceinline__ __half2 Pow2Half2(int n) {
  return AsHalf2(static_cast<std::uint32_t>((n + 15) << 10) * 0x10001u);
}
// 2^n as a float, n clamped to the normal range (the query exponents of real values are far
// inside it).
__device__ __forceinline__ float Pow2(int n) {
  return __uint_as_float(static_cast<std::uint32_t>(max(-126, min(127, n)) + 127) << 23);
}
// movmatrix: the transpose of an 8 x 8 fp16 tile held as one row pair per lane.
__device__ __forceinline__ std::uint32_t Transpose(std::uint32_t x) {
  std::uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ void PrefetchL2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}
__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  const auto s = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A block's shared-memory stage. K codes: key r's D / 4 bytes at row (r / 8) * 9 + r % 8 (a
// padding row after every 8: the 8 keys a fragment load reads, 8 g + nt for g = 0..7, fall in
// different banks); V codes as stored (channel c's 16 bytes at 16 c: lanes read word tq of
// channels 16 mt + 8 h + g, all banks distinct); K (scale, min) words in 4 rows of D / 4 (lane tq
// reads row tq), each row padded by 16 bytes; V (scale, min) words as stored.
template <int D>
struct Geo16 {
  static constexpr std::uint32_t kKWords = D / 64;  // K code words per lane and key
  static constexpr std::uint32_t kKc = D / 16;      // k-steps of Sᵀ = K Q''ᵀ
  static constexpr std::uint32_t kMt = D / 16;      // channel m-tiles of Oᵀ = Vᵀ Pᵀ
  static constexpr std::uint32_t kKRow = D / 4;     // bytes of one key's codes
  static constexpr std::uint32_t kCodeBytes = kP * D / 4;
  static constexpr std::uint32_t kKOff = 0;
  static constexpr std::uint32_t kVOff = 8u * 9u * kKRow;
  static constexpr std::uint32_t kKsOff = kVOff + kCodeBytes;
  static constexpr std::uint32_t kKsRow = D + 16u;
  static constexpr std::uint32_t kVsOff = kKsOff + 4u * kKsRow;
  static constexpr std::uint32_t kStageBytes = kVsOff + 4u * D;
  static_assert(kStageBytes % 16 == 0);
};

// Before the kernel's dependency wait, so while the previous call may still run (and may be
// writing what is read here): warp `warp` reads its sequence's descriptor as it stands (through
// L2 only, so that the reads after the wait do not find it in L1), finds its units as the kernel
// does after the wait (kStrided: the split kernel's deal), and asks L2 for the sections of its
// first kStages - 1 blocks (what its first copies read) and for its unquantized runs' rows. A hint
// only: nothing is written, nothing read here is used after the wait, a page outside the pool is
// skipped, and a prefetch of a stale or unmapped address does not fault (as the homomorphic
// kernel's PrefetchFirstBlocks; docs/hack-gpu.md). The kernel computes the same after the wait
// inline: sharing this code there made the 128K batch-1 call 1% slower (ptxas' allocation at 168
// registers; H200, session 25).
template <int D, bool kStrided>
__device__ __forceinline__ void PrefetchFirstUnits(const HackAttentionParams& p,
                                                   std::uint32_t seq_index, std::uint32_t kvh,
                                                   std::uint32_t split, std::uint32_t warp,
                                                   std::uint32_t W) {
  using G = Geo16<D>;
  const std::uint32_t lane = threadIdx.x & 31u;
  const HackAttentionSeq* sp = p.seqs + seq_index;
  const std::uint32_t tokens = __ldcg(&sp->tokens), sinks = __ldcg(&sp->sinks);
  if (tokens == 0 || tokens > p.max_tokens || sinks > tokens) return;
  auto pointer = [](const void* field) {
    return reinterpret_cast<const std::uint8_t*>(
        __ldcg(reinterpret_cast<const unsigned long long*>(field)));
  };
  hack::Layout lay;
  lay.layers = p.layers;
  lay.tokens = p.page_blocks == 0 ? tokens : p.page_blocks * kP;  // the sections' layout
  lay.heads = p.kv_heads;
  lay.dim = D;
  lay.partition = kP;
  lay.sinks = p.page_blocks == 0 ? sinks : 0;
  lay.orientation = hack::kOrientChannel;
  const std::uint64_t k_codes0 = lay.group(p.layer, 0, kvh, 0) * G::kCodeBytes;
  const std::uint64_t v_codes0 = lay.group(p.layer, 1, kvh, 0) * G::kCodeBytes;
  const std::uint64_t k_scales0 = lay.partition_base(p.layer, 0, kvh, 0) * 4u;
  const std::uint64_t v_scales0 = lay.partition_base(p.layer, 1, kvh, 0) * 4u;
  const std::uint32_t nb = (tokens - sinks) / kP, nu = tokens - nb * kP;
  const std::uint32_t units = nb + (nu + kRunKeys - 1) / kRunKeys;
  const std::uint32_t per_split = (units + p.splits - 1) / p.splits;
  const std::uint32_t ub = min(units, split * per_split);
  const std::uint32_t ue = min(units, ub + per_split), qe = min(ue, nb);
  const std::uint32_t first = kStrided ? split + p.splits * warp : ub + warp;
  const std::uint32_t stride = kStrided ? p.splits * W : W;
  const std::uint32_t end = kStrided ? units : ue, qend = kStrided ? nb : qe;
  const std::uint32_t blocks = first < qend ? (qend - first + stride - 1) / stride : 0;
  const std::uint8_t* codes = p.page_blocks == 0 ? pointer(&sp->codes) : nullptr;
  const std::uint8_t* scales = p.page_blocks == 0 ? pointer(&sp->scales) : nullptr;
  constexpr std::uint32_t kCodeLines = G::kCodeBytes / 128, kScaleLines = D * 4 / 128;
  for (std::uint32_t i = 0; i < blocks && i + 1 < kStages; ++i) {
    const std::uint32_t j = first + i * stride;
    const std::uint8_t* c = codes + std::uint64_t{j} * G::kCodeBytes;
    const std::uint8_t* s = scales + std::uint64_t{j} * D * 4u;
    if (p.page_blocks != 0) {
      const std::uint32_t entry = j / p.page_blocks, slot = j % p.page_blocks;
      if (entry >= p.max_pages_per_seq) break;
      const std::int32_t page =
          __ldcg(p.block_tables + std::uint64_t{seq_index} * p.max_pages_per_seq + entry);
      if (page < 0 || static_cast<std::uint32_t>(page) >= p.num_pages) break;
      c = p.page_codes + static_cast<std::uint64_t>(page) * p.page_codes_bytes +
          std::uint64_t{slot} * G::kCodeBytes;
      s = p.page_scales + static_cast<std::uint64_t>(page) * p.page_scales_bytes +
          std::uint64_t{slot} * D * 4u;
    }
    for (std::uint32_t l = lane; l < 2u * (kCodeLines + kScaleLines); l += 32) {
      const std::uint32_t v = l & 1u, line = l >> 1;  // K (v = 0) or V
      PrefetchL2(line < kCodeLines ? c + (v ? v_codes0 : k_codes0) + 128u * line
                                   : s + (v ? v_scales0 : k_scales0) + 128u * (line - kCodeLines));
    }
  }
  // Run r's rows (K, then V) of this KV head: [layers][K, V][nu][kv_heads][D] 2-byte elements.
  const auto* tail = reinterpret_cast<const std::uint16_t*>(pointer(&sp->tail));
  for (std::uint32_t u = first + blocks * stride; u < end; u += stride) {
    constexpr std::uint32_t kLines = D / 64;  // 128-byte lines of a row
    const std::uint32_t r = u - nb, count = min(kRunKeys, nu - r * kRunKeys);
    for (std::uint32_t i = lane; i < 2u * count * kLines; i += 32) {
      const std::uint32_t c = i / (count * kLines), key = i / kLines % count;
      PrefetchL2(tail +
                 ((std::uint64_t{p.layer} * 2u + c) * nu + r * kRunKeys + key) *
                     (std::uint64_t{p.kv_heads} * D) +
                 std::uint64_t{kvh} * D + 64u * (i % kLines));
    }
  }
}

// A warp's first kStages - 1 blocks (first + i stride, of its `blocks`) into its ring's first
// stages, a commit group each (empty past `blocks`), so that the block loop's waits count them.
template <typename Issue>
__device__ __forceinline__ void IssueFirstBlocks(Issue& issue, std::uint32_t first,
                                                 std::uint32_t blocks, std::uint32_t stride,
                                                 std::uint8_t* ring, std::uint32_t stage_bytes) {
#pragma unroll
  for (std::uint32_t i = 0; i + 1 < kStages; ++i) {
    if (i < blocks) issue(first + i * stride, ring + i * stage_bytes);
    CpAsyncCommit();
  }
}

// IoT: q's and out's element (io_element.cuh). kEarly: the CTA prefetches its first units before
// the dependency wait and lets the next call launch after it (see the wait below). kFewWarps: the
// kernel is launched with at most kHackDecodeFp16FullWarps warps (LaunchHackDecodeFp16), and
// bounded by those it may use 200 registers where the 12-warp bound held it to 168 (H200, session
// 27: 4K batch 1 with a 63-token tail -3%, 4K -1%, 32K -0.7%; 4K batch 16 +1%). Three
// instantiations run: few warps and early (split sequences of up to 128 blocks per split: 128K at
// batch 1; whole sequences of up to 256: batch 16 up to 16K), many warps and early (split
// sequences of more blocks per split: longer than 128K at batch 1), many warps and not early
// (longer whole sequences: batch 16 from 32K). The second is its own kernel because a run-time
// choice inside the third cost batch 16 1% (its registers; session 29, `late-prefetch-when-split`).
constexpr std::uint32_t MaxThreads(bool few_warps) {
  return 32 * (few_warps ? kHackDecodeFp16FullWarps : kHackDecodeFp16MaxWarps);
}
template <int D, typename IoT, bool kEarly, bool kFewWarps>
__global__ void __launch_bounds__(MaxThreads(kFewWarps), 1)
    HackDecodeFp16Kernel(const __grid_constant__ HackAttentionParams p) {
  using G = Geo16<D>;
  extern __shared__ __align__(16) std::uint8_t smem[];
  __shared__ float s_m[kMaxSplits][kRows];
  __shared__ float s_l[kMaxSplits][kRows];
  __shared__ std::uint32_t s_last;
  // The query's B fragments per k-step and lane, {qh0, qh1, b1_0, b1_1} below (qh, b1: pairs of
  // k-step ks), the same for every warp: warp 0 writes them, the blocks read them (in registers
  // they held 32 of the 12-warp kernel's 168; H200, session 26, with attend_block's scale words
  // read per pair of k-steps and their maximum by one reduction: 4K batch 16 -3 to -4%, 128K batch
  // 1 -1%, the rest level, once the query is asked for first; without that, slower).
  __shared__ uint4 s_qfrag[G::kKc][32];

  const std::uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
  const std::uint32_t g = lane >> 2, tq = lane & 3u;
  const std::uint32_t W = blockDim.x >> 5;
  std::uint32_t cta = blockIdx.x;
  const std::uint32_t split = cta % p.splits;
  cta /= p.splits;
  const std::uint32_t kvh = cta % p.kv_heads;
  const std::uint32_t seq_index = cta / p.kv_heads;
  const std::uint32_t pair = seq_index * p.kv_heads + kvh;
  // Programmatic dependent launch (see LaunchHackDecodeFp16): nothing in global memory is read or
  // written before the grid this one depends on has completed. kEarly CTAs first ask L2 for their
  // first units (hints only), and after the wait let the next call launch, so that its CTAs
  // prefetch while this call's finish.
  // The split 12-warp kernel (early, many warps) deals units to its splits strided (see `first`
  // below) and asks for its first block alone (see kOneFirst).
  constexpr bool kSplitKernel = kEarly && !kFewWarps;
  constexpr bool kStrided = kSplitKernel;
  if constexpr (kEarly) PrefetchFirstUnits<D, kStrided>(p, seq_index, kvh, split, warp, W);
  internal::GridDependencyWait();
  if constexpr (kEarly) internal::GridDependencyLaunchDependents();
  const HackAttentionSeq seq = p.seqs[seq_index];

  // The sequence's layout; a bad descriptor gives no work (NaN outputs) and an error.
  std::uint32_t bad_kind = 0;
  if (seq.tokens == 0 || seq.tokens > p.max_tokens) {
    bad_kind = kErrTokens;
  } else if (seq.sinks > seq.tokens) {
    bad_kind = kErrSinks;
  }
  hack::Layout lay;
  lay.layers = p.layers;
  lay.tokens = bad_kind == 0 ? seq.tokens : 0;
  lay.heads = p.kv_heads;
  lay.dim = D;
  lay.partition = kP;
  lay.sinks = bad_kind == 0 ? seq.sinks : 0;
  lay.orientation = hack::kOrientChannel;
  if (bad_kind == 0 && lay.blocks() > 0 && p.page_blocks == 0 &&
      (seq.codes == nullptr || seq.scales == nullptr || !Aligned16(seq.codes) ||
       !Aligned16(seq.scales))) {
    bad_kind = kErrSection;
  }
  const std::uint32_t unquantized = lay.unquantized_tokens();
  if (bad_kind == 0 && unquantized > 0 && (seq.tail == nullptr || !Aligned16(seq.tail))) {
    bad_kind = kErrTail;
  }
  if (bad_kind != 0) {
    if (tid == 0 && kvh == 0 && split == 0) ReportError(p, seq_index, bad_kind);
    lay.tokens = 0;
    lay.sinks = 0;
  }
  const std::uint32_t nb = bad_kind == 0 ? lay.blocks() : 0;
  const std::uint32_t nu = bad_kind == 0 ? unquantized : 0;
  const std::uint32_t units = nb + (nu + kRunKeys - 1) / kRunKeys;
  // Splits share this sequence's units evenly (its units, not the grid's estimate): a contiguous
  // range [ub, ue) each, or every S-th unit in the split 12-warp kernel (kStrided below).
  const std::uint32_t per_split = (units + p.splits - 1) / p.splits;
  const std::uint32_t ub = min(units, split * per_split);
  const std::uint32_t ue = min(units, ub + per_split);
  const std::uint32_t qe = min(ue, nb);

  // Block j's sections. Contiguous: consecutive blocks of a (layer, K|V, head) are consecutive
  // groups; paged: slot j % page_blocks of page block_tables[seq][j / page_blocks].
  hack::Layout base_lay = lay;
  if (p.page_blocks != 0) {
    base_lay.tokens = p.page_blocks * kP;
    base_lay.sinks = 0;
  }
  const std::uint64_t k_codes0 = base_lay.group(p.layer, 0, kvh, 0) * G::kCodeBytes;
  const std::uint64_t v_codes0 = base_lay.group(p.layer, 1, kvh, 0) * G::kCodeBytes;
  const std::uint64_t k_scales0 = base_lay.partition_base(p.layer, 0, kvh, 0) * 4u;
  const std::uint64_t v_scales0 = base_lay.partition_base(p.layer, 1, kvh, 0) * 4u;
  struct Src {
    const std::uint8_t* codes;
    const std::uint8_t* scales;
  };
  auto locate = [&](std::uint32_t j) -> Src {
    if (p.page_blocks == 0) {
      return {seq.codes + std::uint64_t{j} * G::kCodeBytes, seq.scales + std::uint64_t{j} * D * 4u};
    }
    const std::uint32_t entry = j / p.page_blocks;
    std::int32_t page =
        entry < p.max_pages_per_seq
            ? __ldg(p.block_tables + std::uint64_t{seq_index} * p.max_pages_per_seq + entry)
            : -1;
    if (page < 0 || static_cast<std::uint32_t>(page) >= p.num_pages) {
      if (lane == 0) ReportError(p, seq_index, kErrPage);
      page = 0;  // stays in bounds; the call reports the error
    }
    const std::uint32_t slot = j % p.page_blocks;
    return {p.page_codes + static_cast<std::uint64_t>(page) * p.page_codes_bytes +
                std::uint64_t{slot} * G::kCodeBytes,
            p.page_scales + static_cast<std::uint64_t>(page) * p.page_scales_bytes +
                std::uint64_t{slot} * D * 4u};
  };
  // Block j's four sections into `stage` (Geo16's layout): 2.5 D 16-byte copies per warp. Lane
  // copies K code chunk c = lane + 32 i (key c / kKWords) to k_dst + i kKDstStep (32 chunks are
  // 32 / kKWords keys, whole groups of 8 rows, each group 9 rows with its padding), V code chunk c
  // to 16 c, and the (scale, min) chunk `lane`; the sources are 16 c from the sections' starts.
  // (Written so, the copies' addresses are a few bases plus constants: H200, session 26, batch 16
  // -2%. 14 bulk copies per block on an mbarrier instead, lanes 0..13 one each, were 3-10% slower.)
  constexpr std::uint32_t kKDstStep = 32u / G::kKWords / 8u * 9u * G::kKRow;
  const std::uint32_t key0 = lane / G::kKWords;
  const std::uint32_t k_dst =
      G::kKOff + ((key0 >> 3) * 9u + (key0 & 7u)) * G::kKRow + (lane % G::kKWords) * 16u;
  const std::uint32_t ks_dst = G::kKsOff + (lane / (D / 16)) * G::kKsRow + (lane % (D / 16)) * 16u;
  auto issue = [&](std::uint32_t j, std::uint8_t* stage) {
    const Src src = locate(j);
    const std::uint8_t* kc = src.codes + k_codes0 + 16u * lane;
    const std::uint8_t* vc = src.codes + v_codes0 + 16u * lane;
#pragma unroll
    for (std::uint32_t i = 0; i < D / 32; ++i) {
      CpAsync16(stage + k_dst + i * kKDstStep, kc + 512u * i);
      CpAsync16(stage + G::kVOff + 16u * lane + 512u * i, vc + 512u * i);
    }
    if (lane < D / 4) {
      CpAsync16(stage + ks_dst, src.scales + k_scales0 + 16u * lane);
      CpAsync16(stage + G::kVsOff + 16u * lane, src.scales + v_scales0 + 16u * lane);
    }
  };

  // The query is asked for first, ahead of the blocks' copies (behind them it waited for them:
  // H200, session 26, 128K batch 1 -6%); 16-bit queries by 16-byte loads (q is 16-byte aligned, as
  // HackDecodeArgs::q must be, and so are 8 of its dims from a multiple of 8), fp32 ones element by
  // element below (by 16-byte loads ptxas spilled, session 25).
  const bool row = g < p.group && bad_kind == 0;
  constexpr bool kVectorQ = sizeof(IoT) == 2;
  const IoT* qp = static_cast<const IoT*>(p.q) +
                  (std::uint64_t{seq_index} * p.q_heads + kvh * p.group + (row ? g : 0)) * D;
  float qv[D / 4];
  if constexpr (kVectorQ) LoadIo<D / 4>(qp + tq * (D / 4), row, qv);

  // The warp's blocks (units below nb) go through its stage ring, the first kStages - 1 asked for
  // before the loop. A kEarly CTA asks for them before it prepares the query (they are in L2 by
  // then, asked for before the wait: the two latencies overlap); the others after (the query is
  // then not served behind every warp's first copies from HBM; H200, session 29: 128K batch 1
  // -1.9%, batch 16 level; the kEarly kernel so was 3.6-5.5% slower at 4K and 32K).
  std::uint8_t* ring = smem + std::size_t{warp} * kStages * G::kStageBytes;
  // The warp's units are first + k stride. The split 12-warp kernel (beyond 128K at batch 1) deals
  // a sequence's units to its S splits strided (split s: units s + k S; its warp w those of them
  // with k = w + i W), so that at each step the S CTAs of a KV head read neighbouring blocks rather
  // than S ranges far apart (H100, session 37, 128K batch 1 -1.0 to -1.1%); the others take a
  // contiguous range per split (the few-warp kernel's splits are short, the whole-sequence kernel
  // has one).
  const std::uint32_t first = kStrided ? split + p.splits * warp : ub + warp;
  const std::uint32_t stride = kStrided ? p.splits * W : W;
  const std::uint32_t end = kStrided ? units : ue, qend = kStrided ? nb : qe;
  const std::uint32_t blocks = first < qend ? (qend - first + stride - 1) / stride : 0;
  // The 12-warp kernel of split sequences (beyond 128K at batch 1) asks here for its first block
  // only, and for the second beside the third once the first has landed: every warp's first block
  // then is not served behind the others' second blocks (after the dependency wait all 128 CTAs ask
  // at once; H200, session 36: 128K batch 1 -3.4 to -3.9%). The few-warp kernel asks for both: its
  // warps have one to four blocks up to 32K, and the same there was 1.5-3.6% slower at 4K batch 1
  // and 16; for warps of 12 blocks or more (128K batch 1, batch 16 at 6K-16K, since session 38 on
  // this kernel) +0.5 to +1.4% at 128K batch 1 (H100, session 38, `few-one-first`).
  constexpr bool kOneFirst = kSplitKernel;
  if constexpr (kOneFirst) {
    if (blocks > 0) issue(first, ring);
    CpAsyncCommit();
  } else if constexpr (kEarly) {
    IssueFirstBlocks(issue, first, blocks, stride, ring, G::kStageBytes);
  }

  // The warp's unquantized runs (after its blocks): their rows are asked into L2 now (kEarly: were,
  // before the wait).
  const auto* tail = static_cast<const std::uint16_t*>(seq.tail);
  auto run_row = [&](std::uint32_t r, std::uint32_t c, std::uint32_t key) {  // K (c = 0) or V
    return tail +
           ((std::uint64_t{p.layer} * 2u + c) * unquantized + r * kRunKeys + key) *
               (std::uint64_t{p.kv_heads} * D) +
           std::uint64_t{kvh} * D;
  };
  for (std::uint32_t u = first + blocks * stride; !kEarly && u < end; u += stride) {
    constexpr std::uint32_t kLines = D / 64;  // 128-byte lines of a row
    const std::uint32_t r = u - nb, count = min(kRunKeys, nu - r * kRunKeys);
    for (std::uint32_t i = lane; i < 2u * count * kLines; i += 32) {
      PrefetchL2(run_row(r, i / (count * kLines), i / kLines % count) + 64u * (i % kLines));
    }
  }

  // The query, fixed per call. Lane (g, tq) holds head g's dims of k-step ks: d, d + 8 (b0) and
  // d + 1, d + 9 (b1), d = tq D/4 + 16 (ks / 4) + 2 (ks % 4), i.e. code pairs 2 (ks % 4) and
  // 2 (ks % 4) + 1 of the lane's word ks / 4, in units of softmax_scale * log2(e) * 2^-a_g with
  // max |.| of the head in [1/4, 1/2): b1 as they are (the mins' and the unquantized keys' B), qh
  // times 2^14 * 4^-PairShift (the B that a block's normalised K scales multiply); to s_qfrag.
  int ah[2];    // heads 2 tq, 2 tq + 1: their exponents a
  float sb[2];  // and 2^a
  int a = 0;    // head g's exponent
  {
    float qf[G::kKc][4];
    float qmax = 0.0f;
#pragma unroll
    for (std::uint32_t ks = 0; ks < G::kKc; ++ks) {
      const std::uint32_t d = tq * (D / 4) + (ks >> 2) * 16u + 2u * (ks & 3u);
      const std::uint32_t dims[4] = {d, d + 8u, d + 1u, d + 9u};
#pragma unroll
      for (std::uint32_t i = 0; i < 4; ++i) {
        if constexpr (kVectorQ) {
          qf[ks][i] = qv[dims[i] - tq * (D / 4)] * p.scale_log2;
        } else {
          qf[ks][i] = row ? IoToFloat(__ldg(qp + dims[i])) * p.scale_log2 : 0.0f;
        }
        qmax = fmaxf(qmax, fabsf(qf[ks][i]));
      }
    }
    qmax = fmaxf(qmax, __shfl_xor_sync(kFull, qmax, 1));
    qmax = fmaxf(qmax, __shfl_xor_sync(kFull, qmax, 2));
    if (qmax > 0.0f) {
      frexpf(qmax, &a);  // qmax in [2^(a-1), 2^a)
      ++a;
    }
#pragma unroll
    for (std::uint32_t ks = 0; ks < G::kKc; ++ks) {
      const int k0 = 2 * static_cast<int>(PairShift(2u * (ks & 3u)));
      const int k1 = 2 * static_cast<int>(PairShift(2u * (ks & 3u) + 1u));
      const float f = Pow2(-a), f0 = Pow2(14 - a - k0), f1 = Pow2(14 - a - k1);
      const std::uint32_t b1_0 = PackHalf2(qf[ks][0] * f, qf[ks][1] * f);
      const std::uint32_t b1_1 = PackHalf2(qf[ks][2] * f, qf[ks][3] * f);
      const std::uint32_t qh0 = PackHalf2(qf[ks][0] * f0, qf[ks][1] * f0);
      const std::uint32_t qh1 = PackHalf2(qf[ks][2] * f1, qf[ks][3] * f1);
      if (warp == 0) s_qfrag[ks][lane] = make_uint4(qh0, qh1, b1_0, b1_1);
    }
    // Lanes 8 tq and 8 tq + 4 hold heads 2 tq and 2 tq + 1.
    const int a0 = __shfl_sync(kFull, a, 8u * tq), a1 = __shfl_sync(kFull, a, 8u * tq + 4u);
    ah[0] = a0;
    ah[1] = a1;
    sb[0] = Pow2(a0);
    sb[1] = Pow2(a1);
  }

  // The first copies, after the query (see `ring` above).
  if constexpr (!kEarly) IssueFirstBlocks(issue, first, blocks, stride, ring, G::kStageBytes);
  __syncthreads();  // s_qfrag written

  // O' = O / 2^16: o[mt] = channels 16 mt + g (0, 1) and 16 mt + 8 + g (2, 3) of heads 2 tq (0, 2)
  // and 2 tq + 1 (1, 3). m, l: those heads' running maximum (log2 units) and normaliser.
  float o[G::kMt][4];
#pragma unroll
  for (std::uint32_t i = 0; i < G::kMt; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  // The online softmax of a unit's scores s (Sᵀ m-tiles: row g = key 8 g + 2 mt, row g + 8 = key
  // 8 g + 2 mt + 1; columns heads 2 tq, 2 tq + 1; log2 units, masked keys -inf): m moves on, corr
  // is the factor O' and l take, and pb the Pᵀ B fragments of the unit's 4 key k-steps — with
  // `quantized`, each key's p times 2^(8 - 2 PairShift) (see the file comment), and l is left to
  // the caller (a quantized block sums its p by MMA); otherwise l moves on and psum is the unit's
  // sum of p per head.
  auto softmax = [&](float(&s)[4][4], bool quantized, std::uint32_t(&pb)[4][2], float(&corr)[2],
                     float(&psum)[2]) {
    float lmx[2];
#pragma unroll
    for (std::uint32_t e = 0; e < 2; ++e) {
      lmx[e] = -INFINITY;
#pragma unroll
      for (std::uint32_t mt = 0; mt < 4; ++mt) {
        lmx[e] = fmaxf(lmx[e], fmaxf(s[mt][e], s[mt][e + 2]));
      }
    }
#pragma unroll
    for (std::uint32_t e = 0; e < 2; ++e) {
      lmx[e] = fmaxf(lmx[e], __shfl_xor_sync(kFull, lmx[e], 4));
      lmx[e] = fmaxf(lmx[e], __shfl_xor_sync(kFull, lmx[e], 8));
      lmx[e] = fmaxf(lmx[e], __shfl_xor_sync(kFull, lmx[e], 16));
    }
#pragma unroll
    for (std::uint32_t e = 0; e < 2; ++e) {
      const float mn = fmaxf(m[e], lmx[e]);
      corr[e] = Exp2(m[e] - (mn == -INFINITY ? 0.0f : mn));
      m[e] = mn;
      const float base = m[e] == -INFINITY ? 0.0f : m[e];
#pragma unroll
      for (std::uint32_t mt = 0; mt < 4; ++mt) {
        s[mt][e] = Exp2(s[mt][e] - base);
        s[mt][e + 2] = Exp2(s[mt][e + 2] - base);
      }
      if (!quantized) {
        float ps = 0.0f;
#pragma unroll
        for (std::uint32_t mt = 0; mt < 4; ++mt) ps += s[mt][e] + s[mt][e + 2];
        ps += __shfl_xor_sync(kFull, ps, 4);
        ps += __shfl_xor_sync(kFull, ps, 8);
        ps += __shfl_xor_sync(kFull, ps, 16);
        l[e] = l[e] * corr[e] + ps;
        psum[e] = ps;
      }
    }
#pragma unroll
    for (std::uint32_t mt = 0; mt < 4; ++mt) {
      __half2 lo = __floats2half2_rn(s[mt][0], s[mt][1]);
      __half2 hi = __floats2half2_rn(s[mt][2], s[mt][3]);
      if (quantized) {
        const int n0 = 8 - 2 * static_cast<int>(PairShift(2u * mt));
        const int n1 = 8 - 2 * static_cast<int>(PairShift(2u * mt + 1u));
        if (n0 != 0) lo = __hmul2(lo, Pow2Half2(n0));
        if (n1 != 0) hi = __hmul2(hi, Pow2Half2(n1));
      }
      pb[mt][0] = Transpose(AsU32(lo));
      pb[mt][1] = Transpose(AsU32(hi));
    }
  };

  // A quantized block from its stage.
  auto attend_block = [&](const std::uint8_t* stage) {
    std::uint32_t kw[8][G::kKWords];  // keys 8 g + nt, the lane's words
#pragma unroll
    for (std::uint32_t nt = 0; nt < 8; ++nt) {
      const std::uint8_t* r = stage + G::kKOff + (9u * g + nt) * G::kKRow + tq * (4u * G::kKWords);
      if constexpr (G::kKWords == 2) {
        const uint2 w = *reinterpret_cast<const uint2*>(r);
        kw[nt][0] = w.x;
        kw[nt][1] = w.y;
      } else {
        kw[nt][0] = *reinterpret_cast<const std::uint32_t*>(r);
      }
    }
    // The block's K scales times 2^n, n such that the largest is in [1, 2) (n = 15 - its fp16
    // exponent field; non-negative fp16 values order as their bits; at most [2, 4) for scales
    // >= 2^15): Q'' = qh * that stays below 2^15 (qh < 2^13) and far from fp16's subnormals
    // whatever the scales' size. The warp reads the D words once (lane L: 4 words of row
    // L / (D / 16) % 4) and takes their largest scale by one warp reduction.
    std::uint32_t top;
    {
      constexpr std::uint32_t kLanesPerRow = D / 16;  // 4 words each
      const uint4 e = *reinterpret_cast<const uint4*>(
          stage + G::kKsOff + (lane / kLanesPerRow % 4u) * G::kKsRow + 16u * (lane % kLanesPerRow));
      top = __vmaxu2(__vmaxu2(e.x, e.y), __vmaxu2(e.z, e.w)) & 0xffffu;  // low halves: scales
      top = __reduce_max_sync(kFull, top);
    }
    const int n = max(-14, 15 - static_cast<int>(top >> 10));  // -14: Q'' < 2^13 * 4
    const __half2 up = Pow2Half2(n);
    float s[4][4], bias[4];
#pragma unroll
    for (std::uint32_t mt = 0; mt < 4; ++mt) s[mt][0] = s[mt][1] = s[mt][2] = s[mt][3] = 0.0f;
    bias[0] = bias[1] = bias[2] = bias[3] = 0.0f;
#pragma unroll
    for (std::uint32_t ks = 0; ks < G::kKc; ++ks) {
      const std::uint32_t w = ks >> 2, jp = ks & 3u;
      // The lane's (scale, min) words 16 w + 2 jp + (0, 8, 1, 9) (dims tq D/4 + those), read as
      // 16-byte words shared by k-steps jp = 0, 1 and 2, 3.
      const std::uint8_t* krow = stage + G::kKsOff + tq * G::kKsRow + 64u * w + 16u * (jp >> 1);
      const uint4 lo = *reinterpret_cast<const uint4*>(krow);
      const uint4 hi = *reinterpret_cast<const uint4*>(krow + 32u);
      const bool odd = (jp & 1u) != 0;
      const std::uint32_t e0 = odd ? lo.z : lo.x, e1 = odd ? hi.z : hi.x;
      const std::uint32_t e2 = odd ? lo.w : lo.y, e3 = odd ? hi.w : hi.y;
      const __half2 sc0 = __hmul2(AsHalf2(__byte_perm(e0, e1, 0x5410)), up);
      const __half2 sc1 = __hmul2(AsHalf2(__byte_perm(e2, e3, 0x5410)), up);
      const uint4 qfr = s_qfrag[ks][lane];
      const std::uint32_t q0 = AsU32(__hmul2(AsHalf2(qfr.x), sc0));
      const std::uint32_t q1 = AsU32(__hmul2(AsHalf2(qfr.y), sc1));
      const std::uint32_t mn0 = __byte_perm(e0, e1, 0x7632), mn1 = __byte_perm(e2, e3, 0x7632);
      MmaF16(bias, mn0, mn0, mn1, mn1, qfr.z, qfr.w);
#pragma unroll
      for (std::uint32_t mt = 0; mt < 4; ++mt) {
        const std::uint32_t x0 = kw[2 * mt][w], x1 = kw[2 * mt + 1][w];
        const std::uint32_t y0 = x0 >> 10, y1 = x1 >> 10;
        MmaF16(s[mt], CodePair(x0, y0, 2 * jp), CodePair(x1, y1, 2 * jp),
               CodePair(x0, y0, 2 * jp + 1), CodePair(x1, y1, 2 * jp + 1), q0, q1);
      }
    }
    const float bias0 = bias[0] * sb[0], bias1 = bias[1] * sb[1];
    // acc = sum Q'' code 4^k 2^-24 with Q'' = q 2^(14 - a) 4^-k scale 2^n.
    const float sq[2] = {Pow2(ah[0] + 10 - n), Pow2(ah[1] + 10 - n)};
#pragma unroll
    for (std::uint32_t mt = 0; mt < 4; ++mt) {
      s[mt][0] = fmaf(s[mt][0], sq[0], bias0);
      s[mt][1] = fmaf(s[mt][1], sq[1], bias1);
      s[mt][2] = fmaf(s[mt][2], sq[0], bias0);
      s[mt][3] = fmaf(s[mt][3], sq[1], bias1);
    }
    std::uint32_t pb[4][2];
    float corr[2], psum[2];
    softmax(s, true, pb, corr, psum);
    // 2^-16 sum_t p_t per head, as P V's products have it: Pᵀ against codes that are all 1 (the
    // A fragments are constants), so the sum is of the p the products take (rounded to fp16).
    float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (std::uint32_t kk = 0; kk < 4; ++kk) {
      constexpr std::uint32_t kOnes = 0x55555555u;  // 16 codes of 1
      const std::uint32_t a0 = CodePair(kOnes, kOnes >> 10, 2 * kk);
      const std::uint32_t a1 = CodePair(kOnes, kOnes >> 10, 2 * kk + 1);
      MmaF16(sums, a0, a0, a1, a1, pb[kk][0], pb[kk][1]);
    }
    const float ps0 = sums[0], ps1 = sums[1];
    l[0] = fmaf(l[0], corr[0], ps0 * 65536.0f);
    l[1] = fmaf(l[1], corr[1], ps1 * 65536.0f);
#pragma unroll
    for (std::uint32_t mt = 0; mt < G::kMt; ++mt) {
      const std::uint32_t ch0 = 16u * mt + g, ch1 = ch0 + 8u;
      const std::uint32_t v0 =
          *reinterpret_cast<const std::uint32_t*>(stage + G::kVOff + 16u * ch0 + 4u * tq);
      const std::uint32_t v1 =
          *reinterpret_cast<const std::uint32_t*>(stage + G::kVOff + 16u * ch1 + 4u * tq);
      const std::uint32_t y0 = v0 >> 10, y1 = v1 >> 10;
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (std::uint32_t kk = 0; kk < 4; ++kk) {
        MmaF16(acc, CodePair(v0, y0, 2 * kk), CodePair(v1, y1, 2 * kk),
               CodePair(v0, y0, 2 * kk + 1), CodePair(v1, y1, 2 * kk + 1), pb[kk][0], pb[kk][1]);
      }
      const __half2 e0 =
          AsHalf2(*reinterpret_cast<const std::uint32_t*>(stage + G::kVsOff + 4u * ch0));
      const __half2 e1 =
          AsHalf2(*reinterpret_cast<const std::uint32_t*>(stage + G::kVsOff + 4u * ch1));
      const float sc0 = __low2float(e0), mn0 = __high2float(e0);
      const float sc1 = __low2float(e1), mn1 = __high2float(e1);
      o[mt][0] = fmaf(o[mt][0], corr[0], fmaf(sc0, acc[0], mn0 * ps0));
      o[mt][1] = fmaf(o[mt][1], corr[1], fmaf(sc0, acc[1], mn0 * ps1));
      o[mt][2] = fmaf(o[mt][2], corr[0], fmaf(sc1, acc[2], mn1 * ps0));
      o[mt][3] = fmaf(o[mt][3], corr[1], fmaf(sc1, acc[3], mn1 * ps1));
    }
  };

  // Unquantized run r: tail rows [kRunKeys r, + count) (sinks first, then the tail), read from
  // global memory straight into fragments (kRunKeys rows of K and V: 4 KB at head_dim 128 and 8
  // keys, every load independent, so one round trip; absent rows read as zero). fp16 K and V enter
  // the MMAs as they are; bf16 ones are scaled by a power of two that brings the run's largest
  // magnitude to [2^14, 2^15) (any bf16 value fits, small ones keep their precision) and rounded to
  // fp16.
  //   * S: the run's keys are the rows of one m-tile (row g: key g, g + 8: key g + 8), and the
  //     reduction order is permuted so that a lane's K fragments are whole 16-byte chunks: k-step
  //     2 j + h, pairs 2 tq and 2 tq + 8 are dimensions 32 j + 8 tq + 4 h + (0, 1) and (2, 3) (a
  //     lane reads chunk 4 j + tq of rows g and g + 8; the query is read again in that order).
  //   * movmatrix turns S's tile into Pᵀ's k-step over keys 0..15; Vᵀ's fragments are the
  //     transposes of rows g / g + 8's words 8 mt + tq and 8 mt + 4 + tq (channels 16 mt + 2 tq
  //     and 16 mt + 8 + 2 tq, two each).
  // K times 2^-tk: S = 2^(a + tk) acc; V times 2^-tv: O' += 2^(tv - 16) acc.
  const bool bf16 = p.tail_bf16 != 0;

  auto attend_tail = [&](std::uint32_t r) {
    const std::uint32_t count = min(kRunKeys, nu - r * kRunKeys);
    // Rows g and g + 8 (those of keys >= kRunKeys are zero constants).
    const bool have[2] = {g < count, (kRunKeys > 8u) && g + 8u < count};
    uint4 kf[2][D / 32];             // rows' chunks 4 j + tq
    std::uint32_t vf[2][G::kMt][2];  // rows' words 8 mt + tq, 8 mt + 4 + tq
#pragma unroll
    for (std::uint32_t h = 0; h < 2; ++h) {
      if (h * 8u >= kRunKeys) {
#pragma unroll
        for (std::uint32_t j = 0; j < D / 32; ++j) kf[h][j] = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (std::uint32_t mt = 0; mt < G::kMt; ++mt) vf[h][mt][0] = vf[h][mt][1] = 0u;
        continue;
      }
      const auto* k = reinterpret_cast<const uint4*>(run_row(r, 0, g + 8u * h));
      const auto* v = reinterpret_cast<const std::uint32_t*>(run_row(r, 1, g + 8u * h));
#pragma unroll
      for (std::uint32_t j = 0; j < D / 32; ++j) {
        kf[h][j] = have[h] ? __ldg(k + 4u * j + tq) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (std::uint32_t mt = 0; mt < G::kMt; ++mt) {
        vf[h][mt][0] = have[h] ? __ldg(v + 8u * mt + tq) : 0u;
        vf[h][mt][1] = have[h] ? __ldg(v + 8u * mt + 4u + tq) : 0u;
      }
    }
    // Head g's query, dimensions 32 j + 8 tq + 4 h + (0, 1) (qs[j][h][0]) and (2, 3) ([1]).
    std::uint32_t qs[D / 32][2][2];
#pragma unroll
    for (std::uint32_t j = 0; j < D / 32; ++j) {
      float x[8];
      const float f = p.scale_log2 * Pow2(-a);
      if constexpr (kVectorQ) {
        LoadIo<8>(qp + 32u * j + 8u * tq, row, x);
#pragma unroll
        for (std::uint32_t i = 0; i < 8; ++i) x[i] *= f;
      } else {
#pragma unroll
        for (std::uint32_t i = 0; i < 8; ++i) {
          x[i] = row ? IoToFloat(__ldg(qp + 32u * j + 8u * tq + i)) * f : 0.0f;
        }
      }
#pragma unroll
      for (std::uint32_t h = 0; h < 2; ++h) {
        qs[j][h][0] = PackHalf2(x[4 * h], x[4 * h + 1]);
        qs[j][h][1] = PackHalf2(x[4 * h + 2], x[4 * h + 3]);
      }
    }
    int tk = 0, tv = 0;
    if (bf16) {
      // The largest magnitudes' bits (bf16 orders as its magnitude bits), then the exponents.
      std::uint32_t mk = 0, mv = 0;
#pragma unroll
      for (std::uint32_t h = 0; h < 2; ++h) {
#pragma unroll
        for (std::uint32_t j = 0; j < D / 32; ++j) {
          mk = __vmaxu2(mk, kf[h][j].x & 0x7fff7fffu);
          mk = __vmaxu2(mk, kf[h][j].y & 0x7fff7fffu);
          mk = __vmaxu2(mk, kf[h][j].z & 0x7fff7fffu);
          mk = __vmaxu2(mk, kf[h][j].w & 0x7fff7fffu);
        }
#pragma unroll
        for (std::uint32_t mt = 0; mt < G::kMt; ++mt) {
          mv = __vmaxu2(mv, vf[h][mt][0] & 0x7fff7fffu);
          mv = __vmaxu2(mv, vf[h][mt][1] & 0x7fff7fffu);
        }
      }
      mk = __reduce_max_sync(kFull, max(mk & 0xffffu, mk >> 16));
      mv = __reduce_max_sync(kFull, max(mv & 0xffffu, mv >> 16));
      // Biased exponent E >= 1: largest in [2^(E - 127), 2^(E - 126)), so t = E - 141. E = 0
      // (zeros, subnormals below 2^-126): t = 0, and they round to fp16 zeros.
      tk = (mk >> 7) != 0 ? static_cast<int>(mk >> 7) - 141 : 0;
      tv = (mv >> 7) != 0 ? static_cast<int>(mv >> 7) - 141 : 0;
      const float dk = Pow2(-tk), dv = Pow2(-tv);
      auto to_half2 = [](std::uint32_t w, float down) {
        return PackHalf2(__uint_as_float(w << 16) * down, __uint_as_float(w & 0xffff0000u) * down);
      };
#pragma unroll
      for (std::uint32_t h = 0; h < 2; ++h) {
#pragma unroll
        for (std::uint32_t j = 0; j < D / 32; ++j) {
          kf[h][j].x = to_half2(kf[h][j].x, dk);
          kf[h][j].y = to_half2(kf[h][j].y, dk);
          kf[h][j].z = to_half2(kf[h][j].z, dk);
          kf[h][j].w = to_half2(kf[h][j].w, dk);
        }
#pragma unroll
        for (std::uint32_t mt = 0; mt < G::kMt; ++mt) {
          vf[h][mt][0] = to_half2(vf[h][mt][0], dv);
          vf[h][mt][1] = to_half2(vf[h][mt][1], dv);
        }
      }
    }
    float s[4][4];
#pragma unroll
    for (std::uint32_t i = 0; i < 4; ++i) s[0][i] = 0.0f;
#pragma unroll
    for (std::uint32_t j = 0; j < D / 32; ++j) {
      MmaF16(s[0], kf[0][j].x, kf[1][j].x, kf[0][j].y, kf[1][j].y, qs[j][0][0], qs[j][0][1]);
      MmaF16(s[0], kf[0][j].z, kf[1][j].z, kf[0][j].w, kf[1][j].w, qs[j][1][0], qs[j][1][1]);
    }
    const float st[2] = {Pow2(ah[0] + tk), Pow2(ah[1] + tk)};
    s[0][0] = have[0] ? s[0][0] * st[0] : -INFINITY;
    s[0][1] = have[0] ? s[0][1] * st[1] : -INFINITY;
    s[0][2] = have[1] ? s[0][2] * st[0] : -INFINITY;
    s[0][3] = have[1] ? s[0][3] * st[1] : -INFINITY;
#pragma unroll
    for (std::uint32_t mt = 1; mt < 4; ++mt) s[mt][0] = s[mt][1] = s[mt][2] = s[mt][3] = -INFINITY;
    std::uint32_t pb[4][2];
    float corr[2], psum[2];
    softmax(s, false, pb, corr, psum);
    const float vup = Pow2(tv - 16);
#pragma unroll
    for (std::uint32_t mt = 0; mt < G::kMt; ++mt) {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const bool rows8 = kRunKeys > 8u;  // rows 8..15 are keys, not zeros
      MmaF16(acc, Transpose(vf[0][mt][0]), Transpose(vf[0][mt][1]),
             rows8 ? Transpose(vf[1][mt][0]) : 0u, rows8 ? Transpose(vf[1][mt][1]) : 0u, pb[0][0],
             pb[0][1]);
#pragma unroll
      for (std::uint32_t i = 0; i < 4; ++i) o[mt][i] = fmaf(o[mt][i], corr[i & 1u], acc[i] * vup);
    }
  };

  // ---- the warp's units: its blocks through the stage ring, then unquantized runs ----
  {
    // Stage i % kStages is `now`, (i + kStages - 1) % kStages is `next` (the one just freed).
    std::uint32_t now = 0, next = kStages - 1;
    for (std::uint32_t i = 0; i < blocks; ++i) {
      if (kOneFirst && i == 0) {
        CpAsyncWait<0>();  // block 0's copies have landed (this lane's) ...
        __syncwarp();      // ... and every lane's
        if (blocks > 1) issue(first + stride, ring + G::kStageBytes);
        CpAsyncCommit();
      } else {
        CpAsyncWait<kStages - 2>();  // block i's copies have landed (this lane's) ...
        __syncwarp();                // ... and every lane's; stage (i - 1) % kStages is free
      }
      const std::uint32_t ahead = i + kStages - 1;
      if (ahead < blocks) issue(first + ahead * stride, ring + next * G::kStageBytes);
      CpAsyncCommit();
      attend_block(ring + now * G::kStageBytes);
      next = now;
      now = now + 1 == kStages ? 0 : now + 1;
    }
    CpAsyncWait<0>();
    for (std::uint32_t u = first + blocks * stride; u < end; u += stride) attend_tail(u - nb);
  }

  // ---- merge the warps: O' [8 heads][D + kMergePad], then maxima and normalisers, per warp. The
  // kEarly kernels (batch 1) write each warp's into its own stage ring as soon as its units are
  // done (no barrier before the writes: no other warp uses that ring), then one barrier (H200,
  // session 36: batch 1 -1.6 to -2.3%, 4K batch 16 -3.0%); the whole-sequence kernel (batch 16)
  // waits for every warp and writes them one after another from the start of shared memory (its
  // warps writing into their own rings were +1.3 to +1.6% at 32K and 128K batch 16 on the H200,
  // though -2.9% at 128K on an H100).
  constexpr bool kOwnRing = kEarly;
  if constexpr (kOwnRing) {
    __syncwarp();  // every lane is past its last read of the ring
  } else {
    __syncthreads();  // every warp is past its last read of the rings
  }
  constexpr std::uint32_t kORow = D + kMergePad;
  constexpr std::uint32_t kWarpFloats = kStages * G::kStageBytes / 4u;  // a ring, in floats
  static_assert(kRows * (kORow + 2u) <= kWarpFloats && G::kStageBytes % 16u == 0u);
  // Warp w's O' rows at s_o + w o_step (rows kORow apart), its maxima at s_wm + w m_step, its
  // normalisers at s_wl + w m_step.
  constexpr std::uint32_t o_step = kOwnRing ? kWarpFloats : kRows * kORow;
  constexpr std::uint32_t m_step = kOwnRing ? kWarpFloats : kRows;
  float* const s_o = reinterpret_cast<float*>(smem);
  float* const s_wm = s_o + (kOwnRing ? kRows * kORow : W * kRows * kORow);
  float* const s_wl = s_wm + (kOwnRing ? kRows : W * kRows);
  {
    float* ow = s_o + warp * o_step;
#pragma unroll
    for (std::uint32_t mt = 0; mt < G::kMt; ++mt) {
      const std::uint32_t c0 = 16u * mt + g, c1 = c0 + 8u;
      ow[(2u * tq) * kORow + c0] = o[mt][0];
      ow[(2u * tq + 1u) * kORow + c0] = o[mt][1];
      ow[(2u * tq) * kORow + c1] = o[mt][2];
      ow[(2u * tq + 1u) * kORow + c1] = o[mt][3];
    }
    if (g == 0) {
      s_wm[warp * m_step + 2u * tq] = m[0];
      s_wm[warp * m_step + 2u * tq + 1u] = m[1];
      s_wl[warp * m_step + 2u * tq] = l[0];
      s_wl[warp * m_step + 2u * tq + 1u] = l[1];
    }
  }
  __syncthreads();

  const std::uint32_t rows = min(p.group, kRows);
  auto write_out = [&](std::uint32_t r, std::uint32_t d, float4 a, float M, float L) {
    const std::uint64_t row = std::uint64_t{seq_index} * p.q_heads + kvh * p.group + r;
    const float s = 65536.0f / L;  // O' is O / 2^16
    // Element by element: out need only be aligned to its element (HackDecodeArgs::out).
    IoT* o = static_cast<IoT*>(p.out) + row * D + d;
    o[0] = FloatToIo<IoT>(a.x * s);
    o[1] = FloatToIo<IoT>(a.y * s);
    o[2] = FloatToIo<IoT>(a.z * s);
    o[3] = FloatToIo<IoT>(a.w * s);
    if (d == 0 && p.lse != nullptr) p.lse[row] = (M + log2f(L)) * 0.69314718055994531f;
  };
  auto accumulate = [](float4& a, float weight, float4 x) {
    a.x = fmaf(x.x, weight, a.x);
    a.y = fmaf(x.y, weight, a.y);
    a.z = fmaf(x.z, weight, a.z);
    a.w = fmaf(x.w, weight, a.w);
  };
  constexpr std::uint32_t kSlot = kRows * (D + 2);
  float* part = p.partials + (std::uint64_t{pair} * p.splits + split) * kSlot;
  // Each thread weighs its row's warps itself (the warps' maxima and normalisers are broadcast
  // reads): no stage of one thread per row between two more barriers. (With kMergePad, the split
  // merge's weights per thread and thread 0's fence below; H200, session 29: 4K and 32K batch 1
  // -4 to -6%, 128K -2%, 4K batch 16 -5%, 32K and 128K batch 16 level.)
  for (std::uint32_t i = tid; i < rows * (D / 4); i += blockDim.x) {
    const std::uint32_t r = i / (D / 4), d = i % (D / 4) * 4u;
    float M = -INFINITY;
    for (std::uint32_t w = 0; w < W; ++w) M = fmaxf(M, s_wm[w * m_step + r]);
    float L = 0.0f;
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (std::uint32_t w = 0; w < W; ++w) {
      const float mw = s_wm[w * m_step + r];
      const float weight = mw == -INFINITY ? 0.0f : Exp2(mw - M);
      L += s_wl[w * m_step + r] * weight;
      // (One offset, written for the whole-sequence kernel as it was: its code is then 98cf9f3's.)
      const std::uint32_t at = kOwnRing ? w * o_step + r * kORow : (w * kRows + r) * kORow;
      accumulate(a, weight, *reinterpret_cast<const float4*>(s_o + at + d));
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
  // The arrival: the CTA's partial stores, a CTA barrier, then thread 0's one atomic with acquire
  // and release semantics at GPU scope (`atom.add.acq_rel.gpu`: it releases the CTA's partials
  // and, in the last CTA, acquires the others'), and a barrier before the last CTA reads them —
  // cooperative groups' grid sync arrives so (`atom.add.release.gpu` after a CTA barrier). In
  // place of a fence, the atomic and a second fence in the last CTA (`__threadfence`, a fence.sc):
  // H100, session 37, 4K batch 1 -4.6 to -5.5%, 32K -2.0 to -2.5%, 128K -0.8 to -1.0%. The
  // whole-sequence kernel (one split: it never arrives) keeps the fences, so that its code stays
  // what batch 16 measured.
  __syncthreads();
  if (tid == 0) {
    bool last;
    if constexpr (kEarly) {
      std::uint32_t before;
      asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;"
                   : "=r"(before)
                   : "l"(p.counters + pair)
                   : "memory");
      last = before == p.splits - 1;
    } else {
      __threadfence();
      last = atomicAdd(p.counters + pair, 1u) == p.splits - 1;
      if (last) __threadfence();
    }
    s_last = last ? 1u : 0u;
  }
  __syncthreads();
  if (s_last == 0) return;

  // The last split to arrive merges all of them (log-sum-exp rule), each thread weighing its row's
  // splits itself. The few-warp kernel (short splits: the merge is a large part of its call) loads
  // its row's split maxima and normalisers in the same round trip as its splits' partial outputs,
  // every load of the merge in flight at once, predicated up to kMaxSplits rather than a loop that
  // stops at p.splits, which serialised them (session 29); absent splits weigh 0 and add exact
  // zeros (H100, session 31: 4K batch 1 -6.2%). The 12-warp kernels stage the maxima and
  // normalisers through shared memory first (the one-trip merge there: 128K batch 1 +1.3%).
  const float* parts = p.partials + std::uint64_t{pair} * p.splits * kSlot;
  if constexpr (kFewWarps) {
    for (std::uint32_t i = tid; i < rows * (D / 4); i += blockDim.x) {
      const std::uint32_t r = i / (D / 4), d = i % (D / 4) * 4u;
      const float* src = parts + r * D + d;
      const float* ml = parts + kRows * D + r;  // the split's maximum; its normaliser kRows after
      float ms[kMaxSplits], ls[kMaxSplits];
      float4 xs[kMaxSplits];
#pragma unroll
      for (std::uint32_t sp = 0; sp < kMaxSplits; ++sp) {
        const bool have = sp < p.splits;
        ms[sp] = have ? __ldcg(ml + sp * kSlot) : -INFINITY;
        ls[sp] = have ? __ldcg(ml + sp * kSlot + kRows) : 0.0f;
        xs[sp] = have ? __ldcg(reinterpret_cast<const float4*>(src + sp * kSlot))
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      float M = -INFINITY;
#pragma unroll
      for (std::uint32_t sp = 0; sp < kMaxSplits; ++sp) M = fmaxf(M, ms[sp]);
      float L = 0.0f;
      float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (std::uint32_t sp = 0; sp < kMaxSplits; ++sp) {
        const float weight = ms[sp] == -INFINITY ? 0.0f : Exp2(ms[sp] - M);
        L += ls[sp] * weight;
        accumulate(a, weight, xs[sp]);
      }
      write_out(r, d, a, M, L);
    }
  } else {
    for (std::uint32_t i = tid; i < p.splits * rows; i += blockDim.x) {
      const std::uint32_t sp = i / rows, r = i % rows;
      s_m[sp][r] = __ldcg(parts + sp * kSlot + kRows * D + r);
      s_l[sp][r] = __ldcg(parts + sp * kSlot + kRows * D + kRows + r);
    }
    __syncthreads();
    for (std::uint32_t i = tid; i < rows * (D / 4); i += blockDim.x) {
      const std::uint32_t r = i / (D / 4), d = i % (D / 4) * 4u;
      const float* src = parts + r * D + d;
      float M = -INFINITY;
      for (std::uint32_t sp = 0; sp < p.splits; ++sp) M = fmaxf(M, s_m[sp][r]);
      float L = 0.0f;
      float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 16
      for (std::uint32_t sp = 0; sp < p.splits; ++sp) {
        const float ms = s_m[sp][r];
        const float weight = ms == -INFINITY ? 0.0f : Exp2(ms - M);
        L += s_l[sp][r] * weight;
        accumulate(a, weight, __ldcg(reinterpret_cast<const float4*>(src + sp * kSlot)));
      }
      write_out(r, d, a, M, L);
    }
  }
  if (tid == 0) p.counters[pair] = 0;  // ready for the next launch
}

std::atomic<std::size_t> g_decode_fp16_smem[2][kIoTypes][3][kMaxDevices];

// A warp's stage ring (the warps' merge buffers lie in the rings once the warps' units are done).
template <int HeadDim>
std::size_t HackDecodeFp16SharedBytes(std::uint32_t warps) {
  return std::size_t{warps} * kStages * Geo16<HeadDim>::kStageBytes;
}

}  // namespace

template <int HeadDim>
cudaError_t LaunchHackDecodeFp16(const HackAttentionParams& params, cudaStream_t stream) {
  static_assert(HeadDim == 64 || HeadDim == 128);
  if (params.group == 0 || params.group > kRows || params.warps == 0 ||
      params.warps > kHackDecodeFp16MaxWarps || params.splits == 0 || params.splits > kMaxSplits) {
    return cudaErrorInvalidValue;
  }
  const std::size_t smem = HackDecodeFp16SharedBytes<HeadDim>(params.warps);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(params.tiles * params.kv_heads * params.splits);
  config.blockDim = dim3(params.warps * 32);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  // Programmatic dependent launch: a call launched right after another (an engine's layer loop, a
  // CUDA graph of them) is launched as the previous one's CTAs exit, not after it has completed.
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  return DispatchIo(params.io_dtype, [&](auto tag) {
    using IoT = typename decltype(tag)::type;
    // Calls of at most kHackDecodeFp16FullWarps warps (split sequences of up to 128 blocks per
    // split: 128K at batch 1; whole sequences of up to 256: batch 16 up to 16K; see
    // EnqueueHackDecodeAttention) take the kernel that prefetches before its dependency wait;
    // longer splits of a split sequence its 12-warp instantiation; longer whole sequences (batch 16
    // from 32K), where the first blocks' latency is spread over many, the one without (H200: 2-4%
    // faster there than with it; docs/hack-gpu.md).
    const bool few = params.warps <= kHackDecodeFp16FullWarps;
    const int which = few ? 0 : params.splits > 1 ? 1 : 2;
    auto* kernel = which == 0   ? HackDecodeFp16Kernel<HeadDim, IoT, true, true>
                   : which == 1 ? HackDecodeFp16Kernel<HeadDim, IoT, true, false>
                                : HackDecodeFp16Kernel<HeadDim, IoT, false, false>;
    const cudaError_t err =
        ConfigureSharedMemory(kernel, HackDecodeFp16SharedBytes<HeadDim>(kHackDecodeFp16MaxWarps),
                              g_decode_fp16_smem[HeadDim == 64 ? 0 : 1][kIoIndex<IoT>][which]);
    return err != cudaSuccess ? err : cudaLaunchKernelEx(&config, kernel, params);
  });
}

template cudaError_t LaunchHackDecodeFp16<64>(const HackAttentionParams&, cudaStream_t);
template cudaError_t LaunchHackDecodeFp16<128>(const HackAttentionParams&, cudaStream_t);

}  // namespace kvdepot::cuda
