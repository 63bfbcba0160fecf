// Kernel family "cachegen", encode half (see kvdepot/cuda/cachegen.h, docs/cachegen-gpu.md):
// params -> kernels -> launcher -> dispatcher, plus the container layout helpers. Compiled with
// -fmad=false. The pipeline, per batch (every kernel covers all chunks of the batch):
//   1. ScanQuantize<In>: one block per (chunk, lk, 64 channels): per-channel min/max over the
//      tokens staged in shared memory (first occurrence wins ties, as on the CPU), non-finite
//      detection, fp16 and fp32 scales (fp16 pairs straight into the container), then, when the
//      block's channels fit fp16 scales, the symbols (u8) and the lk's histogram (per-lane
//      shared-memory counters, integer atomics: deterministic).
//   2. RequantizeFp32<In>: only for chunks where some channel's scales do not fit fp16 (the CPU
//      then uses fp32 scales for the whole chunk): symbols and histogram again, fp32 scales.
//   3. Normalize: one thread per (chunk, lk): NormalizeFrequencies -> tables section + packed
//      (freq, cum) for the coder.
//   4. Encode: one warp per group, steps in reverse, words written backward into the group's
//      worst-case scratch region (the final stream ends up contiguous at its end); its length.
//   5. Finalize: one block per chunk: scan of the lengths -> index section and offsets; header,
//      section table (checksums 0), params, zero padding; the container's byte size and the
//      chunk's status, written to host-mapped memory; clears the flags for the next batch.
//   6. Compact: one block per group: copies its words into the codes section (and, for fp32
//      scales, its channels' scale pairs into the scales section).
#include "kvdepot/cuda/cachegen.h"
#include "launch.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/base/checksum.h"
#include "kvdepot/codec/cachegen_format.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {

namespace {

using internal::ConfigureSharedMemory;
using internal::CpAsync16;
using internal::CpAsyncCommit;
using internal::CpAsyncWait;
using internal::CpAsyncWaitAll;
using internal::kMaxDevices;
using internal::SharedAddress;

using cachegen::kLanes;
using cachegen::kMaxBins;
using cachegen::kStateLow;

constexpr std::uint32_t kFullMask = 0xffffffffu;
constexpr std::uint32_t kRows = 8;  // token rows (warps) of a min/max or quantize block
constexpr std::uint32_t kTileThreads = kRows * 32;
constexpr std::uint32_t kEncodeWarps = 4;    // groups per encode block
constexpr std::uint32_t kEncodeWindow = 64;  // symbol rows staged per window (2 KiB per warp)
constexpr std::uint32_t kFinalizeThreads = 1024;
constexpr std::uint32_t kCompactThreads = 128;
constexpr std::uint32_t kSectionCount = 5;
using cachegen::kParamsFixedBytes;         // cachegen_format.h
constexpr std::uint32_t kStatusWords = 8;  // device status words per chunk (see the params)
constexpr std::uint32_t kHostStatusWords =
    4;  // host-mapped: fp16 failed, ~nonfinite, ~overflow, bytes

__host__ __device__ constexpr std::uint64_t AlignUp64(std::uint64_t v) {
  return (v + 63) & ~std::uint64_t{63};
}

__device__ __forceinline__ const CacheGenEncodeChunkDesc& Desc(const CacheGenEncodeParams& p,
                                                               std::uint32_t chunk) {
  return p.chunks == nullptr ? p.inline_chunks[chunk] : p.chunks[chunk];
}

// ---- element loads ----

// fp16 through the hardware conversion: the same float as HalfBitsToFloat for every finite
// value, subnormals included (non-finite inputs are refused whatever they convert to).
template <DType In>
__device__ __forceinline__ float ToFloat(std::uint32_t bits16) {
  if constexpr (In == DType::kFloat16) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
  } else {
    return Bf16BitsToFloat(static_cast<std::uint16_t>(bits16));
  }
}

// V consecutive elements starting at element `idx` of `base`, as float.
template <DType In, int V>
__device__ __forceinline__ void LoadVec(const void* base, std::uint64_t idx, float (&f)[V]) {
  if constexpr (V == 8) {
    if constexpr (In == DType::kFloat32) {
      const uint4* p = reinterpret_cast<const uint4*>(static_cast<const float*>(base) + idx);
      const uint4 a = __ldg(p), b = __ldg(p + 1);
      f[0] = __uint_as_float(a.x);
      f[1] = __uint_as_float(a.y);
      f[2] = __uint_as_float(a.z);
      f[3] = __uint_as_float(a.w);
      f[4] = __uint_as_float(b.x);
      f[5] = __uint_as_float(b.y);
      f[6] = __uint_as_float(b.z);
      f[7] = __uint_as_float(b.w);
    } else {
      const uint4 a =
          __ldg(reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(base) + idx));
      const std::uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        f[2 * i] = ToFloat<In>(w[i] & 0xffffu);
        f[2 * i + 1] = ToFloat<In>(w[i] >> 16);
      }
    }
  } else {
    if constexpr (In == DType::kFloat32) {
      f[0] = __ldg(static_cast<const float*>(base) + idx);
    } else {
      f[0] = ToFloat<In>(__ldg(static_cast<const std::uint16_t*>(base) + idx));
    }
  }
}

// Token range [begin, end) of row `row` of a kRows-row block.
__device__ __forceinline__ void RowRange(std::uint32_t tokens, std::uint32_t row,
                                         std::uint32_t* begin, std::uint32_t* end) {
  const std::uint32_t per = (tokens + kRows - 1) / kRows;
  *begin = min(tokens, row * per);
  *end = min(tokens, *begin + per);
}

// ---- 1. fused scan + scales + quantize + histogram ----

// One block per (chunk, lk, 64-channel tile): 16 warps, lane l owns tile channels 2l and 2l + 1.
// Tokens go through shared memory kTokenBlock at a time, converted to float once: a min/max pass
// (each warp over a contiguous row range, partials combined in warp then block order, so that
// ties between +0 and -0 resolve to the first occurrence in token order as on the CPU), then the
// scales, then (with T <= kTokenBlock straight from the same shared tile) the quantize pass.
// Quantization is speculative: a block whose channels all fit fp16 scales quantizes with them;
// when any channel of the chunk does not, RequantizeFp32 redoes the whole chunk afterwards.
constexpr std::uint32_t kScanThreads = 512;
constexpr std::uint32_t kScanWarps = kScanThreads / 32;
constexpr std::uint32_t kTileChannels = 64;
constexpr std::uint32_t kTokenBlock = 256;

struct ScanSmem {
  float tile[kTokenBlock][kTileChannels];                  // 64 KiB
  std::uint8_t count[kScanWarps][cachegen::kMaxBins][32];  // 32 KiB, per-lane symbol counts
                                                           // of one token block (<= 2 * 16)
  std::uint32_t hist[cachegen::kMaxBins];                  // the block's counts
  float part_min[kScanWarps][kTileChannels];
  float part_max[kScanWarps][kTileChannels];
  float lo[kTileChannels];
  float step[kTileChannels];
  float rcp[kTileChannels];  // RN(1 / step), for QuantizeFp16Scale
  std::uint32_t part_rows[kScanWarps];
};

// Loads rows [t0, t0 + rows) of the tile's channels into s.tile (as float).
template <DType In>
__device__ __forceinline__ void LoadTile(const CacheGenEncodeParams& p, const void* in,
                                         std::uint64_t row0, std::uint32_t c_base,
                                         std::uint32_t rows, ScanSmem& s) {
  const std::uint32_t C = p.channels;
  if (p.vec == 8) {
    // 16-byte vectors: 8 (16-bit) or 4 (fp32) elements.
    constexpr std::uint32_t kPer = In == DType::kFloat32 ? 4 : 8;
    constexpr std::uint32_t kVecs = kTileChannels / kPer;  // per row
    const std::uint32_t n = rows * kVecs;
    constexpr std::uint32_t kUnroll = 4;
    for (std::uint32_t i0 = threadIdx.x; i0 < n; i0 += kScanThreads * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (std::uint32_t u = 0; u < kUnroll; ++u) {
        const std::uint32_t i = i0 + u * kScanThreads;
        const std::uint32_t c = c_base + (i % kVecs) * kPer;
        if (i < n && c < C) {
          const std::uint64_t e = (row0 + i / kVecs) * C + c;
          if constexpr (In == DType::kFloat32) {
            v[u] = __ldg(reinterpret_cast<const uint4*>(static_cast<const float*>(in) + e));
          } else {
            v[u] = __ldg(reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(in) + e));
          }
        }
      }
#pragma unroll
      for (std::uint32_t u = 0; u < kUnroll; ++u) {
        const std::uint32_t i = i0 + u * kScanThreads;
        const std::uint32_t c = c_base + (i % kVecs) * kPer;
        if (i < n && c < C) {
          float* dst = &s.tile[i / kVecs][(i % kVecs) * kPer];
          const std::uint32_t w[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
          if constexpr (In == DType::kFloat32) {
            *reinterpret_cast<float4*>(dst) =
                make_float4(__uint_as_float(w[0]), __uint_as_float(w[1]), __uint_as_float(w[2]),
                            __uint_as_float(w[3]));
          } else {
            float f[8];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              f[2 * k] = ToFloat<In>(w[k] & 0xffffu);
              f[2 * k + 1] = ToFloat<In>(w[k] >> 16);
            }
            reinterpret_cast<float4*>(dst)[0] = make_float4(f[0], f[1], f[2], f[3]);
            reinterpret_cast<float4*>(dst)[1] = make_float4(f[4], f[5], f[6], f[7]);
          }
        }
      }
    }
  } else {
    const std::uint32_t n = rows * kTileChannels;
    for (std::uint32_t i = threadIdx.x; i < n; i += kScanThreads) {
      const std::uint32_t c = c_base + i % kTileChannels;
      if (c < C) {
        const std::uint64_t e = (row0 + i / kTileChannels) * C + c;
        float f[1];
        LoadVec<In, 1>(in, e, f);
        s.tile[i / kTileChannels][i % kTileChannels] = f[0];
      }
    }
  }
}

template <DType In>
__global__ void __launch_bounds__(kScanThreads, 2)
    ScanQuantizeKernel(const __grid_constant__ CacheGenEncodeParams p) {
  internal::GridDependencyWait();
  extern __shared__ uint4 smem_raw[];
  ScanSmem& s = *reinterpret_cast<ScanSmem*>(smem_raw);
  const std::uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const std::uint32_t C = p.channels, T = p.tokens, lks = p.layers * 2;
  const std::uint32_t tiles = (C + kTileChannels - 1) / kTileChannels;
  std::uint32_t b = blockIdx.x;
  const std::uint32_t tile = b % tiles;
  b /= tiles;
  const std::uint32_t lk = b % lks, chunk = b / lks;
  const std::uint32_t c_base = tile * kTileChannels;
  const std::uint32_t cl = lane * 2;  // this lane's first tile channel
  const bool has0 = c_base + cl < C, has1 = c_base + cl + 1 < C;
  const void* in = Desc(p, chunk).input;
  const std::uint64_t lk_row0 = std::uint64_t{lk} * T;
  for (std::uint32_t i = lane; i < cachegen::kMaxBins * 32 / 4; i += 32) {
    reinterpret_cast<std::uint32_t*>(&s.count[warp][0][0])[i] = 0;
  }
  if (threadIdx.x < cachegen::kMaxBins) s.hist[threadIdx.x] = 0;

  // Pass 1: min/max. Thread 0..63 keeps channel threadIdx.x's running result over token blocks.
  float run_min = 0.0f, run_max = 0.0f;
  bool run_have = false;
  bool nonfinite = false;
  for (std::uint32_t t0 = 0; t0 < T; t0 += kTokenBlock) {
    const std::uint32_t rows = min(kTokenBlock, T - t0);
    LoadTile<In>(p, in, lk_row0 + t0, c_base, rows, s);
    __syncthreads();
    const std::uint32_t per = (rows + kScanWarps - 1) / kScanWarps;
    const std::uint32_t r0 = min(rows, warp * per), r1 = min(rows, r0 + per);
    float mn0 = 0.0f, mx0 = 0.0f, mn1 = 0.0f, mx1 = 0.0f;
    if (r0 < r1) {
      const float2 first = *reinterpret_cast<const float2*>(&s.tile[r0][cl]);
      mn0 = mx0 = first.x;
      mn1 = mx1 = first.y;
      nonfinite |= (has0 && !cachegen::IsFiniteFloat(first.x)) ||
                   (has1 && !cachegen::IsFiniteFloat(first.y));
      for (std::uint32_t r = r0 + 1; r < r1; ++r) {
        const float2 v = *reinterpret_cast<const float2*>(&s.tile[r][cl]);
        nonfinite |=
            (has0 && !cachegen::IsFiniteFloat(v.x)) || (has1 && !cachegen::IsFiniteFloat(v.y));
        if (v.x < mn0) mn0 = v.x;
        if (v.x > mx0) mx0 = v.x;
        if (v.y < mn1) mn1 = v.y;
        if (v.y > mx1) mx1 = v.y;
      }
    }
    s.part_min[warp][cl] = mn0;
    s.part_min[warp][cl + 1] = mn1;
    s.part_max[warp][cl] = mx0;
    s.part_max[warp][cl + 1] = mx1;
    if (lane == 0) s.part_rows[warp] = r1 - r0;
    __syncthreads();
    if (threadIdx.x < kTileChannels) {
      for (std::uint32_t w = 0; w < kScanWarps; ++w) {
        if (s.part_rows[w] == 0) continue;
        const float a = s.part_min[w][threadIdx.x], z = s.part_max[w][threadIdx.x];
        if (!run_have) {
          run_min = a;
          run_max = z;
          run_have = true;
        } else {
          if (a < run_min) run_min = a;
          if (z > run_max) run_max = z;
        }
      }
    }
    __syncthreads();  // the next token block overwrites the tile and the partials
  }
  if (nonfinite) {
    // Rare: this thread's first non-finite element in flat (token, channel) order.
    const std::uint32_t blocks = (T + kTokenBlock - 1) / kTokenBlock;
    std::uint64_t bad = ~std::uint64_t{0};
    for (std::uint32_t tb = 0; tb < blocks && bad == ~std::uint64_t{0}; ++tb) {
      const std::uint32_t t0 = tb * kTokenBlock, rows = min(kTokenBlock, T - t0);
      const std::uint32_t per = (rows + kScanWarps - 1) / kScanWarps;
      const std::uint32_t r0 = min(rows, warp * per), r1 = min(rows, r0 + per);
      for (std::uint32_t r = r0; r < r1 && bad == ~std::uint64_t{0}; ++r) {
        const std::uint64_t row = (lk_row0 + t0 + r) * C + c_base + cl;
        for (std::uint32_t k = 0; k < 2; ++k) {
          if (c_base + cl + k >= C || bad != ~std::uint64_t{0}) continue;
          float f[1];
          LoadVec<In, 1>(in, row + k, f);
          if (!cachegen::IsFiniteFloat(f[0])) bad = row + k;
        }
      }
    }
    atomicMax(&p.status[chunk * kStatusWords + 1], ~static_cast<unsigned long long>(bad));
  }

  // Scales of the tile's channels.
  const std::uint32_t bins = p.bins[lk];
  bool ok16 = true;
  if (threadIdx.x < kTileChannels && c_base + threadIdx.x < C) {
    const std::uint32_t c = c_base + threadIdx.x;
    const std::uint64_t sc_index = std::uint64_t{lk} * C + c;
    bool ok32 = true;
    const cachegen::ChannelScale s16 = cachegen::ScaleFp16(run_min, run_max, bins, &ok16);
    const cachegen::ChannelScale s32 = cachegen::ScaleFp32(run_min, run_max, bins, &ok32);
    const std::uint32_t pair16 = static_cast<std::uint32_t>(FloatToHalfBits(s16.lo)) |
                                 (static_cast<std::uint32_t>(FloatToHalfBits(s16.step)) << 16);
    reinterpret_cast<std::uint32_t*>(Desc(p, chunk).output + p.scales_offset)[sc_index] = pair16;
    float* s32p = p.scales32 + (std::uint64_t{chunk} * lks * C + sc_index) * 2;
    s32p[0] = s32.lo;
    s32p[1] = s32.step;
    if (!ok16) atomicOr(&p.status[chunk * kStatusWords + 0], 1ull);
    if (!ok32) {
      atomicMax(&p.status[chunk * kStatusWords + 2], ~static_cast<unsigned long long>(sc_index));
    }
    s.lo[threadIdx.x] = s16.lo;
    s.step[threadIdx.x] = s16.step;
    s.rcp[threadIdx.x] = __frcp_rn(s16.step);
  }
  if (__syncthreads_and(ok16) == 0) return;  // the chunk needs fp32 scales: RequantizeFp32

  // Pass 2: quantize with fp16 scales; per-lane counters, flushed into s.hist per token block.
  const cachegen::ChannelScale sc0{s.lo[cl], s.step[cl]};
  const cachegen::ChannelScale sc1{s.lo[cl + 1], s.step[cl + 1]};
  const float rcp0 = s.rcp[cl], rcp1 = s.rcp[cl + 1];
  std::uint8_t* count = &s.count[warp][0][lane];
  std::uint8_t* sym = p.symbols + (std::uint64_t{chunk} * lks + lk) * T * C + c_base + cl;
  const bool pair_store = has1 && (C % 2 == 0);
  for (std::uint32_t t0 = 0; t0 < T; t0 += kTokenBlock) {
    const std::uint32_t rows = min(kTokenBlock, T - t0);
    if (T > kTokenBlock) {  // the tile holds the last token block: reload this one
      __syncthreads();
      LoadTile<In>(p, in, lk_row0 + t0, c_base, rows, s);
      __syncthreads();
    }
    const std::uint32_t per = (rows + kScanWarps - 1) / kScanWarps;
    const std::uint32_t r0 = min(rows, warp * per), r1 = min(rows, r0 + per);
    if (has0) {
      std::uint8_t* dst = sym + std::uint64_t{t0 + r0} * C;
      for (std::uint32_t r = r0; r < r1; ++r, dst += C) {
        const float2 v = *reinterpret_cast<const float2*>(&s.tile[r][cl]);
        const std::uint32_t q0 = cachegen::QuantizeFp16Scale(v.x, sc0, rcp0, bins);
        count[q0 * 32] += 1;
        if (pair_store) {
          const std::uint32_t q1 = cachegen::QuantizeFp16Scale(v.y, sc1, rcp1, bins);
          count[q1 * 32] += 1;
          *reinterpret_cast<std::uint16_t*>(dst) = static_cast<std::uint16_t>(q0 | (q1 << 8));
        } else {
          dst[0] = static_cast<std::uint8_t>(q0);
          if (has1) {
            const std::uint32_t q1 = cachegen::QuantizeFp16Scale(v.y, sc1, rcp1, bins);
            count[q1 * 32] += 1;
            dst[1] = static_cast<std::uint8_t>(q1);
          }
        }
      }
    }
    __syncthreads();
    // Flush: bin threadIdx.x / 8 sums warps x lanes [part * 4, part * 4 + 4), part = tid % 8.
    const std::uint32_t bin = threadIdx.x >> 3, part = threadIdx.x & 7u;
    std::uint32_t sum = 0;
    for (std::uint32_t w = 0; w < kScanWarps; ++w) {
      std::uint32_t* word = reinterpret_cast<std::uint32_t*>(&s.count[w][bin][part * 4]);
      const std::uint32_t four = *word;
      *word = 0;
      sum += (four & 0xffu) + ((four >> 8) & 0xffu) + ((four >> 16) & 0xffu) + (four >> 24);
    }
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    sum += __shfl_xor_sync(kFullMask, sum, 2);
    sum += __shfl_xor_sync(kFullMask, sum, 4);
    if (part == 0) s.hist[bin] += sum;
  }
  __syncthreads();
  if (threadIdx.x < bins && s.hist[threadIdx.x] != 0) {
    atomicAdd(&p.hist[(std::uint64_t{chunk} * lks + lk) * kMaxBins + threadIdx.x],
              s.hist[threadIdx.x]);
  }
}

// ---- 2. fp32 fallback: quantize + histogram again with fp32 scales ----

// Runs for every chunk but does work only for chunks that need fp32 scales (some channel's
// scales do not fit fp16: ScanQuantize skipped or discarded them). Counts go to hist32.

template <DType In, int V>
__device__ void QuantizeTile(const CacheGenEncodeParams& p, std::uint32_t chunk, std::uint32_t lk,
                             std::uint32_t tile, std::uint32_t* s_count) {
  const std::uint32_t lane = threadIdx.x & 31u, row = threadIdx.x >> 5;
  const std::uint32_t C = p.channels, T = p.tokens;
  const std::uint32_t lks = p.layers * 2;
  const std::uint32_t c0 = tile * 32 * V + lane * V;
  std::uint32_t* count = s_count + row * kMaxBins * 32 + lane;  // this lane's counters, stride 32
  for (std::uint32_t i = lane; i < kMaxBins * 32; i += 32) s_count[row * kMaxBins * 32 + i] = 0;
  __syncwarp();
  const std::uint32_t bins = p.bins[lk];
  if (c0 < C) {
    cachegen::ChannelScale sc[V];
    const std::uint64_t sc_index = std::uint64_t{lk} * C + c0;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float* s32p = p.scales32 + (std::uint64_t{chunk} * lks * C + sc_index + v) * 2;
      sc[v] = {s32p[0], s32p[1]};
    }
    const void* in = Desc(p, chunk).input;
    const std::uint64_t base = (std::uint64_t{lk} * T) * C + c0;
    std::uint8_t* sym = p.symbols + std::uint64_t{chunk} * lks * T * C + base;
    std::uint32_t t0, t1;
    RowRange(T, row, &t0, &t1);
    constexpr int kUnroll = 2;
    for (std::uint32_t t = t0; t < t1; t += kUnroll) {
      float f[kUnroll][V];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (t + u < t1) LoadVec<In, V>(in, base + std::uint64_t{t + u} * C, f[u]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (t + u < t1) {
          std::uint32_t q[V];
#pragma unroll
          for (int v = 0; v < V; ++v) {
            q[v] = cachegen::Quantize(f[u][v], sc[v], bins);
            count[q[v] * 32] += 1;
          }
          std::uint8_t* dst = sym + std::uint64_t{t + u} * C;
          if constexpr (V == 8) {
            uint2 packed;
            packed.x = q[0] | (q[1] << 8) | (q[2] << 16) | (q[3] << 24);
            packed.y = q[4] | (q[5] << 8) | (q[6] << 16) | (q[7] << 24);
            *reinterpret_cast<uint2*>(dst) = packed;
          } else {
            *dst = static_cast<std::uint8_t>(q[0]);
          }
        }
      }
    }
  }
  __syncthreads();
  // Bin b = threadIdx.x / 4 sums rows x lanes [part * 8, part * 8 + 8) with part = threadIdx.x % 4.
  const std::uint32_t bin = threadIdx.x >> 2, part = threadIdx.x & 3u;
  std::uint32_t sum = 0;
  if (bin < kMaxBins) {
    for (std::uint32_t r = 0; r < kRows; ++r) {
#pragma unroll
      for (std::uint32_t l = 0; l < 8; ++l)
        sum += s_count[(r * kMaxBins + bin) * 32 + part * 8 + l];
    }
  }
  sum += __shfl_xor_sync(kFullMask, sum, 1);
  sum += __shfl_xor_sync(kFullMask, sum, 2);
  if (part == 0 && bin < bins && sum != 0) {
    atomicAdd(&p.hist32[(std::uint64_t{chunk} * lks + lk) * kMaxBins + bin], sum);
  }
}

template <DType In>
__global__ void __launch_bounds__(kTileThreads)
    RequantizeFp32Kernel(const __grid_constant__ CacheGenEncodeParams p) {
  internal::GridDependencyWait();
  extern __shared__ std::uint32_t s_count[];  // [kRows][kMaxBins][32]
  const std::uint32_t lks = p.layers * 2;
  const std::uint32_t tiles = (p.channels + 32 * p.vec - 1) / (32 * p.vec);
  std::uint32_t b = blockIdx.x;
  const std::uint32_t tile = b % tiles;
  b /= tiles;
  const std::uint32_t lk = b % lks, chunk = b / lks;
  if (p.status[chunk * kStatusWords + 0] == 0) return;  // fp16 scales: ScanQuantize did it
  if (p.vec == 8) {
    QuantizeTile<In, 8>(p, chunk, lk, tile, s_count);
  } else {
    QuantizeTile<In, 1>(p, chunk, lk, tile, s_count);
  }
}

// ---- 3. frequency tables ----

// One warp per (chunk, lk), lane s holding symbols s and s + 32: the frequencies of
// cachegen::NormalizeFrequencies (max(1, floor(count * 4096 / total)) for present symbols, the
// difference to 4096 on the most frequent, lowest index on ties), computed with warp reductions
// instead of one thread's serial loops (byte-identical containers: the GPU tests compare them
// with the CPU encoder's).
__device__ __forceinline__ std::uint64_t WarpSum64(std::uint64_t v) {
#pragma unroll
  for (std::uint32_t off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

__device__ __forceinline__ std::uint64_t WarpMax64(std::uint64_t v) {
#pragma unroll
  for (std::uint32_t off = 16; off > 0; off >>= 1) {
    const std::uint64_t o = __shfl_xor_sync(kFullMask, v, off);
    v = o > v ? o : v;
  }
  return v;
}

__global__ void NormalizeKernel(const __grid_constant__ CacheGenEncodeParams p) {
  internal::GridDependencyWait();
  const std::uint32_t lks = p.layers * 2;
  const std::uint32_t lane = threadIdx.x & 31u;
  const std::uint32_t i = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;  // chunk * lks + lk
  if (i >= p.num_chunks * lks) return;                                   // whole warps
  const std::uint32_t chunk = i / lks, lk = i % lks;
  const std::uint32_t bins = p.bins[lk];
  const bool fp32 = p.status[chunk * kStatusWords + 0] != 0;
  const std::uint64_t row = std::uint64_t{i} * kMaxBins;
  const std::uint32_t* hist = (fp32 ? p.hist32 : p.hist) + row;
  const std::uint32_t s0 = lane, s1 = lane + 32;
  const std::uint32_t c0 = s0 < bins ? hist[s0] : 0u, c1 = s1 < bins ? hist[s1] : 0u;
  __syncwarp();  // every count read before any is cleared (hist may be p.hist)
  if (s0 < bins) p.hist[row + s0] = p.hist32[row + s0] = 0;  // ready for the next batch
  if (s1 < bins) p.hist[row + s1] = p.hist32[row + s1] = 0;
  const std::uint64_t total = WarpSum64(std::uint64_t{c0} + c1);
  // Most frequent symbol, lowest index on ties: the largest (count, 63 - s).
  const std::uint64_t k0 = (std::uint64_t{c0} << 6) | (63u - s0);
  const std::uint64_t k1 = (std::uint64_t{c1} << 6) | (63u - s1);
  const std::uint64_t key = WarpMax64(k0 > k1 ? k0 : k1);
  const std::uint32_t best = 63u - static_cast<std::uint32_t>(key & 63u);
  const bool narrow = total < (1ull << 20);
  auto freq_of = [&](std::uint32_t c) -> std::uint32_t {
    if (c == 0) return 0u;
    const std::uint32_t f =
        narrow ? (c * cachegen::kProbScale) / static_cast<std::uint32_t>(total)
               : static_cast<std::uint32_t>((std::uint64_t{c} * cachegen::kProbScale) / total);
    return f == 0 ? 1u : f;
  };
  std::uint32_t f0 = freq_of(c0), f1 = freq_of(c1);
  const auto sum = static_cast<std::int32_t>(WarpSum64(std::uint64_t{f0} + f1));
  const std::int32_t fix = static_cast<std::int32_t>(cachegen::kProbScale) - sum;
  if (best == s0) f0 = static_cast<std::uint32_t>(static_cast<std::int32_t>(f0) + fix);
  if (best == s1) f1 = static_cast<std::uint32_t>(static_cast<std::int32_t>(f1) + fix);
  const internal::WarpCumulative64 cum = internal::WarpCumulative(f0, f1);
  auto* table =
      reinterpret_cast<std::uint16_t*>(Desc(p, chunk).output + p.tables_offset) + p.table_start[lk];
  std::uint32_t* packed = p.packed + row;
  if (s0 < bins) {
    table[s0] = static_cast<std::uint16_t>(f0);
    packed[s0] = f0 | (cum.cum0 << 16);
  }
  if (s1 < bins) {
    table[s1] = static_cast<std::uint16_t>(f1);
    packed[s1] = f1 | (cum.cum1 << 16);
  }
}

// ---- 4. rANS encode ----

__global__ void __launch_bounds__(kEncodeWarps * 32)
    EncodeKernel(const __grid_constant__ CacheGenEncodeParams p) {
  internal::GridDependencyWait();
  __shared__ std::uint32_t s_table[kMaxBins];
  __shared__ std::uint64_t s_rcp[kMaxBins];  // RansReciprocal of each symbol's frequency
  __shared__ __align__(16) std::uint8_t s_sym[kEncodeWarps][2][kEncodeWindow][32];
  const std::uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const std::uint32_t lks = p.layers * 2;
  const std::uint32_t blocks_per_lk = (p.groups_per_lk + kEncodeWarps - 1) / kEncodeWarps;
  std::uint32_t b = blockIdx.x;
  const std::uint32_t blk = b % blocks_per_lk;
  b /= blocks_per_lk;
  const std::uint32_t lk = b % lks, chunk = b / lks;
  const std::uint32_t* packed = p.packed + (std::uint64_t{chunk} * lks + lk) * kMaxBins;
  for (std::uint32_t s = threadIdx.x; s < kMaxBins; s += blockDim.x) {
    const std::uint32_t e = packed[s];
    s_table[s] = e;
    s_rcp[s] = cachegen::RansReciprocal((e & 0xffffu) == 0 ? 1u : (e & 0xffffu));
  }
  __syncthreads();
  constexpr std::uint64_t kRcpOne = 1ull << 44;  // RansReciprocal(1): inactive lanes
  const std::uint32_t group = blk * kEncodeWarps + warp;
  if (group >= p.groups_per_lk) return;

  const std::uint32_t C = p.channels, T = p.tokens, cpl = p.channels_per_lane;
  const std::uint32_t groups = lks * p.groups_per_lk;
  const std::uint32_t g = lk * p.groups_per_lk + group;
  std::uint16_t* region = p.streams + (std::uint64_t{chunk} * groups + g) * p.stream_cap;
  const std::uint32_t top = p.stream_cap - 1;  // emission e goes to region[top - e]
  const std::uint32_t lanemask_gt = lane == 31 ? 0u : (~0u << (lane + 1));
  const std::uint8_t* sym_lk = p.symbols + (std::uint64_t{chunk} * lks + lk) * T * C;
  std::uint32_t x = kStateLow;
  std::uint32_t emitted = 0;
  // One step: the lane's symbol entry e (freq | cum << 16; inactive lanes pass freq 1 and keep
  // their state), the ballot of emitting lanes, their words at consecutive descending positions.
  // `all`: every lane of the pass is active (the common case), so no lane keeps its state.
  auto step = [&](auto all, bool active, std::uint32_t e, std::uint64_t rcp) {
    std::uint32_t y = x;
    std::uint16_t w = 0;
    bool emit = cachegen::RansEncodeStepRcp(&y, e & 0xffffu, e >> 16, rcp, &w);
    if constexpr (decltype(all)::value) {
      x = y;
    } else {
      emit = emit && active;
      x = active ? y : x;
    }
    const std::uint32_t ballot = __ballot_sync(kFullMask, emit);
    std::uint16_t* dst = region + (top - (emitted + __popc(ballot & lanemask_gt)));
    // A predicated store rather than a branch: keeps the step free of divergent control flow.
    asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %2, 0;\n\t@p st.global.u16 [%0], %1;\n\t}" ::"l"(dst),
        "h"(w), "r"(static_cast<std::uint32_t>(emit)));
    emitted += __popc(ballot);
  };
  // A pass's symbols (T rows of the group's 32 channels, C bytes apart) are staged through shared
  // memory in windows of kEncodeWindow rows, the next window loading (cp.async) while this one is
  // encoded: the state chain then waits on shared memory only, never on a global load.
  auto* stage = s_sym[warp];
  for (std::uint32_t k = cpl; k-- > 0;) {
    const std::uint32_t c = cachegen::LaneChannel(group, k, lane, cpl);
    const bool active = c < C;
    if (__ballot_sync(kFullMask, active) == 0) continue;
    const std::uint32_t base = cachegen::LaneChannel(group, k, 0, cpl);
    const bool all_active = __all_sync(kFullMask, active);
    // Whole 16-byte runs (every lane active, rows 16-byte aligned): asynchronous copies.
    const bool vector = base + 32 <= C && C % 16 == 0;
    auto load_window = [&](std::uint32_t hi, std::uint32_t buf) {
      const std::uint32_t lo = hi > kEncodeWindow ? hi - kEncodeWindow : 0;
      if (vector) {
        const std::uint32_t dst = SharedAddress(&stage[buf][0][0]);
        for (std::uint32_t i = lane; i < (hi - lo) * 2; i += 32) {
          const std::uint8_t* src = sym_lk + std::uint64_t{lo + i / 2} * C + base + 16 * (i % 2);
          CpAsync16(dst + 16u * i, src);
        }
      } else {
        for (std::uint32_t r = lo; r < hi; ++r) {
          stage[buf][r - lo][lane] = active ? sym_lk[std::uint64_t{r} * C + c] : 0;
        }
      }
      CpAsyncCommit();
    };
    load_window(T, 0);
    for (std::uint32_t hi = T, w = 0; hi > 0; ++w) {
      const std::uint32_t lo = hi > kEncodeWindow ? hi - kEncodeWindow : 0;
      if (lo > 0) {
        load_window(lo, (w + 1) & 1u);
      } else {
        CpAsyncCommit();  // an empty group keeps the count uniform
      }
      CpAsyncWait<1>();  // window w has landed
      __syncwarp();
      const std::uint8_t(*rows)[32] = stage[w & 1u];
      // Steps for rows hi - 1 down to lo, in blocks of 8 whose lookups precede their steps.
      auto encode_rows = [&](auto all) {
        std::uint32_t j = hi - lo;
        for (; j >= 8; j -= 8) {
          std::uint32_t e[8];
          std::uint64_t r[8];
#pragma unroll
          for (std::uint32_t u = 0; u < 8; ++u) {
            const std::uint32_t q = rows[j - 1 - u][lane];
            e[u] = active ? s_table[q] : 1u;
            r[u] = active ? s_rcp[q] : kRcpOne;
          }
#pragma unroll
          for (std::uint32_t u = 0; u < 8; ++u) step(all, active, e[u], r[u]);
        }
        for (; j > 0; --j) {
          const std::uint32_t q = rows[j - 1][lane];
          step(all, active, active ? s_table[q] : 1u, active ? s_rcp[q] : kRcpOne);
        }
      };
      if (all_active) {
        encode_rows(std::true_type{});
      } else {
        encode_rows(std::false_type{});
      }
      __syncwarp();  // the buffer is free for window w + 2
      hi = lo;
    }
  }
  // Final states of the stateful lanes (a prefix), pushed lanes descending, hi then lo.
  const bool stateful = cachegen::LaneChannel(group, 0, lane, cpl) < C;
  const std::uint32_t n_state = __popc(__ballot_sync(kFullMask, stateful));
  if (stateful) {
    const std::uint32_t e_hi = emitted + 2 * (n_state - 1 - lane);
    region[top - e_hi] = static_cast<std::uint16_t>(x >> 16);
    region[top - e_hi - 1] = static_cast<std::uint16_t>(x & 0xffffu);
  }
  emitted += 2 * n_state;
  if (lane == 0) p.lengths[std::uint64_t{chunk} * groups + g] = emitted;
}

// ---- 5. scan + container assembly ----

struct ChunkLayout {
  std::uint64_t scales_bytes;
  std::uint64_t index_offset;
  std::uint64_t codes_offset;
};

__device__ __forceinline__ ChunkLayout LayoutOf(const CacheGenEncodeParams& p, bool fp32,
                                                std::uint32_t groups) {
  ChunkLayout l;
  l.scales_bytes = fp32 ? p.scales_bytes16 * 2 : p.scales_bytes16;
  l.index_offset = AlignUp64(p.scales_offset + l.scales_bytes);
  l.codes_offset = AlignUp64(l.index_offset + std::uint64_t{groups} * 4);
  return l;
}

__device__ void ZeroBytes(std::byte* out, std::uint64_t begin, std::uint64_t end) {
  for (std::uint64_t i = begin + threadIdx.x; i < end; i += blockDim.x) out[i] = std::byte{0};
}

__global__ void __launch_bounds__(kFinalizeThreads)
    FinalizeKernel(const __grid_constant__ CacheGenEncodeParams p) {
  internal::GridDependencyWait();
  __shared__ std::uint32_t s_warp[32];
  __shared__ std::uint32_t s_carry;
  const std::uint32_t chunk = blockIdx.x;
  const std::uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const std::uint32_t lks = p.layers * 2;
  const std::uint32_t groups = lks * p.groups_per_lk;
  const bool fp32 = p.status[chunk * kStatusWords + 0] != 0;
  const ChunkLayout lay = LayoutOf(p, fp32, groups);
  std::byte* out = Desc(p, chunk).output;
  const std::uint32_t* lengths = p.lengths + std::uint64_t{chunk} * groups;
  std::uint32_t* offsets = p.offsets + std::uint64_t{chunk} * groups;
  auto* index = reinterpret_cast<std::uint32_t*>(out + lay.index_offset);
  if (threadIdx.x == 0) s_carry = 0;
  __syncthreads();
  for (std::uint32_t base = 0; base < groups; base += blockDim.x) {
    const std::uint32_t g = base + threadIdx.x;
    const std::uint32_t len = g < groups ? lengths[g] : 0u;
    std::uint32_t incl = len;
#pragma unroll
    for (std::uint32_t off = 1; off < 32; off <<= 1) {
      const std::uint32_t u = __shfl_up_sync(kFullMask, incl, off);
      if (lane >= off) incl += u;
    }
    if (lane == 31) s_warp[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      const std::uint32_t nwarps = blockDim.x / 32;
      std::uint32_t w = lane < nwarps ? s_warp[lane] : 0u;
#pragma unroll
      for (std::uint32_t off = 1; off < 32; off <<= 1) {
        const std::uint32_t u = __shfl_up_sync(kFullMask, w, off);
        if (lane >= off) w += u;
      }
      s_warp[lane] = w;  // inclusive prefix of warp totals
    }
    __syncthreads();
    const std::uint32_t carry = s_carry;
    const std::uint32_t end = carry + (warp == 0 ? 0u : s_warp[warp - 1]) + incl;
    if (g < groups) {
      offsets[g] = end - len;
      index[g] = end;
    }
    __syncthreads();
    if (threadIdx.x == blockDim.x - 1) s_carry = end;
    __syncthreads();
  }
  const std::uint64_t codes_words = s_carry;
  const std::uint64_t total = lay.codes_offset + codes_words * 2;
  const std::uint64_t params_bytes = kParamsFixedBytes + lks;
  const std::uint64_t tables_bytes = std::uint64_t{p.table_entries} * 2;
  const std::uint64_t index_bytes = std::uint64_t{groups} * 4;
  if (threadIdx.x == 0) {
    unsigned long long* st = p.status + chunk * kStatusWords;
    unsigned long long* host = p.host_status + chunk * kHostStatusWords;
    host[0] = st[0];
    host[1] = st[1];
    host[2] = st[2];
    host[3] = total;
    st[4] = fp32 ? 1ull : 0ull;  // for Compact
    st[0] = st[1] = st[2] = 0;   // ready for the next batch
    // Fixed header and section table (container_layout.h; the host's SealContainer fills in the
    // checksums), then the params section's fixed bytes.
    container_layout::HeaderFields header;
    header.codec = static_cast<std::uint8_t>(CodecId::kCacheGen);
    header.dtype = static_cast<std::uint8_t>(p.input_dtype);
    header.layers = p.layers;
    header.tokens = p.tokens;
    header.kv_heads = p.kv_heads;
    header.head_dim = p.head_dim;
    header.total_bytes = total;
    const container_layout::SectionEntry sections[kSectionCount] = {
        {static_cast<std::uint32_t>(SectionKind::kParams), 0, p.params_offset, params_bytes},
        {static_cast<std::uint32_t>(SectionKind::kTables), 0, p.tables_offset, tables_bytes},
        {static_cast<std::uint32_t>(SectionKind::kScales), 0, p.scales_offset, lay.scales_bytes},
        {static_cast<std::uint32_t>(SectionKind::kIndex), 0, lay.index_offset, index_bytes},
        {static_cast<std::uint32_t>(SectionKind::kCodes), 0, lay.codes_offset, codes_words * 2}};
    container_layout::WriteHeader(out, header, sections, kSectionCount);
    cachegen::WriteParamsFixed(out + p.params_offset,
                               fp32 ? cachegen::kScaleFp32 : cachegen::kScaleFp16,
                               p.channels_per_lane);
  }
  for (std::uint32_t i = threadIdx.x; i < lks; i += blockDim.x) {
    out[p.params_offset + kParamsFixedBytes + i] = static_cast<std::byte>(p.bins[i]);
  }
  // Zero padding before each section.
  ZeroBytes(out, kContainerHeaderBytes + kSectionCount * kSectionEntryBytes, p.params_offset);
  ZeroBytes(out, p.params_offset + params_bytes, p.tables_offset);
  ZeroBytes(out, p.tables_offset + tables_bytes, p.scales_offset);
  ZeroBytes(out, p.scales_offset + lay.scales_bytes, lay.index_offset);
  ZeroBytes(out, lay.index_offset + index_bytes, lay.codes_offset);
}

// ---- 6. compaction ----

__global__ void __launch_bounds__(kCompactThreads)
    CompactKernel(const __grid_constant__ CacheGenEncodeParams p) {
  internal::GridDependencyWait();
  const std::uint32_t lks = p.layers * 2;
  const std::uint32_t groups = lks * p.groups_per_lk;
  const std::uint32_t chunk = blockIdx.x / groups, g = blockIdx.x % groups;
  const bool fp32 = p.status[chunk * kStatusWords + 4] != 0;
  const ChunkLayout lay = LayoutOf(p, fp32, groups);
  std::byte* out = Desc(p, chunk).output;
  const std::uint64_t cg = std::uint64_t{chunk} * groups + g;
  const std::uint32_t len = p.lengths[cg];
  const std::uint16_t* src = p.streams + cg * p.stream_cap + (p.stream_cap - len);
  std::uint16_t* dst = reinterpret_cast<std::uint16_t*>(out + lay.codes_offset) + p.offsets[cg];
  constexpr std::uint32_t kUnroll = 8;
  for (std::uint32_t base = 0; base < len; base += kUnroll * kCompactThreads) {
    std::uint16_t w[kUnroll];
#pragma unroll
    for (std::uint32_t u = 0; u < kUnroll; ++u) {
      const std::uint32_t i = base + u * kCompactThreads + threadIdx.x;
      if (i < len) w[u] = src[i];
    }
#pragma unroll
    for (std::uint32_t u = 0; u < kUnroll; ++u) {
      const std::uint32_t i = base + u * kCompactThreads + threadIdx.x;
      if (i < len) dst[i] = w[u];
    }
  }
  if (fp32) {
    // This group's channels' f32 scale pairs.
    const std::uint32_t lk = g / p.groups_per_lk, group = g % p.groups_per_lk;
    const std::uint32_t per_group = kLanes * p.channels_per_lane;
    const std::uint32_t c_begin = group * per_group;
    const std::uint32_t c_end = min(p.channels, c_begin + per_group);
    const float2* s = reinterpret_cast<const float2*>(p.scales32) +
                      (std::uint64_t{chunk} * lks + lk) * p.channels;
    float2* d = reinterpret_cast<float2*>(out + p.scales_offset) + std::uint64_t{lk} * p.channels;
    for (std::uint32_t c = c_begin + threadIdx.x; c < c_end; c += blockDim.x) d[c] = s[c];
  }
}

cudaError_t Launch(const void* kernel, unsigned blocks, unsigned threads, std::size_t smem,
                   const CacheGenEncodeParams& params, cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  // Programmatic dependent launch: each kernel is launched while its predecessor's last blocks
  // finish and waits for it (GridDependencyWait) before touching memory, which hides the launch
  // gaps of the six-kernel sequence (~4 us of a 110 us batch-1 encode).
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  void* args[] = {const_cast<CacheGenEncodeParams*>(&params)};
  return cudaLaunchKernelExC(&config, kernel, args);
}

// ---- host-side layout ----

struct HostLayout {
  std::uint32_t lks = 0;
  std::uint32_t channels = 0;
  std::uint32_t cpl = 0;
  std::uint32_t groups_per_lk = 0;
  std::uint32_t groups = 0;
  std::uint64_t stream_cap = 0;
  std::uint64_t elements = 0;  // per chunk
};

HostLayout MakeHostLayout(const KvShape& shape) {
  HostLayout l;
  l.lks = shape.layers * 2;
  l.channels = shape.kv_heads * shape.head_dim;
  l.cpl = cachegen::ChannelsPerLane(shape.tokens);
  l.groups_per_lk = cachegen::GroupsPerLayerKv(l.channels, l.cpl);
  l.groups = l.lks * l.groups_per_lk;
  l.stream_cap = 2 * kLanes + std::uint64_t{l.cpl} * shape.tokens * kLanes;
  l.elements = shape.elements();
  return l;
}

// Byte offsets of the per-chunk scratch arrays inside the workspace's device buffer.
struct ScratchLayout {
  std::size_t descs = 0, table_start = 0, bins = 0, upload_end = 0;
  std::size_t hist = 0, hist32 = 0, status = 0, zero_end = 0;
  std::size_t scales32 = 0, packed = 0, lengths = 0, offsets = 0, symbols = 0, streams = 0;
  std::size_t total = 0;
};

std::size_t Align256(std::size_t v) {
  return (v + 255) & ~std::size_t{255};
}

ScratchLayout MakeScratchLayout(const KvShape& shape, std::uint32_t chunks) {
  const HostLayout h = MakeHostLayout(shape);
  ScratchLayout s;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t where = at;
    at = Align256(at + bytes);
    return where;
  };
  s.descs = take(std::size_t{chunks} * sizeof(CacheGenEncodeChunkDesc));
  s.table_start = take(std::size_t{h.lks} * 4);
  s.bins = at;
  at += h.lks;
  s.upload_end = at;
  at = Align256(at);
  s.hist = take(std::size_t{chunks} * h.lks * kMaxBins * 4);
  s.hist32 = take(std::size_t{chunks} * h.lks * kMaxBins * 4);
  s.status = at;
  at += std::size_t{chunks} * kStatusWords * 8;
  s.zero_end = at;
  at = Align256(at);
  s.scales32 = take(std::size_t{chunks} * h.lks * h.channels * 8);
  s.packed = take(std::size_t{chunks} * h.lks * kMaxBins * 4);
  s.lengths = take(std::size_t{chunks} * h.groups * 4);
  s.offsets = take(std::size_t{chunks} * h.groups * 4);
  s.symbols = take(std::size_t{chunks} * h.elements);
  s.streams = take(std::size_t{chunks} * h.groups * h.stream_cap * 2);
  s.total = at;
  return s;
}

// Pinned host buffer: upload staging [0, upload_end), then the device-written status.
std::size_t HostStatusOffset(const ScratchLayout& s) {
  return Align256(s.upload_end);
}

bool Aligned(const void* p, std::uintptr_t n) {
  return (reinterpret_cast<std::uintptr_t>(p) & (n - 1)) == 0;
}

}  // namespace

std::uint64_t CacheGenMaxContainerBytes(const KvShape& shape) {
  if (!ValidateShape(shape, DType::kFloat16).ok()) return 0;
  const HostLayout h = MakeHostLayout(shape);
  const std::uint64_t lengths[kSectionCount] = {
      kParamsFixedBytes + h.lks, std::uint64_t{h.lks} * kMaxBins * 2,
      std::uint64_t{h.lks} * h.channels * 8, std::uint64_t{h.groups} * 4,
      std::uint64_t{h.groups} * h.stream_cap * 2};
  return ContainerSize(lengths);
}

Status SealCacheGenContainer(std::span<std::byte> c) {
  return SealContainer(c).WithContext("SealCacheGenContainer");
}

template <DType In>
cudaError_t LaunchCacheGenEncode(const CacheGenEncodeParams& params, cudaStream_t stream) {
  const std::uint32_t lks = params.layers * 2;
  const std::uint32_t groups = lks * params.groups_per_lk;
  const unsigned scan_blocks =
      params.num_chunks * lks * ((params.channels + kTileChannels - 1) / kTileChannels);
  static std::atomic<std::size_t> scan_configured[kMaxDevices] = {};
  cudaError_t err =
      ConfigureSharedMemory(ScanQuantizeKernel<In>, sizeof(ScanSmem), scan_configured);
  if (err != cudaSuccess) return err;
  const std::size_t fallback_smem = std::size_t{kRows} * kMaxBins * 32 * 4;  // 64 KiB
  static std::atomic<std::size_t> fallback_configured[kMaxDevices] = {};
  err = ConfigureSharedMemory(RequantizeFp32Kernel<In>, fallback_smem, fallback_configured);
  if (err != cudaSuccess) return err;
  err = Launch(reinterpret_cast<const void*>(ScanQuantizeKernel<In>), scan_blocks, kScanThreads,
               sizeof(ScanSmem), params, stream);
  if (err != cudaSuccess) return err;
  const std::uint32_t tiles = (params.channels + 32 * params.vec - 1) / (32 * params.vec);
  err = Launch(reinterpret_cast<const void*>(RequantizeFp32Kernel<In>),
               params.num_chunks * lks * tiles, kTileThreads, fallback_smem, params, stream);
  if (err != cudaSuccess) return err;
  const std::uint32_t norm_warps = params.num_chunks * lks;  // 4 per block
  err = Launch(reinterpret_cast<const void*>(NormalizeKernel), (norm_warps + 3) / 4, 128, 0, params,
               stream);
  if (err != cudaSuccess) return err;
  const std::uint32_t enc_blocks =
      params.num_chunks * lks * ((params.groups_per_lk + kEncodeWarps - 1) / kEncodeWarps);
  err = Launch(reinterpret_cast<const void*>(EncodeKernel), enc_blocks, kEncodeWarps * 32, 0,
               params, stream);
  if (err != cudaSuccess) return err;
  err = Launch(reinterpret_cast<const void*>(FinalizeKernel), params.num_chunks, kFinalizeThreads,
               0, params, stream);
  if (err != cudaSuccess) return err;
  return Launch(reinterpret_cast<const void*>(CompactKernel), params.num_chunks * groups,
                kCompactThreads, 0, params, stream);
}

// The closed set of instantiations.
template cudaError_t LaunchCacheGenEncode<DType::kFloat16>(const CacheGenEncodeParams&,
                                                           cudaStream_t);
template cudaError_t LaunchCacheGenEncode<DType::kBFloat16>(const CacheGenEncodeParams&,
                                                            cudaStream_t);
template cudaError_t LaunchCacheGenEncode<DType::kFloat32>(const CacheGenEncodeParams&,
                                                           cudaStream_t);

Result<CacheGenEncodeWorkspace> CacheGenEncodeWorkspace::Create(const KvShape& shape,
                                                                std::uint32_t max_chunks) {
  KVD_RETURN_IF_ERROR(ValidateShape(shape, DType::kFloat32).WithContext("CacheGenEncodeWorkspace"));
  if (max_chunks == 0 || max_chunks > 4096) {
    return InvalidArgument("CacheGenEncodeWorkspace: max_chunks " + std::to_string(max_chunks) +
                           " out of range [1, 4096]");
  }
  const ScratchLayout s = MakeScratchLayout(shape, max_chunks);
  const HostLayout h = MakeHostLayout(shape);
  if (std::uint64_t{max_chunks} * h.groups > INT32_MAX) {
    return InvalidArgument("CacheGenEncodeWorkspace: " + std::to_string(max_chunks) +
                           " chunks of " + std::to_string(h.groups) +
                           " groups are too many for one launch");
  }
  CacheGenEncodeWorkspace ws;
  ws.shape_ = shape;
  ws.max_chunks_ = max_chunks;
  KVD_ASSIGN_OR_RETURN(ws.device_, DeviceBuffer::Allocate(s.total));
  KVD_ASSIGN_OR_RETURN(ws.host_,
                       PinnedHostBuffer::Allocate(HostStatusOffset(s) +
                                                  std::size_t{max_chunks} * kHostStatusWords * 8));
  void* status = nullptr;
  KVD_CUDA_RETURN_IF_ERROR(
      cudaHostGetDevicePointer(&status,
                               static_cast<std::byte*>(ws.host_.data()) + HostStatusOffset(s), 0),
      "CacheGenEncodeWorkspace: map status");
  ws.host_status_device_ = static_cast<unsigned long long*>(status);
  return Result<CacheGenEncodeWorkspace>(std::move(ws));
}

Status EnqueueEncodeCacheGen(DType dtype, const KvShape& shape, std::span<const void* const> inputs,
                             std::span<std::byte* const> outputs, const CacheGenOptions& options,
                             CacheGenEncodeWorkspace& ws, cudaStream_t stream) {
  const std::string what = "EnqueueEncodeCacheGen";
  if (ws.pending_chunks_ != 0) {
    return InvalidArgument(what +
                           ": the workspace has a batch in flight (call "
                           "FinishEncodeCacheGen first)");
  }
  if (!IsValidDType(static_cast<std::uint8_t>(dtype))) {
    return InvalidArgument(what + ": invalid dtype " + std::to_string(static_cast<int>(dtype)));
  }
  KVD_RETURN_IF_ERROR(ValidateShape(shape, dtype).WithContext("cachegen encode"));
  if (!(shape == ws.shape_)) {
    return InvalidArgument(what + ": shape " + shape.ToString() + " differs from the workspace's " +
                           ws.shape_.ToString());
  }
  if (inputs.empty() || inputs.size() != outputs.size() || inputs.size() > ws.max_chunks_) {
    return InvalidArgument(what + ": " + std::to_string(inputs.size()) + " inputs and " +
                           std::to_string(outputs.size()) + " outputs; need the same count, 1 to " +
                           std::to_string(ws.max_chunks_));
  }
  KVD_ASSIGN_OR_RETURN(const CacheGenOptions opts, ResolveCacheGenOptions(options, shape.layers));

  const HostLayout h = MakeHostLayout(shape);
  const auto chunks = static_cast<std::uint32_t>(inputs.size());
  const ScratchLayout s = MakeScratchLayout(shape, ws.max_chunks_);
  auto* host = static_cast<std::byte*>(ws.host_.data());
  auto* dev = static_cast<std::byte*>(ws.device_.data());
  const std::uint64_t esize = DTypeSize(dtype);
  bool vec = h.channels % 8 == 0;
  CacheGenEncodeParams p{};
  const bool inline_chunks = chunks <= kCacheGenInlineChunks;
  auto* descs =
      inline_chunks ? p.inline_chunks : reinterpret_cast<CacheGenEncodeChunkDesc*>(host + s.descs);
  for (std::uint32_t i = 0; i < chunks; ++i) {
    if (inputs[i] == nullptr || !Aligned(inputs[i], esize)) {
      return InvalidArgument(what + ": input " + std::to_string(i) + " is null or misaligned");
    }
    if (outputs[i] == nullptr || !Aligned(outputs[i], 16)) {
      return InvalidArgument(what + ": output " + std::to_string(i) +
                             " is null or not 16-byte aligned");
    }
    vec = vec && Aligned(inputs[i], 16);
    descs[i] = CacheGenEncodeChunkDesc{inputs[i], outputs[i]};
  }
  std::vector<std::uint8_t> bins(h.lks);
  std::uint32_t entries = 0;
  for (std::uint32_t l = 0; l < shape.layers; ++l) {
    bins[2 * l] = opts.k_bins[l];
    bins[2 * l + 1] = opts.v_bins[l];
    entries += opts.k_bins[l] + opts.v_bins[l];
  }
  // The bins profile (and its table offsets) is uploaded only when it changes.
  if (bins != ws.device_bins_) {
    auto* table_start = reinterpret_cast<std::uint32_t*>(host + s.table_start);
    std::uint32_t at = 0;
    for (std::uint32_t lk = 0; lk < h.lks; ++lk) {
      table_start[lk] = at;
      at += bins[lk];
    }
    std::memcpy(host + s.bins, bins.data(), bins.size());
    KVD_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dev + s.table_start, host + s.table_start, s.upload_end - s.table_start,
                        cudaMemcpyHostToDevice, stream),
        what + ": upload bins");
    ws.device_bins_ = bins;
  }
  if (!inline_chunks) {
    KVD_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dev + s.descs, host + s.descs, chunks * sizeof(CacheGenEncodeChunkDesc),
                        cudaMemcpyHostToDevice, stream),
        what + ": upload descriptors");
  }
  if (ws.dirty_) {  // first batch, or after a failure: counters and flags start at 0
    KVD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dev + s.hist, 0, s.zero_end - s.hist, stream),
                             what + ": clear counters");
    ws.dirty_ = false;
  }

  p.chunks =
      inline_chunks ? nullptr : reinterpret_cast<const CacheGenEncodeChunkDesc*>(dev + s.descs);
  p.bins = reinterpret_cast<const std::uint8_t*>(dev + s.bins);
  p.table_start = reinterpret_cast<const std::uint32_t*>(dev + s.table_start);
  p.symbols = reinterpret_cast<std::uint8_t*>(dev + s.symbols);
  p.scales32 = reinterpret_cast<float*>(dev + s.scales32);
  p.hist = reinterpret_cast<std::uint32_t*>(dev + s.hist);
  p.hist32 = reinterpret_cast<std::uint32_t*>(dev + s.hist32);
  p.packed = reinterpret_cast<std::uint32_t*>(dev + s.packed);
  p.streams = reinterpret_cast<std::uint16_t*>(dev + s.streams);
  p.lengths = reinterpret_cast<std::uint32_t*>(dev + s.lengths);
  p.offsets = reinterpret_cast<std::uint32_t*>(dev + s.offsets);
  p.status = reinterpret_cast<unsigned long long*>(dev + s.status);
  p.host_status = ws.host_status_device_;
  p.params_offset = AlignUp64(kContainerHeaderBytes + kSectionCount * kSectionEntryBytes);
  p.tables_offset = AlignUp64(p.params_offset + kParamsFixedBytes + h.lks);
  p.scales_offset = AlignUp64(p.tables_offset + std::uint64_t{entries} * 2);
  p.scales_bytes16 = std::uint64_t{h.lks} * h.channels * 4;
  p.num_chunks = chunks;
  p.layers = shape.layers;
  p.tokens = shape.tokens;
  p.kv_heads = shape.kv_heads;
  p.head_dim = shape.head_dim;
  p.channels = h.channels;
  p.channels_per_lane = h.cpl;
  p.groups_per_lk = h.groups_per_lk;
  p.table_entries = entries;
  p.stream_cap = static_cast<std::uint32_t>(h.stream_cap);
  p.vec = vec ? 8u : 1u;
  p.input_dtype = static_cast<std::uint32_t>(dtype);

  cudaError_t err = cudaErrorInvalidValue;
  switch (dtype) {
    case DType::kFloat16: err = LaunchCacheGenEncode<DType::kFloat16>(p, stream); break;
    case DType::kBFloat16: err = LaunchCacheGenEncode<DType::kBFloat16>(p, stream); break;
    case DType::kFloat32: err = LaunchCacheGenEncode<DType::kFloat32>(p, stream); break;
    default: return InvalidArgument(what + ": unsupported dtype");
  }
  if (err != cudaSuccess) {
    ws.dirty_ = true;  // some kernels may have run
    return StatusFromCuda(err, what + ": launch");
  }
  ws.pending_chunks_ = chunks;
  return Status::Ok();
}

Result<std::vector<std::uint64_t>> FinishEncodeCacheGen(CacheGenEncodeWorkspace& ws,
                                                        cudaStream_t stream) {
  if (ws.pending_chunks_ == 0) return InvalidArgument("FinishEncodeCacheGen: no batch in flight");
  const std::uint32_t chunks = ws.pending_chunks_;
  ws.pending_chunks_ = 0;
  if (const cudaError_t err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    ws.dirty_ = true;
    return StatusFromCuda(err, "FinishEncodeCacheGen");
  }
  const ScratchLayout s = MakeScratchLayout(ws.shape_, ws.max_chunks_);
  const auto* status = reinterpret_cast<const volatile unsigned long long*>(
      static_cast<const std::byte*>(ws.host_.data()) + HostStatusOffset(s));
  const std::uint32_t channels = ws.shape_.kv_heads * ws.shape_.head_dim;
  const std::string prefix = chunks > 1 ? "cachegen: chunk " : "cachegen: ";
  std::vector<std::uint64_t> sizes(chunks);
  for (std::uint32_t i = 0; i < chunks; ++i) {
    const volatile unsigned long long* st = status + std::size_t{i} * kHostStatusWords;
    const std::string where = chunks > 1 ? prefix + std::to_string(i) + ": " : prefix;
    if (st[1] != 0) {
      return InvalidArgument(where + "non-finite value at " + ElementPosition(ws.shape_, ~st[1]) +
                             " (CacheGen cannot represent NaN/Inf; use the raw codec)");
    }
    if (st[0] != 0 && st[2] != 0) {
      const std::uint64_t sc = ~st[2];
      return InvalidArgument(where + "the value range of channel " + std::to_string(sc % channels) +
                             " of layer " + std::to_string(sc / channels / 2) + " overflows float");
    }
    sizes[i] = st[3];
  }
  return sizes;
}

Result<std::vector<std::uint64_t>> EncodeCacheGenDevice(DType dtype, const KvShape& shape,
                                                        std::span<const void* const> inputs,
                                                        std::span<std::byte* const> outputs,
                                                        const CacheGenOptions& options,
                                                        CacheGenEncodeWorkspace& workspace,
                                                        cudaStream_t stream) {
  KVD_RETURN_IF_ERROR(
      EnqueueEncodeCacheGen(dtype, shape, inputs, outputs, options, workspace, stream));
  return FinishEncodeCacheGen(workspace, stream);
}

Result<std::vector<std::byte>> EncodeCacheGenGpu(const KvTensorView& host_tensor,
                                                 const CacheGenOptions& options,
                                                 cudaStream_t stream) {
  KVD_RETURN_IF_ERROR(host_tensor.Validate().WithContext("cachegen encode"));
  const KvShape& shape = host_tensor.shape;
  KVD_ASSIGN_OR_RETURN(CacheGenEncodeWorkspace ws, CacheGenEncodeWorkspace::Create(shape, 1));
  const std::uint64_t max_bytes = CacheGenMaxContainerBytes(shape);
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_in, DeviceBuffer::Allocate(host_tensor.data.size()));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_out, DeviceBuffer::Allocate(max_bytes));
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_in.data(), host_tensor.data.data(),
                                           host_tensor.data.size(), cudaMemcpyHostToDevice, stream),
                           "EncodeCacheGenGpu: upload");
  const void* const ins[] = {d_in.data()};
  std::byte* const outs[] = {static_cast<std::byte*>(d_out.data())};
  KVD_ASSIGN_OR_RETURN(
      std::vector<std::uint64_t> sizes,
      EncodeCacheGenDevice(host_tensor.dtype, shape, ins, outs, options, ws, stream));
  if (sizes[0] > max_bytes) return Internal("EncodeCacheGenGpu: container larger than its bound");
  std::vector<std::byte> bytes(sizes[0]);
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(bytes.data(), d_out.data(), bytes.size(), cudaMemcpyDeviceToHost, stream),
      "EncodeCacheGenGpu: download");
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "EncodeCacheGenGpu");
  KVD_RETURN_IF_ERROR(SealCacheGenContainer(bytes));
  return bytes;
}

}  // namespace kvdepot::cuda
