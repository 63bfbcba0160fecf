// The probes' wgmma products with 8 columns (bench/gpu/probes: mma_forms.cu, decode_floor.cu's
// step-o8): D (64 rows x 8, fp32, mma.sync's C layout per warp) += A (64 x K from registers,
// mma.sync's A layout per warp) x B (K x 8 in shared memory, K-major, no swizzle). sm_90a only.
#pragma once

#include <cstdint>

namespace probes {

// Descriptor of a K-major B tile of 8 rows without swizzle at shared address `shared_addr`: core
// matrices of 8 rows x 16 bytes (128 bytes each), `k_core_bytes` apart along K (the leading byte
// offset), one group along N (the stride byte offset, 256, is not used with 8 rows).
__device__ __forceinline__ std::uint64_t TileDesc(std::uint32_t shared_addr,
                                                  std::uint32_t k_core_bytes = 128) {
  return static_cast<std::uint64_t>((shared_addr & 0x3ffffu) >> 4) |
         (static_cast<std::uint64_t>(k_core_bytes >> 4) << 16) |
         (static_cast<std::uint64_t>(256 >> 4) << 32);
}

// K = 16, fp16 A and B.
__device__ __forceinline__ void WgmmaF16N8(float (&d)[4], const std::uint32_t (&a)[4],
                                           std::uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, "
      "1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

// K = 32, e4m3 A and B.
__device__ __forceinline__ void WgmmaE4m3N8(float (&d)[4], const std::uint32_t (&a)[4],
                                            std::uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "%8, 1, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

}  // namespace probes
