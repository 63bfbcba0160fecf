// Decode floor probes (issue 24 §2; docs/hack-gpu.md, "What bounds it"): how fast can any decode
// kernel stream batch x 8 KV heads x (tokens / 64) hack-int2 blocks (head_dim 128: K and V codes
// 2 x 2048 bytes, K and V (scale, min) pairs 2 x 512 bytes per block and KV head) through the
// SMs, and what do unpacking the codes to fp16 and feeding them to fp16 tensor cores cost on top?
// Not a kernel of the library: no softmax, no merges, no descriptors, random bytes. Each mode does
// only part of a decode kernel's work, so each time is a floor for the kernels that do that part:
//   read      16-byte loads of every byte of every block, XOR-folded (the bandwidth floor);
//   fold      + every 16-code word unpacked to 8 fp16 pairs with one LOP3 per pair (and one shift
//               per word): the unpack a kernel with the scales folded into Q and into the output
//               would do (1024 + code * 4^j, the bias and 4^-j carried elsewhere), and one HADD2
//               per pair that consumes it (so the compiler cannot merge the LOP3s); the (scale,
//               min) words are read (XOR-folded), as such a kernel reads them;
//   full      + per pair two HFMA2 (the code made exact, then scale and min applied): the fp16
//               prefill's unpack, three instructions per pair as the fp16 decode kernel's;
//   fold-mma  fold, and every 4 pairs one mma.sync.m16n8k16 (f16 -> f32): 64 per block and KV
//               head, what a kernel with S^T = K Q^T and O^T = V^T P^T issues (variant D);
//   full-mma  full, and the same MMAs.
// A warp streams the (sequence, head, block) units gw, gw + W, ... (W warps in the grid), the next
// unit's 10 x 16 bytes per lane loaded into registers while this one is processed. Timing: a CUDA
// graph of 18 launches over 3 rotating copies of the data (3 x 84 MB at 128K tokens, batch 1: more
// than the 60 MB L2), replayed 30 times; the median per launch is reported, best over the grid
// shapes tried (CTAs per SM x warps per CTA).
//
// Build (from the repository root):
//   nvcc -O3 -std=c++17 -arch=sm_90a -I cuda/src -o decode_floor bench/gpu/probes/decode_floor.cu
// Run:
//   ./decode_floor [tokens (131072)] [batch (1)]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mma_sync.cuh"  // cuda/src: -I cuda/src

namespace {

using kvdepot::cuda::internal::MmaF16;

constexpr int kKvHeads = 8;
constexpr int kBlockBytes = 5120;               // per (block, KV head)
constexpr int kLaneChunks = kBlockBytes / 512;  // 16-byte chunks per lane: 4 K, 4 V, 1 + 1 scales
constexpr int kCalls = 18, kSets = 3, kReps = 30;

enum Mode { kRead, kFold, kFull, kFoldMma, kFullMma };
const char* const kModeNames[] = {"read", "fold", "full", "fold-mma", "full-mma"};

#define CHECK(x)                                                                       \
  do {                                                                                 \
    const cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

__device__ __forceinline__ std::uint32_t AsU32(__half2 h) {
  return *reinterpret_cast<std::uint32_t*>(&h);
}
__device__ __forceinline__ __half2 AsHalf2(std::uint32_t u) {
  return *reinterpret_cast<__half2*>(&u);
}

// Code pair j (codes j and j + 8 of a 16-code word) as the fp16 pair 1024 + code * 4^k: one LOP3
// (pairs 5..7 from the word shifted right by 10 once). `bias` is 0x64006400 passed at run time: as
// a compile-time constant ptxas emits an AND and an OR, each with an immediate (two LOP3s).
template <int J>
__device__ __forceinline__ std::uint32_t Pair(std::uint32_t w, std::uint32_t w10,
                                              std::uint32_t bias) {
  constexpr int k = J < 5 ? J : J - 5;
  return ((J < 5 ? w : w10) & (0x00030003u << (2 * k))) | bias;
}

template <Mode M>
__global__ void __launch_bounds__(512) Probe(const uint4* __restrict__ data, std::uint64_t units,
                                             std::uint32_t bias, std::uint32_t* __restrict__ out) {
  const std::uint32_t lane = threadIdx.x & 31u;
  const std::uint64_t gw = (std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const std::uint64_t warps = std::uint64_t{gridDim.x} * blockDim.x >> 5;
  std::uint32_t acc = 0;
  float c[4][4] = {};
  __half2 sum[2] = {__float2half2_rn(0.0f), __float2half2_rn(0.0f)};
  const std::uint32_t b0 = 0x3C003C00u ^ lane, b1 = 0x3C003C00u;  // a query fragment
  uint4 cur[kLaneChunks], next[kLaneChunks];
  auto load = [&](std::uint64_t u, uint4(&r)[kLaneChunks]) {
    const uint4* src = data + u * (kBlockBytes / 16) + lane;
#pragma unroll
    for (int i = 0; i < kLaneChunks; ++i) r[i] = __ldcs(src + i * 32);
  };
  std::uint64_t u = gw;
  if (u < units) load(u, next);
  for (; u < units; u += warps) {
#pragma unroll
    for (int i = 0; i < kLaneChunks; ++i) cur[i] = next[i];
    if (u + warps < units) load(u + warps, next);
    if constexpr (M == kRead) {
#pragma unroll
      for (int i = 0; i < kLaneChunks; ++i) acc ^= cur[i].x ^ cur[i].y ^ cur[i].z ^ cur[i].w;
    } else {
      // (scale, min) pairs of 4 channels each for K and V (chunks 8 and 9).
      const std::uint32_t sm[8] = {cur[8].x, cur[8].y, cur[8].z, cur[8].w,
                                   cur[9].x, cur[9].y, cur[9].z, cur[9].w};
      // A kernel with the scales folded into Q and the output still reads them: consume them.
      if constexpr (M == kFold || M == kFoldMma) {
#pragma unroll
        for (int i = 0; i < 8; ++i) acc ^= sm[i];
      }
      int mma = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) {  // 4 K chunks, then 4 V chunks
        const std::uint32_t words[4] = {cur[i].x, cur[i].y, cur[i].z, cur[i].w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const std::uint32_t x = words[w], x10 = x >> 10;
          std::uint32_t h[8] = {Pair<0>(x, x10, bias), Pair<1>(x, x10, bias), Pair<2>(x, x10, bias),
                                Pair<3>(x, x10, bias), Pair<4>(x, x10, bias), Pair<5>(x, x10, bias),
                                Pair<6>(x, x10, bias), Pair<7>(x, x10, bias)};
          if constexpr (M == kFull || M == kFullMma) {
            const std::uint32_t e = sm[(i / 4) * 4 + w];
            const __half2 scale = AsHalf2(__byte_perm(e, e, 0x1010));
            const __half2 mn = AsHalf2(__byte_perm(e, e, 0x3232));
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const int k = j < 5 ? j : j - 5;
              const float inv = 1.0f / static_cast<float>(1 << (2 * k));
              const __half2 code =
                  __hfma2(AsHalf2(h[j]), __float2half2_rn(inv), __float2half2_rn(-1024.0f * inv));
              h[j] = AsU32(__hfma2(code, scale, mn));
            }
          }
          if constexpr (M == kFold || M == kFull) {  // one HADD2 per pair keeps each of them
#pragma unroll
            for (int j = 0; j < 8; ++j) sum[j & 1] = __hadd2(sum[j & 1], AsHalf2(h[j]));
          } else {
            MmaF16(c[mma & 3], h[0], h[1], h[2], h[3], b0, b1);
            MmaF16(c[(mma + 1) & 3], h[4], h[5], h[6], h[7], b0, b1);
            mma += 2;
          }
        }
      }
    }
  }
  if constexpr (M == kFold || M == kFull) acc ^= AsU32(__hadd2(sum[0], sum[1]));
  if constexpr (M == kFoldMma || M == kFullMma) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      acc ^= __float_as_uint(c[s][0] + c[s][1] + c[s][2] + c[s][3]);
    }
  }
  if (acc == 0x9e3779b9u) out[gw] = acc;  // never, in practice; keeps the work
}

template <Mode M>
float TimeMode(const uint4* data, std::uint64_t units, std::uint32_t* out, int ctas, int threads,
               cudaStream_t stream) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kCalls; ++i) {
    Probe<M><<<ctas, threads, 0, stream>>>(data + (i % kSets) * units * (kBlockBytes / 16), units,
                                           0x64006400u, out);
  }
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  std::vector<float> us;
  for (int r = 0; r < kReps; ++r) {
    CHECK(cudaEventRecord(a, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.0f / kCalls);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t tokens = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 131072;
  const std::uint64_t batch = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  const std::uint64_t units = batch * kKvHeads * (tokens / 64);
  const std::uint64_t bytes = units * kBlockBytes;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  uint4* data = nullptr;
  std::uint32_t* out = nullptr;
  CHECK(cudaMalloc(&data, bytes * kSets));
  CHECK(cudaMalloc(&out, 1 << 24));
  std::vector<std::uint32_t> host(bytes / 4);
  std::uint32_t x = 12345;
  for (auto& v : host) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    v = x & 0x3BFF3BFFu;  // (scale, min) words stay finite fp16 pairs, codes stay random
  }
  for (int s = 0; s < kSets; ++s) {
    CHECK(cudaMemcpy(reinterpret_cast<char*>(data) + s * bytes, host.data(), bytes,
                     cudaMemcpyHostToDevice));
  }
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  std::printf("%s, %d SMs; %llu tokens, batch %llu: %llu units, %.1f MB per call\n", prop.name,
              prop.multiProcessorCount, static_cast<unsigned long long>(tokens),
              static_cast<unsigned long long>(batch), static_cast<unsigned long long>(units),
              bytes / 1e6);
  std::printf("%-9s %10s %10s  %s\n", "mode", "median us", "GB/s", "grid (CTAs x warps)");
  auto run = [&](Mode m, auto timer) {
    float best = 1e30f;
    int best_ctas = 0, best_warps = 0;
    for (int per_sm : {1, 2}) {
      for (int warps : {8, 16}) {
        if (per_sm * warps > 32) continue;
        const int ctas = per_sm * prop.multiProcessorCount;
        const float t = timer(ctas, warps * 32);
        if (t < best) best = t, best_ctas = ctas, best_warps = warps;
      }
    }
    std::printf("%-9s %10.2f %10.1f  %d x %d\n", kModeNames[m], best, bytes / (best * 1e3),
                best_ctas, best_warps);
  };
  run(kRead, [&](int c, int t) { return TimeMode<kRead>(data, units, out, c, t, stream); });
  run(kFold, [&](int c, int t) { return TimeMode<kFold>(data, units, out, c, t, stream); });
  run(kFull, [&](int c, int t) { return TimeMode<kFull>(data, units, out, c, t, stream); });
  run(kFoldMma, [&](int c, int t) { return TimeMode<kFoldMma>(data, units, out, c, t, stream); });
  run(kFullMma, [&](int c, int t) { return TimeMode<kFullMma>(data, units, out, c, t, stream); });
  CHECK(cudaFree(data));
  CHECK(cudaFree(out));
  return 0;
}
