// Tensor-product forms for the decode block loop (issue 24 §2; docs/hack-gpu.md, "Floors measured"
// and "Session 39"): what a decode block's two products cost on the sm_90 tensor cores in three
// operand forms, with the unpack each form needs, under a full GPU's load (so at its power cap,
// where batch-16 decode runs). Not a kernel of the library: no memory traffic, no softmax, random
// codes from a per-thread xorshift. Per unit (one 64-token block of one KV head at head_dim 128:
// S^T = K Q^T and O^T = V^T P^T, 2 x 64 x 128 x 8 multiply-adds) a warp does its share of:
//   hmma16   the fp16 decode kernel's form: 32 16-code words to fp16 pairs (one LOP3 per pair, one
//            shift per word: codes as subnormals), 64 mma.sync.m16n8k16 (f16 -> f32, B from
//            registers);
//   wgmma16  the same unpack, 64 wgmma.m64n8k16 per warpgroup unit of 4 (A from registers, B a
//            256-byte K-major tile in shared memory): the same products with the B operand read
//            by the tensor cores instead of from each warp's registers;
//   wgmma8   e4m3 operands: 32 words to fp8 quads (w & 0x03030303, w & 0x0C0C0C0C and the same of
//            w >> 4: the codes as e4m3 subnormals c * 2^-9 or c * 2^-7; 4 LOP3 and one shift per
//            word), 32 wgmma.m64n8k32.e4m3 (mma.sync's e4m3 form compiles for sm_90a to
//            conversions and two fp16 HMMAs: not an option).
// Each CTA of 8 warps (two warpgroups) runs `units` units per warp; the grid is 132 x 1 or 2 CTAs
// per SM. Timing: the median of 7 launches of ~100 ms each (long enough to settle under the power
// cap; sample the clock beside it with nvidia-smi).
//
// Build (from the repository root):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I cuda/src
//     -o mma_forms bench/gpu/probes/mma_forms.cu
// (-arch=sm_90a fails with nvcc 13.0 here: it also assembles compute_90 PTX, without wgmma.)
// Run:
//   ./mma_forms [units per warp (20000)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.cuh"
#include "codes.cuh"
#include "mma_sync.cuh"  // cuda/src: -I cuda/src
#include "wgmma.cuh"     // cuda/src
#include "wgmma_n8.cuh"

namespace {

using kvdepot::cuda::internal::FenceOperands;
using kvdepot::cuda::internal::KeepLive;
using kvdepot::cuda::internal::MmaF16;
using kvdepot::cuda::internal::WgmmaCommit;
using kvdepot::cuda::internal::WgmmaFence;
using kvdepot::cuda::internal::WgmmaWait;
using probes::E4m3Quads;
using probes::Pair;
using probes::TileDesc;
using probes::WgmmaE4m3N8;
using probes::WgmmaF16N8;

enum Form { kHmma16, kWgmma16, kWgmma8 };
const char* const kFormNames[] = {"hmma16", "wgmma16", "wgmma8"};

__device__ __forceinline__ std::uint32_t Next(std::uint32_t& x) {
  x ^= x << 13, x ^= x >> 17, x ^= x << 5;
  return x;
}

// One chunk: 4 words (of the unit's 32) unpacked into A fragments. fp16: 8 fragments (32 pairs);
// e4m3: 4 fragments (16 quads).
template <Form F>
__device__ __forceinline__ void Unpack(std::uint32_t& x, std::uint32_t (&a)[8][4]) {
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const std::uint32_t v = Next(x);
    if constexpr (F == kWgmma8) {
      E4m3Quads(v, a[w]);
    } else {  // fp16 subnormal pairs: bias 0
      const std::uint32_t v10 = v >> 10;
      a[2 * w][0] = Pair<0>(v, v10, 0), a[2 * w][1] = Pair<1>(v, v10, 0);
      a[2 * w][2] = Pair<2>(v, v10, 0), a[2 * w][3] = Pair<3>(v, v10, 0);
      a[2 * w + 1][0] = Pair<4>(v, v10, 0), a[2 * w + 1][1] = Pair<5>(v, v10, 0);
      a[2 * w + 1][2] = Pair<6>(v, v10, 0), a[2 * w + 1][3] = Pair<7>(v, v10, 0);
    }
  }
}

template <Form F>
__global__ void __launch_bounds__(256) Forms(std::uint32_t units, std::uint32_t* __restrict__ out) {
  __shared__ __align__(1024) std::uint8_t tile[256];
  for (std::uint32_t i = threadIdx.x; i < 256; i += blockDim.x) {
    tile[i] = static_cast<std::uint8_t>(F == kWgmma8 ? 0x30 + (i & 7) : ((i & 1) ? 0x2C : i));
  }
  __syncthreads();
  const std::uint64_t desc = TileDesc(static_cast<std::uint32_t>(__cvta_generic_to_shared(tile)));
  std::uint32_t x = 0x9E3779B9u * (blockIdx.x * blockDim.x + threadIdx.x + 1);
  float d[4][4] = {};
  const std::uint32_t b0 = 0x3C003C00u ^ (threadIdx.x & 31u), b1 = 0x3C003C00u;
  constexpr int kChunkFrags = F == kWgmma8 ? 4 : 8;
  for (std::uint32_t u = 0; u < units; ++u) {
    // 8 chunks of 4 words per unit; two A sets alternate so that a chunk's wgmmas may still read
    // one set while the next chunk is unpacked into the other.
    std::uint32_t a[2][8][4];
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      std::uint32_t(&cur)[8][4] = a[c & 1];
      Unpack<F>(x, cur);
      if constexpr (F == kHmma16) {
#pragma unroll
        for (int f = 0; f < 8; ++f)
          MmaF16(d[f & 3], cur[f][0], cur[f][1], cur[f][2], cur[f][3], b0, b1);
      } else {
        WgmmaFence();
#pragma unroll
        for (int f = 0; f < kChunkFrags; ++f) {
          if constexpr (F == kWgmma8) {
            WgmmaE4m3N8(d[f & 3], reinterpret_cast<const std::uint32_t(&)[4]>(cur[f]), desc);
          } else {
            WgmmaF16N8(d[f & 3], reinterpret_cast<const std::uint32_t(&)[4]>(cur[f]), desc);
          }
        }
        WgmmaCommit();
        WgmmaWait<1>();
        KeepLive(a[(c + 1) & 1]);  // the previous chunk's set, read until the wait above
      }
    }
    if constexpr (F != kHmma16) {
      WgmmaWait<0>();
      KeepLive(a[1]);
      FenceOperands(d);
    }
  }
  std::uint32_t acc = x;
#pragma unroll
  for (int i = 0; i < 4; ++i) acc ^= __float_as_uint(d[i][0] + d[i][1] + d[i][2] + d[i][3]);
  if (acc == 0x9e3779b9u) out[0] = acc;  // never, in practice; keeps the work
}

using Kernel = void (*)(std::uint32_t, std::uint32_t*);

float TimeKernel(Kernel kernel, std::uint32_t units, std::uint32_t* out, int ctas) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  kernel<<<ctas, 256>>>(units / 10 + 1, out);  // warm-up
  CHECK(cudaGetLastError());
  std::vector<float> ms;
  for (int r = 0; r < 7; ++r) {
    CHECK(cudaEventRecord(a));
    kernel<<<ctas, 256>>>(units, out);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint32_t units =
      argc > 1 ? static_cast<std::uint32_t>(std::strtoul(argv[1], nullptr, 10)) : 20000u;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::uint32_t* out = nullptr;
  CHECK(cudaMalloc(&out, 4096));
  std::printf("%s, %d SMs; %u units per warp, 8 warps per CTA\n", prop.name,
              prop.multiProcessorCount, units);
  std::printf("%-8s %6s %10s %14s %12s\n", "form", "CTA/SM", "median ms", "ns/unit/SM", "TMAC/s");
  const Kernel kernels[] = {Forms<kHmma16>, Forms<kWgmma16>, Forms<kWgmma8>};
  for (int per_sm : {1, 2}) {
    for (int f = 0; f < 3; ++f) {
      const int ctas = per_sm * prop.multiProcessorCount;
      const float ms = TimeKernel(kernels[f], units, out, ctas);
      const double unit_total = static_cast<double>(units) * ctas * 8;  // warp-units
      const double ns_per_unit_sm = ms * 1e6 / (unit_total / prop.multiProcessorCount);
      const double macs = unit_total * 131072.0;
      std::printf("%-8s %6d %10.2f %14.2f %12.1f\n", kFormNames[f], per_sm, ms, ns_per_unit_sm,
                  macs / (ms * 1e-3) / 1e12);
    }
  }
  CHECK(cudaFree(out));
  return 0;
}
