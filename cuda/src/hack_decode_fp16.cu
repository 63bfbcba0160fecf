// Kernel family "hack", dequantize-on-load decode (see kvdepot/cuda/hack.h, HackDecodeMath::
// kDequantFp16; docs/hack-gpu.md, "Decode attention: the fp16 path"): decode attention over
// hack-int2 KV whose 2-bit codes are unpacked to fp16 in registers and multiplied on fp16 tensor
// cores (mma.sync m16n8k16, fp32 accumulation). It computes attention over the dequantized KV —
// not HACK's homomorphic INT8 math — so its reference is kvdepot::DecodeAttention over
// kvdepot::DequantizeHack (tolerance at kHackDequantDecodeRelL2Tolerance in hack.h).
//
// Work decomposition. A CTA owns (sequence, KV head, split) as the homomorphic decode kernel does
// (same grid sizing, same split partial / arrival-counter merge); its W warps take the split's
// units (64-token HACK blocks, then runs of up to 64 unquantized sink / tail tokens) round-robin,
// each warp with its own online-softmax state, and the warps merge in shared memory. No K/V tile
// goes through shared memory: a warp loads a block's code words and (scale, min) pairs straight
// into registers (the next block's while it computes the current one) and builds the MMA operands
// from them.
//   * S = Q Kᵀ: A = the group's query heads (rows 0..7; rows 8..15 zero), B = K [head_dim][keys]:
//     lane (g, tq) holds key 8 g + nt of n-tile nt and the head_dim / 4 dims tq·D/4 .. of it
//     (8 bytes of the key's 32 at D = 128), so K's token-major rows are read as they are stored.
//   * O += P V as Oᵀ = Vᵀ Pᵀ: A = Vᵀ [channels][keys] (m-tile mt rows g / g + 8 = channels
//     (D/8) g + 2 mt and + 1), B = Pᵀ taken from the S accumulators in registers (the key order
//     of the S columns is chosen so that no shuffle is needed: S n-tile nt column 2 tq + e is key
//     16 tq + 8 e + nt, which is code 8 e + nt of V word tq).
// Unpacking: a code pair (i, i + 8) of a 16-code word becomes the fp16 pair 1 + code / 4 with one
// shift and one LOP3 (the code in mantissa bits 8..9 of 1.0), and one HFMA2 turns it into the value
// divided by four: (1 + c/4)·scale + (min/4 − scale) = (min + c·scale) / 4. The quarter keeps
// min/4 − scale within fp16's range for every valid container (|min| <= 65504, scale <= 65504·2/3);
// the four comes back in the queries (scaled by 4) and in the output's normalisation.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "fast_exp2.cuh"
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
using internal::kIoIndex;
using internal::kIoTypes;
using internal::kMaxDevices;
using internal::MmaF16;

constexpr std::uint32_t kP = 64;
constexpr std::uint32_t kRows = 8;
constexpr std::uint32_t kMaxSplits = 16;
constexpr unsigned kFull = 0xffffffffu;
// Error kinds, as hack_attention.cu's AttnError (FinishHackAttention names them).
constexpr std::uint32_t kErrTokens = 1, kErrSinks = 2, kErrSection = 3, kErrTail = 4, kErrPage = 5;

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
// Codes j and j + 8 of a 16-code word (bits 2 j and 2 j + 16) as the fp16 pair 1 + code / 4.
template <std::uint32_t J>
__device__ __forceinline__ __half2 CodePair(std::uint32_t word) {
  std::uint32_t x;
  if constexpr (J < 4) {
    x = word << (8u - 2u * J);
  } else {
    x = word >> (2u * J - 8u);
  }
  return AsHalf2((x & 0x03000300u) | 0x3C003C00u);
}
// (scale, min) entries of two channels -> (scale pair, quarter-min-minus-scale pair).
__device__ __forceinline__ void ScaleMin(std::uint32_t e0, std::uint32_t e1, __half2& scale,
                                         __half2& base) {
  scale = AsHalf2(__byte_perm(e0, e1, 0x5410));
  const __half2 mn = AsHalf2(__byte_perm(e0, e1, 0x7632));
  base = __hfma2(mn, __float2half2_rn(0.25f), __hneg2(scale));
}
// An unquantized element (fp16 or bf16 bits) as fp16, divided by four.
__device__ __forceinline__ __half TailQuarter(std::uint16_t bits, bool bf16) {
  const __half h =
      bf16 ? __float2half_rn(__uint_as_float(std::uint32_t{bits} << 16)) : __ushort_as_half(bits);
  return __hmul(h, __float2half(0.25f));
}

template <int D>
struct Geo16 {
  static constexpr std::uint32_t kKWords = D / 64;  // K code words per lane per key
  static constexpr std::uint32_t kKc = D / 16;      // k-chunks of Q Kᵀ
  static constexpr std::uint32_t kMt = D / 16;      // m-tiles of Vᵀ Pᵀ
  static constexpr std::uint32_t kKScales = D / 4;  // K (scale, min) words per lane
  static constexpr std::uint32_t kVScales = D / 8;  // V (scale, min) words per lane
  static constexpr std::uint32_t kCodeBytes = kP * D / 4;
};

// One quantized block's words for one lane.
template <int D>
struct Raw {
  std::uint32_t k[8][Geo16<D>::kKWords];  // [n-tile][word]
  std::uint32_t v[Geo16<D>::kMt][2];      // [m-tile][row g | row g + 8]
  std::uint32_t ks[Geo16<D>::kKScales];
  std::uint32_t vs[Geo16<D>::kVScales];
};

// IoT: q's and out's element (io_element.cuh).
template <int D, typename IoT>
__global__ void __launch_bounds__(kHackDecodeFp16MaxWarps * 32, 1)
    HackDecodeFp16Kernel(const __grid_constant__ HackAttentionParams p) {
  using G = Geo16<D>;
  extern __shared__ __align__(16) float smem_f[];
  __shared__ float s_m[kMaxSplits][kRows];
  __shared__ float s_l[kMaxSplits][kRows];
  __shared__ float s_row_m[kRows], s_row_l[kRows];
  __shared__ std::uint32_t s_last;

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
  // written before the grid this one depends on has completed.
  internal::GridDependencyWait();
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
  const std::uint32_t units = nb + (nu + kP - 1) / kP;
  // Splits share this sequence's units evenly (its units, not the grid's estimate).
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
  // Block j's codes and scales sections (paged: through the block table).
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
  // K: key 8 g + nt, bytes tq·D/16 .. of its row, and the (scale, min) of those dims.
  auto load_k = [&](const Src& src, Raw<D>& raw) {
    const std::uint8_t* kc = src.codes + k_codes0 + (8u * g) * (D / 4) + tq * (D / 16);
#pragma unroll
    for (std::uint32_t nt = 0; nt < 8; ++nt) {
      if constexpr (G::kKWords == 2) {
        const uint2 w = __ldg(reinterpret_cast<const uint2*>(kc + nt * (D / 4)));
        raw.k[nt][0] = w.x;
        raw.k[nt][1] = w.y;
      } else {
        raw.k[nt][0] = __ldg(reinterpret_cast<const std::uint32_t*>(kc + nt * (D / 4)));
      }
    }
    const auto* ksp = reinterpret_cast<const uint4*>(src.scales + k_scales0) + tq * (D / 16);
#pragma unroll
    for (std::uint32_t i = 0; i < G::kKScales / 4; ++i) {
      const uint4 e = __ldg(ksp + i);
      raw.ks[4 * i] = e.x;
      raw.ks[4 * i + 1] = e.y;
      raw.ks[4 * i + 2] = e.z;
      raw.ks[4 * i + 3] = e.w;
    }
  };
  // V: channels (D/8) g + 2 mt (+1), word tq (keys 16 tq ..), and those channels' (scale, min).
  auto load_v = [&](const Src& src, Raw<D>& raw) {
    const auto* vc =
        reinterpret_cast<const std::uint32_t*>(src.codes + v_codes0 + (D / 8) * g * 16u) + tq;
#pragma unroll
    for (std::uint32_t mt = 0; mt < G::kMt; ++mt) {
      raw.v[mt][0] = __ldg(vc + (2u * mt) * 4u);
      raw.v[mt][1] = __ldg(vc + (2u * mt + 1u) * 4u);
    }
    const auto* vsp = reinterpret_cast<const uint4*>(src.scales + v_scales0) + g * (D / 32);
#pragma unroll
    for (std::uint32_t i = 0; i < G::kVScales / 4; ++i) {
      const uint4 e = __ldg(vsp + i);
      raw.vs[4 * i] = e.x;
      raw.vs[4 * i + 1] = e.y;
      raw.vs[4 * i + 2] = e.z;
      raw.vs[4 * i + 3] = e.w;
    }
  };

  // Q fragments: head kvh·group + g (zero rows past the group), chunk kc = word w, pairs j0 = 2 (kc
  // & 3) and j0 + 1: a0 = dims (j0, j0 + 8), a2 = dims (j0 + 1, j0 + 9) of the lane's word w, in
  // units of softmax_scale · log2(e) · 4 (K is carried divided by four).
  std::uint32_t qa[G::kKc][2];
  {
    const bool row = g < p.group && bad_kind == 0;
    const IoT* qp = static_cast<const IoT*>(p.q) +
                    (std::uint64_t{seq_index} * p.q_heads + kvh * p.group + (row ? g : 0)) * D;
    const float f = p.scale_log2 * 4.0f;
    auto ld = [&](std::uint32_t d) { return row ? IoToFloat(__ldg(qp + d)) * f : 0.0f; };
#pragma unroll
    for (std::uint32_t kc = 0; kc < G::kKc; ++kc) {
      const std::uint32_t d = tq * (D / 4) + (kc >> 2) * 16u + 2u * (kc & 3u);
      qa[kc][0] = PackHalf2(ld(d), ld(d + 8));
      qa[kc][1] = PackHalf2(ld(d + 1), ld(d + 9));
    }
  }

  float o[G::kMt][4];
#pragma unroll
  for (std::uint32_t i = 0; i < G::kMt; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  // One unit: K fragments from kb(nt, kc, half) and V fragments from va(mt, kk, idx) (idx 0..3 =
  // a0..a3), keys at or past `count` masked; after_qk() runs once K's fragments are consumed.
  auto attend = [&](auto kb, auto va, std::uint32_t count, auto after_qk) {
    float s[8][4];
#pragma unroll
    for (std::uint32_t nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (std::uint32_t kc = 0; kc < G::kKc; ++kc) {
#pragma unroll
      for (std::uint32_t nt = 0; nt < 8; ++nt) {
        MmaF16(s[nt], qa[kc][0], 0u, qa[kc][1], 0u, kb(nt, kc, 0), kb(nt, kc, 1));
      }
    }
    after_qk();
    if (count < kP) {
#pragma unroll
      for (std::uint32_t nt = 0; nt < 8; ++nt) {
        if (16u * tq + nt >= count) s[nt][0] = -INFINITY;
        if (16u * tq + 8u + nt >= count) s[nt][1] = -INFINITY;
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (std::uint32_t nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][0], s[nt][1]));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
    const float mn = fmaxf(m, mx);
    const float base = mn == -INFINITY ? 0.0f : mn;
    const float corr = Exp2(m - base);
    m = mn;
    float sum = 0.0f;
    std::uint32_t pb[4][2];
#pragma unroll
    for (std::uint32_t nt = 0; nt < 8; ++nt) {
      const float e0 = Exp2(s[nt][0] - base), e1 = Exp2(s[nt][1] - base);
      sum += e0 + e1;
      pb[nt >> 1][nt & 1u] = PackHalf2(e0, e1);
    }
    l = l * corr + sum;
    // O's columns are heads 2 tq and 2 tq + 1: their corrections live in lanes 8 tq and 8 tq + 4.
    const float c0 = __shfl_sync(kFull, corr, 8u * tq);
    const float c1 = __shfl_sync(kFull, corr, 8u * tq + 4u);
#pragma unroll
    for (std::uint32_t mt = 0; mt < G::kMt; ++mt) {
      o[mt][0] *= c0;
      o[mt][1] *= c1;
      o[mt][2] *= c0;
      o[mt][3] *= c1;
#pragma unroll
      for (std::uint32_t kk = 0; kk < 4; ++kk) {
        MmaF16(o[mt], va(mt, kk, 0), va(mt, kk, 1), va(mt, kk, 2), va(mt, kk, 3), pb[kk][0],
               pb[kk][1]);
      }
    }
  };

  // A quantized block from `raw`; the next block's K words are loaded into `raw` once this block's
  // are consumed (after Q Kᵀ), its V words after P V.
  auto attend_block = [&](Raw<D>& raw, bool has_next, const Src& next) {
    auto kb = [&](std::uint32_t nt, std::uint32_t kc, std::uint32_t half) -> std::uint32_t {
      const std::uint32_t w = kc >> 2, j = 2u * (kc & 3u) + half;
      __half2 scale, base;
      ScaleMin(raw.ks[16u * w + j], raw.ks[16u * w + j + 8u], scale, base);
      __half2 c;
      switch (j) {
        case 0: c = CodePair<0>(raw.k[nt][w]); break;
        case 1: c = CodePair<1>(raw.k[nt][w]); break;
        case 2: c = CodePair<2>(raw.k[nt][w]); break;
        case 3: c = CodePair<3>(raw.k[nt][w]); break;
        case 4: c = CodePair<4>(raw.k[nt][w]); break;
        case 5: c = CodePair<5>(raw.k[nt][w]); break;
        case 6: c = CodePair<6>(raw.k[nt][w]); break;
        default: c = CodePair<7>(raw.k[nt][w]); break;
      }
      return AsU32(__hfma2(c, scale, base));
    };
    auto va = [&](std::uint32_t mt, std::uint32_t kk, std::uint32_t idx) -> std::uint32_t {
      const std::uint32_t hi = idx & 1u, j = 2u * kk + (idx >> 1);
      const std::uint32_t e = raw.vs[2u * mt + hi];
      __half2 scale, base;
      ScaleMin(e, e, scale, base);
      const std::uint32_t word = raw.v[mt][hi];
      __half2 c;
      switch (j) {
        case 0: c = CodePair<0>(word); break;
        case 1: c = CodePair<1>(word); break;
        case 2: c = CodePair<2>(word); break;
        case 3: c = CodePair<3>(word); break;
        case 4: c = CodePair<4>(word); break;
        case 5: c = CodePair<5>(word); break;
        case 6: c = CodePair<6>(word); break;
        default: c = CodePair<7>(word); break;
      }
      return AsU32(__hfma2(c, scale, base));
    };
    attend(kb, va, kP, [&] {
      if (has_next) load_k(next, raw);
    });
    if (has_next) load_v(next, raw);
  };

  // Unquantized run r: tail rows [64 r, 64 r + count) (sinks first, then the tail).
  const bool bf16 = p.tail_bf16 != 0;
  const auto* tail = static_cast<const std::uint16_t*>(seq.tail);
  auto attend_tail = [&](std::uint32_t r) {
    const std::uint32_t t0 = r * kP, count = min(kP, nu - t0);
    auto elem = [&](std::uint32_t c, std::uint32_t key, std::uint32_t d) -> __half {
      if (key >= count) return __float2half(0.0f);
      const std::uint64_t off =
          ((std::uint64_t{p.layer} * 2u + c) * unquantized + t0 + key) * p.kv_heads * D +
          std::uint64_t{kvh} * D + d;
      return TailQuarter(__ldg(tail + off), bf16);
    };
    auto kb = [&](std::uint32_t nt, std::uint32_t kc, std::uint32_t half) -> std::uint32_t {
      const std::uint32_t d = tq * (D / 4) + (kc >> 2) * 16u + 2u * (kc & 3u) + half;
      const std::uint32_t key = 8u * g + nt;
      return AsU32(__halves2half2(elem(0, key, d), elem(0, key, d + 8)));
    };
    auto va = [&](std::uint32_t mt, std::uint32_t kk, std::uint32_t idx) -> std::uint32_t {
      const std::uint32_t ch = (D / 8) * g + 2u * mt + (idx & 1u);
      const std::uint32_t key = 16u * tq + 2u * kk + (idx >> 1);
      return AsU32(__halves2half2(elem(1, key, ch), elem(1, key + 8, ch)));
    };
    attend(kb, va, count, [] {});
  };

  // ---- the warp's units: blocks ub + warp + k W (next block prefetched), then unquantized ----
  {
    Raw<D> raw;
    std::uint32_t u = ub + warp;
    if (u < qe) {
      const Src first = locate(u);
      load_k(first, raw);
      load_v(first, raw);
    }
    for (; u < qe; u += W) {
      const bool has_next = u + W < qe;
      const Src next = has_next ? locate(u + W) : Src{nullptr, nullptr};
      attend_block(raw, has_next, next);
    }
    for (; u < ue; u += W) attend_tail(u - nb);
  }

  // ---- merge the warps: O [W][8 heads][D], then the rows' maxima and normalisers ----
  l += __shfl_xor_sync(kFull, l, 1);
  l += __shfl_xor_sync(kFull, l, 2);
  float* s_o = smem_f;                   // [W][kRows][D]
  float* s_wm = smem_f + W * kRows * D;  // [W][kRows]
  float* s_wl = s_wm + W * kRows;        // [W][kRows]
  {
    float* ow = s_o + warp * kRows * D;
#pragma unroll
    for (std::uint32_t mt = 0; mt < G::kMt; ++mt) {
      const std::uint32_t c0 = (D / 8) * g + 2u * mt;
      ow[(2u * tq) * D + c0] = o[mt][0];
      ow[(2u * tq + 1u) * D + c0] = o[mt][1];
      ow[(2u * tq) * D + c0 + 1u] = o[mt][2];
      ow[(2u * tq + 1u) * D + c0 + 1u] = o[mt][3];
    }
    if (tq == 0) {
      s_wm[warp * kRows + g] = m;
      s_wl[warp * kRows + g] = l;
    }
  }
  __syncthreads();
  if (tid < kRows) {
    float M = -INFINITY;
    for (std::uint32_t w = 0; w < W; ++w) M = fmaxf(M, s_wm[w * kRows + tid]);
    float L = 0.0f;
    for (std::uint32_t w = 0; w < W; ++w) {
      const float mw = s_wm[w * kRows + tid];
      const float weight = mw == -INFINITY ? 0.0f : Exp2(mw - M);
      s_wm[w * kRows + tid] = weight;
      L += s_wl[w * kRows + tid] * weight;
    }
    s_row_m[tid] = M;
    s_row_l[tid] = L;
  }
  __syncthreads();

  const std::uint32_t rows = min(p.group, kRows);
  auto write_out = [&](std::uint32_t r, std::uint32_t d, float4 a, float M, float L) {
    const std::uint64_t row = std::uint64_t{seq_index} * p.q_heads + kvh * p.group + r;
    const float s = 4.0f / L;  // V was carried divided by four
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
  for (std::uint32_t i = tid; i < rows * (D / 4); i += blockDim.x) {
    const std::uint32_t r = i / (D / 4), d = i % (D / 4) * 4u;
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (std::uint32_t w = 0; w < W; ++w) {
      accumulate(a, s_wm[w * kRows + r],
                 *reinterpret_cast<const float4*>(s_o + (w * kRows + r) * D + d));
    }
    if (p.splits == 1) {
      write_out(r, d, a, s_row_m[r], s_row_l[r]);
    } else {
      __stcg(reinterpret_cast<float4*>(part + r * D + d), a);
    }
  }
  if (p.splits == 1) return;
  if (tid < kRows) {
    __stcg(part + kRows * D + tid, s_row_m[tid]);
    __stcg(part + kRows * D + kRows + tid, s_row_l[tid]);
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) s_last = atomicAdd(p.counters + pair, 1u) == p.splits - 1 ? 1u : 0u;
  __syncthreads();
  if (s_last == 0) return;
  __threadfence();

  // The last split to arrive merges all of them (log-sum-exp rule).
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
      const float ms = s_m[sp][tid];
      const float weight = ms == -INFINITY ? 0.0f : Exp2(ms - M);
      s_m[sp][tid] = weight;
      L += s_l[sp][tid] * weight;
    }
    s_row_m[tid] = M;
    s_row_l[tid] = L;
  }
  __syncthreads();
  for (std::uint32_t i = tid; i < rows * (D / 4); i += blockDim.x) {
    const std::uint32_t r = i / (D / 4), d = i % (D / 4) * 4u;
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

std::atomic<std::size_t> g_decode_fp16_smem[2][kIoTypes][kMaxDevices];

// The warps' merge buffers: O [warps][8][D], then the warps' row maxima and normalisers.
template <int HeadDim>
std::size_t HackDecodeFp16SharedBytes(std::uint32_t warps) {
  return std::size_t{warps} * kRows * (HeadDim + 2) * sizeof(float);
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
    auto* kernel = HackDecodeFp16Kernel<HeadDim, IoT>;
    const cudaError_t err =
        ConfigureSharedMemory(kernel, HackDecodeFp16SharedBytes<HeadDim>(kHackDecodeFp16MaxWarps),
                              g_decode_fp16_smem[HeadDim == 64 ? 0 : 1][kIoIndex<IoT>]);
    return err != cudaSuccess ? err : cudaLaunchKernelEx(&config, kernel, params);
  });
}

template cudaError_t LaunchHackDecodeFp16<64>(const HackAttentionParams&, cudaStream_t);
template cudaError_t LaunchHackDecodeFp16<128>(const HackAttentionParams&, cudaStream_t);

}  // namespace kvdepot::cuda
