// GPU HACK INT2 kernels vs the CPU reference: quantize and dequantize byte for byte
// (kvdepot::EncodeHack / DequantizeHack), decode and prefill attention within the stated
// tolerance of the float64 homomorphic references (kvdepot::HackDecodeAttentionBatch /
// HackPrefillAttention with INT8 Q and P), paged == contiguous, NaN queries, argument errors;
// batched quantize chunk by chunk; the fp16 prefill path within its tolerance of attention over the
// dequantized KV (kvdepot::PrefillAttention over DequantizeHack), staged (HackPrefillArgs::
// staging) or not.
#include "kvdepot/cuda/hack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "hack_attention_test_util.h"
#include "kvdepot/base/byte_order.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/hack_attention.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/synth.h"
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

TEST(NoDeviceHackGpu, ArgumentErrorsBeforeTouchingTheDevice) {
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

  HackAttentionWorkspace ws;  // never created: the checks below come first
  HackKvCache kv;
  kv.layers = 1;
  kv.kv_heads = 2;
  kv.head_dim = 128;
  HackDecodeArgs args;
  args.q_heads = 8;
  auto code = [&]() { return EnqueueHackDecodeAttention(kv, args, ws, nullptr).code(); };
  kv.head_dim = 96;
  EXPECT_EQ(code(), StatusCode::kUnimplemented);
  kv.head_dim = 256;
  EXPECT_EQ(code(), StatusCode::kUnimplemented);
  kv.head_dim = 128;
  kv.partition = 32;
  EXPECT_EQ(code(), StatusCode::kUnimplemented);
  kv.partition = 48;
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);
  kv.partition = 64;
  args.q_heads = 32;  // 16 query heads per KV head
  EXPECT_EQ(code(), StatusCode::kUnimplemented);
  args.q_heads = 7;
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);
  args.q_heads = 8;
  kv.dtype = DType::kFloat32;
  EXPECT_EQ(code(), StatusCode::kUnimplemented);
  kv.dtype = DType::kFloat16;
  kv.layer = 1;
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);
  kv.layer = 0;
  args.softmax_scale = -1;
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);
  args.softmax_scale = 0;
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);  // workspace not created, no sequences
  kv.page_blocks = 4;                               // paged without a pool
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);
}

// The staging scratch's size: kv_heads x the call's key tiles x 32 KiB, at head_dim 128 with
// kDequantFp16 only.
TEST(NoDeviceHackGpu, PrefillStagingBytesCountTheCallsKeyTiles) {
  HackKvCache kv;
  kv.layers = 2;
  kv.kv_heads = 2;
  kv.head_dim = 128;
  HackPrefillArgs a;
  a.math = HackPrefillMath::kDequantFp16;
  a.seq.tokens = 1000;
  a.seq.sinks = 4;
  a.first_position = 900;
  a.queries = 100;
  // 1 sink tile, 15 blocks (positions 4..963), 1 tail tile (964..999).
  EXPECT_EQ(HackPrefillStagingBytes(kv, a), 2u * 17u * kHackPrefillStageBytes);
  a.first_position = 0;
  a.queries = 68;  // keys 0..67: the sink tile and block 0
  EXPECT_EQ(HackPrefillStagingBytes(kv, a), 2u * 2u * kHackPrefillStageBytes);
  a.seq.sinks = 0;
  a.seq.tokens = 4096;
  a.queries = 4096;
  kv.kv_heads = 8;
  EXPECT_EQ(HackPrefillStagingBytes(kv, a), std::uint64_t{16} << 20);  // the 4K prompt
  a.math = HackPrefillMath::kHomomorphicInt8;
  EXPECT_EQ(HackPrefillStagingBytes(kv, a), 0u);
  a.math = HackPrefillMath::kDequantFp16;
  kv.head_dim = 64;
  EXPECT_EQ(HackPrefillStagingBytes(kv, a), 0u);
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

// ---- attention ----

// Relative L2 over all outputs <= kHackAttentionRelL2Tolerance, and over each (query, head) <=
// kHackAttentionHeadTolerance. Rows flagged in `skip` are not compared.
void ExpectClose(const std::vector<double>& ref, const std::vector<float>& gpu, std::uint32_t dim,
                 const std::string& label, const std::vector<bool>& skip = {}) {
  ASSERT_EQ(ref.size(), gpu.size()) << label;
  double num = 0, den = 0, worst = 0;
  std::size_t worst_row = 0;
  for (std::size_t row = 0; row * dim < ref.size(); ++row) {
    if (!skip.empty() && skip[row]) continue;
    double n = 0, d = 0;
    for (std::uint32_t i = 0; i < dim; ++i) {
      const double e = static_cast<double>(gpu[row * dim + i]) - ref[row * dim + i];
      n += e * e;
      d += ref[row * dim + i] * ref[row * dim + i];
    }
    num += n;
    den += d;
    const double rel = std::sqrt(n / std::max(d, 1e-300));
    if (!(rel <= worst)) {
      worst = rel;
      worst_row = row;
    }
  }
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  EXPECT_LE(rel, kHackAttentionRelL2Tolerance) << label;
  EXPECT_LE(worst, kHackAttentionHeadTolerance) << label << " (query-head row " << worst_row << ")";
  std::printf("[ info ] %s: rel L2 %.3g, worst (query, head) %.3g\n", label.c_str(), rel, worst);
}

void CheckDecodeBatch(std::uint32_t dim, std::uint32_t group, DType dtype,
                      const std::vector<std::uint32_t>& lengths, std::uint32_t sinks,
                      std::uint64_t seed) {
  const std::uint32_t kv_heads = 2, q_heads = kv_heads * group, layers = 2, layer = 1;
  std::vector<GpuSeq> seqs;
  std::vector<HackAttentionSeq> descs;
  std::vector<HackChunk> chunks;
  std::uint32_t max_tokens = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const KvTensor t = Synth({layers, lengths[i], kv_heads, dim}, dtype, seed + i);
    HackOptions o;
    o.sinks = i % 2 == 0 ? sinks : 0;
    seqs.push_back(MakeSeq(t, o));
    max_tokens = std::max(max_tokens, lengths[i]);
  }
  for (const GpuSeq& s : seqs) {
    descs.push_back(s.desc);
    chunks.push_back(s.chunk);
  }
  std::vector<HackSequence> batch;
  for (const HackChunk& c : chunks) batch.push_back(HackSequence(&c, 1));
  const std::vector<float> q = RandomQueries(lengths.size() * q_heads * dim, seed * 31);
  AttentionOptions ao;
  ao.q_heads = q_heads;
  Result<AttentionResult> ref = HackDecodeAttentionBatch(batch, layer, q, ao);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const KvTensor shape_only = KvTensor::Zeros(dtype, {layers, 1, kv_heads, dim});
  const GpuResult got = RunDecode(KvFor(shape_only, dtype, layer), descs, max_tokens, q, q_heads);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  std::string label = "decode d";
  for (const std::uint32_t v : {dim, group}) {
    label += std::to_string(v);
    label += " g";
  }
  label.resize(label.size() - 2);
  label += ' ';
  label += DTypeName(dtype);
  label += " sinks ";
  label += std::to_string(sinks);
  label += " T";
  for (std::uint32_t l : lengths) {
    label += ' ';
    label += std::to_string(l);
  }
  ExpectClose(ref->out, got.out, dim, label);
  for (float v : got.lse) EXPECT_TRUE(std::isfinite(v)) << label;
}

TEST(HackGpu, DecodeMatchesTheCpuReference) {
  KVD_REQUIRE_GPU();
  const std::vector<std::uint32_t> lengths = {1, 63, 64, 65, 1000};
  std::uint64_t seed = 1000;
  for (std::uint32_t dim : {64u, 128u}) {
    for (std::uint32_t group : {1u, 4u, 8u}) {
      CheckDecodeBatch(dim, group, DType::kFloat16, lengths, 0, seed += 10);
    }
    CheckDecodeBatch(dim, 8, DType::kBFloat16, lengths, 4, seed += 10);
    CheckDecodeBatch(dim, 4, DType::kFloat16, {130, 64, 7, 300}, 70, seed += 10);  // many sinks
  }
}

TEST(HackGpu, LongDecodeUsesSplitKv) {
  KVD_REQUIRE_GPU();
  CheckDecodeBatch(128, 8, DType::kFloat16, {20000}, 0, 77);
  CheckDecodeBatch(128, 8, DType::kBFloat16, {20000, 3000}, 4, 78);
  CheckDecodeBatch(64, 4, DType::kFloat16, {12345}, 0, 79);
  // About one block per warp (4K tokens, 2 KV heads, 16 splits): twin warps at head_dim 128.
  CheckDecodeBatch(128, 8, DType::kFloat16, {4096}, 0, 80);
  CheckDecodeBatch(128, 8, DType::kBFloat16, {4100}, 4, 81);
  // Exactly ceil(T / 64) units with the last one unquantized (sinks and tail: 4 + 60, 64 + 0,
  // 64 + 2 tokens): the grid's units per split, sized for that count, must reach it.
  CheckDecodeBatch(128, 8, DType::kFloat16, {4096}, 4, 82);
  CheckDecodeBatch(64, 4, DType::kBFloat16, {2048, 130}, 64, 83);
}

TEST(HackGpu, DecodeLseIsTheLogNormaliser) {
  KVD_REQUIRE_GPU();
  // One sequence of identical keys: every score equals q.k, so lse = ln(T) + scale * q.k exactly
  // in exact arithmetic; check it against the plain attention's normaliser computed here.
  const std::uint32_t dim = 64, T = 200;
  KvTensor t = KvTensor::Zeros(DType::kFloat16, {1, T, 1, dim});
  for (std::uint32_t tok = 0; tok < T; ++tok) {
    for (std::uint32_t d = 0; d < dim; ++d) {
      StoreFloat(t, std::uint64_t{tok} * dim + d, 0.0f);  // K = 0
      StoreFloat(t, (std::uint64_t{T} + tok) * dim + d, 0.5f);
    }
  }
  const GpuSeq s = MakeSeq(t, {});
  const std::vector<float> q = RandomQueries(dim, 5);
  const GpuResult got = RunDecode(KvFor(t, DType::kFloat16, 0), {s.desc}, T, q, 1);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_NEAR(got.lse[0], std::log(static_cast<double>(T)), 1e-4);
  for (float v : got.out) EXPECT_NEAR(v, 0.5f, 1e-5f);
}

// Copies group (layer, kv, head, block b) of `src` (layout `sl`, sections of `c`) into slot `slot`
// of a page (layout `pl`) whose sections start at codes / scales / sums.
void CopyGroup(const std::vector<std::byte>& c, const hack::Layout& sl, std::uint32_t b,
               const hack::Layout& pl, std::uint32_t slot, std::uint8_t* codes,
               std::uint8_t* scales, std::uint8_t* sums) {
  const ContainerView v = *ParseContainer(c);
  const std::byte* sc = v.Find(SectionKind::kCodes)->bytes.data();
  const std::byte* ss = v.Find(SectionKind::kScales)->bytes.data();
  const std::byte* su = v.Find(SectionKind::kSums)->bytes.data();
  for (std::uint32_t l = 0; l < sl.layers; ++l) {
    for (std::uint32_t kv = 0; kv < 2; ++kv) {
      for (std::uint32_t h = 0; h < sl.heads; ++h) {
        std::memcpy(codes + pl.code_base(pl.group(l, kv, h, slot)) / 4,
                    sc + sl.code_base(sl.group(l, kv, h, b)) / 4, sl.codes_per_group() / 4);
        std::memcpy(scales + pl.partition_base(l, kv, h, slot) * 4,
                    ss + sl.partition_base(l, kv, h, b) * 4, sl.partitions_per_group(kv) * 4);
        std::memcpy(sums + pl.sum_base(l, kv, h, slot), su + sl.sum_base(l, kv, h, b),
                    sl.sums_per_group(kv));
      }
    }
  }
}

TEST(HackGpu, PagedWithShuffledBlockTableEqualsContiguous) {
  KVD_REQUIRE_GPU();
  for (std::uint32_t dim : {64u, 128u}) {
    const std::uint32_t layers = 2, kv_heads = 2, group = 4, q_heads = kv_heads * group;
    const std::uint32_t page_blocks = 4, page_tokens = page_blocks * 64;
    const std::vector<std::uint32_t> lengths = {1000, 600, 40};
    std::vector<KvTensor> tensors;
    std::vector<GpuSeq> contiguous;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      tensors.push_back(Synth({layers, lengths[i], kv_heads, dim}, DType::kFloat16, 500 + i));
      contiguous.push_back(MakeSeq(tensors.back(), {}));
    }
    // The page pool: every page of every sequence, at shuffled positions.
    hack::Layout pl = HackLayoutFor({layers, page_tokens, kv_heads, dim}, {});
    const HackSectionBytes pb = HackSectionBytesFor(pl, DType::kFloat16);
    std::uint32_t max_pages = 0, total_pages = 0;
    for (std::uint32_t l : lengths) {
      const std::uint32_t pages = ((l / 64) + page_blocks - 1) / page_blocks;
      max_pages = std::max(max_pages, std::max(pages, 1u));
      total_pages += pages;
    }
    const std::uint32_t num_pages = total_pages + 3;  // some unused pages
    std::vector<std::uint32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0u);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(dim));
    std::vector<std::uint8_t> codes(num_pages * pb.codes), scales(num_pages * pb.scales),
        sums(num_pages * pb.sums);
    std::vector<std::int32_t> table(lengths.size() * max_pages, -1);
    std::uint32_t next = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      const std::vector<std::byte> c = *EncodeHack(tensors[i].view(), {});
      const hack::Layout sl = contiguous[i].chunk.layout;
      for (std::uint32_t b = 0; b < sl.blocks(); ++b) {
        if (b % page_blocks == 0)
          table[i * max_pages + b / page_blocks] = static_cast<std::int32_t>(perm[next++]);
        const auto page = static_cast<std::uint32_t>(table[i * max_pages + b / page_blocks]);
        CopyGroup(c, sl, b, pl, b % page_blocks, codes.data() + page * pb.codes,
                  scales.data() + page * pb.scales, sums.data() + page * pb.sums);
      }
    }
    DeviceBuffer d_codes = Dev(codes.data(), codes.size());
    DeviceBuffer d_scales = Dev(scales.data(), scales.size());
    DeviceBuffer d_sums = Dev(sums.data(), sums.size());
    DeviceBuffer d_table = Dev(table.data(), table.size());
    HackKvCache kv = KvFor(tensors[0], DType::kFloat16, 1);
    std::vector<HackAttentionSeq> contig_descs, paged_descs;
    for (const GpuSeq& s : contiguous) {
      contig_descs.push_back(s.desc);
      HackAttentionSeq p = s.desc;
      p.codes = p.scales = p.sums = nullptr;  // found through the block table
      paged_descs.push_back(p);
    }
    const std::vector<float> q = RandomQueries(lengths.size() * q_heads * dim, 99 + dim);
    const GpuResult want = RunDecode(kv, contig_descs, 1000, q, q_heads);
    ASSERT_TRUE(want.status.ok()) << want.status.ToString();
    kv.page_blocks = page_blocks;
    kv.num_pages = num_pages;
    kv.page_codes = d_codes.as<std::uint8_t>();
    kv.page_scales = d_scales.as<std::uint8_t>();
    kv.page_sums = d_sums.as<std::uint8_t>();
    kv.page_codes_bytes = pb.codes;
    kv.page_scales_bytes = pb.scales;
    kv.page_sums_bytes = pb.sums;
    kv.block_tables = d_table.as<std::int32_t>();
    kv.max_pages_per_seq = max_pages;
    const GpuResult got = RunDecode(kv, paged_descs, 1000, q, q_heads);
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    EXPECT_EQ(std::memcmp(got.out.data(), want.out.data(), got.out.size() * 4), 0)
        << "paged output differs from contiguous (d " << dim << ")";
    // And both agree with the CPU over the sequences cut into 256-token chunks.
    std::vector<std::vector<HackChunk>> chunked(lengths.size());
    std::vector<HackSequence> batch;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      for (std::uint32_t start = 0; start < lengths[i]; start += page_tokens) {
        const std::uint32_t n = std::min(page_tokens, lengths[i] - start);
        KvTensor part = KvTensor::Zeros(DType::kFloat16, {layers, n, kv_heads, dim});
        const std::size_t row = std::size_t{kv_heads} * dim * 2;
        for (std::uint32_t lk = 0; lk < layers * 2; ++lk) {
          std::memcpy(part.data.data() + lk * n * row,
                      tensors[i].data.data() + (std::size_t{lk} * lengths[i] + start) * row,
                      n * row);
        }
        chunked[i].push_back(*UnpackHack(*ParseContainer(*EncodeHack(part.view(), {}))));
      }
      batch.push_back(chunked[i]);
    }
    AttentionOptions ao;
    ao.q_heads = q_heads;
    Result<AttentionResult> ref = HackDecodeAttentionBatch(batch, 1, q, ao);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ExpectClose(ref->out, got.out, dim, "paged d" + std::to_string(dim));

    // A table entry outside the pool is reported.
    table[max_pages + 1] = static_cast<std::int32_t>(num_pages);
    DeviceBuffer d_bad = Dev(table.data(), table.size());
    kv.block_tables = d_bad.as<std::int32_t>();
    const GpuResult bad = RunDecode(kv, paged_descs, 1000, q, q_heads);
    EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument) << bad.status.ToString();
    EXPECT_NE(bad.status.message().find("sequence 1"), std::string::npos) << bad.status.ToString();
  }
}

TEST(HackGpu, PrefillMatchesTheCpuReference) {
  KVD_REQUIRE_GPU();
  std::uint64_t seed = 2000;
  for (std::uint32_t dim : {64u, 128u}) {
    for (std::uint32_t group : {1u, 4u, 8u}) {
      for (std::uint32_t sinks : {0u, 4u}) {
        const std::uint32_t T = 300, kv_heads = 2, q_heads = kv_heads * group;
        const KvTensor t = Synth({2, T, kv_heads, dim}, DType::kFloat16, seed++);
        HackOptions o;
        o.sinks = sinks;
        const GpuSeq s = MakeSeq(t, o);
        struct Range {
          std::uint32_t first, n;
        };
        for (const Range r : {Range{0, T}, Range{223, 77}, Range{64, 1}}) {
          const std::vector<float> q = RandomQueries(std::size_t{r.n} * q_heads * dim, seed * 13);
          AttentionOptions ao;
          ao.q_heads = q_heads;
          Result<AttentionResult> ref =
              HackPrefillAttention(HackSequence(&s.chunk, 1), 1, q, r.first, ao);
          ASSERT_TRUE(ref.ok()) << ref.status().ToString();
          auto ws = HackAttentionWorkspace::Create();
          ASSERT_TRUE(ws.ok());
          DeviceBuffer d_q = Dev(q.data(), q.size());
          DeviceBuffer d_out = DevAlloc(q.size() * 4);
          HackPrefillArgs a;
          a.seq = s.desc;
          a.queries = r.n;
          a.first_position = r.first;
          a.q_heads = q_heads;
          a.q = d_q.as<float>();
          a.out = d_out.as<float>();
          Status st = EnqueueHackPrefillAttention(KvFor(t, DType::kFloat16, 1), a, *ws, nullptr);
          ASSERT_TRUE(st.ok()) << st.ToString();
          st = FinishHackAttention(*ws, nullptr);
          ASSERT_TRUE(st.ok()) << st.ToString();
          std::vector<float> out(q.size());
          ASSERT_EQ(cudaMemcpy(out.data(), d_out.data(), out.size() * 4, cudaMemcpyDeviceToHost),
                    cudaSuccess);
          ExpectClose(ref->out, out, dim,
                      "prefill d" + std::to_string(dim) + " g" + std::to_string(group) + " sinks " +
                          std::to_string(sinks) + " first " + std::to_string(r.first) + " n " +
                          std::to_string(r.n));
        }
        // Prefill past the sequence end is an argument error.
        auto ws = HackAttentionWorkspace::Create();
        HackPrefillArgs a;
        a.seq = s.desc;
        a.queries = 10;
        a.first_position = T - 5;
        a.q_heads = q_heads;
        a.q = reinterpret_cast<const float*>(s.desc.codes);
        a.out = reinterpret_cast<float*>(0x100);
        EXPECT_EQ(EnqueueHackPrefillAttention(KvFor(t, DType::kFloat16, 1), a, *ws, nullptr).code(),
                  StatusCode::kInvalidArgument);
        // So is an output that is not 16-byte aligned (the fp16 kernels store rows in bulk).
        a.first_position = 0;
        a.out = reinterpret_cast<float*>(0x104);
        const Status misaligned =
            EnqueueHackPrefillAttention(KvFor(t, DType::kFloat16, 1), a, *ws, nullptr);
        EXPECT_EQ(misaligned.code(), StatusCode::kInvalidArgument);
        EXPECT_NE(misaligned.message().find("16-byte aligned"), std::string::npos)
            << misaligned.ToString();
      }
    }
  }
}

// Chunked prefill after a prefix hit: T_new queries at positions T_prefix .. over a sequence of
// T_prefix + T_new tokens (the new tokens quantized with the prefix into whole blocks; the
// unfinished last block stays unquantized in the tail, in the chunk dtype), on awkward shapes:
// T_new in {1, 17, 255} x T_prefix in {0, 1, 64, 1000}, both head_dims, GQA group 8, fp16 and
// bf16 KV.
TEST(HackGpu, ChunkedPrefillOverACachedPrefixMatchesTheCpuReference) {
  KVD_REQUIRE_GPU();
  std::uint64_t seed = 9000;
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  for (std::uint32_t dim : {64u, 128u}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (std::uint32_t prefix : {0u, 1u, 64u, 1000u}) {
        for (std::uint32_t fresh : {1u, 17u, 255u}) {
          const std::uint32_t T = prefix + fresh, kv_heads = 1, group = 8;
          const std::uint32_t q_heads = kv_heads * group;
          const KvTensor t = Synth({1, T, kv_heads, dim}, dtype, seed++);
          const GpuSeq s = MakeSeq(t, {});
          const std::vector<float> q = RandomQueries(std::size_t{fresh} * q_heads * dim, seed * 7);
          AttentionOptions ao;
          ao.q_heads = q_heads;
          Result<AttentionResult> ref =
              HackPrefillAttention(HackSequence(&s.chunk, 1), 0, q, prefix, ao);
          ASSERT_TRUE(ref.ok()) << ref.status().ToString();
          DeviceBuffer d_q = Dev(q.data(), q.size());
          DeviceBuffer d_out = DevAlloc(q.size() * 4);
          HackPrefillArgs a;
          a.seq = s.desc;
          a.queries = fresh;
          a.first_position = prefix;
          a.q_heads = q_heads;
          a.q = d_q.as<float>();
          a.out = d_out.as<float>();
          Status st = EnqueueHackPrefillAttention(KvFor(t, dtype, 0), a, *ws, nullptr);
          ASSERT_TRUE(st.ok()) << st.ToString();
          st = FinishHackAttention(*ws, nullptr);
          ASSERT_TRUE(st.ok()) << st.ToString();
          std::vector<float> out(q.size());
          ASSERT_EQ(cudaMemcpy(out.data(), d_out.data(), out.size() * 4, cudaMemcpyDeviceToHost),
                    cudaSuccess);
          ExpectClose(ref->out, out, dim,
                      "chunked prefill d" + std::to_string(dim) + " " +
                          std::string(DTypeName(dtype)) + " prefix " + std::to_string(prefix) +
                          " new " + std::to_string(fresh));
        }
      }
    }
  }
}

// ---- the dequantize-on-load prefill (HackPrefillMath::kDequantFp16) ----

// Relative L2 over all outputs and worst (query, head) against the dequantized-KV reference.
void ExpectCloseFp16(const std::vector<double>& ref, const std::vector<float>& gpu,
                     std::uint32_t dim, const std::string& label) {
  ASSERT_EQ(ref.size(), gpu.size()) << label;
  double num = 0, den = 0, worst = 0;
  for (std::size_t row = 0; row * dim < ref.size(); ++row) {
    double n = 0, d = 0;
    for (std::uint32_t i = 0; i < dim; ++i) {
      const double e = static_cast<double>(gpu[row * dim + i]) - ref[row * dim + i];
      n += e * e;
      d += ref[row * dim + i] * ref[row * dim + i];
    }
    num += n;
    den += d;
    const double rel = std::sqrt(n / std::max(d, 1e-300));
    if (!(rel <= worst)) worst = rel;
  }
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  EXPECT_LE(rel, kHackDequantPrefillRelL2Tolerance) << label;
  EXPECT_LE(worst, kHackDequantPrefillHeadTolerance) << label;
  std::printf("[ info ] %s: rel L2 %.3g, worst (query, head) %.3g\n", label.c_str(), rel, worst);
}

// One shape of the fp16-prefill tests: a sequence of prefix + fresh tokens (2 layers, 2 KV heads)
// whose layer `layer` is attended, its container on the device, and `fresh` random queries.
struct Fp16PrefillCase {
  std::uint32_t dim, prefix, fresh, q_heads, layer;
  GpuSeq s;
  HackKvCache kv;
  std::vector<float> q;
  std::string label;
};

// Calls fn(c) for each chunked-prefill shape: T_new in {1, 17, 255} x T_prefix in {0, 1, 64, 1000},
// both head_dims, fp16 and bf16 KV, 2 KV heads with GQA groups 8 and 3 (3: CTAs of 42 tokens), 4
// sinks on every other sequence (an unquantized tile before the blocks); seeds from `seed` on.
// Stops at the first fatal failure.
template <typename Fn>
void ForEachFp16PrefillCase(std::uint64_t seed, Fn&& fn) {
  for (std::uint32_t dim : {64u, 128u}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (std::uint32_t prefix : {0u, 1u, 64u, 1000u}) {
        for (std::uint32_t fresh : {1u, 17u, 255u}) {
          const std::uint32_t T = prefix + fresh, kv_heads = 2, layers = 2, layer = 1;
          const std::uint32_t group = (seed % 2 == 0) ? 8 : 3, q_heads = kv_heads * group;
          const KvTensor t = Synth({layers, T, kv_heads, dim}, dtype, seed);
          HackOptions o;
          o.sinks = seed % 4 < 2 ? 4 : 0;
          ++seed;
          Fp16PrefillCase c{dim,
                            prefix,
                            fresh,
                            q_heads,
                            layer,
                            MakeSeq(t, o),
                            KvFor(t, dtype, layer),
                            RandomQueries(std::size_t{fresh} * q_heads * dim, seed * 7),
                            "d"};
          c.label += std::to_string(dim);  // by +=: GCC 12 -O3 -Wrestrict false positive
          c.label += ' ';
          c.label += DTypeName(dtype);
          c.label += " g" + std::to_string(group) + " sinks " + std::to_string(o.sinks) +
                     " prefix " + std::to_string(prefix) + " new " + std::to_string(fresh);
          fn(c);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// The fp16 path against attention over the dequantized KV (PrefillAttention over DequantizeHack
// to fp32), on the chunked-prefill shapes (ForEachFp16PrefillCase); the lse is the log of the
// normaliser (finite).
TEST(HackGpu, DequantFp16PrefillMatchesAttentionOverTheDequantizedKv) {
  KVD_REQUIRE_GPU();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  ForEachFp16PrefillCase(12000, [&](const Fp16PrefillCase& c) {
    AttentionOptions ao;
    ao.q_heads = c.q_heads;
    const KvTensor deq = DequantizeHack(c.s.chunk, DType::kFloat32);
    Result<AttentionResult> ref = PrefillAttention(deq.view(), c.layer, c.q, c.prefix, ao);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    const GpuResult got = RunPrefill(c.kv, c.s.desc, c.prefix, c.q, c.q_heads, *ws);
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    ExpectCloseFp16(ref->out, got.out, c.dim, "fp16 prefill " + c.label);
    for (float v : got.lse) ASSERT_TRUE(std::isfinite(v));
  });
}

// Paged KV (pages at shuffled pool positions) gives the same bits as the contiguous chunk, unstaged
// and staged (HackPrefillArgs::staging; against the contiguous staged call), and a block-table
// entry outside the pool is reported.
TEST(HackGpu, DequantFp16PrefillPagedEqualsContiguous) {
  KVD_REQUIRE_GPU();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  for (std::uint32_t dim : {64u, 128u}) {
    const std::uint32_t layers = 2, layer = 1, kv_heads = 2, group = 4, q_heads = kv_heads * group;
    const std::uint32_t page_blocks = 4, page_tokens = page_blocks * 64, T = 1000, fresh = 100;
    const KvTensor t = Synth({layers, T, kv_heads, dim}, DType::kFloat16, 700 + dim);
    const GpuSeq s = MakeSeq(t, {});
    const hack::Layout pl = HackLayoutFor({layers, page_tokens, kv_heads, dim}, {});
    const HackSectionBytes pb = HackSectionBytesFor(pl, DType::kFloat16);
    const hack::Layout sl = s.chunk.layout;
    const std::uint32_t pages = (sl.blocks() + page_blocks - 1) / page_blocks;
    const std::uint32_t num_pages = pages + 2;
    std::vector<std::uint32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0u);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(dim));
    std::vector<std::uint8_t> codes(num_pages * pb.codes), scales(num_pages * pb.scales),
        sums(num_pages * pb.sums);
    std::vector<std::int32_t> table(pages);
    const std::vector<std::byte> c = *EncodeHack(t.view(), {});
    for (std::uint32_t b = 0; b < sl.blocks(); ++b) {
      if (b % page_blocks == 0)
        table[b / page_blocks] = static_cast<std::int32_t>(perm[b / page_blocks]);
      const auto page = static_cast<std::uint32_t>(table[b / page_blocks]);
      CopyGroup(c, sl, b, pl, b % page_blocks, codes.data() + page * pb.codes,
                scales.data() + page * pb.scales, sums.data() + page * pb.sums);
    }
    DeviceBuffer d_codes = Dev(codes.data(), codes.size());
    DeviceBuffer d_scales = Dev(scales.data(), scales.size());
    DeviceBuffer d_sums = Dev(sums.data(), sums.size());
    DeviceBuffer d_table = Dev(table.data(), table.size());
    const std::vector<float> q = RandomQueries(std::size_t{fresh} * q_heads * dim, 31 + dim);
    HackKvCache kv = KvFor(t, DType::kFloat16, layer);
    const GpuResult want = RunPrefill(kv, s.desc, T - fresh, q, q_heads, *ws);
    ASSERT_TRUE(want.status.ok()) << want.status.ToString();
    const GpuResult want_staged = RunPrefill(kv, s.desc, T - fresh, q, q_heads, *ws, true);
    ASSERT_TRUE(want_staged.status.ok()) << want_staged.status.ToString();
    kv.page_blocks = page_blocks;
    kv.num_pages = num_pages;
    kv.page_codes = d_codes.as<std::uint8_t>();
    kv.page_scales = d_scales.as<std::uint8_t>();
    kv.page_sums = d_sums.as<std::uint8_t>();
    kv.page_codes_bytes = pb.codes;
    kv.page_scales_bytes = pb.scales;
    kv.page_sums_bytes = pb.sums;
    kv.block_tables = d_table.as<std::int32_t>();
    kv.max_pages_per_seq = pages;
    HackAttentionSeq paged = s.desc;
    paged.codes = paged.scales = paged.sums = nullptr;
    const GpuResult got = RunPrefill(kv, paged, T - fresh, q, q_heads, *ws);
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    EXPECT_EQ(std::memcmp(got.out.data(), want.out.data(), got.out.size() * 4), 0) << "d" << dim;
    const GpuResult staged = RunPrefill(kv, paged, T - fresh, q, q_heads, *ws, true);
    ASSERT_TRUE(staged.status.ok()) << staged.status.ToString();
    EXPECT_EQ(std::memcmp(staged.out.data(), want_staged.out.data(), staged.out.size() * 4), 0)
        << "staged d" << dim;

    // A table entry outside the pool is reported, staged (by the staging kernel) or not.
    std::vector<std::int32_t> bad_table = table;
    bad_table[1] = static_cast<std::int32_t>(num_pages);
    DeviceBuffer d_bad = Dev(bad_table.data(), bad_table.size());
    kv.block_tables = d_bad.as<std::int32_t>();
    for (const bool staging : {false, true}) {
      const GpuResult bad = RunPrefill(kv, paged, T - fresh, q, q_heads, *ws, staging);
      EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument)
          << "d" << dim << " staged " << staging << ": " << bad.status.ToString();
      EXPECT_NE(bad.status.message().find("block table entry is outside"), std::string::npos)
          << bad.status.ToString();
    }
  }
}

// Staged (the staging kernel, then the warp-specialised kernel copying its images, 128 keys per
// consumer iteration) is attention over the dequantized KV within the fp16 path's tolerances, on
// the chunked-prefill shapes (ForEachFp16PrefillCase); it is not bit for bit the unstaged call
// (its softmax maximum runs over 128 keys, not 64). Head_dim 64 ignores the scratch: the same bits
// as unstaged.
TEST(HackGpu, DequantFp16PrefillStagedMatchesAttentionOverTheDequantizedKv) {
  KVD_REQUIRE_GPU();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  ForEachFp16PrefillCase(12000, [&](const Fp16PrefillCase& c) {
    AttentionOptions ao;
    ao.q_heads = c.q_heads;
    const KvTensor deq = DequantizeHack(c.s.chunk, DType::kFloat32);
    Result<AttentionResult> ref = PrefillAttention(deq.view(), c.layer, c.q, c.prefix, ao);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    const GpuResult got = RunPrefill(c.kv, c.s.desc, c.prefix, c.q, c.q_heads, *ws, true);
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    ExpectCloseFp16(ref->out, got.out, c.dim, "staged fp16 prefill " + c.label);
    for (float v : got.lse) ASSERT_TRUE(std::isfinite(v));
    if (c.dim == 64) {
      const GpuResult want = RunPrefill(c.kv, c.s.desc, c.prefix, c.q, c.q_heads, *ws);
      ASSERT_TRUE(want.status.ok()) << want.status.ToString();
      EXPECT_EQ(std::memcmp(got.out.data(), want.out.data(), got.out.size() * 4), 0) << c.label;
      EXPECT_EQ(std::memcmp(got.lse.data(), want.lse.data(), got.lse.size() * 4), 0) << c.label;
    }
  });
}

// fp16 and bf16 q and out (HackPrefillArgs::io_dtype) on the chunked-prefill shapes
// (ForEachFp16PrefillCase), through the fp16 path unstaged and staged and through the homomorphic
// kernel: the call over 16-bit queries computes what the fp32 call over the same values computes,
// so its out is that call's out rounded to the io type and its lse the same (bit for bit on the
// fp16 path; the homomorphic kernel's fp32 sums vary in the last bits between calls, so per row
// within io's unit roundoff there: NotTheFp32OutputsRounded); the fp16 path's also against
// attention over the dequantized KV
// (with the rounded queries) within its tolerances. An io_dtype that is no DType is refused.
TEST(HackGpu, PrefillTakesFp16AndBf16QueriesAndOutputs) {
  KVD_REQUIRE_GPU();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  struct Path {
    HackPrefillMath math;
    bool staged;
    const char* name;
  };
  constexpr Path kPaths[] = {{HackPrefillMath::kDequantFp16, false, "fp16 path"},
                             {HackPrefillMath::kDequantFp16, true, "fp16 path staged"},
                             {HackPrefillMath::kHomomorphicInt8, false, "homomorphic"}};
  ForEachFp16PrefillCase(13000, [&](const Fp16PrefillCase& c) {
    for (const DType io : {DType::kFloat16, DType::kBFloat16}) {
      std::vector<float> q(c.q.size());
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = From16(To16(c.q[i], io), io);
      AttentionOptions ao;
      ao.q_heads = c.q_heads;
      const KvTensor deq = DequantizeHack(c.s.chunk, DType::kFloat32);
      Result<AttentionResult> ref = PrefillAttention(deq.view(), c.layer, q, c.prefix, ao);
      ASSERT_TRUE(ref.ok()) << ref.status().ToString();
      for (const Path& path : kPaths) {
        const std::string label = std::string(DTypeName(io)) + " " + path.name + " " + c.label;
        const GpuResult wide = RunPrefill(c.kv, c.s.desc, c.prefix, q, c.q_heads, *ws, path.staged,
                                          DType::kFloat32, path.math);
        ASSERT_TRUE(wide.status.ok()) << label << ": " << wide.status.ToString();
        const GpuResult got =
            RunPrefill(c.kv, c.s.desc, c.prefix, q, c.q_heads, *ws, path.staged, io, path.math);
        ASSERT_TRUE(got.status.ok()) << label << ": " << got.status.ToString();
        const bool per_row = path.math == HackPrefillMath::kHomomorphicInt8;
        if (per_row) {  // how much two fp32 calls differ, for the record
          const GpuResult again = RunPrefill(c.kv, c.s.desc, c.prefix, q, c.q_heads, *ws,
                                             path.staged, DType::kFloat32, path.math);
          std::size_t n = 0;
          for (std::size_t i = 0; i < again.out.size(); ++i) n += again.out[i] != wide.out[i];
          if (n > 0)
            std::printf("[ info ] %s: two fp32 calls differ in %zu outputs\n", label.c_str(), n);
        }
        EXPECT_EQ(NotTheFp32OutputsRounded(got.out, wide.out, io, c.dim, per_row), 0u)
            << label << ": outputs (or rows) that are not the fp32 call's, rounded";
        EXPECT_EQ(LseDiffer(got.lse, wide.lse, per_row), 0u) << label;
        if (path.math == HackPrefillMath::kDequantFp16) {
          ExpectCloseFp16(ref->out, got.out, c.dim, "io " + label);
        }
      }
    }
  });
  // An io_dtype that is no DType is refused before anything is launched.
  const KvTensor t = Synth({2, 16, 2, 128}, DType::kFloat16, 5);
  const GpuSeq s = MakeSeq(t, {});
  const HackKvCache kv = KvFor(t, DType::kFloat16, 1);
  DeviceBuffer d_q = DevAlloc(16 * 16 * 128 * 4), d_out = DevAlloc(16 * 16 * 128 * 4);
  HackPrefillArgs a;
  a.seq = s.desc;
  a.queries = 16;
  a.q_heads = 16;
  a.q = d_q.data();
  a.out = d_out.data();
  for (const HackPrefillMath math :
       {HackPrefillMath::kHomomorphicInt8, HackPrefillMath::kDequantFp16}) {
    a.math = math;
    a.io_dtype = static_cast<DType>(9);
    const Status st = EnqueueHackPrefillAttention(kv, a, *ws, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("io_dtype 9 is not fp16, bf16 or fp32"), std::string::npos)
        << st.ToString();
  }
}

// A staging scratch smaller than HackPrefillStagingBytes, or misaligned, is an error that names
// the sizes; the staging alone needs a scratch.
TEST(HackGpu, DequantFp16PrefillStagingScratchErrors) {
  KVD_REQUIRE_GPU();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  const std::uint32_t dim = 128, layers = 2, layer = 1, kv_heads = 2, group = 8;
  const std::uint32_t q_heads = kv_heads * group, T = 1000, fresh = 300;
  const KvTensor t = Synth({layers, T, kv_heads, dim}, DType::kBFloat16, 901);
  HackOptions o;
  o.sinks = 4;
  const GpuSeq s = MakeSeq(t, o);
  const std::vector<float> q = RandomQueries(std::size_t{fresh} * q_heads * dim, 77);
  const HackKvCache kv = KvFor(t, DType::kBFloat16, layer);
  // Too small by 16 bytes, and misaligned: errors, nothing launched.
  DeviceBuffer d_q = Dev(q.data(), q.size());
  DeviceBuffer d_out = DevAlloc(q.size() * 4);
  HackPrefillArgs a;
  a.seq = s.desc;
  a.queries = fresh;
  a.first_position = T - fresh;
  a.q_heads = q_heads;
  a.q = d_q.as<float>();
  a.out = d_out.as<float>();
  a.math = HackPrefillMath::kDequantFp16;
  const std::uint64_t need = HackPrefillStagingBytes(kv, a);
  ASSERT_EQ(need, std::uint64_t{kv_heads} * 17u * kHackPrefillStageBytes);
  DeviceBuffer scratch = DevAlloc(need + 16);
  a.staging = scratch.data();
  a.staging_bytes = need - 16;
  const Status small = EnqueueHackPrefillAttention(kv, a, *ws, nullptr);
  EXPECT_EQ(small.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.message().find("staging scratch of " + std::to_string(need - 16) +
                                 " bytes is too small: this call needs " + std::to_string(need) +
                                 " bytes"),
            std::string::npos)
      << small.ToString();
  EXPECT_EQ(EnqueueHackPrefillStaging(kv, a, *ws, nullptr).code(), StatusCode::kInvalidArgument);
  a.staging = scratch.as<std::uint8_t>() + 8;
  a.staging_bytes = need;
  EXPECT_EQ(EnqueueHackPrefillAttention(kv, a, *ws, nullptr).code(), StatusCode::kInvalidArgument);
  // Without a scratch the staging alone is refused (the call does not stage).
  a.staging = nullptr;
  EXPECT_EQ(EnqueueHackPrefillStaging(kv, a, *ws, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(FinishHackAttention(*ws, nullptr).ok());
}

// ---- the dequantize-on-load decode (HackDecodeMath::kDequantFp16) ----

// A ragged decode batch through the fp16 path against DecodeAttention over each sequence's
// DequantizeHack(chunk, fp32) (float64): relative L2 and worst (query, head) within
// kHackDequantDecode*Tolerance; the lse is finite. Sinks on every other sequence.
// kv_max > 0: each sequence's synthesized KV is scaled (before quantization) so that its largest
// magnitude is kv_max, and the queries by the inverse of the first sequence's factor (the scores
// keep their size).
void CheckDecodeFp16(std::uint32_t dim, std::uint32_t group, DType dtype,
                     const std::vector<std::uint32_t>& lengths, std::uint32_t sinks,
                     std::uint64_t seed, float kv_max = 0.0f) {
  const std::uint32_t kv_heads = 2, q_heads = kv_heads * group, layers = 2, layer = 1;
  std::vector<GpuSeq> seqs;
  std::vector<HackAttentionSeq> descs;
  std::vector<KvTensor> deq;
  std::uint32_t max_tokens = 0;
  float q_factor = 1.0f;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    KvTensor t = Synth({layers, lengths[i], kv_heads, dim}, dtype, seed + i);
    if (kv_max > 0.0f) {
      auto value = [&](std::uint64_t e) {
        const auto bits = LoadLE<std::uint16_t>(t.data.data() + e * 2);
        return dtype == DType::kBFloat16 ? Bf16BitsToFloat(bits) : HalfBitsToFloat(bits);
      };
      float largest = 0.0f;
      for (std::uint64_t e = 0; e < t.shape.elements(); ++e) {
        largest = std::max(largest, std::fabs(value(e)));
      }
      for (std::uint64_t e = 0; e < t.shape.elements(); ++e) {
        StoreFloat(t, e, value(e) * (kv_max / largest));
      }
      if (i == 0) q_factor = largest / kv_max;
    }
    HackOptions o;
    o.sinks = i % 2 == 0 ? sinks : 0;
    seqs.push_back(MakeSeq(t, o));
    descs.push_back(seqs.back().desc);
    deq.push_back(DequantizeHack(seqs.back().chunk, DType::kFloat32));
    max_tokens = std::max(max_tokens, lengths[i]);
  }
  std::vector<KvTensorView> views;
  for (const KvTensor& t : deq) views.push_back(t.view());
  std::vector<float> q = RandomQueries(lengths.size() * q_heads * dim, seed * 31);
  for (float& x : q) x *= q_factor;
  AttentionOptions ao;
  ao.q_heads = q_heads;
  Result<AttentionResult> ref = DecodeAttentionBatch(views, layer, q, ao);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const KvTensor shape_only = KvTensor::Zeros(dtype, {layers, 1, kv_heads, dim});
  const GpuResult got = RunDecode(KvFor(shape_only, dtype, layer), descs, max_tokens, q, q_heads,
                                  HackDecodeMath::kDequantFp16);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  std::string label = "fp16 decode d" + std::to_string(dim) + " g" + std::to_string(group) + " " +
                      std::string(DTypeName(dtype)) + " sinks " + std::to_string(sinks) +
                      " kv max " + std::to_string(kv_max) + " T";
  for (std::uint32_t l : lengths) {
    label += ' ';  // not `" " + std::to_string(l)`: GCC 12 -O3 -Wrestrict false positive
    label += std::to_string(l);
  }
  ASSERT_EQ(ref->out.size(), got.out.size()) << label;
  double num = 0, den = 0, worst = 0;
  for (std::size_t row = 0; row * dim < ref->out.size(); ++row) {
    double n = 0, d = 0;
    for (std::uint32_t i = 0; i < dim; ++i) {
      const double e = static_cast<double>(got.out[row * dim + i]) - ref->out[row * dim + i];
      n += e * e;
      d += ref->out[row * dim + i] * ref->out[row * dim + i];
    }
    num += n;
    den += d;
    const double rel = std::sqrt(n / std::max(d, 1e-300));
    if (!(rel <= worst)) worst = rel;
  }
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  EXPECT_LE(rel, kHackDequantDecodeRelL2Tolerance) << label;
  EXPECT_LE(worst, kHackDequantDecodeHeadTolerance) << label;
  std::printf("[ info ] %s: rel L2 %.3g, worst (query, head) %.3g\n", label.c_str(), rel, worst);
  for (float v : got.lse) EXPECT_TRUE(std::isfinite(v)) << label;
}

TEST(HackGpu, DequantFp16DecodeMatchesAttentionOverTheDequantizedKv) {
  KVD_REQUIRE_GPU();
  const std::vector<std::uint32_t> lengths = {1, 17, 255, 1000, 64, 65};
  std::uint64_t seed = 15000;
  for (std::uint32_t dim : {64u, 128u}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (std::uint32_t group : {8u, 3u, 1u}) {
        CheckDecodeFp16(dim, group, dtype, lengths, 0, seed += 10);
        CheckDecodeFp16(dim, group, dtype, lengths, 4, seed += 10);
      }
    }
    CheckDecodeFp16(dim, 4, DType::kFloat16, {130, 64, 7, 300}, 70, seed += 10);  // many sinks
  }
}

// The kernel folds K's scales into the query (q * scale in fp16) and keeps V's codes exact: no
// range limit on q beyond finiteness, and tiny scales (fp16 subnormal products) lose nothing
// that matters. KV up to 60000 (scales near fp16's top), and KV within +-0.01 / +-0.0001 under
// queries thousands of times larger (K scales ~1e-3 / 1e-5: q * scale products in fp16's
// subnormal range); the scores keep their size, so the reference tolerances stay meaningful.
TEST(HackGpu, DequantFp16DecodeTakesExtremeMagnitudes) {
  KVD_REQUIRE_GPU();
  const std::vector<std::uint32_t> lengths = {1000, 65, 300};
  for (std::uint32_t dim : {64u, 128u}) {
    CheckDecodeFp16(dim, 8, DType::kFloat16, lengths, 4, 16100 + dim, 60000.0f);
    CheckDecodeFp16(dim, 4, DType::kBFloat16, lengths, 4, 16200 + dim, 60000.0f);
    CheckDecodeFp16(dim, 8, DType::kFloat16, lengths, 4, 16300 + dim, 0.01f);
    CheckDecodeFp16(dim, 3, DType::kBFloat16, lengths, 0, 16400 + dim, 0.0001f);
  }
}

TEST(HackGpu, DequantFp16LongDecodeUsesSplitKv) {
  KVD_REQUIRE_GPU();
  CheckDecodeFp16(128, 8, DType::kFloat16, {20000}, 0, 177);
  CheckDecodeFp16(128, 8, DType::kBFloat16, {20000, 3000}, 4, 178);
  CheckDecodeFp16(64, 3, DType::kFloat16, {12345}, 0, 179);
  // Splits of more than 128 blocks (split sequences) or 256 (whole ones) get 12 warps
  // (EnqueueHackDecodeAttention); the ones above, at most 8 and the kernel that prefetches before
  // its dependency wait. 8 sequences (16 pairs: 8 splits) sized for the longest: 782 blocks, 98 per
  // split, a split sequence on 8 warps (as 128K tokens at batch 1 run).
  CheckDecodeFp16(128, 8, DType::kBFloat16, {50000, 1, 17, 65, 255, 1000, 64, 130}, 4, 180);
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  // A split sequence of more than 128 blocks per split: the 12-warp kernel that prefetches too.
  // sms / 16 + 1 sequences (more than sms / 8 pairs: at most 7 splits), sized for the longest's
  // 938 units: 134 or more per split (a chunk holds at most kMaxTokens = 65536 tokens).
  std::vector<std::uint32_t> split12(static_cast<std::size_t>(sms) / 16 + 1, 130);
  split12[0] = 60000;
  split12[1] = 17;
  CheckDecodeFp16(128, 8, DType::kBFloat16, split12, 4, 182);
  // Whole sequences (more pairs than SMs: one split each), the grid sized for the longest's 97
  // units (6,200 tokens with 4 sinks: 96 blocks and 52 unquantized tokens): 8 warps, as batch 16
  // at 6K runs it; then for 313 units (20,000 tokens): the 12-warp kernel that does not prefetch,
  // as batch 16 at 32K runs it.
  std::vector<std::uint32_t> whole(static_cast<std::size_t>(sms) / 2 + 1, 65);
  whole[0] = 6200;
  CheckDecodeFp16(128, 8, DType::kBFloat16, whole, 4, 181);
  whole[0] = 20000;
  CheckDecodeFp16(128, 8, DType::kBFloat16, whole, 4, 183);
}

// Decode calls enqueued back to back on one stream, as an engine's layer loop or a CUDA graph
// enqueues them (programmatic dependent launch: a call is launched while the previous one
// finishes, and must wait for it before touching memory). Each call's query is the previous
// call's output and all share one workspace, so a call that read its query, or the workspace's
// split partials and arrival counters, before the previous call completed would miss its
// reference: the CPU reference of that math (`math`) over the query the call was given.
void CheckChainedDecodes(std::uint32_t tokens, HackDecodeMath math, std::uint64_t seed) {
  constexpr std::uint32_t kCalls = 4;
  const std::uint32_t dim = 128, group = 8, kv_heads = 2, q_heads = kv_heads * group;
  const std::uint32_t layers = 2, layer = 1;
  const bool fp16 = math == HackDecodeMath::kDequantFp16;
  const KvTensor t = Synth({layers, tokens, kv_heads, dim}, DType::kFloat16, seed);
  const GpuSeq seq = MakeSeq(t, HackOptions{});
  const KvTensor deq = DequantizeHack(seq.chunk, DType::kFloat32);
  const std::vector<float> q0 = RandomQueries(std::size_t{q_heads} * dim, seed * 31);
  Result<Stream> stream = Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  DeviceBuffer d_seqs = Dev(&seq.desc, 1);
  std::vector<DeviceBuffer> bufs;  // bufs[i]: call i's query, call i - 1's output
  bufs.push_back(Dev(q0.data(), q0.size()));
  for (std::uint32_t i = 0; i < kCalls; ++i) bufs.push_back(DevAlloc(q0.size() * sizeof(float)));
  const KvTensor shape_only = KvTensor::Zeros(DType::kFloat16, {layers, 1, kv_heads, dim});
  for (std::uint32_t i = 0; i < kCalls; ++i) {
    HackDecodeArgs a;
    a.seqs = d_seqs.as<HackAttentionSeq>();
    a.num_seqs = 1;
    a.max_tokens = tokens;
    a.q_heads = q_heads;
    a.q = bufs[i].as<float>();
    a.out = bufs[i + 1].as<float>();
    a.math = math;
    const Status st = EnqueueHackDecodeAttention(KvFor(shape_only, DType::kFloat16, layer), a, *ws,
                                                 stream->get());
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const Status done = FinishHackAttention(*ws, stream->get());
  ASSERT_TRUE(done.ok()) << done.ToString();
  std::vector<std::vector<float>> host(kCalls + 1, std::vector<float>(q0.size()));
  for (std::uint32_t i = 0; i <= kCalls; ++i) {
    ASSERT_EQ(cudaMemcpy(host[i].data(), bufs[i].data(), q0.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  AttentionOptions ao;
  ao.q_heads = q_heads;
  for (std::uint32_t i = 0; i < kCalls; ++i) {
    const std::string label = std::string(fp16 ? "fp16" : "homomorphic") + " decode T " +
                              std::to_string(tokens) + ", call " + std::to_string(i + 1) + " of " +
                              std::to_string(kCalls) + " back to back";
    if (fp16) {
      Result<AttentionResult> ref = DecodeAttention(deq.view(), layer, host[i], ao);
      ASSERT_TRUE(ref.ok()) << ref.status().ToString();
      ExpectCloseFp16(ref->out, host[i + 1], dim, label);
    } else {
      Result<AttentionResult> ref =
          HackDecodeAttention(HackSequence(&seq.chunk, 1), layer, host[i], ao);
      ASSERT_TRUE(ref.ok()) << ref.status().ToString();
      ExpectClose(ref->out, host[i + 1], dim, label);
    }
  }
}

TEST(HackGpu, BackToBackDecodeCallsWaitForThePreviousCall) {
  KVD_REQUIRE_GPU();
  // 4K tokens: twin warps, 16 splits; 20 000: single warps, 16 splits (2 KV heads).
  for (std::uint32_t tokens : {4096u, 20000u}) {
    CheckChainedDecodes(tokens, HackDecodeMath::kHomomorphicInt8, 90 + tokens);
    CheckChainedDecodes(tokens, HackDecodeMath::kDequantFp16, 91 + tokens);
  }
}

// Paged KV (pages at shuffled pool positions) gives the same bits as the contiguous chunks, and a
// bad table entry is reported.
TEST(HackGpu, DequantFp16DecodePagedEqualsContiguous) {
  KVD_REQUIRE_GPU();
  for (std::uint32_t dim : {64u, 128u}) {
    const std::uint32_t layers = 2, kv_heads = 2, group = 8, q_heads = kv_heads * group;
    const std::uint32_t page_blocks = 4, page_tokens = page_blocks * 64;
    const std::vector<std::uint32_t> lengths = {1000, 600, 40, 5000};
    std::vector<KvTensor> tensors;
    std::vector<GpuSeq> contiguous;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      tensors.push_back(Synth({layers, lengths[i], kv_heads, dim}, DType::kFloat16, 900 + i));
      contiguous.push_back(MakeSeq(tensors.back(), {}));
    }
    hack::Layout pl = HackLayoutFor({layers, page_tokens, kv_heads, dim}, {});
    const HackSectionBytes pb = HackSectionBytesFor(pl, DType::kFloat16);
    std::uint32_t max_pages = 0, total_pages = 0;
    for (std::uint32_t l : lengths) {
      const std::uint32_t pages = ((l / 64) + page_blocks - 1) / page_blocks;
      max_pages = std::max(max_pages, std::max(pages, 1u));
      total_pages += pages;
    }
    const std::uint32_t num_pages = total_pages + 3;
    std::vector<std::uint32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0u);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(dim + 1));
    std::vector<std::uint8_t> codes(num_pages * pb.codes), scales(num_pages * pb.scales),
        sums(num_pages * pb.sums);
    std::vector<std::int32_t> table(lengths.size() * max_pages, -1);
    std::uint32_t next = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      const std::vector<std::byte> c = *EncodeHack(tensors[i].view(), {});
      const hack::Layout sl = contiguous[i].chunk.layout;
      for (std::uint32_t b = 0; b < sl.blocks(); ++b) {
        if (b % page_blocks == 0) {
          table[i * max_pages + b / page_blocks] = static_cast<std::int32_t>(perm[next++]);
        }
        const auto page = static_cast<std::uint32_t>(table[i * max_pages + b / page_blocks]);
        CopyGroup(c, sl, b, pl, b % page_blocks, codes.data() + page * pb.codes,
                  scales.data() + page * pb.scales, sums.data() + page * pb.sums);
      }
    }
    DeviceBuffer d_codes = Dev(codes.data(), codes.size());
    DeviceBuffer d_scales = Dev(scales.data(), scales.size());
    DeviceBuffer d_sums = Dev(sums.data(), sums.size());
    DeviceBuffer d_table = Dev(table.data(), table.size());
    HackKvCache kv = KvFor(tensors[0], DType::kFloat16, 1);
    std::vector<HackAttentionSeq> contig_descs, paged_descs;
    for (const GpuSeq& s : contiguous) {
      contig_descs.push_back(s.desc);
      HackAttentionSeq p = s.desc;
      p.codes = p.scales = p.sums = nullptr;
      paged_descs.push_back(p);
    }
    const std::vector<float> q = RandomQueries(lengths.size() * q_heads * dim, 199 + dim);
    const GpuResult want =
        RunDecode(kv, contig_descs, 5000, q, q_heads, HackDecodeMath::kDequantFp16);
    ASSERT_TRUE(want.status.ok()) << want.status.ToString();
    kv.page_blocks = page_blocks;
    kv.num_pages = num_pages;
    kv.page_codes = d_codes.as<std::uint8_t>();
    kv.page_scales = d_scales.as<std::uint8_t>();
    kv.page_sums = d_sums.as<std::uint8_t>();
    kv.page_codes_bytes = pb.codes;
    kv.page_scales_bytes = pb.scales;
    kv.page_sums_bytes = pb.sums;
    kv.block_tables = d_table.as<std::int32_t>();
    kv.max_pages_per_seq = max_pages;
    const GpuResult got =
        RunDecode(kv, paged_descs, 5000, q, q_heads, HackDecodeMath::kDequantFp16);
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    EXPECT_EQ(std::memcmp(got.out.data(), want.out.data(), got.out.size() * 4), 0)
        << "paged fp16 decode differs from contiguous (d " << dim << ")";
    table[max_pages + 1] = static_cast<std::int32_t>(num_pages);
    DeviceBuffer d_bad = Dev(table.data(), table.size());
    kv.block_tables = d_bad.as<std::int32_t>();
    const GpuResult bad =
        RunDecode(kv, paged_descs, 5000, q, q_heads, HackDecodeMath::kDequantFp16);
    EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument) << bad.status.ToString();
    EXPECT_NE(bad.status.message().find("sequence 1"), std::string::npos) << bad.status.ToString();
  }
}

// Exact attention over the original KV: the fp16 path's error is at most the homomorphic path's
// (no INT8 Q' or P on top of the same 2-bit KV), on synthetic KV at d 128, GQA 8.
TEST(HackGpu, DequantFp16DecodeIsNoWorseThanHomomorphicAgainstExactAttention) {
  KVD_REQUIRE_GPU();
  for (std::uint32_t dim : {64u, 128u}) {
    const std::uint32_t layers = 1, kv_heads = 2, group = 8, q_heads = kv_heads * group;
    const std::vector<std::uint32_t> lengths = {1000, 4000, 255};
    std::vector<KvTensor> tensors;
    std::vector<HackAttentionSeq> descs;
    std::vector<GpuSeq> seqs;
    std::vector<KvTensorView> views;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      tensors.push_back(Synth({layers, lengths[i], kv_heads, dim}, DType::kFloat16, 4242 + i));
    }
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      seqs.push_back(MakeSeq(tensors[i], {}));
      descs.push_back(seqs.back().desc);
      views.push_back(tensors[i].view());
    }
    const std::vector<float> q = RandomQueries(lengths.size() * q_heads * dim, 4243 + dim);
    AttentionOptions ao;
    ao.q_heads = q_heads;
    Result<AttentionResult> exact = DecodeAttentionBatch(views, 0, q, ao);
    ASSERT_TRUE(exact.ok()) << exact.status().ToString();
    const HackKvCache kv = KvFor(tensors[0], DType::kFloat16, 0);
    const GpuResult int8 = RunDecode(kv, descs, 4000, q, q_heads);
    const GpuResult fp16 = RunDecode(kv, descs, 4000, q, q_heads, HackDecodeMath::kDequantFp16);
    ASSERT_TRUE(int8.status.ok() && fp16.status.ok());
    auto rel = [&](const std::vector<float>& got) {
      double n = 0, d = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double e = got[i] - exact->out[i];
        n += e * e;
        d += exact->out[i] * exact->out[i];
      }
      return std::sqrt(n / d);
    };
    const double e8 = rel(int8.out), e16 = rel(fp16.out);
    std::printf("[ info ] d%u vs exact attention: homomorphic %.4g, fp16 %.4g (ratio %.3f)\n", dim,
                e8, e16, e16 / e8);
    EXPECT_LE(e16, 1.05 * e8) << "d" << dim;
  }
}

TEST(HackGpu, NonFiniteQueryHeadsGiveNanOutputs) {
  KVD_REQUIRE_GPU();
  const std::uint32_t dim = 128, kv_heads = 2, group = 4, q_heads = kv_heads * group;
  const KvTensor t = Synth({1, 500, kv_heads, dim}, DType::kFloat16, 61);
  const GpuSeq s = MakeSeq(t, {});
  std::vector<float> q = RandomQueries(q_heads * dim, 62);
  q[1 * dim + 17] = std::numeric_limits<float>::quiet_NaN();
  q[6 * dim + 0] = -std::numeric_limits<float>::infinity();
  const GpuResult got = RunDecode(KvFor(t, DType::kFloat16, 0), {s.desc}, 500, q, q_heads);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  std::vector<float> clean = q;
  std::vector<bool> skip(q_heads, false);
  for (std::uint32_t h : {1u, 6u}) {
    skip[h] = true;
    std::fill(clean.begin() + h * dim, clean.begin() + (h + 1) * dim, 0.0f);
    for (std::uint32_t d = 0; d < dim; ++d) EXPECT_TRUE(std::isnan(got.out[h * dim + d]));
    EXPECT_TRUE(std::isnan(got.lse[h]));
  }
  AttentionOptions ao;
  ao.q_heads = q_heads;
  Result<AttentionResult> ref = HackDecodeAttention(HackSequence(&s.chunk, 1), 0, clean, ao);
  ASSERT_TRUE(ref.ok());
  ExpectClose(ref->out, got.out, dim, "nan heads", skip);
}

TEST(HackGpu, BadSequenceDescriptorsAreReported) {
  KVD_REQUIRE_GPU();
  const std::uint32_t dim = 64, kv_heads = 1;
  const KvTensor t = Synth({1, 300, kv_heads, dim}, DType::kFloat16, 71);
  const GpuSeq s = MakeSeq(t, {});
  const std::vector<float> q = RandomQueries(2 * dim, 72);
  const HackKvCache kv = KvFor(t, DType::kFloat16, 0);
  // tokens beyond max_tokens: reported (the first bad sequence is named), outputs NaN.
  GpuResult r = RunDecode(kv, {s.desc, s.desc}, 299, q, 1);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("sequence 0"), std::string::npos) << r.status.ToString();
  EXPECT_TRUE(std::isnan(r.out[0]));
  HackAttentionSeq no_tail = s.desc;
  no_tail.tail = nullptr;
  r = RunDecode(kv, {s.desc, no_tail}, 300, q, 1);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("sequence 1: tail"), std::string::npos) << r.status.ToString();
  EXPECT_FALSE(std::isnan(r.out[0]));
  EXPECT_TRUE(std::isnan(r.out[dim]));
  r = RunDecode(kv, {s.desc, s.desc}, 300, q, 1);
  EXPECT_TRUE(r.status.ok()) << r.status.ToString();
}

}  // namespace
}  // namespace kvdepot::cuda
