// Device-only approximate exponential shared by the attention kernels (hack_attention.cu,
// hack_prefill_fp16.cu): one special-function-unit instruction for their online softmax.
#pragma once

namespace kvdepot::cuda::internal {

// 2^x on the special-function unit (ex2.approx: relative error ~2^-22; flushes subnormals;
// 2^-inf = 0).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kvdepot::cuda::internal
