// Internal helpers shared by kvdepot_cuda's kernel launchers (not installed, not public API).
// Included from .cu files only (uses the C++ templates of cuda_runtime.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot::cuda::internal {

// Number of blocks for a grid-stride `kernel` over `work_items` (one item per thread per
// iteration): as many blocks as can be resident at once on the current device (SM count x the
// kernel's occupancy at `threads_per_block` and `dynamic_smem` bytes), fewer when there is less
// work, at least 1. Sizing by real occupancy avoids a second, partly empty wave of blocks.
template <typename Kernel>
cudaError_t GridStrideBlocks(Kernel kernel, std::uint64_t work_items, int threads_per_block,
                             std::size_t dynamic_smem, unsigned* blocks) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  int sm_count = 0;
  err = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads_per_block,
                                                      dynamic_smem);
  if (err != cudaSuccess) return err;
  const std::uint64_t resident = static_cast<std::uint64_t>(std::max(sm_count, 1)) *
                                 static_cast<std::uint64_t>(std::max(per_sm, 1));
  const auto threads = static_cast<std::uint64_t>(threads_per_block);
  const std::uint64_t needed = (work_items + threads - 1) / threads;
  *blocks = static_cast<unsigned>(std::max<std::uint64_t>(1, std::min(resident, needed)));
  return cudaSuccess;
}

// ---- device helpers shared by the kernel families ----

// How a decoded element of dtype D is stored (fp16 and bf16 as their bits, fp32 as float), and
// the rounding of a float into it: numeric.h's (one hardware conversion in device code).
template <DType D>
struct StoredElement {
  using type = std::uint16_t;
};
template <>
struct StoredElement<DType::kFloat32> {
  using type = float;
};
template <DType D>
using Stored = typename StoredElement<D>::type;

template <DType D>
__device__ __forceinline__ Stored<D> ToStored(float v) {
  if constexpr (D == DType::kFloat16) {
    return FloatToHalfBits(v);
  } else if constexpr (D == DType::kBFloat16) {
    return FloatToBf16Bits(v);
  } else {
    return v;
  }
}

// The shared-memory (state space) address of a generic pointer into shared memory.
__device__ __forceinline__ std::uint32_t SharedAddress(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async of 16 bytes, global -> shared (both 16-byte aligned), bypassing L1.
__device__ __forceinline__ void CpAsync16(std::uint32_t shared_dst, const void* global_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_dst), "l"(global_src)
               : "memory");
}
__device__ __forceinline__ void CpAsync4(std::uint32_t shared_dst, const void* global_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(shared_dst), "l"(global_src)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most `Pending` of this thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// Exclusive prefix sums of a 64-entry table held by a warp as lane l -> (f[l], f[l + 32]): cum0 of
// entry l, cum1 of entry l + 32, and the sum of all 64 (every lane gets the same total).
struct WarpCumulative64 {
  std::uint32_t cum0, cum1, total;
};
__device__ __forceinline__ WarpCumulative64 WarpCumulative(std::uint32_t f0, std::uint32_t f1) {
  const std::uint32_t lane = threadIdx.x & 31u;
  std::uint32_t s0 = f0, s1 = f1;  // inclusive scans of each half
#pragma unroll
  for (std::uint32_t off = 1; off < 32; off <<= 1) {
    const std::uint32_t u0 = __shfl_up_sync(0xffffffffu, s0, off);
    const std::uint32_t u1 = __shfl_up_sync(0xffffffffu, s1, off);
    if (lane >= off) {
      s0 += u0;
      s1 += u1;
    }
  }
  const std::uint32_t half = __shfl_sync(0xffffffffu, s0, 31);
  return {s0 - f0, half + s1 - f1, half + __shfl_sync(0xffffffffu, s1, 31)};
}

// Waits until the grid this one depends on (programmatic dependent launch,
// cudaLaunchAttributeProgrammaticStreamSerialization) has completed and its memory is visible;
// returns at once for a grid launched without that attribute. sm_90.
__device__ __forceinline__ void GridDependencyWait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Lets the grid launched after this one with programmatic stream serialization start (its CTAs
// then wait in GridDependencyWait until this grid has completed); sm_90.
__device__ __forceinline__ void GridDependencyLaunchDependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Devices whose shared-memory configuration ConfigureSharedMemory caches.
inline constexpr int kMaxDevices = 64;

// Raises `kernel`'s dynamic shared memory limit to `smem` bytes and prefers shared memory over L1
// on the current device, once per device and size (`configured` remembers what was set;
// cudaFuncSetAttribute costs microseconds per launch). Devices beyond kMaxDevices are configured
// every time.
template <typename Kernel>
cudaError_t ConfigureSharedMemory(Kernel kernel, std::size_t smem,
                                  std::atomic<std::size_t> (&configured)[kMaxDevices]) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const bool cached = device >= 0 && device < kMaxDevices;
  if (cached && configured[device].load(std::memory_order_relaxed) >= smem) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
  if (err != cudaSuccess) return err;
  if (cached) configured[device].store(smem, std::memory_order_relaxed);
  return cudaSuccess;
}

}  // namespace kvdepot::cuda::internal
