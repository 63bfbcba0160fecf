// The probes' unpacks of a 16-code hack-int2 word (bench/gpu/probes: decode_floor.cu, mma_forms.cu)
// into tensor-core A operands.
#pragma once

#include <cstdint>

namespace probes {

// Code pair j (codes j and j + 8 of a 16-code word) as the fp16 pair bias + code * 4^k: one LOP3
// (pairs 5..7 from the word shifted right by 10 once). With bias 0 the codes are fp16 subnormals
// (the fp16 decode kernel's unpack); with 0x64006400, 1024 + code * 4^k, which must then be passed
// at run time: as a compile-time constant ptxas emits an AND and an OR, each with an immediate (two
// LOP3s).
template <int J>
__device__ __forceinline__ std::uint32_t Pair(std::uint32_t w, std::uint32_t w10,
                                              std::uint32_t bias) {
  constexpr int k = J < 5 ? J : J - 5;
  return ((J < 5 ? w : w10) & (0x00030003u << (2 * k))) | bias;
}

// The 16 codes of word w as 4 registers of e4m3 quads: byte bits 0-1 of w and of w >> 4 hold the
// codes as the subnormals c * 2^-9, bits 2-3 as c * 2^-7 (e4m3 patterns 0-15 are the integers 0-15
// times 2^-9). 4 LOP3 and one shift.
__device__ __forceinline__ void E4m3Quads(std::uint32_t w, std::uint32_t (&q)[4]) {
  const std::uint32_t w4 = w >> 4;
  q[0] = w & 0x03030303u, q[1] = w & 0x0C0C0C0Cu;
  q[2] = w4 & 0x03030303u, q[3] = w4 & 0x0C0C0C0Cu;
}

}  // namespace probes
