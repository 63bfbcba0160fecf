// cudaError_t -> kvdepot::Status: the one place CUDA runtime errors enter the error vocabulary.
//
// Usable from plain C++ (g++) and from .cu files. Thread-safety: stateless.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "kvdepot/base/status.h"

namespace kvdepot::cuda {

// OK for cudaSuccess; otherwise a Status whose message is
// "<context>: <cudaGetErrorName(err)>: <cudaGetErrorString(err)>". Codes:
//   cudaErrorMemoryAllocation                    -> kResourceExhausted
//   cudaErrorNoDevice, cudaErrorInsufficientDriver -> kUnavailable
//   cudaErrorInvalidValue                        -> kInvalidArgument
//   everything else                              -> kDeviceError
// Does not touch the device (safe to call with no GPU and no driver).
Status StatusFromCuda(cudaError_t err, std::string_view context);

}  // namespace kvdepot::cuda

// Evaluates `call` (a cudaError_t expression) and returns StatusFromCuda(err, context) from the
// enclosing function when it is not cudaSuccess. `context` is anything convertible to
// std::string_view; it is evaluated only on error.
#define KVD_CUDA_RETURN_IF_ERROR(call, context)                         \
  do {                                                                  \
    const cudaError_t kvd_cuda_err_ = (call);                           \
    if (kvd_cuda_err_ != cudaSuccess) {                                 \
      return ::kvdepot::cuda::StatusFromCuda(kvd_cuda_err_, (context)); \
    }                                                                   \
  } while (0)
