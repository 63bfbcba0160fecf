#include "kvdepot/cuda/status.h"

#include <string>

namespace kvdepot::cuda {

Status StatusFromCuda(cudaError_t err, std::string_view context) {
  if (err == cudaSuccess) return Status::Ok();
  StatusCode code = StatusCode::kDeviceError;
  switch (err) {
    case cudaErrorMemoryAllocation: code = StatusCode::kResourceExhausted; break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: code = StatusCode::kUnavailable; break;
    case cudaErrorInvalidValue: code = StatusCode::kInvalidArgument; break;
    default: break;
  }
  // Both lookups are table reads in the runtime; they never return null, but be defensive.
  const char* name = cudaGetErrorName(err);
  const char* text = cudaGetErrorString(err);
  std::string message(context);
  message += ": ";
  message += name != nullptr ? name : "cudaError";
  message += ": ";
  message += text != nullptr ? text : "unknown CUDA error";
  if (name == nullptr) message += " (" + std::to_string(static_cast<int>(err)) + ")";
  return Status(code, std::move(message));
}

}  // namespace kvdepot::cuda
