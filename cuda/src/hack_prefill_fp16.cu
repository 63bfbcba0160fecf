// Kernel family "hack", dequantize-on-load prefill (see kvdepot/cuda/hack.h, HackPrefillMath::
// kDequantFp16; docs/hack-gpu.md, "Prefill attention: the fp16 path"): causal (chunked) prefill
// over hack-int2 KV whose 2-bit codes are unpacked to fp16 in shared memory and multiplied on fp16
// tensor cores (fp32 accumulation): wgmma on sm_90a at head_dim 128, mma.sync m16n8k16 otherwise,
// FlashAttention-2 style (one CTA, no warp specialisation). It computes
// attention over the dequantized KV — not HACK's homomorphic INT8 math — so its reference is
// kvdepot::PrefillAttention over kvdepot::DequantizeHack (tolerance at
// kHackDequantPrefillRelL2Tolerance in hack.h).
//
// Work decomposition. A CTA of 8 warps owns 128 rows: the `group` query heads sharing one KV head,
// of 128 / group consecutive query tokens (row r = token r / group, head r % group); warp w owns
// rows 16 w .. 16 w + 15, their Q fragments in registers (fp16, pre-multiplied by the softmax scale
// in log2 units), their O accumulators and online-softmax state in registers. The CTA walks the
// key tiles of its causal range in position order: each tile is 64 keys, either one quantized
// HACK block or up to 64 unquantized sink / tail tokens. Per tile:
//   1. (all threads) the next tile's K and V code words and per-channel (scale, min) pairs are
//      loaded into registers before this tile's math, and unpacked after it into the other of two
//      shared-memory stages (one __syncthreads per tile): code pairs become fp16 with one
//      shift+mask (LOP3) into the exponent field of 1024, one subtraction of 1024 and one fp16
//      fused multiply-add with (scale, min) — min + code * scale rounded once to fp16, the value
//      DequantizeHack produces in fp16;
//   2. (each warp) S = Q Kᵀ (K [key][d]), causal mask, online softmax in fp32 base 2, O += P V (P
//      from the S accumulators as fp16 A fragments; V stored transposed [d][key]). mma.sync path:
//      B fragments read with ldmatrix, the next tile unpacked after P V. wgmma path (each
//      warpgroup: 64 rows, m64n64k16 for S, m64n128k16 for P V, A from registers, B read by the
//      tensor cores from shared memory through 128-byte-swizzle descriptors): the next block's K
//      is unpacked while Q Kᵀ runs and its V while P V runs (fence.proxy.async before the
//      barrier), each warpgroup waiting for its wgmmas before the barrier.
// The unpack writes a code pair (i, i + 8) of a 16-code word as one half2. So that no shuffle is
// needed, positions inside each 16-group are permuted the same way on both sides of each product:
// in K's head_dim (and Q's, loaded in that order), and in the key order (K's rows, the S / P
// columns, V's columns): position 2 j holds index j, position 2 j + 1 index j + 8.
// Shared tiles have 128-byte rows (K in panels of 64 head_dim columns) XOR-swizzled per 16-byte
// chunk (chunk ^ (row & 7)): wgmma's 128-byte swizzle, and free of ldmatrix bank conflicts. O is
// rescaled only when some row's running maximum moved (a warp vote; multiplying by 1 is exact).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "fast_exp2.cuh"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/cuda/hack.h"
#include "launch.h"

namespace kvdepot::cuda {

namespace {

using internal::ConfigureSharedMemory;
using internal::Exp2;
using internal::kMaxDevices;
using internal::SharedAddress;

constexpr std::uint32_t kP = 64;  // keys per tile: one HACK block
constexpr std::uint32_t kWarps = 8;
constexpr std::uint32_t kThreads = kWarps * 32;
constexpr std::uint32_t kRows = kWarps * 16;  // rows (query token x head) per CTA
constexpr std::uint32_t kErrPage = 5;         // as hack_attention.cu's AttnError::kErrPage
constexpr unsigned kFull = 0xffffffffu;

template <int D>
struct Fp16Geo {
  static constexpr std::uint32_t kKBytes = kP * D * 2;  // K [64 key positions][D] fp16
  static constexpr std::uint32_t kVBytes = D * kP * 2;  // Vᵀ [D][64 key positions] fp16
  static constexpr std::uint32_t kStageBytes = kKBytes + kVBytes;
  // + 1024: the stages start on a 1024-byte boundary (the 128-byte swizzle's repeat, which wgmma's
  // shared-memory descriptors assume).
  static constexpr std::uint32_t kSmem = 2 * kStageBytes + 1024;
  static constexpr std::uint32_t kWordsPerToken = D / 16;  // K code words (16 codes) per token
  static constexpr std::uint32_t kWords = D / 64;          // K (and V) code words per thread
};

// Position of index i (0..15) inside its 16-group, and its inverse (see the header comment).
__device__ __forceinline__ std::uint32_t PosIn16(std::uint32_t i) {
  return ((i & 7u) << 1) | (i >> 3);
}

// Byte offsets of the swizzled tiles: 128-byte rows whose 16-byte chunks are XOR-swizzled
// (chunk ^ (row & 7)) — wgmma's 128-byte swizzle, also free of ldmatrix bank conflicts. K: row =
// key position, col = head_dim position (halves), in panels of 64 columns ([D / 64][64 keys][64]).
template <int D>
__device__ __forceinline__ std::uint32_t KOff(std::uint32_t row, std::uint32_t col) {
  return (col >> 6) * (kP * 128u) + row * 128u +
         (((((col >> 3) & 7u) ^ (row & 7u)) << 4) | ((col & 7u) << 1));
}
// Vᵀ: row = channel, col = key position.
__device__ __forceinline__ std::uint32_t VOff(std::uint32_t row, std::uint32_t col) {
  return row * (kP * 2) + ((((col >> 3) ^ (row & 7u)) << 4) | ((col & 7u) << 1));
}

// sm_90a (the arch-specific target, __CUDA_ARCH_FEAT_SM90_ALL), head_dim 128: both products on
// wgmma, B operands read by the tensor cores from the swizzled shared tiles. Other targets, and
// head_dim 64: mma.sync with ldmatrix B fragments (a head_dim-64 wgmma build gave wrong results
// over sequences of more than one key tile on the H200, cause not found: docs/hack-gpu.md).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVDEPOT_HACK_PREFILL_WGMMA 1
// Shared-memory matrix descriptor of a K-major tile with 128-byte rows and the 128-byte swizzle, 8
// rows per 1024 bytes (stride byte offset 1024; the leading byte offset is unused for this layout).
__device__ __forceinline__ std::uint64_t SwizzledDesc(std::uint32_t shared_addr) {
  return static_cast<std::uint64_t>((shared_addr & 0x3ffffu) >> 4) |
         (static_cast<std::uint64_t>(1) << 16) | (static_cast<std::uint64_t>(1024 >> 4) << 32) |
         (static_cast<std::uint64_t>(1) << 62);
}
__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaWaitAll() {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
// Orders the compiler's uses of accumulator registers against the asynchronous wgmma (issued
// before / waited for by the asm statements around it).
template <int N>
__device__ __forceinline__ void FenceOperands(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
  }
}
// Makes this thread's generic-proxy shared-memory writes visible to wgmma (the async proxy).
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// D (64 rows x N, fp32; this thread's fragment in mma.sync's C layout per 8 columns) (+)= A (64 x
// 16 fp16 from registers, mma.sync's A layout per warp) x B (16 x N fp16 in shared memory, K-major,
// descriptor `desc`); D is overwritten when accumulate == 0.
__device__ __forceinline__ void Wgmma(float (&d)[8][4], const std::uint32_t (&a)[4],
                                      std::uint64_t desc, std::uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}
__device__ __forceinline__ void Wgmma(float (&d)[16][4], const std::uint32_t (&a)[4],
                                      std::uint64_t desc, std::uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]),
        "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]),
        "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]),
        "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}
#endif
__device__ __forceinline__ void Ldsm4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void MmaF16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                       std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}
__device__ __forceinline__ __half2 AsHalf2(std::uint32_t u) {
  return *reinterpret_cast<const __half2*>(&u);
}
__device__ __forceinline__ std::uint32_t AsU32(__half2 h) {
  return *reinterpret_cast<const std::uint32_t*>(&h);
}
// Code pair j of a 16-code word (codes j and j + 8), dequantized: min + code * scale, one rounding.
__device__ __forceinline__ std::uint32_t DequantPair(std::uint32_t word, std::uint32_t j,
                                                     __half2 scale, __half2 min) {
  const std::uint32_t biased = ((word >> (2u * j)) & 0x00030003u) | 0x64006400u;  // 1024 + code
  const __half2 code = __hsub2(AsHalf2(biased), AsHalf2(0x64006400u));
  return AsU32(__hfma2(code, scale, min));
}
// An unquantized element (fp16 or bf16 bits) as fp16 bits (bf16: exact within fp16's normal range;
// the codec keeps stored values within +-65504).
__device__ __forceinline__ std::uint32_t TailToHalf(std::uint32_t bits, bool bf16) {
  if (!bf16) return bits;
  return __half_as_ushort(__float2half_rn(__uint_as_float(bits << 16)));
}

// One key tile of the sequence: positions [start, start + count), a quantized block or not.
struct Tile {
  std::uint32_t start;
  std::uint32_t count;
  std::int32_t block;  // -1: unquantized (sinks or tail)
};

struct SeqGeometry {
  std::uint32_t sinks, blocks, tail_begin, tokens, sink_tiles;
  __device__ Tile At(std::uint32_t i) const {
    if (i < sink_tiles) return {i * kP, min(kP, sinks - i * kP), -1};
    if (i < sink_tiles + blocks) {
      const std::uint32_t j = i - sink_tiles;
      return {sinks + j * kP, kP, static_cast<std::int32_t>(j)};
    }
    const std::uint32_t start = tail_begin + (i - sink_tiles - blocks) * kP;
    return {start, min(kP, tokens - start), -1};
  }
};

// Registers holding one quantized block's K and V code words and (scale, min) pairs.
template <int D>
struct RawBlock {
  std::uint32_t k[Fp16Geo<D>::kWords];
  std::uint32_t v[Fp16Geo<D>::kWords];
  std::uint32_t ks[16];                  // K entries of channels d0 .. d0 + 15
  std::uint32_t vs[Fp16Geo<D>::kWords];  // V entry of each V word's channel
};

template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    HackPrefillFp16Kernel(const __grid_constant__ HackAttentionParams p) {
  using G = Fp16Geo<D>;
  extern __shared__ __align__(128) std::uint8_t smem_raw[];
  std::uint8_t* const smem = smem_raw + ((1024u - (SharedAddress(smem_raw) & 1023u)) & 1023u);
  const std::uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
  const std::uint32_t g = lane >> 2, tq = lane & 3u;
  const std::uint32_t head = blockIdx.y;
  const std::uint32_t group = p.group;
  const std::uint32_t tokens_per_cta = kRows / group;
  // Latest query tiles first: they have the most keys (causal).
  const std::uint32_t q0 = (gridDim.x - 1u - blockIdx.x) * tokens_per_cta;
  const std::uint32_t q_end = min(p.queries, q0 + tokens_per_cta);
  const HackAttentionSeq& seq = p.prefill_seq;

  hack::Layout lay;
  lay.layers = p.layers;
  lay.tokens = seq.tokens;
  lay.heads = p.kv_heads;
  lay.dim = D;
  lay.partition = kP;
  lay.sinks = seq.sinks;
  SeqGeometry geo;
  geo.sinks = seq.sinks;
  geo.blocks = lay.blocks();
  geo.tail_begin = lay.tail_begin();
  geo.tokens = seq.tokens;
  geo.sink_tiles = (seq.sinks + kP - 1) / kP;
  const std::uint32_t unquantized = lay.unquantized_tokens();
  const std::uint32_t max_key = p.first_position + q_end - 1u;
  const std::uint32_t min_query = p.first_position + q0;

  // Block j's K / V codes and scales. Contiguous: consecutive blocks of a (layer, kv, head) are
  // consecutive groups; paged: slot j % page_blocks of page block_tables[j / page_blocks].
  hack::Layout page_lay = lay;
  if (p.page_blocks != 0) {
    page_lay.tokens = p.page_blocks * kP;
    page_lay.sinks = 0;
  }
  const hack::Layout& base_lay = p.page_blocks != 0 ? page_lay : lay;
  const std::uint64_t k_codes0 = base_lay.group(p.layer, 0, head, 0) * (kP * D / 4);
  const std::uint64_t v_codes0 = base_lay.group(p.layer, 1, head, 0) * (kP * D / 4);
  const std::uint64_t k_scales0 = base_lay.partition_base(p.layer, 0, head, 0) * 4u;
  const std::uint64_t v_scales0 = base_lay.partition_base(p.layer, 1, head, 0) * 4u;
  auto block_bases = [&](std::uint32_t j, const std::uint8_t*& codes, const std::uint8_t*& scales) {
    if (p.page_blocks == 0) {
      codes = seq.codes + std::uint64_t{j} * (kP * D / 4);
      scales = seq.scales + std::uint64_t{j} * D * 4u;
      return;
    }
    std::int32_t page = p.block_tables[j / p.page_blocks];
    if (page < 0 || static_cast<std::uint32_t>(page) >= p.num_pages) {
      atomicMin(p.error, static_cast<unsigned long long>(kErrPage));
      page = 0;
    }
    const std::uint32_t slot = j % p.page_blocks;
    codes = p.page_codes + static_cast<std::uint64_t>(page) * p.page_codes_bytes +
            std::uint64_t{slot} * (kP * D / 4);
    scales = p.page_scales + static_cast<std::uint64_t>(page) * p.page_scales_bytes +
             std::uint64_t{slot} * D * 4u;
  };

  // This thread's K words: token (tid + 256 i) / kWordsPerToken, channels d0k .. d0k + 15; V
  // words: channel (tid + 256 i) / 4, tokens t0v .. t0v + 15.
  const std::uint32_t d0k = (tid % G::kWordsPerToken) * 16u;
  const std::uint32_t t0v = (tid % 4u) * 16u;

  auto load_raw = [&](std::uint32_t j, RawBlock<D>& raw) {
    const std::uint8_t* codes;
    const std::uint8_t* scales;
    block_bases(j, codes, scales);
    const auto* kw = reinterpret_cast<const std::uint32_t*>(codes + k_codes0);
    const auto* vw = reinterpret_cast<const std::uint32_t*>(codes + v_codes0);
    const auto* ksp = reinterpret_cast<const uint4*>(scales + k_scales0) + d0k / 4u;
    const auto* vsp = reinterpret_cast<const std::uint32_t*>(scales + v_scales0);
#pragma unroll
    for (std::uint32_t i = 0; i < G::kWords; ++i) {
      raw.k[i] = __ldg(kw + tid + i * kThreads);
      raw.v[i] = __ldg(vw + tid + i * kThreads);
      raw.vs[i] = __ldg(vsp + (tid + i * kThreads) / 4u);
    }
#pragma unroll
    for (std::uint32_t i = 0; i < 4; ++i) {
      const uint4 e = __ldg(ksp + i);
      raw.ks[4 * i] = e.x;
      raw.ks[4 * i + 1] = e.y;
      raw.ks[4 * i + 2] = e.z;
      raw.ks[4 * i + 3] = e.w;
    }
  };

  // Unpacks the K half (with_k) and / or the V half (with_v) of a loaded block into `stage`.
  auto unpack_raw = [&](const RawBlock<D>& raw, std::uint8_t* stage, bool with_k, bool with_v) {
    std::uint8_t* ks = stage;
    std::uint8_t* vs = stage + G::kKBytes;
    const std::uint32_t* ke = raw.ks;
#pragma unroll
    for (std::uint32_t i = 0; i < (with_k ? G::kWords : 0u); ++i) {
      const std::uint32_t w = tid + i * kThreads;
      const std::uint32_t t = w / G::kWordsPerToken;
      const std::uint32_t row = (t & ~15u) | PosIn16(t & 15u);
      std::uint32_t h[8];
#pragma unroll
      for (std::uint32_t j = 0; j < 8; ++j) {
        const __half2 scale = AsHalf2(__byte_perm(ke[j], ke[j + 8], 0x5410));
        const __half2 mn = AsHalf2(__byte_perm(ke[j], ke[j + 8], 0x7632));
        h[j] = DequantPair(raw.k[i], j, scale, mn);
      }
      *reinterpret_cast<uint4*>(ks + KOff<D>(row, d0k)) = make_uint4(h[0], h[1], h[2], h[3]);
      *reinterpret_cast<uint4*>(ks + KOff<D>(row, d0k + 8)) = make_uint4(h[4], h[5], h[6], h[7]);
    }
#pragma unroll
    for (std::uint32_t i = 0; i < (with_v ? G::kWords : 0u); ++i) {
      const std::uint32_t d = (tid + i * kThreads) / 4u;
      const __half2 scale = AsHalf2(__byte_perm(raw.vs[i], 0, 0x1010));
      const __half2 mn = AsHalf2(__byte_perm(raw.vs[i], 0, 0x3232));
      std::uint32_t h[8];
#pragma unroll
      for (std::uint32_t j = 0; j < 8; ++j) h[j] = DequantPair(raw.v[i], j, scale, mn);
      *reinterpret_cast<uint4*>(vs + VOff(d, t0v)) = make_uint4(h[0], h[1], h[2], h[3]);
      *reinterpret_cast<uint4*>(vs + VOff(d, t0v + 8)) = make_uint4(h[4], h[5], h[6], h[7]);
    }
  };

  // Unquantized tile: straight from the tail section (zeros past `count`).
  const bool bf16 = p.tail_bf16 != 0;
  const auto* tail = static_cast<const std::uint16_t*>(seq.tail);
  auto unpack_tail = [&](const Tile& tile, std::uint8_t* stage) {
    std::uint8_t* ks = stage;
    std::uint8_t* vs = stage + G::kKBytes;
    for (std::uint32_t item = tid; item < kP * (D / 16); item += kThreads) {
      const std::uint32_t t = item / (D / 16), d0 = item % (D / 16) * 16u;
      const std::uint32_t row = (t & ~15u) | PosIn16(t & 15u);
      std::uint32_t kv[2][8] = {};
      if (t < tile.count) {
        const std::uint32_t u = lay.unquantized_index(tile.start + t);
#pragma unroll
        for (std::uint32_t c = 0; c < 2; ++c) {
          const std::uint64_t off =
              ((std::uint64_t{p.layer} * 2u + c) * unquantized + u) * p.kv_heads * D +
              std::uint64_t{head} * D + d0;
          const uint4 a = __ldg(reinterpret_cast<const uint4*>(tail + off));
          const uint4 b = __ldg(reinterpret_cast<const uint4*>(tail + off + 8));
          const std::uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
          for (std::uint32_t e = 0; e < 8; ++e) {
            kv[c][e] = TailToHalf(w[e] & 0xffffu, bf16) | (TailToHalf(w[e] >> 16, bf16) << 16);
          }
        }
      }
      // K: half2 of channels (j, j + 8) at positions 2 j, 2 j + 1.
      std::uint32_t h[8];
#pragma unroll
      for (std::uint32_t j = 0; j < 8; ++j) {
        const std::uint32_t lo = (kv[0][j / 2] >> (16u * (j & 1u))) & 0xffffu;
        const std::uint32_t hi = (kv[0][4 + j / 2] >> (16u * (j & 1u))) & 0xffffu;
        h[j] = lo | (hi << 16);
      }
      *reinterpret_cast<uint4*>(ks + KOff<D>(row, d0)) = make_uint4(h[0], h[1], h[2], h[3]);
      *reinterpret_cast<uint4*>(ks + KOff<D>(row, d0 + 8)) = make_uint4(h[4], h[5], h[6], h[7]);
      // Vᵀ: channel d0 + e, key position `row`.
#pragma unroll
      for (std::uint32_t e = 0; e < 16; ++e) {
        *reinterpret_cast<std::uint16_t*>(vs + VOff(d0 + e, row)) =
            static_cast<std::uint16_t>(kv[1][e / 2] >> (16u * (e & 1u)));
      }
    }
  };

  // ---- this warp's rows: Q fragments (scaled, fp16, head_dim permuted as K's) ----
  const std::uint32_t ra = warp * 16u + g, rb = ra + 8u;
  const std::uint32_t rows_used = tokens_per_cta * group;
  auto row_query = [&](std::uint32_t r) -> std::uint32_t {  // query index, or ~0u
    const std::uint32_t qi = q0 + r / group;
    return r < rows_used && qi < q_end ? qi : ~0u;
  };
  const std::uint32_t qa = row_query(ra), qb = row_query(rb);
  const std::uint32_t qh_a = head * group + ra % group, qh_b = head * group + rb % group;
  const float* qpa = qa != ~0u ? p.q + (std::uint64_t{qa} * p.q_heads + qh_a) * D : nullptr;
  const float* qpb = qb != ~0u ? p.q + (std::uint64_t{qb} * p.q_heads + qh_b) * D : nullptr;
  // Causal bound per row (padding rows: every key; their outputs are not written).
  const std::uint32_t pos_a = qa != ~0u ? p.first_position + qa : 0xffffffffu;
  const std::uint32_t pos_b = qb != ~0u ? p.first_position + qb : 0xffffffffu;
  std::uint32_t qf[D / 16][4];
  {
    const float sc = p.scale_log2;
    auto ld = [&](const float* row, std::uint32_t d) { return row ? __ldg(row + d) * sc : 0.0f; };
#pragma unroll
    for (std::uint32_t kc = 0; kc < D / 16; ++kc) {
      const std::uint32_t b = kc * 16u + tq;  // positions 2 tq, 2 tq + 1 = channels tq, tq + 8
      qf[kc][0] = PackHalf2(ld(qpa, b), ld(qpa, b + 8));
      qf[kc][1] = PackHalf2(ld(qpb, b), ld(qpb, b + 8));
      qf[kc][2] = PackHalf2(ld(qpa, b + 4), ld(qpa, b + 12));
      qf[kc][3] = PackHalf2(ld(qpb, b + 4), ld(qpb, b + 12));
    }
  }

  float o[D / 8][4];
#pragma unroll
  for (std::uint32_t i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  // ---- tile loop ----
  const std::uint32_t smem_base = SharedAddress(smem);
  RawBlock<D> raw;
  Tile tile = geo.At(0);
  if (tile.block >= 0) {
    load_raw(static_cast<std::uint32_t>(tile.block), raw);
    unpack_raw(raw, smem, true, true);
  } else {
    unpack_tail(tile, smem);
  }
#if defined(KVDEPOT_HACK_PREFILL_WGMMA)
  constexpr bool kWgmma = D == 128;
  if constexpr (kWgmma) FenceProxyAsync();
#else
  constexpr bool kWgmma = false;
#endif
  // ldmatrix lane roles (mma.sync path): matrix lane / 8, row lane % 8.
  [[maybe_unused]] const std::uint32_t lm = lane >> 3, lr = lane & 7u;
  __syncthreads();
  for (std::uint32_t i = 0, stage = 0;; ++i, stage ^= 1u) {
    const Tile next = geo.At(i + 1);
    const bool has_next =
        i + 1 < geo.sink_tiles + geo.blocks + (seq.tokens - geo.tail_begin + kP - 1) / kP &&
        next.start <= max_key;
    if (has_next && next.block >= 0) load_raw(static_cast<std::uint32_t>(next.block), raw);

    const std::uint32_t k_base = smem_base + stage * G::kStageBytes;
    const std::uint32_t v_base = k_base + G::kKBytes;
    std::uint8_t* const next_stage = smem + (stage ^ 1u) * G::kStageBytes;
    float s[8][4];
    if constexpr (kWgmma) {
#if defined(KVDEPOT_HACK_PREFILL_WGMMA)
      // S = Q Kᵀ for the warpgroup's 64 rows: head_dim step kc is 32 bytes into K's panel kc / 4.
      WgmmaFence();
#pragma unroll
      for (std::uint32_t kc = 0; kc < D / 16; ++kc) {
        Wgmma(s, qf[kc], SwizzledDesc(k_base + (kc >> 2) * (kP * 128u) + (kc & 3u) * 32u), kc);
      }
      WgmmaCommit();
      // The next block's K is unpacked while the tensor cores run Q Kᵀ (its stage was last read by
      // the previous tile's wgmmas, which every warpgroup waited for before the last barrier).
      if (has_next && next.block >= 0) unpack_raw(raw, next_stage, true, false);
      WgmmaWaitAll();
      FenceOperands(s);
#endif
    } else {
#pragma unroll
      for (std::uint32_t n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (std::uint32_t kc = 0; kc < D / 16; ++kc) {
#pragma unroll
        for (std::uint32_t nt = 0; nt < 8; nt += 2) {
          std::uint32_t b[4];
          const std::uint32_t row = (nt + (lm >> 1)) * 8u + lr;
          Ldsm4(b, k_base + KOff<D>(row, (kc * 2u + (lm & 1u)) * 8u));
          MmaF16(s[nt], qf[kc], b[0], b[1]);
          MmaF16(s[nt + 1], qf[kc], b[2], b[3]);
        }
      }
    }
    // Mask: key offsets past the tile's count, or past a row's position.
    if (tile.count < kP || tile.start + kP - 1u > min_query) {
#pragma unroll
      for (std::uint32_t nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (std::uint32_t e = 0; e < 2; ++e) {
          const std::uint32_t off = (nt >> 1) * 16u + (nt & 1u) * 4u + tq + 8u * e;
          const std::uint32_t kp = tile.start + off;
          const bool valid = off < tile.count;
          if (!valid || kp > pos_a) s[nt][e] = -INFINITY;
          if (!valid || kp > pos_b) s[nt][2 + e] = -INFINITY;
        }
      }
    }
    // Online softmax (base 2; scores already scaled).
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (std::uint32_t nt = 0; nt < 8; ++nt) {
      mx_a = fmaxf(mx_a, fmaxf(s[nt][0], s[nt][1]));
      mx_b = fmaxf(mx_b, fmaxf(s[nt][2], s[nt][3]));
    }
#pragma unroll
    for (std::uint32_t x = 1; x <= 2; x <<= 1) {
      mx_a = fmaxf(mx_a, __shfl_xor_sync(kFull, mx_a, x));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(kFull, mx_b, x));
    }
    const float new_a = fmaxf(m_a, mx_a), new_b = fmaxf(m_b, mx_b);
    const float base_a = new_a == -INFINITY ? 0.0f : new_a;
    const float base_b = new_b == -INFINITY ? 0.0f : new_b;
    const float corr_a = Exp2(m_a - base_a), corr_b = Exp2(m_b - base_b);
    m_a = new_a;
    m_b = new_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (std::uint32_t nt = 0; nt < 8; ++nt) {
      s[nt][0] = Exp2(s[nt][0] - base_a);
      s[nt][1] = Exp2(s[nt][1] - base_a);
      s[nt][2] = Exp2(s[nt][2] - base_b);
      s[nt][3] = Exp2(s[nt][3] - base_b);
      sum_a += s[nt][0] + s[nt][1];
      sum_b += s[nt][2] + s[nt][3];
    }
    l_a = l_a * corr_a + sum_a;
    l_b = l_b * corr_b + sum_b;
    // Rescale O only when some row's maximum moved (multiplying by 1 changes nothing).
    if (__any_sync(kFull, corr_a != 1.0f || corr_b != 1.0f)) {
#pragma unroll
      for (std::uint32_t nd = 0; nd < D / 8; ++nd) {
        o[nd][0] *= corr_a;
        o[nd][1] *= corr_a;
        o[nd][2] *= corr_b;
        o[nd][3] *= corr_b;
      }
    }
    // O += P V.
    if constexpr (kWgmma) {
#if defined(KVDEPOT_HACK_PREFILL_WGMMA)
      std::uint32_t pa[4][4];
#pragma unroll
      for (std::uint32_t kk = 0; kk < 4; ++kk) {
        pa[kk][0] = PackHalf2(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = PackHalf2(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = PackHalf2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = PackHalf2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
      FenceOperands(o);
      WgmmaFence();
#pragma unroll
      for (std::uint32_t kk = 0; kk < 4; ++kk)
        Wgmma(o, pa[kk], SwizzledDesc(v_base + kk * 32u), 1u);
      WgmmaCommit();
      // The next block's V (or the whole unquantized next tile) is unpacked while they run P V.
      if (has_next) {
        if (next.block >= 0) {
          unpack_raw(raw, next_stage, false, true);
        } else {
          unpack_tail(next, next_stage);
        }
        FenceProxyAsync();
      }
      WgmmaWaitAll();
      FenceOperands(o);
      // P's registers are read by the wgmmas until they complete: keep them live (and unreused by
      // the unpack above) until the wait.
#pragma unroll
      for (std::uint32_t kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (std::uint32_t e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");
      }
      if (!has_next) break;
#endif
    } else {
#pragma unroll
      for (std::uint32_t kk = 0; kk < 4; ++kk) {
        const std::uint32_t a[4] = {PackHalf2(s[2 * kk][0], s[2 * kk][1]),
                                    PackHalf2(s[2 * kk][2], s[2 * kk][3]),
                                    PackHalf2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    PackHalf2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (std::uint32_t nd = 0; nd < D / 8; nd += 2) {
          std::uint32_t b[4];
          const std::uint32_t row = (nd + (lm >> 1)) * 8u + lr;
          Ldsm4(b, v_base + VOff(row, (kk * 2u + (lm & 1u)) * 8u));
          MmaF16(o[nd], a, b[0], b[1]);
          MmaF16(o[nd + 1], a, b[2], b[3]);
        }
      }

      if (!has_next) break;
      if (next.block >= 0) {
        unpack_raw(raw, next_stage, true, true);
      } else {
        unpack_tail(next, next_stage);
      }
    }
    tile = next;
    __syncthreads();
  }

  // ---- normalise and write ----
#pragma unroll
  for (std::uint32_t x = 1; x <= 2; x <<= 1) {
    l_a += __shfl_xor_sync(kFull, l_a, x);
    l_b += __shfl_xor_sync(kFull, l_b, x);
  }
  const float inv_a = 1.0f / l_a, inv_b = 1.0f / l_b;
  float* oa = qa != ~0u ? p.out + (std::uint64_t{qa} * p.q_heads + qh_a) * D : nullptr;
  float* ob = qb != ~0u ? p.out + (std::uint64_t{qb} * p.q_heads + qh_b) * D : nullptr;
#pragma unroll
  for (std::uint32_t nd = 0; nd < D / 8; ++nd) {
    const std::uint32_t d = nd * 8u + 2u * tq;
    if (oa) *reinterpret_cast<float2*>(oa + d) = make_float2(o[nd][0] * inv_a, o[nd][1] * inv_a);
    if (ob) *reinterpret_cast<float2*>(ob + d) = make_float2(o[nd][2] * inv_b, o[nd][3] * inv_b);
  }
  if (p.lse != nullptr && tq == 0) {
    constexpr float kLn2 = 0.69314718055994531f;
    if (oa) p.lse[std::uint64_t{qa} * p.q_heads + qh_a] = (m_a + log2f(l_a)) * kLn2;
    if (ob) p.lse[std::uint64_t{qb} * p.q_heads + qh_b] = (m_b + log2f(l_b)) * kLn2;
  }
}

std::atomic<std::size_t> g_fp16_smem[2][kMaxDevices];

}  // namespace

template <int HeadDim>
cudaError_t LaunchHackPrefillFp16(const HackAttentionParams& params, cudaStream_t stream) {
  static_assert(HeadDim == 64 || HeadDim == 128);
  if (params.group == 0 || params.group > 8 || params.queries == 0) return cudaErrorInvalidValue;
  const std::size_t smem = Fp16Geo<HeadDim>::kSmem;
  cudaError_t err = ConfigureSharedMemory(HackPrefillFp16Kernel<HeadDim>, smem,
                                          g_fp16_smem[HeadDim == 64 ? 0 : 1]);
  if (err != cudaSuccess) return err;
  const std::uint32_t tokens_per_cta = kRows / params.group;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3((params.queries + tokens_per_cta - 1) / tokens_per_cta, params.kv_heads);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  return cudaLaunchKernelEx(&config, HackPrefillFp16Kernel<HeadDim>, params);
}

template cudaError_t LaunchHackPrefillFp16<64>(const HackAttentionParams&, cudaStream_t);
template cudaError_t LaunchHackPrefillFp16<128>(const HackAttentionParams&, cudaStream_t);

}  // namespace kvdepot::cuda
