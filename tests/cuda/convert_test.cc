// GPU dtype conversion vs the CPU reference kvdepot::ConvertDType: byte-for-byte equality.
#include "kvdepot/cuda/convert.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/cuda/device.h"

namespace kvdepot::cuda {
namespace {

constexpr DType kAllDTypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32};

// A tensor of dtype `dtype` whose raw elements are `bits` (2- or 4-byte patterns), shaped
// [1, 2, n/2, 1, 1]. Precondition: bits.size() even and <= 2 * 65536, or a multiple of 2 * 65536.
template <typename Bits>
KvTensor TensorFromBits(DType dtype, const std::vector<Bits>& bits) {
  EXPECT_EQ(sizeof(Bits), DTypeSize(dtype));
  KvShape shape;
  const std::uint64_t half = bits.size() / 2;
  shape.layers = 1;
  shape.head_dim = 1;
  if (half <= kMaxTokens) {
    shape.tokens = static_cast<std::uint32_t>(half);
    shape.kv_heads = 1;
  } else {
    shape.tokens = kMaxTokens;
    shape.kv_heads = static_cast<std::uint32_t>(half / kMaxTokens);
  }
  EXPECT_EQ(shape.elements(), bits.size());
  KvTensor t = KvTensor::Zeros(dtype, shape);
  std::memcpy(t.data.data(), bits.data(), t.data.size());
  return t;
}

std::uint32_t ElementBits(const std::vector<std::byte>& data, DType dtype, std::uint64_t i) {
  std::uint32_t v = 0;
  std::memcpy(&v, data.data() + i * DTypeSize(dtype), DTypeSize(dtype));
  return v;
}

// Compares GPU and CPU conversions of `in` to `to` byte for byte; reports the first mismatches
// with their input bits.
void ExpectGpuMatchesCpu(const KvTensor& in, DType to) {
  const std::string label = std::string(DTypeName(in.dtype)) + "->" + std::string(DTypeName(to));
  Result<KvTensor> cpu = ConvertDType(in.view(), to);
  ASSERT_TRUE(cpu.ok()) << label << ": " << cpu.status().ToString();
  Result<KvTensor> gpu = ConvertDTypeGpu(in.view(), to);
  ASSERT_TRUE(gpu.ok()) << label << ": " << gpu.status().ToString();
  ASSERT_EQ(gpu->dtype, to);
  ASSERT_EQ(gpu->shape, in.shape);
  ASSERT_EQ(gpu->data.size(), cpu->data.size());
  if (gpu->data == cpu->data) return;
  const std::uint64_t n = in.shape.elements();
  int reported = 0;
  std::uint64_t mismatches = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint32_t c = ElementBits(cpu->data, to, i);
    const std::uint32_t g = ElementBits(gpu->data, to, i);
    if (c == g) continue;
    ++mismatches;
    if (reported++ < 8) {
      ADD_FAILURE() << label << " element " << i << ": input 0x" << std::hex
                    << ElementBits(in.data, in.dtype, i) << " cpu 0x" << c << " gpu 0x" << g;
    }
  }
  ADD_FAILURE() << label << ": " << mismatches << " of " << n << " elements differ";
}

std::vector<std::uint16_t> All16BitPatterns() {
  std::vector<std::uint16_t> v(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

TEST(ConvertGpu, AllFp16PatternsToEveryDType) {
  KVD_REQUIRE_GPU();
  const KvTensor in = TensorFromBits(DType::kFloat16, All16BitPatterns());
  for (DType to : kAllDTypes) ExpectGpuMatchesCpu(in, to);
}

TEST(ConvertGpu, AllBf16PatternsToEveryDType) {
  KVD_REQUIRE_GPU();
  const KvTensor in = TensorFromBits(DType::kBFloat16, All16BitPatterns());
  for (DType to : kAllDTypes) ExpectGpuMatchesCpu(in, to);
}

std::vector<std::uint32_t> Fp32SpecialValues() {
  const std::uint32_t magnitudes[] = {
      0x00000000u,  // 0
      0x00000001u,  // smallest fp32 subnormal
      0x00008000u,  // bf16 halfway below its smallest subnormal: rounds to 0 (even)
      0x00008001u,  // just above: rounds to the smallest bf16 subnormal
      0x00010000u,  // smallest bf16 subnormal
      0x00018000u,  // bf16 halfway between subnormals 1 and 2: rounds to 2 (even)
      0x007f8000u,  // rounds up to the smallest bf16 normal
      0x007fffffu,  // largest fp32 subnormal
      0x00800000u,  // smallest fp32 normal
      0x33000000u,  // 2^-25: fp16 halfway to its smallest subnormal: rounds to 0 (even)
      0x33000001u,  // just above: rounds to 2^-24
      0x33800000u,  // 2^-24: smallest fp16 subnormal
      0x33c00000u,  // 1.5 * 2^-24: halfway, rounds to 2 * 2^-24 (even)
      0x34200000u,  // 2.5 * 2^-24: halfway, rounds to 2 * 2^-24 (even)
      0x387fc000u,  // largest fp16 subnormal
      0x387fe000u,  // halfway between largest fp16 subnormal and smallest normal
      0x387fffffu,  // just below 2^-14
      0x38800000u,  // 2^-14: smallest fp16 normal
      0x3f800000u,  // 1
      0x3f801000u,  // 1 + 2^-11: fp16 halfway, rounds to 1 (even)
      0x3f801001u,  // just above: rounds up
      0x3f803000u,  // 1 + 3 * 2^-11: fp16 halfway, rounds up (even)
      0x3f808000u,  // 1 + 2^-8: bf16 halfway, rounds to 1 (even)
      0x3f808001u,  // just above: rounds up
      0x3f818000u,  // bf16 halfway, rounds up (even)
      0x3fffffffu,  // carries into the exponent
      0x477fe000u,  // 65504: fp16 max finite
      0x477fefffu,  // just below 65520: rounds to 65504
      0x477ff000u,  // 65520: rounds to fp16 Inf
      0x477ff001u,
      0x47800000u,  // 65536
      0x7f7f0000u,  // bf16 max finite
      0x7f7f7fffu,  // rounds to bf16 max finite
      0x7f7f8000u,  // bf16 halfway to Inf: rounds to Inf
      0x7f7fffffu,  // fp32 max finite
      0x7f800000u,  // Inf
      0x7f800001u,  // signalling NaN, payload only in low bits
      0x7f802000u,  // signalling NaN, payload bit kept by fp16
      0x7f810000u,  // signalling NaN, payload bit kept by bf16
      0x7fa00000u,  // signalling NaN
      0x7fbfffffu,  // signalling NaN, all payload bits
      0x7fc00000u,  // quiet NaN
      0x7fc00001u,  // quiet NaN with low payload
      0x7fd55555u,  // quiet NaN with mixed payload
      0x7fffffffu,  // quiet NaN, all payload bits
  };
  std::vector<std::uint32_t> v;
  for (std::uint32_t m : magnitudes) {
    v.push_back(m);
    v.push_back(m | 0x80000000u);
  }
  return v;  // even size by construction
}

TEST(ConvertGpu, Fp32SpecialValues) {
  KVD_REQUIRE_GPU();
  const KvTensor in = TensorFromBits(DType::kFloat32, Fp32SpecialValues());
  for (DType to : kAllDTypes) ExpectGpuMatchesCpu(in, to);

  // A few absolute answers, so that a shared mistake in CPU and GPU would still show.
  const std::vector<std::uint32_t> probe = {0x477fefffu, 0x477ff000u, 0x33000000u,
                                            0x33000001u, 0x7f7f8000u, 0x7f802000u};
  const KvTensor p = TensorFromBits(DType::kFloat32, probe);
  Result<KvTensor> h = ConvertDTypeGpu(p.view(), DType::kFloat16);
  Result<KvTensor> b = ConvertDTypeGpu(p.view(), DType::kBFloat16);
  ASSERT_TRUE(h.ok() && b.ok());
  EXPECT_EQ(ElementBits(h->data, DType::kFloat16, 0), 0x7bffu);  // 65504
  EXPECT_EQ(ElementBits(h->data, DType::kFloat16, 1), 0x7c00u);  // Inf
  EXPECT_EQ(ElementBits(h->data, DType::kFloat16, 2), 0x0000u);
  EXPECT_EQ(ElementBits(h->data, DType::kFloat16, 3), 0x0001u);
  EXPECT_EQ(ElementBits(h->data, DType::kFloat16, 5), 0x7e01u);   // quiet bit + payload
  EXPECT_EQ(ElementBits(b->data, DType::kBFloat16, 4), 0x7f80u);  // Inf
  EXPECT_EQ(ElementBits(b->data, DType::kBFloat16, 5), 0x7fc0u);  // quiet, low payload dropped
}

TEST(ConvertGpu, Fp32RandomBitPatterns) {
  KVD_REQUIRE_GPU();
  std::mt19937_64 rng(0x6b766470u);
  // 16 Mi patterns uniformly over all 2^32 (mostly Inf/0 in fp16), ...
  std::vector<std::uint32_t> all(std::size_t{1} << 24);
  for (auto& x : all) x = static_cast<std::uint32_t>(rng());
  const KvTensor in = TensorFromBits(DType::kFloat32, all);
  ExpectGpuMatchesCpu(in, DType::kFloat16);
  ExpectGpuMatchesCpu(in, DType::kBFloat16);
  // ... and 4 Mi with exponents around fp16's range (2^-27 .. 2^17), where rounding happens.
  std::vector<std::uint32_t> near(std::size_t{1} << 22);
  for (auto& x : near) {
    const auto r = static_cast<std::uint32_t>(rng());
    const std::uint32_t exp = 100u + (r >> 24) % 45u;
    x = (r & 0x80000000u) | (exp << 23) | static_cast<std::uint32_t>(rng() & 0x007fffffu);
  }
  const KvTensor in_near = TensorFromBits(DType::kFloat32, near);
  ExpectGpuMatchesCpu(in_near, DType::kFloat16);
  ExpectGpuMatchesCpu(in_near, DType::kBFloat16);
}

// Element counts that leave heads and tails, and pointer offsets (in elements: 1 = 2 bytes for
// fp16/bf16) that move src and dst off 16-byte alignment, so that the vector body, the scalar
// head/tail and the all-scalar fallback all run. Checks guard bytes around the output too.
TEST(ConvertGpu, AwkwardCountsAndOffsets) {
  KVD_REQUIRE_GPU();
  constexpr std::uint64_t kCounts[] = {1, 3, 7, 8, 9, 1023, (std::uint64_t{1} << 20) + 5};
  constexpr std::uint64_t kOffsets[] = {0, 1, 5};
  constexpr std::uint64_t kGuard = 16;  // elements checked after the output
  constexpr std::uint64_t kTotal = std::uint64_t{2} * kMaxTokens * 9;  // >= max count + offsets
  constexpr unsigned char kFill = 0xa5;

  Result<Stream> stream = Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  std::mt19937_64 rng(42);
  for (DType from : kAllDTypes) {
    // Random source bits (all patterns: NaNs and subnormals included).
    KvTensor src;
    if (from == DType::kFloat32) {
      std::vector<std::uint32_t> bits(kTotal);
      for (auto& x : bits) x = static_cast<std::uint32_t>(rng());
      src = TensorFromBits(from, bits);
    } else {
      std::vector<std::uint16_t> bits(kTotal);
      for (auto& x : bits) x = static_cast<std::uint16_t>(rng());
      src = TensorFromBits(from, bits);
    }
    Result<DeviceBuffer> d_src = DeviceBuffer::Allocate(src.data.size());
    ASSERT_TRUE(d_src.ok()) << d_src.status().ToString();
    ASSERT_EQ(cudaMemcpy(d_src->data(), src.data.data(), src.data.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    const std::size_t sf = DTypeSize(from);
    for (DType to : kAllDTypes) {
      Result<KvTensor> ref = ConvertDType(src.view(), to);  // element-wise: slices match
      ASSERT_TRUE(ref.ok()) << ref.status().ToString();
      const std::size_t st = DTypeSize(to);
      Result<DeviceBuffer> d_dst = DeviceBuffer::Allocate((kTotal + kGuard) * st);
      ASSERT_TRUE(d_dst.ok()) << d_dst.status().ToString();
      std::vector<unsigned char> host;
      for (std::uint64_t count : kCounts) {
        for (std::uint64_t so : kOffsets) {
          for (std::uint64_t dof : kOffsets) {
            SCOPED_TRACE(std::string(DTypeName(from)) + "->" + std::string(DTypeName(to)) +
                         " count " + std::to_string(count) + " src offset " + std::to_string(so) +
                         " dst offset " + std::to_string(dof));
            const std::size_t span = (dof + count + kGuard) * st;
            ASSERT_EQ(cudaMemsetAsync(d_dst->data(), kFill, span, stream->get()), cudaSuccess);
            const Status s =
                ConvertOnDevice(from, to, d_src->as<std::byte>() + so * sf,
                                d_dst->as<std::byte>() + dof * st, count, stream->get());
            ASSERT_TRUE(s.ok()) << s.ToString();
            host.assign(span, 0);
            ASSERT_EQ(cudaMemcpyAsync(host.data(), d_dst->data(), span, cudaMemcpyDeviceToHost,
                                      stream->get()),
                      cudaSuccess);
            ASSERT_TRUE(stream->Synchronize().ok());
            for (std::size_t i = 0; i < dof * st; ++i) ASSERT_EQ(host[i], kFill) << "byte " << i;
            ASSERT_EQ(std::memcmp(host.data() + dof * st, ref->data.data() + so * st, count * st),
                      0);
            for (std::size_t i = (dof + count) * st; i < span; ++i) {
              ASSERT_EQ(host[i], kFill) << "guard byte " << i;
            }
          }
        }
      }
    }
  }
}

// Argument checks happen before any CUDA call: no device needed.
TEST(NoDeviceConvert, InvalidArguments) {
  auto* fake = reinterpret_cast<std::byte*>(std::uintptr_t{1} << 40);
  const auto bad = static_cast<DType>(0);
  EXPECT_EQ(ConvertOnDevice(bad, DType::kFloat16, fake, fake + 4096, 4, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ConvertOnDevice(DType::kFloat16, static_cast<DType>(9), fake, fake + 4096, 4, nullptr).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(ConvertOnDevice(DType::kFloat16, DType::kFloat32, nullptr, fake, 4, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ConvertOnDevice(DType::kFloat16, DType::kFloat32, fake, nullptr, 4, nullptr).code(),
            StatusCode::kInvalidArgument);
  // fp32 offset by 2 bytes is not element-aligned.
  const Status misaligned =
      ConvertOnDevice(DType::kFloat32, DType::kFloat16, fake + 2, fake + 4096, 4, nullptr);
  EXPECT_EQ(misaligned.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(misaligned.message().find("aligned"), std::string::npos) << misaligned.message();
  EXPECT_EQ(
      ConvertOnDevice(DType::kFloat16, DType::kFloat32, fake + 4096, fake + 1, 4, nullptr).code(),
      StatusCode::kInvalidArgument);
  // Overlap: fp16 [0, 8) vs fp32 [4, 20).
  const Status overlap =
      ConvertOnDevice(DType::kFloat16, DType::kFloat32, fake, fake + 4, 4, nullptr);
  EXPECT_EQ(overlap.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(overlap.message().find("overlap"), std::string::npos) << overlap.message();
  EXPECT_EQ(ConvertOnDevice(DType::kFloat16, DType::kFloat16, fake, fake + 6, 4, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ConvertOnDevice(DType::kFloat16, DType::kFloat32, fake, fake + 64,
                            std::uint64_t{1} << 63, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
  // count == 0 is a no-op, even with null pointers.
  EXPECT_TRUE(
      ConvertOnDevice(DType::kFloat32, DType::kBFloat16, nullptr, nullptr, 0, nullptr).ok());
}

TEST(NoDeviceConvert, ConvertDTypeGpuValidatesFirst) {
  KvTensorView bad;
  bad.dtype = DType::kFloat16;
  bad.shape = {1, 4, 1, 1};
  std::vector<std::byte> bytes(3);
  bad.data = bytes;
  EXPECT_EQ(ConvertDTypeGpu(bad, DType::kFloat32).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvdepot::cuda
