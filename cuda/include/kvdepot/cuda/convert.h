// Kernel family "convert": element-wise dtype conversion on the GPU between fp16, bf16 and fp32.
//
// Bit-exactness contract: for every input bit pattern (NaN payloads, subnormals, infinities
// included) the GPU output is byte-identical to the CPU reference kvdepot::ConvertDType, because
// the kernel calls the same KVD_HOST_DEVICE functions (kvdepot/numeric.h) element by element:
// source bits -> float (exact) -> destination bits (round to nearest even).
//
// Usable from plain C++ (g++); the kernel itself lives in cuda/src/convert.cu.
// Thread-safety: stateless; concurrent calls on distinct streams / buffers are fine.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot::cuda {

// Kernel parameters, passed by value. Shapes are flat: the conversion is element-wise.
struct ConvertParams {
  const void* src;      // [count] elements of From, device memory, aligned to sizeof(From)
  void* dst;            // [count] elements of To, device memory, aligned to sizeof(To);
                        // must not overlap src
  std::uint64_t count;  // elements
};

// Enqueues the conversion kernel on `stream` and returns the launch error (cudaSuccess when the
// launch was accepted; errors during execution surface at the next synchronisation). Grid-stride
// over a grid sized from the current device's SM count; 16-byte vector loads/stores when src and
// dst can both be 16-byte aligned after a short scalar head, scalar otherwise.
// Preconditions: params as documented above, count > 0.
// Defined (explicitly instantiated in convert.cu) ONLY for the 6 pairs with From != To; any other
// instantiation fails to link. Prefer ConvertOnDevice, which validates and dispatches.
template <DType From, DType To>
cudaError_t LaunchConvert(const ConvertParams& params, cudaStream_t stream);

// Converts `count` elements at device pointer d_src (dtype `from`) into d_dst (dtype `to`),
// asynchronously on `stream`. from == to is a cudaMemcpyAsync device-to-device copy.
// Errors: kInvalidArgument for an invalid dtype, a null pointer with count > 0, a pointer not
// aligned to its element size, overlapping ranges or a byte size that overflows; launch errors via
// StatusFromCuda. count == 0 is a no-op. The caller synchronises `stream` before reading d_dst.
Status ConvertOnDevice(DType from, DType to, const void* d_src, void* d_dst, std::uint64_t count,
                       cudaStream_t stream);

// Convenience for tests and tools (not for the data path: it allocates and synchronises):
// uploads `in`, converts it on the current device, downloads the result. Same contract as
// kvdepot::ConvertDType (in.Validate() errors are returned as they are), plus CUDA errors.
Result<KvTensor> ConvertDTypeGpu(const KvTensorView& in, DType to);

}  // namespace kvdepot::cuda
