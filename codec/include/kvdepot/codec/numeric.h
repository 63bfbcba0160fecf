// Bit-exact scalar conversions between fp32, fp16 and bf16, usable from C++ and CUDA.
//
// These functions are the single definition of kvdepot's rounding: the CPU codecs and the CUDA
// kernels both call them, which is what makes CPU and GPU outputs byte-identical. Rounding is
// round-to-nearest-even. Overflow rounds to infinity. NaN stays NaN with its sign: fp32 -> fp16
// keeps the top 10 payload bits and sets the quiet bit; fp32 -> bf16 keeps the top 7 payload bits
// and sets the quiet bit. Subnormals are handled exactly (no flush to zero).
//
// In device code the conversions of non-NaN values use the hardware instructions (cvt.rn, and
// cvt.rm / cvt.rp in cachegen_format.h's HalfRoundDown / HalfRoundUp), which are the same IEEE
// roundings — round to nearest even (or toward -/+ infinity), subnormals exact, overflow to Inf —
// in one instruction instead of a branchy sequence; NaN keeps the code below so that payload bits
// stay identical. Device code must be compiled without flush-to-zero (no --use_fast_math).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define KVD_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVD_HOST_DEVICE inline
#endif

namespace kvdepot {

KVD_HOST_DEVICE std::uint32_t FloatBits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

KVD_HOST_DEVICE float BitsToFloat(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// binary32 -> binary16, round to nearest even.
KVD_HOST_DEVICE std::uint16_t FloatToHalfBits(float value) {
#if defined(__CUDA_ARCH__)
  if (value == value) return __half_as_ushort(__float2half_rn(value));
#endif
  const std::uint32_t x = FloatBits(value);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN
    if (abs == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x03ffu));
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: overflow to infinity
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // < 2^-25 rounds to 0
    const std::uint32_t exp = abs >> 23;                             // 102..112
    const std::uint32_t mant = (abs & 0x007fffffu) | 0x00800000u;    // implicit 1
    const std::uint32_t shift = 126u - exp;                          // 14..24
    std::uint32_t half = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits.
  std::uint32_t half = ((abs - 0x38000000u) >> 13);
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // carry may reach Inf: correct
  return static_cast<std::uint16_t>(sign | half);
}

// binary16 -> binary32, exact.
KVD_HOST_DEVICE float HalfBitsToFloat(std::uint16_t h) {
#if defined(__CUDA_ARCH__)
  if ((h & 0x7fffu) <= 0x7c00u) return __half2float(__ushort_as_half(h));
#endif
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x03ffu;
  if (exp == 0x1fu) return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return BitsToFloat(sign);
  // Subnormal: normalise.
  std::uint32_t e = 113u;
  while ((mant & 0x0400u) == 0) {
    mant <<= 1;
    --e;
  }
  return BitsToFloat(sign | (e << 23) | ((mant & 0x03ffu) << 13));
}

// binary32 -> bfloat16, round to nearest even.
KVD_HOST_DEVICE std::uint16_t FloatToBf16Bits(float value) {
#if defined(__CUDA_ARCH__)
  if (value == value) return __bfloat16_as_ushort(__float2bfloat16_rn(value));
#endif
  const std::uint32_t x = FloatBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload, force quiet
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  }
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

// bfloat16 -> binary32, exact.
KVD_HOST_DEVICE float Bf16BitsToFloat(std::uint16_t b) {
  return BitsToFloat(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace kvdepot
