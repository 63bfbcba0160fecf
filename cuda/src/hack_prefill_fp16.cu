// Kernel family "hack", dequantize-on-load prefill (see kvdepot/cuda/hack.h, HackPrefillMath::
// kDequantFp16; docs/hack-gpu.md, "Prefill attention: the fp16 path"): causal (chunked) prefill
// over hack-int2 KV whose 2-bit codes are unpacked to fp16 in shared memory and multiplied on fp16
// tensor cores (fp32 accumulation). It computes attention over the dequantized KV — not HACK's
// homomorphic INT8 math — so its reference is kvdepot::PrefillAttention over
// kvdepot::DequantizeHack (tolerance at kHackDequantPrefillRelL2Tolerance in hack.h).
//
// Work decomposition (both kernels). A CTA owns 128 rows: the `group` query heads sharing one KV
// head, of 128 / group consecutive query tokens (row r = token r / group, head r % group); each of
// its 8 math warps owns 16 rows, their Q fragments in registers (fp16, pre-multiplied by the
// softmax scale in log2 units), their O accumulators and online-softmax state in registers. The
// CTA walks the key tiles of its causal range in position order: each tile is 64 keys, either one
// quantized HACK block or up to 64 unquantized sink / tail tokens, unpacked into a shared stage:
// code pairs become fp16 with one mask (LOP3; one shift per 16-code word) into the mantissas of
// 1024, one fp16 fma by powers of two giving the code, and one fp16 fused multiply-add with
// (scale, min) — min + code * scale rounded once to fp16, the value DequantizeHack produces in
// fp16 (see DequantPair). Per tile each warp computes
// S = Q Kᵀ (K [key][d]), causal mask, online softmax in fp32 base 2, O += P V (P from the S
// accumulators as fp16 A fragments; V stored transposed [d][key]).
//   - HackPrefillFp16WsKernel (head_dim 128 on sm_90a, compute capability 9.0): warp-specialised
//     (FlashAttention-3's schedule; see its comment): a producer warpgroup unpacks into a ring of
//     stages signalled by mbarriers, two consumer warpgroups (64 rows each) multiply on wgmma
//     (m64n64k16 for S, m64n128k16 for P V, A from registers, B read by the tensor cores from
//     shared memory through 128-byte-swizzle descriptors), taking turns on the tensor cores. Q
//     enters through a per-warp shared scratch (LoadQueriesThroughShared); the staged kernel's O
//     leaves by bulk copies from the freed stages (WriteThroughShared).
//     Staged (HackPrefillArgs::staging): HackPrefillFp16StageKernel first writes every tile's stage
//     image once per call to a global scratch, and the producer only bulk-copies them (TMA).
//   - HackPrefillFp16Kernel (head_dim 64, and other targets): 8 warps on mma.sync m16n8k16 with
//     ldmatrix B fragments; every thread loads the next tile's words before this tile's math and
//     unpacks them into the other of two stages after it (one __syncthreads per tile).
// The unpack writes a code pair (i, i + 8) of a 16-code word as one half2. So that no shuffle is
// needed, positions inside each 16-group are permuted the same way on both sides of each product:
// in K's head_dim (and Q's, loaded in that order), and in the key order (K's rows, the S / P
// columns, V's columns): position 2 j holds index j, position 2 j + 1 index j + 8.
// Shared tiles have 128-byte rows (K in panels of 64 head_dim columns) XOR-swizzled per 16-byte
// chunk (chunk ^ (row & 7)): wgmma's 128-byte swizzle, and free of ldmatrix bank conflicts. O is
// rescaled only when some row's running maximum moved (a warp vote; multiplying by 1 is exact).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "fast_exp2.cuh"
#include "hack_attention_shared.h"
#include "io_element.cuh"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/cuda/hack.h"
#include "launch.h"
#include "wgmma.cuh"

namespace kvdepot::cuda {

namespace {

using internal::ConfigureSharedMemory;
using internal::DispatchIo;
using internal::Exp2;
using internal::FenceOperands;
using internal::IoToFloat;
using internal::KeepLive;
using internal::kErrArch;
using internal::kErrPage;
using internal::kIoIndex;
using internal::kIoTypes;
using internal::kMaxDevices;
using internal::kP;  // keys per tile: one HACK block
using internal::SharedAddress;
using internal::StoreOut2;
using internal::WgmmaCommit;
using internal::WgmmaFence;
using internal::WgmmaWait;

constexpr std::uint32_t kWarps = 8;
constexpr std::uint32_t kThreads = kWarps * 32;
constexpr std::uint32_t kRows = kWarps * 16;  // rows (query token x head) per CTA
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

// sm_90a (the arch-specific target, __CUDA_ARCH_FEAT_SM90_ALL): wgmma, mbarriers, named barriers
// and setmaxnreg for the warp-specialised kernel (head_dim 128 only: a head_dim-64 wgmma build
// gave wrong results over sequences of more than one key tile on the H200, cause not found:
// docs/hack-gpu.md).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVDEPOT_HACK_PREFILL_WGMMA 1
// Shared-memory matrix descriptor of a K-major tile with 128-byte rows and the 128-byte swizzle, 8
// rows per 1024 bytes (stride byte offset 1024; the leading byte offset is unused for this layout).
__device__ __forceinline__ std::uint64_t SwizzledDesc(std::uint32_t shared_addr) {
  return static_cast<std::uint64_t>((shared_addr & 0x3ffffu) >> 4) |
         (static_cast<std::uint64_t>(1) << 16) | (static_cast<std::uint64_t>(1024 >> 4) << 32) |
         (static_cast<std::uint64_t>(1) << 62);
}
// Makes this thread's generic-proxy shared-memory writes visible to wgmma (the async proxy).
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// mbarrier in shared memory (state-space address `bar`): init with an arrival count, arrive
// (release, CTA scope), and wait until the phase of parity `parity` has completed (acquire).
__device__ __forceinline__ void MbarInit(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void MbarArrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void MbarWait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
  __syncwarp();  // reconverged for the .aligned instructions that follow
}
// Arrives at mbarrier `bar` and adds `bytes` to the transaction count its phase waits for.
__device__ __forceinline__ void MbarArriveExpectTx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
// Bulk asynchronous copy (TMA, 1-D) of `bytes` (a multiple of 16) from global `src` to shared `dst`
// (both 16-byte aligned), completing `bytes` transactions on mbarrier `bar`.
__device__ __forceinline__ void BulkCopyToShared(std::uint32_t dst, const void* src,
                                                 std::uint32_t bytes, std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// Bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from shared to global
// memory in this thread's bulk group; the shared writes before it need FenceProxyAsync.
__device__ __forceinline__ void BulkCopyToGlobal(void* dst, std::uint32_t src,
                                                 std::uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
// Commits this thread's bulk copies and waits until they have read their shared memory.
__device__ __forceinline__ void BulkCommitAndWaitRead() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// Named barrier `id` (1..15) over `count` threads: wait for it, or only arrive at it.
__device__ __forceinline__ void NamedBarSync(std::uint32_t id, std::uint32_t count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void NamedBarArrive(std::uint32_t id, std::uint32_t count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
// Sets this warpgroup's per-thread register count (all its threads, warpgroup-aligned).
template <std::uint32_t kRegs, bool kInc>
__device__ __forceinline__ void SetMaxNReg() {
  if constexpr (kInc) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
  }
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
// Code pair j (0..7, a compile-time constant once unrolled) of a 16-code word `word` (codes j and
// j + 8), dequantized: min + code * scale, one rounding; `hi` must be word >> 10. The pair is
// masked in place into the mantissas of two fp16 1024s — pairs 0..4 from `word` at bits 2 j, pairs
// 5..7 from `hi` at bits 2 (j - 5), so never above bit 9 — giving 1024 + code * 4^k (k = j or
// j - 5): one LOP3, no shift. The first fma, by 4^-k and -1024 * 4^-k, gives the code exactly (both
// are powers of two: the product is exact and normal, the sum an integer 0..3), the second the
// value.
__device__ __forceinline__ std::uint32_t DequantPair(std::uint32_t word, std::uint32_t hi,
                                                     std::uint32_t j, __half2 scale, __half2 min) {
  const std::uint32_t k = j < 5u ? j : j - 5u;
  const std::uint32_t biased = ((j < 5u ? word : hi) & (0x00030003u << (2u * k))) | 0x64006400u;
  const std::uint32_t inv = (15u - 2u * k) << 10;              // fp16 4^-k
  const std::uint32_t neg = 0x8000u | ((25u - 2u * k) << 10);  // fp16 -1024 * 4^-k
  const __half2 code =
      __hfma2(AsHalf2(biased), AsHalf2(inv | (inv << 16)), AsHalf2(neg | (neg << 16)));
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

__host__ __device__ inline std::uint32_t Min(std::uint32_t a, std::uint32_t b) {
  return a < b ? a : b;
}

struct SeqGeometry {
  std::uint32_t sinks, blocks, tail_begin, tokens, sink_tiles;
  // The sequence's layout at head_dim D, and its tiles.
  template <int D>
  static __device__ hack::Layout LayoutOf(const HackAttentionParams& p) {
    hack::Layout lay;
    lay.layers = p.layers;
    lay.tokens = p.prefill_seq.tokens;
    lay.heads = p.kv_heads;
    lay.dim = D;
    lay.partition = kP;
    lay.sinks = p.prefill_seq.sinks;
    return lay;
  }
  static __host__ __device__ SeqGeometry Of(const hack::Layout& lay) {
    return {lay.sinks, lay.blocks(), lay.tail_begin(), lay.tokens, (lay.sinks + kP - 1) / kP};
  }
  // Number of tiles that start at or before `max_key` (tiles start in increasing position order;
  // tile 0 starts at 0, so at least 1).
  __host__ __device__ std::uint32_t Count(std::uint32_t max_key) const {
    const std::uint32_t last = Min(max_key, tokens - 1u);
    std::uint32_t n = Min(sink_tiles, last / kP + 1u);
    if (last >= sinks && blocks > 0) n += Min(blocks, (last - sinks) / kP + 1u);
    if (last >= tail_begin) n += (last - tail_begin) / kP + 1u;
    return n;
  }
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

// Registers holding one quantized block's K and V code words and (scale, min) pairs, for one of
// kN threads that share the block's 4 D K words and 4 D V words.
template <int D, std::uint32_t kN>
struct RawBlock {
  static constexpr std::uint32_t kWords = 4u * D / kN;  // K (and V) code words per thread
  std::uint32_t k[kWords];
  std::uint32_t v[kWords];
  std::uint32_t ks[16];      // K entries of channels d0k .. d0k + 15
  std::uint32_t vs[kWords];  // V entry of each V word's channel
};

// The sequence's key tiles for one (CTA, KV head), and the loads / unpacks that fill a shared
// stage with one of them, shared among kN threads (thread index t): K word t + kN i is token
// (t + kN i) / (D / 16), channels d0k .. d0k + 15; V word t + kN i is channel (t + kN i) / 4,
// key positions t0v .. t0v + 15.
template <int D, std::uint32_t kN>
struct KvSource {
  using G = Fp16Geo<D>;
  using Raw = RawBlock<D, kN>;
  static_assert(kN % (D / 16) == 0 && kN % 4 == 0, "a thread's words share d0k and t0v");

  const HackAttentionParams& p;
  const HackAttentionSeq& seq;
  std::uint32_t t, head, d0k, t0v, unquantized;
  hack::Layout lay;
  SeqGeometry geo;
  std::uint64_t k_codes0, v_codes0, k_scales0, v_scales0;

  __device__ KvSource(const HackAttentionParams& params, std::uint32_t thread, std::uint32_t kv)
      : p(params), seq(params.prefill_seq), t(thread), head(kv) {
    d0k = (t % G::kWordsPerToken) * 16u;
    t0v = (t % 4u) * 16u;
    lay = SeqGeometry::LayoutOf<D>(p);
    geo = SeqGeometry::Of(lay);
    unquantized = lay.unquantized_tokens();
    // Block j's K / V codes and scales. Contiguous: consecutive blocks of a (layer, kv, head) are
    // consecutive groups; paged: slot j % page_blocks of page block_tables[j / page_blocks].
    hack::Layout base_lay = lay;
    if (p.page_blocks != 0) {
      base_lay.tokens = p.page_blocks * kP;
      base_lay.sinks = 0;
    }
    k_codes0 = base_lay.group(p.layer, 0, head, 0) * (kP * D / 4);
    v_codes0 = base_lay.group(p.layer, 1, head, 0) * (kP * D / 4);
    k_scales0 = base_lay.partition_base(p.layer, 0, head, 0) * 4u;
    v_scales0 = base_lay.partition_base(p.layer, 1, head, 0) * 4u;
  }

  __device__ void BlockBases(std::uint32_t j, const std::uint8_t*& codes,
                             const std::uint8_t*& scales) const {
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
  }

  // Loads block j's K half (with_k) and / or V half (with_v) into `raw`.
  __device__ void Load(std::uint32_t j, Raw& raw, bool with_k, bool with_v) const {
    const std::uint8_t* codes;
    const std::uint8_t* scales;
    BlockBases(j, codes, scales);
    if (with_k) {
      const auto* kw = reinterpret_cast<const std::uint32_t*>(codes + k_codes0);
      const auto* ksp = reinterpret_cast<const uint4*>(scales + k_scales0) + d0k / 4u;
#pragma unroll
      for (std::uint32_t i = 0; i < Raw::kWords; ++i) raw.k[i] = __ldg(kw + t + i * kN);
#pragma unroll
      for (std::uint32_t i = 0; i < 4; ++i) {
        const uint4 e = __ldg(ksp + i);
        raw.ks[4 * i] = e.x;
        raw.ks[4 * i + 1] = e.y;
        raw.ks[4 * i + 2] = e.z;
        raw.ks[4 * i + 3] = e.w;
      }
    }
    if (with_v) {
      const auto* vw = reinterpret_cast<const std::uint32_t*>(codes + v_codes0);
      const auto* vsp = reinterpret_cast<const std::uint32_t*>(scales + v_scales0);
#pragma unroll
      for (std::uint32_t i = 0; i < Raw::kWords; ++i) {
        raw.v[i] = __ldg(vw + t + i * kN);
        raw.vs[i] = __ldg(vsp + (t + i * kN) / 4u);
      }
    }
  }

  // Unpacks the K half (with_k) and / or the V half (with_v) of a loaded block into `stage`.
  __device__ void Unpack(const Raw& raw, std::uint8_t* stage, bool with_k, bool with_v) const {
    std::uint8_t* ks = stage;
    std::uint8_t* vs = stage + G::kKBytes;
    const std::uint32_t* ke = raw.ks;
#pragma unroll
    for (std::uint32_t i = 0; i < (with_k ? Raw::kWords : 0u); ++i) {
      const std::uint32_t w = t + i * kN;
      const std::uint32_t tok = w / G::kWordsPerToken;
      const std::uint32_t row = (tok & ~15u) | PosIn16(tok & 15u);
      std::uint32_t h[8];
#pragma unroll
      for (std::uint32_t j = 0; j < 8; ++j) {
        const __half2 scale = AsHalf2(__byte_perm(ke[j], ke[j + 8], 0x5410));
        const __half2 mn = AsHalf2(__byte_perm(ke[j], ke[j + 8], 0x7632));
        h[j] = DequantPair(raw.k[i], raw.k[i] >> 10, j, scale, mn);
      }
      *reinterpret_cast<uint4*>(ks + KOff<D>(row, d0k)) = make_uint4(h[0], h[1], h[2], h[3]);
      *reinterpret_cast<uint4*>(ks + KOff<D>(row, d0k + 8)) = make_uint4(h[4], h[5], h[6], h[7]);
    }
#pragma unroll
    for (std::uint32_t i = 0; i < (with_v ? Raw::kWords : 0u); ++i) {
      const std::uint32_t d = (t + i * kN) / 4u;
      const __half2 scale = AsHalf2(__byte_perm(raw.vs[i], 0, 0x1010));
      const __half2 mn = AsHalf2(__byte_perm(raw.vs[i], 0, 0x3232));
      std::uint32_t h[8];
#pragma unroll
      for (std::uint32_t j = 0; j < 8; ++j)
        h[j] = DequantPair(raw.v[i], raw.v[i] >> 10, j, scale, mn);
      *reinterpret_cast<uint4*>(vs + VOff(d, t0v)) = make_uint4(h[0], h[1], h[2], h[3]);
      *reinterpret_cast<uint4*>(vs + VOff(d, t0v + 8)) = make_uint4(h[4], h[5], h[6], h[7]);
    }
  }

  // Unquantized tile: straight from the tail section (zeros past `count`).
  __device__ void UnpackTail(const Tile& tile, std::uint8_t* stage) const {
    const bool bf16 = p.tail_bf16 != 0;
    const auto* tail = static_cast<const std::uint16_t*>(seq.tail);
    std::uint8_t* ks = stage;
    std::uint8_t* vs = stage + G::kKBytes;
    for (std::uint32_t item = t; item < kP * (D / 16); item += kN) {
      const std::uint32_t tok = item / (D / 16), d0 = item % (D / 16) * 16u;
      const std::uint32_t row = (tok & ~15u) | PosIn16(tok & 15u);
      std::uint32_t kv[2][8] = {};
      if (tok < tile.count) {
        const std::uint32_t u = lay.unquantized_index(tile.start + tok);
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
  }

  // Fills `stage` with tile `tile` (loading a quantized block's words first).
  __device__ void Fill(const Tile& tile, std::uint8_t* stage) const {
    if (tile.block >= 0) {
      Raw raw;
      Load(static_cast<std::uint32_t>(tile.block), raw, true, true);
      Unpack(raw, stage, true, true);
    } else {
      UnpackTail(tile, stage);
    }
  }
};

// The query rows of a CTA: 128 / group consecutive query tokens, latest first (they have the most
// keys, causal).
struct CtaQueries {
  std::uint32_t q0, q_end, rows_used, max_key, min_query;
  __device__ explicit CtaQueries(const HackAttentionParams& p) {
    const std::uint32_t tokens_per_cta = kRows / p.group;
    q0 = (gridDim.x - 1u - blockIdx.x) * tokens_per_cta;
    q_end = min(p.queries, q0 + tokens_per_cta);
    rows_used = tokens_per_cta * p.group;
    max_key = p.first_position + q_end - 1u;
    min_query = p.first_position + q0;
  }
};

// One thread's two rows a = 16 w + g and b = a + 8 of its warp w's 16 (w: the warp's index among
// the CTA's 8 math warps), in mma.sync's (and wgmma's) accumulator layout: Q fragments (fp16,
// scaled by softmax_scale·log2 e, head_dim permuted as K's), O accumulators and the online softmax.
// Shared memory per warp of RowsState::LoadQueriesThroughShared (16 rows of D fp16) and of
// RowsState::WriteThroughShared (16 rows of D fp32, each padded by 32 bytes so that the 8 rows a
// store instruction writes start 8 banks apart).
template <int D>
constexpr std::uint32_t kQueryScratchBytes = 16u * D * 2u;
template <int D>
constexpr std::uint32_t kOutRowBytes = D * 4u + 32u;
template <int D>
constexpr std::uint32_t kOutScratchBytes = 16u * kOutRowBytes<D>;

template <int D>
struct RowsState {
  std::uint32_t qa, qb, qh_a, qh_b, pos_a, pos_b;
  std::uint32_t qf[D / 16][4];
  float o[D / 8][4];
  float m_a, m_b, l_a, l_b;

  // Rows, causal bounds and the softmax state; the Q fragments come from one of the two loaders
  // below (the same fp16 values: q · softmax_scale · log2 e, rounded once).
  __device__ RowsState(const HackAttentionParams& p, const CtaQueries& cq, std::uint32_t warp,
                       std::uint32_t lane) {
    const std::uint32_t g = lane >> 2, group = p.group, head = blockIdx.y;
    const std::uint32_t ra = warp * 16u + g, rb = ra + 8u;
    qa = RowQuery(cq, group, ra);
    qb = RowQuery(cq, group, rb);
    qh_a = head * group + ra % group;
    qh_b = head * group + rb % group;
    // Causal bound per row (padding rows: every key; their outputs are not written).
    pos_a = qa != ~0u ? p.first_position + qa : 0xffffffffu;
    pos_b = qb != ~0u ? p.first_position + qb : 0xffffffffu;
#pragma unroll
    for (std::uint32_t i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    m_a = m_b = -INFINITY;
    l_a = l_b = 0.0f;
  }

  // Query index of CTA row r, or ~0u for a padding row.
  static __device__ std::uint32_t RowQuery(const CtaQueries& cq, std::uint32_t group,
                                           std::uint32_t r) {
    const std::uint32_t qi = cq.q0 + r / group;
    return r < cq.rows_used && qi < cq.q_end ? qi : ~0u;
  }

  // Each lane loads its own fragments' elements (4-byte loads, 4 channels apart).
  template <typename IoT>
  __device__ void LoadQueries(const HackAttentionParams& p, std::uint32_t lane) {
    const std::uint32_t tq = lane & 3u;
    const IoT* const q = reinterpret_cast<const IoT*>(p.q);
    const IoT* qpa = qa != ~0u ? q + (std::uint64_t{qa} * p.q_heads + qh_a) * D : nullptr;
    const IoT* qpb = qb != ~0u ? q + (std::uint64_t{qb} * p.q_heads + qh_b) * D : nullptr;
    const float sc = p.scale_log2;
    auto ld = [&](const IoT* row, std::uint32_t d) {
      return row ? IoToFloat(__ldg(row + d)) * sc : 0.0f;
    };
#pragma unroll
    for (std::uint32_t kc = 0; kc < D / 16; ++kc) {
      const std::uint32_t b = kc * 16u + tq;  // positions 2 tq, 2 tq + 1 = channels tq, tq + 8
      qf[kc][0] = PackHalf2(ld(qpa, b), ld(qpa, b + 8));
      qf[kc][1] = PackHalf2(ld(qpb, b), ld(qpb, b + 8));
      qf[kc][2] = PackHalf2(ld(qpa, b + 4), ld(qpa, b + 12));
      qf[kc][3] = PackHalf2(ld(qpb, b + 4), ld(qpb, b + 12));
    }
  }

  // The same fragments through `scratch` (this warp's kQueryScratchBytes<D> of shared memory): lane
  // L loads channels 4 L .. 4 L + 3 of each of the warp's 16 rows (16-byte loads, a row's 512 bytes
  // per instruction, all 16 in flight), stores them as fp16 in fragment order — row r's 16-group
  // kc as 8-byte pieces [tq] = channels (tq, tq + 8, tq + 4, tq + 12), piece index XOR (r & 7) so
  // that the reads below are free of bank conflicts — and each lane reads its two rows' pieces
  // (qf[kc][0], [2] and [1], [3]) back with 8-byte loads. Against LoadQueries (128 4-byte loads
  // per lane, each warp instruction touching 8 rows' sectors) the staged 4K prompt took ~18 µs
  // less of ~570 (session 20).
  // 16-bit q: 8-byte loads (a row is 256 bytes), widened to the same floats.
  template <typename IoT>
  __device__ void LoadQueriesThroughShared(const HackAttentionParams& p, const CtaQueries& cq,
                                           std::uint32_t warp, std::uint32_t lane,
                                           std::uint8_t* scratch) {
    static_assert(D == 128, "one 16-byte load per lane covers a row");
    // A lane's 4 channels of a row: 16 bytes of fp32, 8 of fp16 / bf16.
    using Chunk = std::conditional_t<sizeof(IoT) == 4, float4, uint2>;
    const std::uint32_t group = p.group, head = blockIdx.y;
    const float sc = p.scale_log2;
    Chunk v[16];
#pragma unroll
    for (std::uint32_t i = 0; i < 16; ++i) {
      const std::uint32_t r = warp * 16u + i, qi = RowQuery(cq, group, r);
      v[i] = Chunk{};
      if (qi != ~0u) {
        const IoT* row = reinterpret_cast<const IoT*>(p.q) +
                         (std::uint64_t{qi} * p.q_heads + head * group + r % group) * D;
        v[i] = __ldg(reinterpret_cast<const Chunk*>(row) + lane);
      }
    }
    const std::uint32_t kc = lane >> 2, m = lane & 3u;      // channels 16 kc + 4 m + j, j = 0..3
    const std::uint32_t slot = ((m & 1u) << 1) | (m >> 1);  // 4 m + j sits in piece j, half slot
#pragma unroll
    for (std::uint32_t i = 0; i < 16; ++i) {
      __half* const piece_row = reinterpret_cast<__half*>(scratch + i * (D * 2u));
      float x[4];
#pragma unroll
      for (std::uint32_t j = 0; j < 4; ++j) {
        if constexpr (sizeof(IoT) == 4) {
          x[j] = j == 0 ? v[i].x : j == 1 ? v[i].y : j == 2 ? v[i].z : v[i].w;
        } else {
          x[j] = IoToFloat<IoT>(v[i], j);
        }
      }
#pragma unroll
      for (std::uint32_t j = 0; j < 4; ++j) {
        piece_row[((kc ^ (i & 7u)) * 4u + j) * 4u + slot] = __float2half_rn(x[j] * sc);
      }
    }
    __syncwarp();
    const std::uint32_t g = lane >> 2, tq = lane & 3u;
#pragma unroll
    for (std::uint32_t c = 0; c < D / 16; ++c) {
      const uint2 a =
          *reinterpret_cast<const uint2*>(scratch + g * (D * 2u) + ((c ^ g) * 4u + tq) * 8u);
      const uint2 b =
          *reinterpret_cast<const uint2*>(scratch + (g + 8u) * (D * 2u) + ((c ^ g) * 4u + tq) * 8u);
      qf[c][0] = a.x;
      qf[c][2] = a.y;
      qf[c][1] = b.x;
      qf[c][3] = b.y;
    }
  }

  // Masks S (key offsets past a tile's count, or past a row's position) and turns it into P in
  // place (base 2; scores already scaled), updating the running maximum and sum; returns the
  // factors O must be multiplied by (corr_a, corr_b) before P V is added. S holds kN / 8 key tiles
  // side by side: columns 64 h .. 64 h + 63 (s[8 h .. 8 h + 7]) are tiles[h]; one maximum, one
  // sum and one correction for all of them.
  template <std::uint32_t kN>
  __device__ void Softmax(float (&s)[kN][4], const Tile* tiles, std::uint32_t min_query,
                          std::uint32_t tq, float& corr_a, float& corr_b) {
#pragma unroll
    for (std::uint32_t h = 0; h < kN / 8u; ++h) {
      const Tile& tile = tiles[h];
      if (tile.count < kP || tile.start + kP - 1u > min_query) {
#pragma unroll
        for (std::uint32_t nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (std::uint32_t e = 0; e < 2; ++e) {
            const std::uint32_t off = (nt >> 1) * 16u + (nt & 1u) * 4u + tq + 8u * e;
            const std::uint32_t kp = tile.start + off;
            const bool valid = off < tile.count;
            if (!valid || kp > pos_a) s[8u * h + nt][e] = -INFINITY;
            if (!valid || kp > pos_b) s[8u * h + nt][2 + e] = -INFINITY;
          }
        }
      }
    }
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (std::uint32_t nt = 0; nt < kN; ++nt) {
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
    corr_a = Exp2(m_a - base_a);
    corr_b = Exp2(m_b - base_b);
    m_a = new_a;
    m_b = new_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (std::uint32_t nt = 0; nt < kN; ++nt) {
      s[nt][0] = Exp2(s[nt][0] - base_a);
      s[nt][1] = Exp2(s[nt][1] - base_a);
      s[nt][2] = Exp2(s[nt][2] - base_b);
      s[nt][3] = Exp2(s[nt][3] - base_b);
      sum_a += s[nt][0] + s[nt][1];
      sum_b += s[nt][2] + s[nt][3];
    }
    l_a = l_a * corr_a + sum_a;
    l_b = l_b * corr_b + sum_b;
  }

  // O *= corr, skipped when no row of the warp moved its maximum (multiplying by 1 changes
  // nothing).
  __device__ void Rescale(float corr_a, float corr_b) {
    if (__any_sync(kFull, corr_a != 1.0f || corr_b != 1.0f)) {
#pragma unroll
      for (std::uint32_t nd = 0; nd < D / 8; ++nd) {
        o[nd][0] *= corr_a;
        o[nd][1] *= corr_a;
        o[nd][2] *= corr_b;
        o[nd][3] *= corr_b;
      }
    }
  }

  // Normalises O and writes it (and the log-sum-exp) for the rows that are real queries.
  template <typename IoT>
  __device__ void Write(const HackAttentionParams& p, std::uint32_t tq) {
    float inv_a, inv_b;
    FinishSums(inv_a, inv_b);
    IoT* const out = reinterpret_cast<IoT*>(p.out);
    IoT* oa = qa != ~0u ? out + (std::uint64_t{qa} * p.q_heads + qh_a) * D : nullptr;
    IoT* ob = qb != ~0u ? out + (std::uint64_t{qb} * p.q_heads + qh_b) * D : nullptr;
#pragma unroll
    for (std::uint32_t nd = 0; nd < D / 8; ++nd) {
      const std::uint32_t d = nd * 8u + 2u * tq;
      if (oa) StoreOut2(oa + d, o[nd][0] * inv_a, o[nd][1] * inv_a);
      if (ob) StoreOut2(ob + d, o[nd][2] * inv_b, o[nd][3] * inv_b);
    }
    WriteLse(p, tq);
  }

  // Sums l_a, l_b over the row's quad and gives the factors that normalise O.
  __device__ void FinishSums(float& inv_a, float& inv_b) {
#pragma unroll
    for (std::uint32_t x = 1; x <= 2; x <<= 1) {
      l_a += __shfl_xor_sync(kFull, l_a, x);
      l_b += __shfl_xor_sync(kFull, l_b, x);
    }
    inv_a = 1.0f / l_a;
    inv_b = 1.0f / l_b;
  }

  // The log-sum-exp of the real rows (l_a, l_b already summed over the quad).
  __device__ void WriteLse(const HackAttentionParams& p, std::uint32_t tq) const {
    if (p.lse != nullptr && tq == 0) {
      constexpr float kLn2 = 0.69314718055994531f;
      if (qa != ~0u) p.lse[std::uint64_t{qa} * p.q_heads + qh_a] = (m_a + log2f(l_a)) * kLn2;
      if (qb != ~0u) p.lse[std::uint64_t{qb} * p.q_heads + qh_b] = (m_b + log2f(l_b)) * kLn2;
    }
  }

#if defined(KVDEPOT_HACK_PREFILL_WGMMA)
  // Write's values (the same products, the same bits) through `scratch` (this warp's
  // kOutScratchBytes<D> of shared memory, 16-byte aligned): the lanes store their normalised O
  // pairs into the warp's 16 rows there, then lane r < 16 copies row r to its place in `out` with
  // one bulk copy (a row is D contiguous elements). Against Write (fragment pairs stored straight
  // to global memory, 8 rows' lines per instruction) the staged 4K prompt took ~6 µs less (session
  // 20). Needs out 16-byte aligned (the launcher checks it).
  template <typename IoT>
  __device__ void WriteThroughShared(const HackAttentionParams& p, const CtaQueries& cq,
                                     std::uint32_t warp, std::uint32_t lane,
                                     std::uint8_t* scratch) {
    const std::uint32_t g = lane >> 2, tq = lane & 3u;
    float inv_a, inv_b;
    FinishSums(inv_a, inv_b);
    WriteLse(p, tq);
    IoT* const row_a = reinterpret_cast<IoT*>(scratch + g * kOutRowBytes<D>);
    IoT* const row_b = reinterpret_cast<IoT*>(scratch + (g + 8u) * kOutRowBytes<D>);
#pragma unroll
    for (std::uint32_t nd = 0; nd < D / 8; ++nd) {
      const std::uint32_t d = nd * 8u + 2u * tq;
      StoreOut2(row_a + d, o[nd][0] * inv_a, o[nd][1] * inv_a);
      StoreOut2(row_b + d, o[nd][2] * inv_b, o[nd][3] * inv_b);
    }
    FenceProxyAsync();  // the stores above, visible to the bulk copies (async proxy)
    __syncwarp();
    if (lane < 16u) {
      const std::uint32_t r = warp * 16u + lane, qi = RowQuery(cq, p.group, r);
      if (qi != ~0u) {
        IoT* const dst = reinterpret_cast<IoT*>(p.out) +
                         (std::uint64_t{qi} * p.q_heads + blockIdx.y * p.group + r % p.group) * D;
        BulkCopyToGlobal(dst, SharedAddress(scratch + lane * kOutRowBytes<D>), D * sizeof(IoT));
      }
      BulkCommitAndWaitRead();  // the CTA's shared memory outlives the reads
    }
  }
#endif
};

// P (the softmax's S registers) as fp16 A fragments of the P V product, one per 16 keys.
template <std::uint32_t kN>
__device__ __forceinline__ void PackP(const float (&s)[kN][4], std::uint32_t (&pa)[kN / 2][4]) {
#pragma unroll
  for (std::uint32_t kk = 0; kk < kN / 2u; ++kk) {
    pa[kk][0] = PackHalf2(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = PackHalf2(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = PackHalf2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = PackHalf2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// mma.sync kernel (head_dim 64, and head_dim 128 without sm_90a): 8 warps, each its 16 rows, every
// thread loading and unpacking the next tile into the other of two stages after P V (one
// __syncthreads per tile). IoT: q's and out's element (io_element.cuh).
template <int D, typename IoT>
__global__ void __launch_bounds__(kThreads, 1)
    HackPrefillFp16Kernel(const __grid_constant__ HackAttentionParams p) {
  using G = Fp16Geo<D>;
  extern __shared__ __align__(128) std::uint8_t smem_raw[];
  std::uint8_t* const smem = smem_raw + ((1024u - (SharedAddress(smem_raw) & 1023u)) & 1023u);
  const std::uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
  const std::uint32_t tq = lane & 3u;
  const CtaQueries cq(p);
  const KvSource<D, kThreads> src(p, tid, blockIdx.y);
  const std::uint32_t n_tiles = src.geo.Count(cq.max_key);
  RowsState<D> rs(p, cq, warp, lane);
  rs.template LoadQueries<IoT>(p, lane);

  const std::uint32_t smem_base = SharedAddress(smem);
  typename KvSource<D, kThreads>::Raw raw;
  Tile tile = src.geo.At(0);
  src.Fill(tile, smem);
  // ldmatrix lane roles: matrix lane / 8, row lane % 8.
  const std::uint32_t lm = lane >> 3, lr = lane & 7u;
  __syncthreads();
  for (std::uint32_t i = 0, stage = 0;; ++i, stage ^= 1u) {
    const Tile next = src.geo.At(i + 1);
    const bool has_next = i + 1 < n_tiles;
    if (has_next && next.block >= 0) {
      src.Load(static_cast<std::uint32_t>(next.block), raw, true, true);
    }
    const std::uint32_t k_base = smem_base + stage * G::kStageBytes;
    const std::uint32_t v_base = k_base + G::kKBytes;
    float s[8][4];
#pragma unroll
    for (std::uint32_t n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (std::uint32_t kc = 0; kc < D / 16; ++kc) {
#pragma unroll
      for (std::uint32_t nt = 0; nt < 8; nt += 2) {
        std::uint32_t b[4];
        const std::uint32_t row = (nt + (lm >> 1)) * 8u + lr;
        Ldsm4(b, k_base + KOff<D>(row, (kc * 2u + (lm & 1u)) * 8u));
        MmaF16(s[nt], rs.qf[kc], b[0], b[1]);
        MmaF16(s[nt + 1], rs.qf[kc], b[2], b[3]);
      }
    }
    float corr_a, corr_b;
    rs.Softmax(s, &tile, cq.min_query, tq, corr_a, corr_b);
    rs.Rescale(corr_a, corr_b);
    std::uint32_t pa[4][4];
    PackP(s, pa);
#pragma unroll
    for (std::uint32_t kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (std::uint32_t nd = 0; nd < D / 8; nd += 2) {
        std::uint32_t b[4];
        const std::uint32_t row = (nd + (lm >> 1)) * 8u + lr;
        Ldsm4(b, v_base + VOff(row, (kk * 2u + (lm & 1u)) * 8u));
        MmaF16(rs.o[nd], pa[kk], b[0], b[1]);
        MmaF16(rs.o[nd + 1], pa[kk], b[2], b[3]);
      }
    }
    if (!has_next) break;
    std::uint8_t* const next_stage = smem + (stage ^ 1u) * G::kStageBytes;
    if (next.block >= 0) {
      src.Unpack(raw, next_stage, true, true);
    } else {
      src.UnpackTail(next, next_stage);
    }
    tile = next;
    __syncthreads();
  }
  rs.template Write<IoT>(p, tq);
}

// Warp-specialised kernel (head_dim 128 on sm_90a; FlashAttention-3's schedule): 3 warpgroups.
// Warpgroup 0, the producer, loads each key tile's code words and (scale, min) pairs (or its
// unquantized tokens) and unpacks them into a ring of kStages shared stages, signalling "full"
// with an mbarrier per stage (its 128 threads arrive after a fence.proxy.async, so the consumers'
// wgmmas see the generic stores); it waits for the stage's "empty" mbarrier (one arrival per
// consumer warp) before refilling it. Warpgroups 1 and 2, the consumers, own 64 rows each and only
// multiply and run the softmax: per tile i they issue S(i) = Q K(i)ᵀ and O += P(i−1) V(i−1) back to
// back, wait for S(i) alone, run its softmax while P V runs, then wait for P V, release tile i−1's
// stage and rescale O. The two consumers take turns to issue (named barriers 1 and 2, 256
// threads: one syncs, the other arrives), so one's softmax runs while the other's products occupy
// the tensor cores. Registers: setmaxnreg moves them from the producer to the consumers: 128 · 88
// + 256 · 208 = 384 · 168, what the launch allocates (with fewer producer registers ptxas spills in
// the producer's unpack; the consumers fit in 208).
// Staged (kStaged): the producer is one lane issuing one bulk copy per tile, so it keeps 24
// registers and the consumers get 240 (128 · 24 + 256 · 240 = 384 · 168): enough for a 128-key
// iteration with Q still in registers. Per iteration j a consumer takes tiles 2 j and 2 j + 1 (two
// stages): S of both (two m64n64k16 sets into one 64 x 128 accumulator) and O += P V of the
// previous pair (eight m64n128k16 k-steps, four per stage), one softmax (one maximum, one
// correction, at most one O rescale) per 128 keys, one ping-pong turn per pair, both stages
// released after the pair's P V. An odd tile count's last pair reads its one tile's stage twice and
// masks the second half whole (P = 0 there). The ring has 6 stages: a consumer holds 4 (the pair
// whose S it issues, the pair whose P V runs).
constexpr std::uint32_t kWsThreads = 384;
template <bool kStaged>
struct WsConfig {
  static constexpr std::uint32_t kStages = kStaged ? 6 : 3;
  static constexpr std::uint32_t kProducerRegs = kStaged ? 24 : 88;
  static constexpr std::uint32_t kConsumerRegs = kStaged ? 240 : 208;
  // setmaxnreg.inc waits until the registers are free: the split must be exactly what a 384-thread
  // launch of __launch_bounds__(384, 1) allocates.
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs == 168 * kWsThreads);
  // The stages, then the consumers' query scratch (8 warps x 16 rows x 128 fp16).
  static constexpr std::uint32_t kSmem =
      kStages * Fp16Geo<128>::kStageBytes + 8u * kQueryScratchBytes<128> + 1024;
  static_assert(kSmem <= 227u * 1024u - 2u * 8u * kStages);
};
static_assert(Fp16Geo<128>::kStageBytes == kHackPrefillStageBytes);

template <bool kStaged, typename IoT>
__global__ void __launch_bounds__(kWsThreads, 1)
    HackPrefillFp16WsKernel(const __grid_constant__ HackAttentionParams p) {
#if defined(KVDEPOT_HACK_PREFILL_WGMMA)
  constexpr int D = 128;
  using G = Fp16Geo<D>;
  using Cfg = WsConfig<kStaged>;
  constexpr std::uint32_t kStages = Cfg::kStages;
  extern __shared__ __align__(128) std::uint8_t smem_raw[];
  __shared__ std::uint64_t bars[2 * kStages];  // full[s], then empty[s]
  std::uint8_t* const smem = smem_raw + ((1024u - (SharedAddress(smem_raw) & 1023u)) & 1023u);
  const std::uint32_t tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
  const std::uint32_t full0 = SharedAddress(&bars[0]), empty0 = SharedAddress(&bars[kStages]);
  if (tid == 0) {
    for (std::uint32_t s = 0; s < kStages; ++s) {
      MbarInit(full0 + 8u * s, kStaged ? 1u : 128u);
      MbarInit(empty0 + 8u * s, 8);
    }
    if constexpr (kStaged) {  // the inits visible to the bulk copies (async proxy)
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      FenceProxyAsync();
    }
  }
  __syncthreads();
  const CtaQueries cq(p);
  const std::uint32_t smem_base = SharedAddress(smem);

  if (warp < 4) {  // ---- producer ----
    SetMaxNReg<Cfg::kProducerRegs, false>();
    if constexpr (kStaged) {
      // Staged: lane 0 of warp 0 copies each tile's image (written by HackPrefillFp16StageKernel)
      // into its stage with one bulk copy, which completes the stage's full barrier (count 1: the
      // arrival with the expected bytes, then the copy's transactions). The copy writes through
      // the async proxy, as the wgmmas read: no proxy fence.
      if (warp == 0) {
        // Launched as the staging kernel's programmatic dependent (LaunchHackPrefillFp16): the
        // images are read only once that grid has completed and its writes are visible. Nothing
        // else in this kernel reads what it writes (the consumers read q, written before it).
        internal::GridDependencyWait();
        const std::uint32_t n_tiles =
            SeqGeometry::Of(SeqGeometry::LayoutOf<D>(p)).Count(cq.max_key);
        const std::uint8_t* const images =
            p.prefill_stages + std::uint64_t{blockIdx.y} * p.prefill_stage_tiles * G::kStageBytes;
        for (std::uint32_t i = 0; i < n_tiles; ++i) {
          const std::uint32_t st = i % kStages;
          if (i >= kStages) MbarWait(empty0 + 8u * st, (i / kStages + 1u) & 1u);
          if (lane == 0) {
            MbarArriveExpectTx(full0 + 8u * st, G::kStageBytes);
            BulkCopyToShared(smem_base + st * G::kStageBytes,
                             images + std::uint64_t{i} * G::kStageBytes, G::kStageBytes,
                             full0 + 8u * st);
          }
        }
      }
      return;
    }
    const KvSource<D, 128> src(p, tid, blockIdx.y);
    const std::uint32_t n_tiles = src.geo.Count(cq.max_key);
    typename KvSource<D, 128>::Raw raw;
    Tile tile = src.geo.At(0);
    if (tile.block >= 0) src.Load(static_cast<std::uint32_t>(tile.block), raw, true, true);
    for (std::uint32_t i = 0; i < n_tiles; ++i) {
      const std::uint32_t st = i % kStages;
      const Tile next = src.geo.At(i + 1);
      const bool load_next = i + 1 < n_tiles && next.block >= 0;
      const std::uint32_t nb = static_cast<std::uint32_t>(next.block);
      if (i >= kStages) MbarWait(empty0 + 8u * st, (i / kStages + 1u) & 1u);
      std::uint8_t* const stage = smem + st * G::kStageBytes;
      if (tile.block >= 0) {
        // The next block's K words are loaded while this one's V is unpacked.
        src.Unpack(raw, stage, true, false);
        if (load_next) src.Load(nb, raw, true, false);
        src.Unpack(raw, stage, false, true);
        if (load_next) src.Load(nb, raw, false, true);
      } else {
        raw = {};  // dead here (no register kept live through the tail's unpack)
        src.UnpackTail(tile, stage);
        if (load_next) src.Load(nb, raw, true, true);
      }
      FenceProxyAsync();
      MbarArrive(full0 + 8u * st);
      tile = next;
    }
    return;
  }

  // ---- consumers ----
  SetMaxNReg<Cfg::kConsumerRegs, true>();
  const std::uint32_t wg = warp / 4u - 1u;  // 0 or 1
  const std::uint32_t tq = lane & 3u;
  const SeqGeometry geo = SeqGeometry::Of(SeqGeometry::LayoutOf<D>(p));
  const std::uint32_t n_tiles = geo.Count(cq.max_key);
  RowsState<D> rs(p, cq, warp - 4u, lane);
  rs.template LoadQueriesThroughShared<IoT>(
      p, cq, warp - 4u, lane,
      smem + kStages * G::kStageBytes + (warp - 4u) * kQueryScratchBytes<D>);
  const std::uint32_t bar_mine = 1u + wg, bar_other = 2u - wg;
  auto k_desc = [&](std::uint32_t st, std::uint32_t kc) {  // head_dim step kc: 32 bytes in panel
    return SwizzledDesc(smem_base + st * G::kStageBytes + (kc >> 2) * (kP * 128u) +
                        (kc & 3u) * 32u);
  };
  auto v_desc = [&](std::uint32_t st, std::uint32_t kk) {
    return SwizzledDesc(smem_base + st * G::kStageBytes + G::kKBytes + kk * 32u);
  };
  if (wg == 1) NamedBarArrive(1, 256);  // consumer 0 issues first

  if constexpr (kStaged) {  // 128 keys (a pair of tiles) per iteration
    const std::uint32_t n_pairs = (n_tiles + 1u) / 2u;
    // Stage of pair j's second half: tile 2 j + 1's, or tile 2 j's again (masked) past the end.
    auto stage_b = [&](std::uint32_t j) {
      return (2u * j + 1u < n_tiles ? 2u * j + 1u : 2u * j) % kStages;
    };
    auto wait_pair = [&](std::uint32_t j) {
      MbarWait(full0 + 8u * ((2u * j) % kStages), ((2u * j) / kStages) & 1u);
      if (2u * j + 1u < n_tiles) {
        MbarWait(full0 + 8u * ((2u * j + 1u) % kStages), ((2u * j + 1u) / kStages) & 1u);
      }
    };
    auto softmax_pair = [&](float(&sp)[16][4], std::uint32_t j, float& ca, float& cb) {
      const Tile tiles[2] = {geo.At(2u * j),
                             2u * j + 1u < n_tiles ? geo.At(2u * j + 1u) : Tile{0, 0, -1}};
      rs.Softmax(sp, tiles, cq.min_query, tq, ca, cb);
    };
    float s[16][4];
    std::uint32_t pa[8][4];
    auto& s_lo = reinterpret_cast<float(&)[8][4]>(s[0]);
    auto& s_hi = reinterpret_cast<float(&)[8][4]>(s[8]);
    // O += P V of the pair whose tiles are in stages va and vb: one commit group. (A pair's
    // masked second half is multiplied all the same: skipping its wgmmas behind a branch made
    // ptxas serialise every wgmma of the kernel (C7519), +37% at the 4K prompt, session 20.)
    auto issue_pv = [&](std::uint32_t va, std::uint32_t vb) {
#pragma unroll
      for (std::uint32_t kk = 0; kk < 4; ++kk) Wgmma(rs.o, pa[kk], v_desc(va, kk), 1u);
#pragma unroll
      for (std::uint32_t kk = 0; kk < 4; ++kk) Wgmma(rs.o, pa[4 + kk], v_desc(vb, kk), 1u);
      WgmmaCommit();
    };
    // Pair 0: S only.
    wait_pair(0);
    NamedBarSync(bar_mine, 256);
    WgmmaFence();
#pragma unroll
    for (std::uint32_t kc = 0; kc < D / 16; ++kc) Wgmma(s_lo, rs.qf[kc], k_desc(0, kc), kc);
#pragma unroll
    for (std::uint32_t kc = 0; kc < D / 16; ++kc) {
      Wgmma(s_hi, rs.qf[kc], k_desc(stage_b(0), kc), kc);
    }
    WgmmaCommit();
    if (wg == 0 || n_pairs > 1) NamedBarArrive(bar_other, 256);
    WgmmaWait<0>();
    FenceOperands(s);
    {
      float corr_a, corr_b;
      softmax_pair(s, 0, corr_a, corr_b);
      PackP(s, pa);
    }
    for (std::uint32_t j = 1; j < n_pairs; ++j) {
      // The previous pair is whole (only the last can be odd).
      const std::uint32_t sa = (2u * j) % kStages, sb = stage_b(j);
      const std::uint32_t pa0 = (2u * j - 2u) % kStages, pa1 = (2u * j - 1u) % kStages;
      wait_pair(j);
      NamedBarSync(bar_mine, 256);
      FenceOperands(rs.o);
      WgmmaFence();
#pragma unroll
      for (std::uint32_t kc = 0; kc < D / 16; ++kc) Wgmma(s_lo, rs.qf[kc], k_desc(sa, kc), kc);
#pragma unroll
      for (std::uint32_t kc = 0; kc < D / 16; ++kc) Wgmma(s_hi, rs.qf[kc], k_desc(sb, kc), kc);
      WgmmaCommit();
      issue_pv(pa0, pa1);
      if (wg == 0 || j + 1 < n_pairs) NamedBarArrive(bar_other, 256);
      WgmmaWait<1>();
      FenceOperands(s);
      float corr_a, corr_b;
      softmax_pair(s, j, corr_a, corr_b);
      WgmmaWait<0>();
      FenceOperands(rs.o);
      KeepLive(pa);
      if (lane == 0) {
        MbarArrive(empty0 + 8u * pa0);
        MbarArrive(empty0 + 8u * pa1);
      }
      rs.Rescale(corr_a, corr_b);
      PackP(s, pa);
    }
    const std::uint32_t la = (2u * (n_pairs - 1u)) % kStages, lb = stage_b(n_pairs - 1u);
    FenceOperands(rs.o);
    WgmmaFence();
    issue_pv(la, lb);
    WgmmaWait<0>();
    FenceOperands(rs.o);
    KeepLive(pa);
    // After both consumers' last wgmmas (named barrier 3) every stage is free: the producer's
    // copies have all landed and been read. O goes out through them (staged kernel only: the
    // unstaged one measured 1.5-2% slower with it, session 20).
    static_assert(8u * kOutScratchBytes<D> <= kStages * G::kStageBytes);
    NamedBarSync(3, 256);
    rs.template WriteThroughShared<IoT>(p, cq, warp - 4u, lane,
                                        smem + (warp - 4u) * kOutScratchBytes<D>);
    return;
  }
  float s[8][4];
  std::uint32_t pa[4][4];
  // Tile 0: S only.
  MbarWait(full0, 0);
  NamedBarSync(bar_mine, 256);
  WgmmaFence();
#pragma unroll
  for (std::uint32_t kc = 0; kc < D / 16; ++kc) Wgmma(s, rs.qf[kc], k_desc(0, kc), kc);
  WgmmaCommit();
  if (wg == 0 || n_tiles > 1) NamedBarArrive(bar_other, 256);
  WgmmaWait<0>();
  FenceOperands(s);
  {
    float corr_a, corr_b;
    const Tile tile = geo.At(0);
    rs.Softmax(s, &tile, cq.min_query, tq, corr_a, corr_b);
    PackP(s, pa);
  }
  for (std::uint32_t i = 1; i < n_tiles; ++i) {
    const std::uint32_t st = i % kStages, prev = (i - 1u) % kStages;
    MbarWait(full0 + 8u * st, (i / kStages) & 1u);
    NamedBarSync(bar_mine, 256);
    FenceOperands(rs.o);
    WgmmaFence();
#pragma unroll
    for (std::uint32_t kc = 0; kc < D / 16; ++kc) Wgmma(s, rs.qf[kc], k_desc(st, kc), kc);
    WgmmaCommit();
#pragma unroll
    for (std::uint32_t kk = 0; kk < 4; ++kk) Wgmma(rs.o, pa[kk], v_desc(prev, kk), 1u);
    WgmmaCommit();
    if (wg == 0 || i + 1 < n_tiles) NamedBarArrive(bar_other, 256);
    WgmmaWait<1>();
    FenceOperands(s);
    float corr_a, corr_b;
    const Tile tile = geo.At(i);
    rs.Softmax(s, &tile, cq.min_query, tq, corr_a, corr_b);
    WgmmaWait<0>();
    FenceOperands(rs.o);
    KeepLive(pa);
    if (lane == 0) MbarArrive(empty0 + 8u * prev);
    rs.Rescale(corr_a, corr_b);
    PackP(s, pa);
  }
  FenceOperands(rs.o);
  WgmmaFence();
#pragma unroll
  for (std::uint32_t kk = 0; kk < 4; ++kk)
    Wgmma(rs.o, pa[kk], v_desc((n_tiles - 1u) % kStages, kk), 1u);
  WgmmaCommit();
  WgmmaWait<0>();
  FenceOperands(rs.o);
  KeepLive(pa);
  rs.template Write<IoT>(p, tq);
#else
  // Built without sm_90a SASS but launched on a compute-capability-9.0 device.
  if (threadIdx.x == 0) atomicMin(p.error, static_cast<unsigned long long>(kErrArch));
#endif
}

// Staging kernel ("dequantize once", head_dim 128): CTA (x, y) fills key tile x of KV head y —
// the stage image the warp-specialised kernel's producer builds, by the same code (KvSource<128,
// 128>::Fill: same loads, unpack, swizzle and permutations, so the same bits) — in shared memory,
// then copies it to image y * prefill_stage_tiles + x of the scratch (32 KiB each, byte for byte:
// the swizzle depends only on offsets inside the stage).
__global__ void __launch_bounds__(128)
    HackPrefillFp16StageKernel(const __grid_constant__ HackAttentionParams p) {
  constexpr int D = 128;
  using G = Fp16Geo<D>;
  extern __shared__ __align__(128) std::uint8_t smem_raw[];
  // The attention kernel may launch now: its CTAs take the SMs as this grid's leave, and prepare
  // (barriers, queries) until their producers' dependency wait.
  internal::GridDependencyLaunchDependents();
  const KvSource<D, 128> src(p, threadIdx.x, blockIdx.y);
  src.Fill(src.geo.At(blockIdx.x), smem_raw);
  __syncthreads();
  auto* const dst = reinterpret_cast<uint4*>(
      p.prefill_stages +
      (std::uint64_t{blockIdx.y} * p.prefill_stage_tiles + blockIdx.x) * G::kStageBytes);
  const auto* const from = reinterpret_cast<const uint4*>(smem_raw);
#pragma unroll 4
  for (std::uint32_t i = threadIdx.x; i < G::kStageBytes / 16u; i += 128u) dst[i] = from[i];
}

// Per device, the dynamic shared memory configured for each kernel ([kernel][io]: see
// LaunchHackPrefillFp16).
std::atomic<std::size_t> g_fp16_smem[4][kIoTypes][kMaxDevices];
std::atomic<int> g_compute_capability[kMaxDevices];  // major * 10 + minor; 0: not asked yet

// Whether the current device runs the warp-specialised kernel: compute capability 9.0 (whose
// sm_90a SASS the default build carries; a build without it reports kErrArch).
cudaError_t UseWarpSpecialised(bool* use) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const bool cached = device >= 0 && device < kMaxDevices;
  int cc = cached ? g_compute_capability[device].load(std::memory_order_relaxed) : 0;
  if (cc == 0) {
    int major = 0, minor = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) return err;
    cc = major * 10 + minor;
    if (cached) g_compute_capability[device].store(cc, std::memory_order_relaxed);
  }
  *use = cc == 90;
  return cudaSuccess;
}

}  // namespace

template <int HeadDim>
cudaError_t LaunchHackPrefillFp16(const HackAttentionParams& params, cudaStream_t stream) {
  static_assert(HeadDim == 64 || HeadDim == 128);
  if (params.group == 0 || params.group > 8 || params.queries == 0) return cudaErrorInvalidValue;
  bool ws = false;
  if constexpr (HeadDim == 128) {
    const cudaError_t err = UseWarpSpecialised(&ws);
    if (err != cudaSuccess) return err;
  }
  const bool staged = ws && params.prefill_stages != nullptr;
  if (staged) {
    const cudaError_t err = LaunchHackPrefillFp16Staging(params, stream);
    if (err != cudaSuccess) return err;
  }
  const std::size_t smem = staged ? WsConfig<true>::kSmem
                           : ws   ? WsConfig<false>::kSmem
                                  : Fp16Geo<HeadDim>::kSmem;
  const std::uint32_t tokens_per_cta = kRows / params.group;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3((params.queries + tokens_per_cta - 1) / tokens_per_cta, params.kv_heads);
  config.blockDim = dim3(ws ? kWsThreads : kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  // Staged: the attention kernel is the staging kernel's programmatic dependent, launched as its
  // CTAs trigger rather than after it has completed (the producer waits before the first image).
  // Only there: everything else it reads was complete before the staging kernel started.
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (staged) {
    config.attrs = &attr;
    config.numAttrs = 1;
  }
  auto launch = [&](auto kernel, std::atomic<std::size_t>(&configured)[kMaxDevices]) {
    const cudaError_t err = ConfigureSharedMemory(kernel, smem, configured);
    return err != cudaSuccess ? err : cudaLaunchKernelEx(&config, kernel, params);
  };
  // [kernel][io]: kernel 0 / 1 HackPrefillFp16Kernel<64 / 128>, 2 / 3 HackPrefillFp16WsKernel<
  // false / true>; io kIoIndex<IoT>.
  return DispatchIo(params.io_dtype, [&](auto tag) {
    using IoT = typename decltype(tag)::type;
    constexpr int io = kIoIndex<IoT>;
    if (staged) return launch(HackPrefillFp16WsKernel<true, IoT>, g_fp16_smem[3][io]);
    if (ws) return launch(HackPrefillFp16WsKernel<false, IoT>, g_fp16_smem[2][io]);
    return launch(HackPrefillFp16Kernel<HeadDim, IoT>, g_fp16_smem[HeadDim == 64 ? 0 : 1][io]);
  });
}

cudaError_t LaunchHackPrefillFp16Staging(const HackAttentionParams& params, cudaStream_t stream) {
  if (params.prefill_stages == nullptr || params.prefill_stage_tiles == 0 || params.kv_heads == 0) {
    return cudaErrorInvalidValue;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(params.prefill_stage_tiles, params.kv_heads);
  config.blockDim = dim3(128);
  config.dynamicSmemBytes = Fp16Geo<128>::kStageBytes;
  config.stream = stream;
  return cudaLaunchKernelEx(&config, HackPrefillFp16StageKernel, params);
}

std::uint64_t HackPrefillStagingBytes(const HackKvCache& kv, const HackPrefillArgs& args) {
  if (args.math != HackPrefillMath::kDequantFp16 || kv.head_dim != 128 || args.queries == 0 ||
      args.seq.tokens == 0 || args.seq.sinks > args.seq.tokens) {
    return 0;
  }
  hack::Layout lay;
  lay.layers = kv.layers;
  lay.tokens = args.seq.tokens;
  lay.heads = kv.kv_heads;
  lay.dim = kv.head_dim;
  lay.partition = kP;
  lay.sinks = args.seq.sinks;
  const std::uint64_t last = std::uint64_t{args.first_position} + args.queries - 1u;
  const std::uint32_t tiles = SeqGeometry::Of(lay).Count(
      static_cast<std::uint32_t>(last < lay.tokens ? last : lay.tokens - 1u));
  return std::uint64_t{kv.kv_heads} * tiles * kHackPrefillStageBytes;
}

template cudaError_t LaunchHackPrefillFp16<64>(const HackAttentionParams&, cudaStream_t);
template cudaError_t LaunchHackPrefillFp16<128>(const HackAttentionParams&, cudaStream_t);

}  // namespace kvdepot::cuda
