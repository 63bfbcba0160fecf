// GPU HACK INT2 quantize and dequantize (cuda/src/hack_quantize.cu) against the CPU reference,
// byte for byte (kvdepot::EncodeHack / DequantizeHack): awkward shapes, every partition and
// orientation, special tensors, rounding boundaries, narrow partitions, what the CPU rejects;
// batched quantize chunk by chunk; without a device, the section sizes and the argument errors
// found before anything is enqueued.
#include "kvdepot/cuda/hack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {
namespace {

// GPU encode == CPU encode (bytes, or status code and message); GPU decode == CPU decode.
void ExpectCodecParity(const KvTensor& t, const HackOptions& o, const std::string& label) {
  SCOPED_TRACE(label + " " + t.shape.ToString() + " " + std::string(DTypeName(t.dtype)) + " P" +
               std::to_string(o.partition) + " " + std::string(HackOrientationName(o.orientation)) +
               " " + std::string(HackRoundingName(o.rounding)) + " sinks " +
               std::to_string(o.sinks));
  Result<std::vector<std::byte>> cpu = EncodeHack(t.view(), o);
  Result<std::vector<std::byte>> gpu = EncodeHackGpu(t.view(), o);
  ASSERT_EQ(cpu.ok(), gpu.ok()) << "cpu " << cpu.status().ToString() << " gpu "
                                << gpu.status().ToString();
  if (!cpu.ok()) {
    EXPECT_EQ(cpu.status().code(), gpu.status().code());
    // Same position (the CPU message also quotes the value).
    const std::string m = cpu.status().message();
    const std::string pos = m.substr(m.find('['), m.find(']') - m.find('[') + 1);
    EXPECT_NE(gpu.status().message().find(pos), std::string::npos)
        << cpu.status().ToString() << " vs " << gpu.status().ToString();
    return;
  }
  if (*cpu != *gpu) {
    std::size_t first = 0;
    while (first < cpu->size() && first < gpu->size() && (*cpu)[first] == (*gpu)[first]) ++first;
    ADD_FAILURE() << "GPU container (" << gpu->size() << " bytes) differs from the CPU's ("
                  << cpu->size() << "), first at byte " << first << " (" << SectionAt(*cpu, first)
                  << ")";
    return;
  }
  Result<ContainerView> view = ParseContainer(*cpu);
  ASSERT_TRUE(view.ok());
  Result<HackChunk> chunk = UnpackHack(*view);
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  for (DType out : {t.dtype, DType::kFloat32,
                    t.dtype == DType::kFloat16 ? DType::kBFloat16 : DType::kFloat16}) {
    const KvTensor want = DequantizeHack(*chunk, out);
    Result<KvTensor> got = DecodeHackGpu(*cpu, out);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->shape, want.shape);
    EXPECT_TRUE(got->data == want.data) << "dequantize to " << DTypeName(out) << " differs";
  }
}

// The 16-bit pattern of v in an fp16 or bf16 tensor (round to nearest).
std::uint16_t Bits16(DType dtype, float v) {
  return dtype == DType::kFloat16 ? FloatToHalfBits(v) : FloatToBf16Bits(v);
}

// ---- host-only parts ----

TEST(NoDeviceHackGpu, SectionBytesMatchTheContainer) {
  const KvTensor t = Synth({3, 200, 2, 64}, DType::kFloat16, 3);
  for (std::uint32_t partition : {32u, 64u, 128u}) {
    HackOptions o;
    o.partition = partition;
    o.sinks = 5;
    const std::vector<std::byte> c = *EncodeHack(t.view(), o);
    const HackSizes sizes = *HackSectionSizes(*ParseContainer(c));
    const HackSectionBytes b = HackSectionBytesFor(HackLayoutFor(t.shape, o), t.dtype);
    EXPECT_EQ(b.codes, sizes.codes);
    EXPECT_EQ(b.scales, sizes.scales);
    EXPECT_EQ(b.sums, sizes.sums);
    EXPECT_EQ(b.tail, sizes.tail);
  }
}

TEST(NoDeviceHackGpu, QuantizeArgumentErrorsBeforeTouchingTheDevice) {
  HackDeviceSections out;
  unsigned long long* err = nullptr;
  // fp32 input and unsupported head_dim.
  EXPECT_EQ(
      EnqueueQuantizeHack(DType::kFloat32, {1, 64, 1, 64}, {}, nullptr, out, err, nullptr).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      EnqueueQuantizeHack(DType::kFloat16, {1, 64, 1, 80}, {}, nullptr, out, err, nullptr).code(),
      StatusCode::kInvalidArgument);
  HackOptions bad;
  bad.partition = 48;
  EXPECT_EQ(
      EnqueueQuantizeHack(DType::kFloat16, {1, 64, 1, 64}, bad, nullptr, out, err, nullptr).code(),
      StatusCode::kInvalidArgument);

  // Batches: 0 or more than kHackQuantizeMaxChunks chunks; a bad chunk is named.
  unsigned long long fake_err = 0;
  std::vector<HackQuantizeChunk> none;
  EXPECT_EQ(EnqueueQuantizeHackBatch(DType::kFloat16, {1, 64, 1, 64}, {}, none, &fake_err, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
  alignas(16) static std::uint8_t fake[64];
  const HackQuantizeChunk good{fake, {fake, fake, fake, fake}, 0};
  std::vector<HackQuantizeChunk> many(kHackQuantizeMaxChunks + 1, good);
  const Status too_many =
      EnqueueQuantizeHackBatch(DType::kFloat16, {1, 64, 1, 64}, {}, many, &fake_err, nullptr);
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("17 chunks"), std::string::npos) << too_many.ToString();
  std::vector<HackQuantizeChunk> three(3, good);
  three[2].out.sums = nullptr;
  const Status null_sums =
      EnqueueQuantizeHackBatch(DType::kFloat16, {1, 64, 1, 64}, {}, three, &fake_err, nullptr);
  EXPECT_EQ(null_sums.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(null_sums.message().find("chunk 2: null device pointer"), std::string::npos)
      << null_sums.ToString();
  three[2] = good;
  three[1].input = fake + 8;
  const Status misaligned =
      EnqueueQuantizeHackBatch(DType::kFloat16, {1, 64, 1, 64}, {}, three, &fake_err, nullptr);
  EXPECT_NE(misaligned.message().find("chunk 1: input, codes and tail must be 16-byte aligned"),
            std::string::npos)
      << misaligned.ToString();
  EXPECT_EQ(EnqueueQuantizeHackBatch(DType::kFloat16, {1, 64, 1, 64}, {}, std::span(&good, 1),
                                     nullptr, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
}

// ---- quantize / dequantize ----

TEST(HackGpu, QuantizeMatchesTheCpuOnAwkwardShapes) {
  KVD_REQUIRE_GPU();
  std::uint64_t seed = 100;
  // Every head_dim and dtype: each (dtype, head_dim) has its own kernel for the default options.
  for (std::uint32_t tokens : {1u, 63u, 64u, 65u, 1000u}) {
    for (std::uint32_t dim : {64u, 128u, 256u}) {
      for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
        const KvTensor t = Synth({2, tokens, 2, dim}, dtype, seed++);
        for (HackRounding rounding : {HackRounding::kNearest, HackRounding::kStochastic}) {
          for (std::uint32_t sinks : {0u, 4u}) {
            HackOptions o;
            o.rounding = rounding;
            o.seed = 0x1234567890abcdefull + seed;
            o.sinks = sinks;
            ExpectCodecParity(t, o, "synth");
          }
        }
      }
    }
  }
}

TEST(HackGpu, QuantizeMatchesTheCpuForEveryPartitionAndOrientation) {
  KVD_REQUIRE_GPU();
  std::uint64_t seed = 300;
  for (std::uint32_t partition : {32u, 64u, 128u}) {
    for (HackOrientation orient : {HackOrientation::kChannel, HackOrientation::kToken}) {
      for (std::uint32_t dim : {64u, 128u, 256u}) {
        const KvTensor t = Synth({2, 300, 3, dim}, DType::kFloat16, seed++);
        for (HackRounding rounding : {HackRounding::kNearest, HackRounding::kStochastic}) {
          HackOptions o;
          o.partition = partition;
          o.orientation = orient;
          o.rounding = rounding;
          o.seed = seed * 7919;
          o.sinks = seed % 3 == 0 ? 3 : 0;
          ExpectCodecParity(t, o, "synth");
        }
      }
    }
  }
}

TEST(HackGpu, QuantizeMatchesTheCpuOnSpecialTensors) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 150, 2, 64};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (HackOrientation orient : {HackOrientation::kChannel, HackOrientation::kToken}) {
      HackOptions o;
      o.orientation = orient;
      ExpectCodecParity(KvTensor::Zeros(dtype, shape), o, "zeros");
      // Signed zeros (the first zero of a partition decides the sign of a zero min / max) among
      // small values.
      KvTensor zs = KvTensor::Zeros(dtype, shape);
      std::mt19937 zr(9);
      for (std::uint64_t i = 0; i < shape.elements(); ++i) {
        const std::uint32_t r = zr() % 4;
        StoreFloat(zs, i, r == 0 ? -0.0f : r == 1 ? 0.0f : r == 2 ? 0.5f : -0.25f);
      }
      ExpectCodecParity(zs, o, "signed zeros");
      KvTensor pos_zero = KvTensor::Zeros(dtype, shape);  // min 0 or max 0 partitions
      for (std::uint64_t i = 0; i < shape.elements(); ++i) {
        StoreFloat(pos_zero, i, (i * 2654435761u) % 5 == 0 ? (i % 2 ? -0.0f : 0.0f) : 1.5f);
      }
      ExpectCodecParity(pos_zero, o, "zero minimum");
      KvTensor constant = KvTensor::Zeros(dtype, shape);
      for (std::uint64_t i = 0; i < shape.elements(); ++i) StoreFloat(constant, i, -3.25f);
      ExpectCodecParity(constant, o, "constant");
      KvTensor extreme = Synth(shape, dtype, 41);  // values near the fp16 limit and tiny ones
      for (std::uint64_t i = 0; i < shape.elements(); i += 7) {
        StoreFloat(extreme, i, i % 2 ? 65000.0f : -65000.0f);
      }
      for (std::uint64_t i = 3; i < shape.elements(); i += 11) StoreFloat(extreme, i, 1e-6f);
      ExpectCodecParity(extreme, o, "extreme");
      HackOptions st = o;
      st.rounding = HackRounding::kStochastic;
      st.seed = 77;
      ExpectCodecParity(extreme, st, "extreme stochastic");
      // Dequantized values in fp16's subnormal range (scales and mins subnormal).
      KvTensor tiny = KvTensor::Zeros(dtype, shape);
      std::mt19937 tr(5);
      std::uniform_real_distribution<float> small(-3.0e-5f, 3.0e-5f);
      for (std::uint64_t i = 0; i < shape.elements(); ++i) StoreFloat(tiny, i, small(tr));
      ExpectCodecParity(tiny, o, "subnormal range");
    }
  }
}

// Elements on and next to the rounding boundaries (min + (k + 0.5) * scale) of every partition:
// the kernel's reciprocal-based rounding must fall back to hack::QuantizeNearest exactly there.
TEST(HackGpu, QuantizeMatchesTheCpuAtRoundingBoundaries) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 128, 2, 128};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (HackOrientation orient : {HackOrientation::kChannel, HackOrientation::kToken}) {
      HackOptions o;
      o.orientation = orient;
      const std::uint32_t P = o.partition;
      KvTensor t = KvTensor::Zeros(dtype, shape);
      auto* bits = reinterpret_cast<std::uint16_t*>(t.data.data());
      const auto to_bits = [&](float v) { return Bits16(dtype, v); };
      const auto value = [&](std::uint16_t b) {
        return dtype == DType::kFloat16 ? HalfBitsToFloat(b) : Bf16BitsToFloat(b);
      };
      std::uint64_t ties = 0;
      for (std::uint64_t i = 0; i < shape.elements(); ++i) {
        const std::uint64_t d = i % shape.head_dim;
        const std::uint64_t head = i / shape.head_dim % shape.kv_heads;
        const std::uint64_t token =
            i / (std::uint64_t{shape.head_dim} * shape.kv_heads) % shape.tokens;
        const std::uint64_t lk =
            i / (std::uint64_t{shape.head_dim} * shape.kv_heads * shape.tokens);
        // The partition (same key for all its elements) and the element's place in it.
        const bool token_part = orient == HackOrientation::kToken && lk % 2 == 0;
        const std::uint64_t key = token_part ? ((lk * shape.tokens + token) * 8 + head) * 8 + d / P
                                             : ((lk * 8 + token / P) * 8 + head) * 1024 + d;
        const std::uint64_t place = token_part ? d % P : token % P;
        std::mt19937_64 part_rng(key * 0x9e3779b97f4a7c15ull + 1);
        const float lo = value(to_bits(-std::ldexp(static_cast<float>(part_rng() % 1024 + 1), -8)));
        const float hi =
            value(to_bits(lo + std::ldexp(static_cast<float>(part_rng() % 4096 + 1), -9)));
        const hack::Quant q = hack::PartitionQuant(lo, hi);
        std::uint16_t b = to_bits(place == 0 ? lo : hi);
        if (place > 1) {
          std::mt19937_64 rng(i);
          const double boundary = q.min + (static_cast<double>(rng() % 3) + 0.5) * q.scale;
          b = static_cast<std::uint16_t>(to_bits(static_cast<float>(boundary)) + rng() % 5 - 2);
          const float v = value(b);
          if (v < lo || v > hi) b = to_bits(lo);
          const float r = (v - q.min) / q.scale;
          if (r == std::floor(r) + 0.5f) ++ties;
        }
        bits[i] = b;
      }
      EXPECT_GT(ties, 100u);  // exact ties are among them
      ExpectCodecParity(t, o, "rounding boundaries");
    }
  }
}

// Round-to-nearest codes come from per-partition thresholds found by search (CodeThreshold):
// partitions a few 16-bit steps wide around large and small magnitudes of either sign, constant
// ones, ones that straddle zero, and wide ones, so that thresholds fall between, on and outside
// the elements.
TEST(HackGpu, QuantizeMatchesTheCpuOnNarrowPartitions) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 192, 2, 128};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (HackOrientation orient : {HackOrientation::kChannel, HackOrientation::kToken}) {
      HackOptions o;
      o.orientation = orient;
      KvTensor t = KvTensor::Zeros(dtype, shape);
      auto* bits = reinterpret_cast<std::uint16_t*>(t.data.data());
      const auto to_bits = [&](float v) { return Bits16(dtype, v); };
      const float centers[] = {1000.0f, -1000.0f, 1.0f, -1.0f, 1e-3f, -1e-3f, 0.0f, 60000.0f};
      for (std::uint64_t i = 0; i < shape.elements(); ++i) {
        const std::uint64_t d = i % shape.head_dim;
        const std::uint64_t block =
            i / (std::uint64_t{shape.head_dim} * shape.kv_heads) / o.partition;
        std::mt19937_64 part(d * 131 + block * 7 + 1);  // one (center, width) per channel, block
        const float center = centers[part() % 8];
        const std::uint32_t width = static_cast<std::uint32_t>(part() % 6);  // 16-bit steps
        std::mt19937_64 rng(i * 0x9e3779b97f4a7c15ull + 3);
        std::uint16_t b = to_bits(center);
        if (width == 5) {
          b = to_bits(center + static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 0.01f);
        } else if (center == 0.0f) {  // +-0 and the smallest subnormals of either sign
          b = static_cast<std::uint16_t>((rng() % 2 ? 0x8000u : 0u) | rng() % (width + 1));
        } else if (width > 0) {
          b = static_cast<std::uint16_t>(b + rng() % (2 * width + 1) - width);
        }
        if ((b & 0x7fffu) >= (dtype == DType::kFloat16 ? 0x7c00u : 0x7f80u)) b = to_bits(center);
        bits[i] = b;
      }
      ExpectCodecParity(t, o, "narrow partitions");
    }
  }
}

TEST(HackGpu, QuantizeRejectsWhatTheCpuRejects) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 130, 2, 64};
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(), -70000.0f};
  const std::uint64_t row = std::uint64_t{shape.kv_heads} * shape.head_dim;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (HackOrientation orient : {HackOrientation::kChannel, HackOrientation::kToken}) {
      for (float v : bad_values) {
        for (std::uint64_t at : {std::uint64_t{5}, std::uint64_t{70 * 128 + 3},
                                 shape.elements() - 1}) {  // quantized, tail, last
          KvTensor t = Synth(shape, dtype, 5);
          StoreFloat(t, at, v);
          StoreFloat(t, at + (at > 10 ? -3 : 9), v);  // a second bad value: the first is named
          HackOptions o;
          o.sinks = 2;
          o.orientation = orient;
          ExpectCodecParity(t, o, "invalid");
        }
        // The first bad value in a later channel of an earlier token than the second (channel
        // partitions look for them channel by channel).
        KvTensor t = Synth(shape, dtype, 6);
        StoreFloat(t, 10 * row + 60, v);
        StoreFloat(t, 11 * row + 1, v);
        HackOptions o;
        o.orientation = orient;
        ExpectCodecParity(t, o, "invalid, earlier token in a later channel");
      }
    }
  }
}

// ---- batched quantize ----

// One chunk of a batch on the device: its input and its sections.
struct DeviceChunk {
  DeviceBuffer input, sections;
  HackQuantizeChunk chunk;
  HackSectionBytes bytes;
};

DeviceChunk UploadChunk(const KvTensor& t, const HackOptions& o, std::uint64_t seed) {
  DeviceChunk c;
  const hack::Layout lay = HackLayoutFor(t.shape, o);
  c.bytes = HackSectionBytesFor(lay, t.dtype);
  const auto up = [](std::uint64_t n) { return (n + 255) / 256 * 256; };
  const std::uint64_t o1 = up(c.bytes.codes), o2 = o1 + up(c.bytes.scales),
                      o3 = o2 + up(c.bytes.sums);
  c.input = DeviceBuffer::Allocate(t.data.size()).value();
  c.sections = DeviceBuffer::Allocate(o3 + up(c.bytes.tail) + 256).value();
  EXPECT_EQ(cudaMemcpy(c.input.data(), t.data.data(), t.data.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  auto* b = c.sections.as<std::uint8_t>();
  c.chunk = {c.input.data(), {b, b + o1, b + o2, b + o3}, seed};
  return c;
}

// Device section `kind` (at `device`) == the same section of the CPU container.
void ExpectSection(const ContainerView& view, SectionKind kind, const void* device,
                   const std::string& label) {
  const SectionView* sv = view.Find(kind);
  ASSERT_NE(sv, nullptr);
  std::vector<std::byte> got(sv->length);
  if (!got.empty()) {
    ASSERT_EQ(cudaMemcpy(got.data(), device, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  EXPECT_TRUE(std::memcmp(got.data(), sv->bytes.data(), got.size()) == 0)
      << label << ": section " << SectionKindName(static_cast<std::uint32_t>(kind)) << " differs";
}

// Batched quantize tests: a stream and a device error word.
class HackGpuBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    KVD_REQUIRE_GPU();
    Result<Stream> s = Stream::Create();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    stream_ = std::move(*s);
    Result<DeviceBuffer> e = DeviceBuffer::Allocate(sizeof(unsigned long long));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    error_ = std::move(*e);
  }
  cudaStream_t stream() const { return stream_.get(); }
  unsigned long long* error() const { return error_.as<unsigned long long>(); }

 private:
  Stream stream_;
  DeviceBuffer error_;
};

TEST_F(HackGpuBatch, QuantizeMatchesTheCpuChunkByChunk) {
  std::uint64_t seed = 900;
  // A tail and sinks (tail rows of every chunk), a default-shaped chunk, every kernel kind.
  for (const KvShape shape : {KvShape{2, 130, 2, 64}, KvShape{3, 256, 8, 128}}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (HackRounding rounding : {HackRounding::kNearest, HackRounding::kStochastic}) {
        for (HackOrientation orient : {HackOrientation::kChannel, HackOrientation::kToken}) {
          for (std::uint32_t n : {1u, 3u, kHackQuantizeMaxChunks}) {
            HackOptions o;
            o.rounding = rounding;
            o.orientation = orient;
            o.sinks = shape.tokens == 130 ? 2 : 0;
            std::vector<KvTensor> tensors;
            std::vector<DeviceChunk> chunks;
            std::vector<HackQuantizeChunk> descs;
            for (std::uint32_t i = 0; i < n; ++i) {
              tensors.push_back(Synth(shape, dtype, seed++));
              chunks.push_back(UploadChunk(tensors.back(), o, 0xabcdef00ull + 7 * i));
              descs.push_back(chunks.back().chunk);
            }
            ASSERT_TRUE(EnqueueQuantizeHackBatch(dtype, shape, o, descs, error(), stream()).ok());
            const Status done = FinishQuantizeHackBatch(shape, error(), stream());
            ASSERT_TRUE(done.ok()) << done.ToString();
            for (std::uint32_t i = 0; i < n; ++i) {
              const std::string label = shape.ToString() + " " + std::string(DTypeName(dtype)) +
                                        " " + std::string(HackRoundingName(rounding)) + " " +
                                        std::string(HackOrientationName(orient)) + " chunk " +
                                        std::to_string(i) + " of " + std::to_string(n);
              HackOptions oi = o;
              oi.seed = descs[i].seed;
              Result<std::vector<std::byte>> cpu = EncodeHack(tensors[i].view(), oi);
              ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
              Result<ContainerView> view = ParseContainer(*cpu);
              ASSERT_TRUE(view.ok());
              const HackDeviceSections& out = descs[i].out;
              ExpectSection(*view, SectionKind::kCodes, out.codes, label);
              ExpectSection(*view, SectionKind::kScales, out.scales, label);
              ExpectSection(*view, SectionKind::kSums, out.sums, label);
              ExpectSection(*view, SectionKind::kTail, out.tail, label);
            }
          }
        }
      }
    }
  }
}

TEST_F(HackGpuBatch, QuantizeNamesTheFirstChunkWithAnInvalidValue) {
  const KvShape shape{2, 130, 2, 64};
  HackOptions o;
  o.sinks = 2;
  std::vector<KvTensor> tensors;
  for (std::uint64_t i = 0; i < 4; ++i) tensors.push_back(Synth(shape, DType::kFloat16, 40 + i));
  // Chunk 1: a value beyond fp16 at the end (the tail); chunk 3: NaN first. Chunk 1 is named.
  StoreFloat(tensors[3], 5, std::numeric_limits<float>::quiet_NaN());
  tensors[1].data[2 * (shape.elements() - 1) + 1] = std::byte{0x7c};  // +Inf, low byte 0
  tensors[1].data[2 * (shape.elements() - 1)] = std::byte{0};
  std::vector<DeviceChunk> chunks;
  std::vector<HackQuantizeChunk> descs;
  for (const KvTensor& t : tensors) {
    chunks.push_back(UploadChunk(t, o, 0));
    descs.push_back(chunks.back().chunk);
  }
  ASSERT_TRUE(EnqueueQuantizeHackBatch(DType::kFloat16, shape, o, descs, error(), stream()).ok());
  const Status got = FinishQuantizeHackBatch(shape, error(), stream());
  Result<std::vector<std::byte>> cpu = EncodeHack(tensors[1].view(), o);
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(got.code(), StatusCode::kInvalidArgument);
  const std::string m = cpu.status().message();
  const std::string pos = m.substr(m.find('['), m.find(']') - m.find('[') + 1);
  EXPECT_EQ(got.message().rfind("chunk 1: hack-int2: non-finite value at " + pos, 0), 0u)
      << got.ToString() << " vs the CPU's " << cpu.status().ToString();
}

}  // namespace
}  // namespace kvdepot::cuda
