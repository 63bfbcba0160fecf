// Warp-level fp16 tensor-core product shared by the register-operand kernels (hack_decode_fp16.cu,
// bench/gpu/probes/decode_floor.cu). Device code only; no other dependencies, so a standalone
// probe can include it.
#pragma once

#include <cstdint>

namespace kvdepot::cuda::internal {

// c += A B with mma.sync.m16n8k16, fp16 inputs, fp32 accumulators: A's fragment a0..a3 (rows g /
// g + 8, k pairs 2 tq / 2 tq + 8 of lane (g, tq)), B's b0, b1 (k pairs 2 tq / 2 tq + 8, column g),
// c rows g / g + 8 and columns 2 tq, 2 tq + 1 (PTX ISA, "Matrix Fragments for mma.m16n8k16").
__device__ __forceinline__ void MmaF16(float (&c)[4], std::uint32_t a0, std::uint32_t a1,
                                       std::uint32_t a2, std::uint32_t a3, std::uint32_t b0,
                                       std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace kvdepot::cuda::internal
