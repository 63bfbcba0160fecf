// Warpgroup tensor-core (wgmma, sm_90a) ordering helpers shared by the kernels that issue wgmma
// with register operands (hack_prefill_fp16.cu, bench/gpu/probes/*.cu). Device code only;
// no other dependencies, so a standalone probe can include it. Call them only from code compiled
// for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL): other targets reject the instructions.
#pragma once

#include <cstdint>

namespace kvdepot::cuda::internal {

// Orders this warpgroup's register writes before the wgmmas that read them (PTX wgmma.fence:
// required before the first wgmma whose accumulator or A registers other instructions wrote).
__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
// Closes the group of this thread's wgmmas issued since the last commit.
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N of this thread's committed wgmma groups are pending.
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
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
// Keeps A-operand registers live (and unreused) until this point: the wgmmas read them until the
// wait before it.
template <int N>
__device__ __forceinline__ void KeepLive(std::uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[i][e])::"memory");
  }
}

}  // namespace kvdepot::cuda::internal
