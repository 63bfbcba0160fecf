// Kernel family "leased" (see kvdepot/cuda/leased.h): the row scatter that writes contiguous
// [layers][2][tokens][row] chunks into pages (two instantiations: 16-byte and 2-byte words), and
// the check of leased HACK chunks' scales (hack_scales_check.h).
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "hack_scales_check.h"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/cuda/leased.h"
#include "launch.h"

namespace kvdepot::cuda {

namespace {

constexpr int kThreads = 256;  // 8 warps per block, one row per warp at a time
constexpr int kWarp = 32;

// Word: uint4 (16 bytes) when rows, strides and pointers allow it, else std::uint16_t (every
// dtype's rows and pointers are 2-byte multiples).
template <typename Word>
__global__ void __launch_bounds__(kThreads) ScatterRowsKernel(ScatterRowsParams p) {
  const std::uint64_t rows = std::uint64_t{p.chunks} * p.layers * 2 * p.tokens;
  const std::uint32_t words = p.row_bytes / sizeof(Word);
  const unsigned lane = threadIdx.x % kWarp;
  const std::uint64_t warps = std::uint64_t{gridDim.x} * (kThreads / kWarp);
  for (std::uint64_t row = blockIdx.x * (kThreads / kWarp) + threadIdx.x / kWarp; row < rows;
       row += warps) {
    // row = ((chunk * layers + layer) * 2 + kv) * tokens + token
    const std::uint32_t token = static_cast<std::uint32_t>(row % p.tokens);
    const std::uint64_t lk = row / p.tokens;  // (chunk * layers + layer) * 2 + kv
    const std::uint32_t kv = static_cast<std::uint32_t>(lk % 2);
    const std::uint32_t layer = static_cast<std::uint32_t>((lk / 2) % p.layers);
    const std::uint32_t chunk = static_cast<std::uint32_t>(lk / 2 / p.layers);
    const std::int32_t page = p.block_tables[chunk][token / p.page_size];
    if (page < 0 || static_cast<std::uint32_t>(page) >= p.num_pages) {
      if (lane == 0) atomicExch(p.error, 1u);
      continue;
    }
    const auto* src = reinterpret_cast<const Word*>(
        p.sources[chunk] + (lk % (std::uint64_t{p.layers} * 2) * p.tokens + token) * p.row_bytes);
    auto* dst = reinterpret_cast<Word*>(p.caches[kv * p.layers + layer] +
                                        static_cast<std::uint64_t>(page) * p.page_stride +
                                        (token % p.page_size) * p.row_stride);
    for (std::uint32_t w = lane; w < words; w += kWarp) dst[w] = src[w];
  }
}

template <typename Word>
cudaError_t Launch(const ScatterRowsParams& p, cudaStream_t stream) {
  const std::uint64_t rows = std::uint64_t{p.chunks} * p.layers * 2 * p.tokens;
  unsigned blocks = 0;
  const cudaError_t err =
      internal::GridStrideBlocks(ScatterRowsKernel<Word>, rows * kWarp, kThreads, 0, &blocks);
  if (err != cudaSuccess) return err;
  ScatterRowsKernel<Word><<<blocks, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// InspectHack's rule for one scales entry (codec/src/hack.cc, CheckScales): the sign tested on
// the bits (-0 is invalid), the sum rounded after the product as on the host (no fused FMA).
__device__ __forceinline__ bool ValidScalesEntry(std::uint32_t entry) {
  const auto scale_bits = static_cast<unsigned short>(entry & 0xffffu);
  const auto min_bits = static_cast<unsigned short>(entry >> 16);
  if ((scale_bits & 0x8000u) != 0) return false;
  const float scale = __half2float(__ushort_as_half(scale_bits));
  const float min = __half2float(__ushort_as_half(min_bits));
  return isfinite(scale) && isfinite(min) &&
         __fadd_rn(min, __fmul_rn(3.0f, scale)) < hack::kFp16Overflow;
}

constexpr int kCheckThreads = 256;

// blockIdx.y strides over the spans, the x dimension over one span's entries.
__global__ void __launch_bounds__(kCheckThreads)
    CheckHackScalesKernel(const internal::HackScalesSpan* spans, std::uint32_t n,
                          unsigned long long* first_bad) {
  for (std::uint32_t s = blockIdx.y; s < n; s += gridDim.y) {
    const internal::HackScalesSpan span = spans[s];
    for (std::uint64_t i = std::uint64_t{blockIdx.x} * kCheckThreads + threadIdx.x; i < span.count;
         i += std::uint64_t{gridDim.x} * kCheckThreads) {
      if (!ValidScalesEntry(span.entries[i])) {
        atomicMin(first_bad, (static_cast<unsigned long long>(s) << 32) | i);
      }
    }
  }
}

}  // namespace

cudaError_t internal::LaunchCheckHackScales(const HackScalesSpan* spans, std::uint32_t n,
                                            std::uint64_t max_count, unsigned long long* first_bad,
                                            cudaStream_t stream) {
  if (n == 0 || max_count == 0) return cudaSuccess;
  if (max_count > 0xffffffffull) return cudaErrorInvalidValue;  // the entry's 32 bits of the key
  // About four entries per thread over the largest span; at most 65535 spans side by side.
  const std::uint64_t x = (max_count + 4 * kCheckThreads - 1) / (4 * kCheckThreads);
  const dim3 grid(static_cast<unsigned>(std::min<std::uint64_t>(x, 1024)),
                  std::min<std::uint32_t>(n, 65535));
  CheckHackScalesKernel<<<grid, kCheckThreads, 0, stream>>>(spans, n, first_bad);
  return cudaGetLastError();
}

cudaError_t LaunchScatterRows(const ScatterRowsParams& p, cudaStream_t stream) {
  if (p.chunks == 0 || p.layers == 0 || p.tokens == 0 || p.page_size == 0 || p.row_bytes % 2 != 0) {
    return cudaErrorInvalidValue;
  }
  const bool wide = p.aligned16 != 0 && p.row_bytes % 16 == 0 && p.row_stride % 16 == 0 &&
                    p.page_stride % 16 == 0;
  return wide ? Launch<uint4>(p, stream) : Launch<std::uint16_t>(p, stream);
}

}  // namespace kvdepot::cuda
