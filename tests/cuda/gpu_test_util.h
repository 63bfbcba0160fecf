// Shared helpers for kvdepot_gpu_tests.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/cuda/device.h"

// Skips the current test, printing the reason, when no usable CUDA device is present.
#define KVD_REQUIRE_GPU()                                                 \
  do {                                                                    \
    const ::kvdepot::Status kvd_gpu_ = ::kvdepot::cuda::GpuAvailable();   \
    if (!kvd_gpu_.ok()) GTEST_SKIP() << "no GPU: " << kvd_gpu_.message(); \
  } while (0)

namespace kvdepot::cuda {

// A synthetic KV tensor (SynthesizeKv), failing the test on error.
inline KvTensor Synth(const KvShape& shape, DType dtype, std::uint64_t seed) {
  Result<KvTensor> t = SynthesizeKv(SynthOptions{shape, seed, dtype});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

// Element i of `t` set to v (rounded to the tensor's dtype).
inline void StoreFloat(KvTensor& t, std::uint64_t i, float v) {
  switch (t.dtype) {
    case DType::kFloat16: StoreLE<std::uint16_t>(t.data.data() + i * 2, FloatToHalfBits(v)); break;
    case DType::kBFloat16: StoreLE<std::uint16_t>(t.data.data() + i * 2, FloatToBf16Bits(v)); break;
    case DType::kFloat32: StoreLE<float>(t.data.data() + i * 4, v); break;
  }
}

// "codes+12", "header/padding": where byte `at` of container `c` lies, for failure messages.
inline std::string SectionAt(const std::vector<std::byte>& c, std::size_t at) {
  Result<ContainerView> v = ParseContainer(c, ParseOptions{false});
  if (!v.ok()) return "?";
  for (const SectionView& s : v->sections) {
    if (at >= s.offset && at < s.offset + s.length) {
      return std::string(SectionKindName(s.kind)) + "+" + std::to_string(at - s.offset);
    }
  }
  return "header/padding";
}

}  // namespace kvdepot::cuda
