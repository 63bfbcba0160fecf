#include "kvdepot/cuda/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "kvdepot/cuda/convert.h"

namespace kvdepot::cuda {
namespace {

// Runs anywhere: either a usable GPU, or kUnavailable with a reason that says why.
TEST(NoDeviceGpuAvailable, OkOrUnavailableWithReason) {
  const Status s = GpuAvailable();
  if (s.ok()) {
    std::printf("GPU available\n");
    return;
  }
  std::printf("GpuAvailable: %s\n", s.ToString().c_str());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_FALSE(s.message().empty());
}

TEST(NoDeviceQueryDevice, NegativeOrdinalIsInvalid) {
  EXPECT_EQ(QueryDevice(-1).status().code(), StatusCode::kInvalidArgument);
}

TEST(NoDeviceBuffers, EmptyAllocationsNeedNoDevice) {
  Result<DeviceBuffer> d = DeviceBuffer::Allocate(0);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->data(), nullptr);
  EXPECT_EQ(d->size(), 0u);
  Result<PinnedHostBuffer> h = PinnedHostBuffer::Allocate(0);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->data(), nullptr);
  Stream none;  // default: no stream, destructor is a no-op
  EXPECT_EQ(none.get(), nullptr);
}

TEST(Device, QueryDevice) {
  KVD_REQUIRE_GPU();
  Result<DeviceInfo> info = QueryDevice(0);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  std::printf("device: %s\n", info->ToString().c_str());
  EXPECT_FALSE(info->name.empty());
  EXPECT_GT(info->sm_count, 0);
  EXPECT_GE(info->cc_major, 9);  // this build carries sm_90 SASS + compute_90 PTX
  EXPECT_GT(info->total_memory_bytes, 0u);
  EXPECT_GT(info->l2_bytes, 0u);
  EXPECT_GT(info->max_shared_memory_per_block_optin, 0u);
  EXPECT_FALSE(QueryDevice(1 << 20).ok());
}

TEST(Device, BuffersAndStreamRoundTrip) {
  KVD_REQUIRE_GPU();
  constexpr std::size_t kBytes = 1 << 20;
  Result<DeviceBuffer> d = DeviceBuffer::Allocate(kBytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  Result<PinnedHostBuffer> h = PinnedHostBuffer::Allocate(kBytes);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  Result<Stream> s = Stream::Create();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_NE(s->get(), nullptr);
  EXPECT_EQ(d->size(), kBytes);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(d->data()) % 256, 0u);

  auto* bytes = h->as<unsigned char>();
  for (std::size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  std::vector<unsigned char> expect(bytes, bytes + kBytes);
  ASSERT_EQ(cudaMemcpyAsync(d->data(), h->data(), kBytes, cudaMemcpyHostToDevice, s->get()),
            cudaSuccess);
  ASSERT_TRUE(s->Synchronize().ok());
  std::memset(h->data(), 0, kBytes);
  ASSERT_EQ(cudaMemcpyAsync(h->data(), d->data(), kBytes, cudaMemcpyDeviceToHost, s->get()),
            cudaSuccess);
  ASSERT_TRUE(s->Synchronize().ok());
  EXPECT_EQ(std::memcmp(h->data(), expect.data(), kBytes), 0);

  // Moves transfer ownership and leave the source empty.
  DeviceBuffer moved = std::move(d.value());
  EXPECT_EQ(d->data(), nullptr);
  EXPECT_EQ(d->size(), 0u);
  EXPECT_EQ(moved.size(), kBytes);
  Stream moved_stream = std::move(s.value());
  EXPECT_EQ(s->get(), nullptr);
  EXPECT_NE(moved_stream.get(), nullptr);
  PinnedHostBuffer moved_host;
  moved_host = std::move(h.value());
  EXPECT_EQ(h->data(), nullptr);
  EXPECT_EQ(moved_host.size(), kBytes);
}

TEST(Device, HugeAllocationIsResourceExhaustedAndHarmless) {
  KVD_REQUIRE_GPU();
  Result<DeviceBuffer> huge = DeviceBuffer::Allocate(std::size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status().ToString();
  // The failed cudaMalloc must not poison later launches (launchers report their own error).
  Result<DeviceBuffer> src = DeviceBuffer::Allocate(64 * 2);
  Result<DeviceBuffer> dst = DeviceBuffer::Allocate(64 * 4);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_EQ(cudaMemset(src->data(), 0x3c, src->size()), cudaSuccess);
  const Status s =
      ConvertOnDevice(DType::kFloat16, DType::kFloat32, src->data(), dst->data(), 64, nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace kvdepot::cuda
