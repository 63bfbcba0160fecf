// StatusFromCuda and KVD_CUDA_RETURN_IF_ERROR: no device needed (suite prefix NoDevice: labelled
// `unit`, runs on machines without a GPU).
#include "kvdepot/cuda/status.h"

#include <gtest/gtest.h>

#include <string>

namespace kvdepot::cuda {
namespace {

TEST(NoDeviceStatusFromCuda, SuccessIsOk) {
  EXPECT_TRUE(StatusFromCuda(cudaSuccess, "ctx").ok());
}

TEST(NoDeviceStatusFromCuda, CodeMapping) {
  EXPECT_EQ(StatusFromCuda(cudaErrorMemoryAllocation, "c").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusFromCuda(cudaErrorNoDevice, "c").code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromCuda(cudaErrorInsufficientDriver, "c").code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromCuda(cudaErrorInvalidValue, "c").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusFromCuda(cudaErrorIllegalAddress, "c").code(), StatusCode::kDeviceError);
  EXPECT_EQ(StatusFromCuda(cudaErrorLaunchFailure, "c").code(), StatusCode::kDeviceError);
  EXPECT_EQ(StatusFromCuda(cudaErrorNoKernelImageForDevice, "c").code(), StatusCode::kDeviceError);
}

TEST(NoDeviceStatusFromCuda, MessageFormat) {
  const Status s = StatusFromCuda(cudaErrorMemoryAllocation, "cudaMalloc(64 bytes)");
  EXPECT_EQ(s.message(), std::string("cudaMalloc(64 bytes): cudaErrorMemoryAllocation: ") +
                             cudaGetErrorString(cudaErrorMemoryAllocation));
  const Status n = StatusFromCuda(cudaErrorNoDevice, "probe");
  EXPECT_EQ(n.message().rfind("probe: cudaErrorNoDevice: ", 0), 0u) << n.message();
}

Status FailsWith(cudaError_t err) {
  KVD_CUDA_RETURN_IF_ERROR(err, std::string("step ") + "two");
  return Status::Ok();
}

Result<int> ResultFailsWith(cudaError_t err) {
  KVD_CUDA_RETURN_IF_ERROR(err, "result");
  return 7;
}

TEST(NoDeviceStatusFromCuda, ReturnIfErrorMacro) {
  EXPECT_TRUE(FailsWith(cudaSuccess).ok());
  const Status s = FailsWith(cudaErrorInvalidValue);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("step two: cudaErrorInvalidValue: ", 0), 0u) << s.message();
  EXPECT_EQ(*ResultFailsWith(cudaSuccess), 7);
  EXPECT_EQ(ResultFailsWith(cudaErrorMemoryAllocation).status().code(),
            StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace kvdepot::cuda
