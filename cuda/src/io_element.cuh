// The element types of the attention kernels' queries and outputs (HackDecodeArgs::io_dtype,
// HackPrefillArgs::io_dtype): fp32, or what an engine's activations are, fp16 / bf16. Included
// from the attention .cu files only.
//
// Contract, for every kernel that takes them: a 16-bit query is read as its exact float value, and
// an output is computed in fp32 and rounded once (to nearest even) when it is stored. So a call
// over 16-bit q computes what the fp32 call over the same values computes, and its out is that
// call's out, rounded. The kernels are templates on the element (IoT: float, __half,
// __nv_bfloat16), not branches at run time: their fp32 instantiations are the fp32-only code they
// replaced (a run-time branch made the staged fp32 prefill 2-4% slower, session 21).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kvdepot/codec/tensor.h"

namespace kvdepot::cuda::internal {

__device__ __forceinline__ float IoToFloat(float x) {
  return x;
}
__device__ __forceinline__ float IoToFloat(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float IoToFloat(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Element k (0..3) of four 16-bit elements loaded as one 8-byte word (lowest address first).
template <typename IoT>
__device__ __forceinline__ float IoToFloat(uint2 w, std::uint32_t k) {
  const auto bits = static_cast<unsigned short>((k < 2u ? w.x : w.y) >> (16u * (k & 1u)));
  if constexpr (std::is_same_v<IoT, __half>) {
    return IoToFloat(__ushort_as_half(bits));
  } else {
    static_assert(std::is_same_v<IoT, __nv_bfloat16>);
    // bf16 is binary32's upper half. Not IoToFloat(__ushort_as_bfloat16(bits)): the same value, but
    // it compiles to 0.5-1.4 KB more SASS in the warp-specialised prefill kernels (the measured
    // code is this).
    return __uint_as_float(std::uint32_t{bits} << 16);
  }
}

// Four consecutive 16-bit elements at src (8-byte aligned) as floats.
template <typename IoT>
__device__ __forceinline__ float4 LoadIo4(const IoT* src) {
  static_assert(sizeof(IoT) == 2);
  const uint2 w = __ldg(reinterpret_cast<const uint2*>(src));
  return make_float4(IoToFloat<IoT>(w, 0), IoToFloat<IoT>(w, 1), IoToFloat<IoT>(w, 2),
                     IoToFloat<IoT>(w, 3));
}

// Elements [0, N) of src (16-bit, 16-byte aligned) as floats by 16-byte loads; zeros unless `use`.
template <std::uint32_t N, typename IoT>
__device__ __forceinline__ void LoadIo(const IoT* src, bool use, float (&out)[N]) {
  static_assert(sizeof(IoT) == 2 && N % 8 == 0);
#pragma unroll
  for (std::uint32_t c = 0; c < N / 8; ++c) {
    const uint4 w = use ? __ldg(reinterpret_cast<const uint4*>(src) + c) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (std::uint32_t k = 0; k < 8; ++k) {
      out[8 * c + k] = IoToFloat<IoT>(k < 4 ? make_uint2(w.x, w.y) : make_uint2(w.z, w.w), k % 4);
    }
  }
}

// x rounded to the element (identity for float).
template <typename IoT>
__device__ __forceinline__ IoT FloatToIo(float x) {
  if constexpr (std::is_same_v<IoT, float>) {
    return x;
  } else if constexpr (std::is_same_v<IoT, __half>) {
    return __float2half_rn(x);
  } else {
    static_assert(std::is_same_v<IoT, __nv_bfloat16>);
    return __float2bfloat16_rn(x);
  }
}

// Stores (lo, hi) at dst, dst + 1 (aligned to the pair).
__device__ __forceinline__ void StoreOut2(float* dst, float lo, float hi) {
  *reinterpret_cast<float2*>(dst) = make_float2(lo, hi);
}
__device__ __forceinline__ void StoreOut2(__half* dst, float lo, float hi) {
  *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(lo, hi);
}
__device__ __forceinline__ void StoreOut2(__nv_bfloat16* dst, float lo, float hi) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(lo, hi);
}

// ---- host: picking the instantiation ----

template <typename T>
struct IoTag {
  using type = T;
};
// The instantiation's index in per-kernel tables: 0 fp32, 1 fp16, 2 bf16.
template <typename IoT>
constexpr int kIoIndex = std::is_same_v<IoT, float>    ? 0
                         : std::is_same_v<IoT, __half> ? 1
                                                       : 2;
inline constexpr int kIoTypes = 3;

// Calls f(IoTag<IoT>{}) with IoT the element of `io_dtype` (a DType value; the launchers validate
// it first, and anything else is taken as fp32) and returns what f returns.
template <typename F>
decltype(auto) DispatchIo(std::uint32_t io_dtype, F&& f) {
  if (io_dtype == static_cast<std::uint32_t>(DType::kFloat16)) return f(IoTag<__half>{});
  if (io_dtype == static_cast<std::uint32_t>(DType::kBFloat16)) return f(IoTag<__nv_bfloat16>{});
  return f(IoTag<float>{});
}

}  // namespace kvdepot::cuda::internal
