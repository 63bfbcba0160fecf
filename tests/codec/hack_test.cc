#include "kvdepot/codec/hack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <tuple>

#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/compare.h"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/codec/synth.h"
#include "test_util.h"

namespace kvdepot {
namespace {

using testing::ResealAll;

KvTensor Synth(const KvShape& shape, DType dtype, std::uint64_t seed = 1) {
  return *SynthesizeKv(SynthOptions{shape, seed, dtype});
}

HackOptions Options(std::uint32_t partition, HackOrientation orientation,
                    HackRounding rounding = HackRounding::kNearest, std::uint64_t seed = 0,
                    std::uint32_t sinks = 0) {
  HackOptions o;
  o.partition = partition;
  o.orientation = orientation;
  o.rounding = rounding;
  o.seed = seed;
  o.sinks = sinks;
  return o;
}

// Encodes twice (deterministic), decodes, and checks decode(encode(x)) ==
// DequantizeHack(QuantizeHack(x)) byte for byte and UnpackHack(encode(x)) == QuantizeHack(x).
std::vector<std::byte> ExpectRoundTrip(const KvTensor& t, const HackOptions& options) {
  auto c = EncodeHack(t.view(), options);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return {};
  EXPECT_EQ(*c, *EncodeHack(t.view(), options)) << "encoding must be deterministic";
  auto decoded = DecodeChunk(*c);
  EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
  if (!decoded.ok()) return {};
  auto q = QuantizeHack(t.view(), options);
  EXPECT_TRUE(q.ok());
  EXPECT_EQ(decoded->dtype, t.dtype);
  EXPECT_EQ(decoded->shape, t.shape);
  EXPECT_TRUE(decoded->data == DequantizeHack(*q, t.dtype).data)
      << "decode(encode(x)) != DequantizeHack(QuantizeHack(x))";
  auto unpacked = UnpackHack(*ParseContainer(*c));
  EXPECT_TRUE(unpacked.ok()) << unpacked.status().ToString();
  if (!unpacked.ok()) return {};
  EXPECT_EQ(unpacked->codes, q->codes);
  EXPECT_EQ(unpacked->sums, q->sums);
  EXPECT_EQ(unpacked->unquantized, q->unquantized);
  EXPECT_EQ(unpacked->quants.size(), q->quants.size());
  for (std::size_t i = 0; i < q->quants.size(); ++i) {
    EXPECT_EQ(unpacked->quants[i].scale, q->quants[i].scale);
    EXPECT_EQ(unpacked->quants[i].min, q->quants[i].min);
  }
  return *c;
}

struct ShapeCase {
  KvShape shape;
  DType dtype;
  HackOptions options;
};

class HackShapes : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(HackShapes, RoundTripTailAndQuantizationBounds) {
  const ShapeCase& tc = GetParam();
  const KvTensor t = Synth(tc.shape, tc.dtype, tc.shape.elements());
  const std::vector<std::byte> c = ExpectRoundTrip(t, tc.options);
  ASSERT_FALSE(c.empty());
  const HackChunk q = *QuantizeHack(t.view(), tc.options);
  const hack::Layout& lay = q.layout;
  const KvTensor d = *DecodeChunk(c);
  const bool stochastic = tc.options.rounding == HackRounding::kStochastic;

  // Sizes follow the layout.
  auto sizes = HackSectionSizes(*ParseContainer(c));
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ(sizes->codes, lay.codes() / 4);
  EXPECT_EQ(sizes->scales, lay.partitions() * 4);
  EXPECT_EQ(sizes->sums, lay.sums() * hack::SumBytes(lay.partition));
  EXPECT_EQ(sizes->tail, lay.unquantized_elements() * DTypeSize(tc.dtype));
  EXPECT_EQ(sizes->total, c.size());
  EXPECT_EQ(lay.tail_begin() + (lay.unquantized_tokens() - lay.sinks), tc.shape.tokens);
  // The public layout and section lengths (what the GPU codec and kernels size buffers by) are
  // the stored chunk's; sinks beyond the tokens clamp as QuantizeHack stores them.
  for (const std::uint32_t more : {0u, tc.shape.tokens + 1}) {
    HackOptions o = tc.options;
    o.sinks += more;
    const hack::Layout want = more == 0 ? lay : QuantizeHack(t.view(), o)->layout;
    const hack::Layout got = HackLayoutFor(tc.shape, o);
    EXPECT_EQ(got.sinks, want.sinks);
    EXPECT_EQ(got.tail_begin(), want.tail_begin());
    EXPECT_EQ(got.partitions(), want.partitions());
    EXPECT_EQ(got.orientation, want.orientation);
  }
  const HackSectionBytes bytes = HackSectionBytesFor(lay, tc.dtype);
  EXPECT_EQ(bytes.codes, sizes->codes);
  EXPECT_EQ(bytes.scales, sizes->scales);
  EXPECT_EQ(bytes.sums, sizes->sums);
  EXPECT_EQ(bytes.tail, sizes->tail);

  // Unquantized tokens are bit-exact; quantized ones lie within half a step (nearest) or one step
  // (stochastic) of the input, plus the dtype's rounding of the result.
  const std::size_t es = DTypeSize(tc.dtype);
  for (std::uint32_t l = 0; l < lay.layers; ++l) {
    for (std::uint32_t kv = 0; kv < 2; ++kv) {
      for (std::uint32_t tok = 0; tok < lay.tokens; ++tok) {
        for (std::uint32_t h = 0; h < lay.heads; ++h) {
          for (std::uint32_t dim = 0; dim < lay.dim; ++dim) {
            const std::uint64_t e = lay.element_index(l, kv, tok, h, dim);
            if (!lay.quantized(tok)) {
              ASSERT_EQ(std::memcmp(t.data.data() + e * es, d.data.data() + e * es, es), 0)
                  << "unquantized token " << tok;
              continue;
            }
            const std::uint32_t b = (tok - lay.sinks) / lay.partition;
            const std::uint32_t tb = (tok - lay.sinks) % lay.partition;
            const hack::Quant& pq =
                q.quants[lay.partition_base(l, kv, h, b) + lay.partition_offset(kv, tb, dim)];
            const double x = ElementAsFloat(t.view(), e), y = ElementAsFloat(d.view(), e);
            const double step = pq.scale;
            const double slack =
                (std::fabs(x) + step) * (tc.dtype == DType::kBFloat16 ? 8e-3 : 1e-3);
            ASSERT_LE(std::fabs(x - y), (stochastic ? step : step / 2) + slack)
                << "at " << e << " x " << x << " y " << y << " scale " << step;
            ASSERT_GE(x, pq.min - slack);
            ASSERT_LE(x, pq.min + 3 * step + slack);
          }
        }
      }
    }
  }
  // Error stays within what 2 bits allow on synthetic KV.
  auto st = CompareTensors(t.view(), d.view());
  ASSERT_TRUE(st.ok());
  EXPECT_LT(st->rel_l2, stochastic ? 0.8 : 0.5) << tc.shape.ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Awkward, HackShapes,
    ::testing::Values(
        ShapeCase{{1, 1, 1, 64}, DType::kFloat16, {}},
        ShapeCase{{2, 63, 2, 64}, DType::kFloat16, {}},
        ShapeCase{{2, 64, 2, 128}, DType::kFloat16, {}},
        ShapeCase{{2, 65, 3, 128}, DType::kBFloat16, Options(64, HackOrientation::kToken)},
        ShapeCase{{1, 1000, 2, 64}, DType::kFloat32, Options(128, HackOrientation::kChannel)},
        ShapeCase{{2, 1000, 1, 64}, DType::kFloat16, Options(32, HackOrientation::kToken)},
        ShapeCase{{3, 256, 2, 80}, DType::kFloat16, Options(64, HackOrientation::kToken)},
        ShapeCase{{2, 200, 2, 16},
                  DType::kFloat16,
                  Options(64, HackOrientation::kChannel, HackRounding::kNearest, 0, 4)},
        ShapeCase{{2, 130, 1, 7},
                  DType::kFloat32,
                  Options(128, HackOrientation::kToken, HackRounding::kStochastic, 7, 2)},
        ShapeCase{{1, 300, 2, 1},
                  DType::kBFloat16,
                  Options(32, HackOrientation::kChannel, HackRounding::kStochastic, 3, 1000)},
        ShapeCase{{2, 256, 4, 128},
                  DType::kFloat16,
                  Options(64, HackOrientation::kChannel, HackRounding::kStochastic, 99)},
        ShapeCase{{1, 97, 2, 200}, DType::kFloat16, Options(128, HackOrientation::kToken)}));

TEST(HackTest, LayoutIndicesArePermutations) {
  for (std::uint8_t orientation : {hack::kOrientChannel, hack::kOrientToken}) {
    for (std::uint32_t dim : {7u, 64u, 80u, 128u, 200u}) {
      hack::Layout lay;
      lay.layers = 2;
      lay.tokens = 150;
      lay.heads = 3;
      lay.dim = dim;
      lay.partition = 32;
      lay.sinks = 5;
      lay.orientation = orientation;
      ASSERT_EQ(lay.blocks(), 4u);
      ASSERT_EQ(lay.unquantized_tokens(), 22u);
      for (std::uint32_t u = 0; u < lay.unquantized_tokens(); ++u) {
        const std::uint32_t tok = lay.unquantized_token(u);
        ASSERT_FALSE(lay.quantized(tok));
        ASSERT_EQ(lay.unquantized_index(tok), u);
      }
      std::vector<int> code_seen(lay.codes()), part_seen(lay.partitions()), sum_seen(lay.sums());
      for (std::uint32_t l = 0; l < 2; ++l) {
        for (std::uint32_t kv = 0; kv < 2; ++kv) {
          for (std::uint32_t h = 0; h < 3; ++h) {
            for (std::uint32_t b = 0; b < lay.blocks(); ++b) {
              const std::uint64_t cb = lay.code_base(lay.group(l, kv, h, b));
              const std::uint64_t pb = lay.partition_base(l, kv, h, b);
              const std::uint64_t sb = lay.sum_base(l, kv, h, b);
              std::vector<std::uint32_t> part_count(lay.partitions_per_group(kv), 0);
              for (std::uint32_t t = 0; t < lay.partition; ++t) {
                for (std::uint32_t d = 0; d < dim; ++d) {
                  ++code_seen[cb + lay.code_offset(kv, t, d)];
                  const std::uint32_t p = lay.partition_offset(kv, t, d);
                  ASSERT_LT(p, lay.partitions_per_group(kv));
                  ++part_count[p];
                  ++sum_seen[sb + lay.sum_offset(kv, t, d)];
                }
              }
              for (std::uint32_t p = 0; p < part_count.size(); ++p) {
                ASSERT_EQ(part_count[p], lay.partition_size(kv, p));
                ++part_seen[pb + p];
                for (std::uint32_t i = 0; i < lay.partition_size(kv, p); ++i) {
                  std::uint32_t t, d;
                  lay.partition_element(kv, p, i, &t, &d);
                  ASSERT_EQ(lay.partition_offset(kv, t, d), p);
                }
              }
            }
          }
        }
      }
      for (int v : code_seen) ASSERT_EQ(v, 1);
      for (int v : part_seen) ASSERT_EQ(v, 1);
      for (int v : sum_seen) ASSERT_GE(v, 1);
    }
  }
}

TEST(HackTest, ScalarMath) {
  // PartitionQuant: min rounded down, scale rounded up to fp16, both exact fp16 values.
  const hack::Quant q = hack::PartitionQuant(-1.1f, 2.3f);
  EXPECT_LE(q.min, -1.1f);
  EXPECT_GE(q.min + 3 * q.scale, 2.3f);
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(q.min)), q.min);
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(q.scale)), q.scale);
  EXPECT_EQ(hack::QuantizeNearest(-1.1f, q), 0u);
  EXPECT_EQ(hack::QuantizeNearest(2.3f, q), 3u);
  EXPECT_EQ(hack::QuantizeNearest(100.0f, q), 3u);
  EXPECT_EQ(hack::QuantizeNearest(-100.0f, q), 0u);
  EXPECT_EQ(hack::QuantizeStochastic(2.3f, q, 0.999f), 3u);
  EXPECT_EQ(hack::QuantizeStochastic(-1.1f, q, 0.0f), 0u);
  // Constant partition: scale 0, code 0, exact.
  const hack::Quant c = hack::PartitionQuant(3.25f, 3.25f);
  EXPECT_EQ(c.scale, 0.0f);
  EXPECT_EQ(hack::QuantizeNearest(3.25f, c), 0u);
  EXPECT_EQ(hack::QuantizeStochastic(3.25f, c, 0.5f), 0u);
  EXPECT_EQ(hack::Dequantize(0, c), 3.25f);
  // A range reaching the top of fp16 keeps min + 3 * scale below the fp16 overflow.
  const hack::Quant top = hack::PartitionQuant(0.0f, 65504.0f);
  EXPECT_LT(top.min + 3 * top.scale, 65520.0f);
  EXPECT_EQ(hack::QuantizeNearest(65504.0f, top), 3u);
  const hack::Quant wide = hack::PartitionQuant(-65504.0f, 65504.0f);
  EXPECT_LT(wide.min + 3 * wide.scale, 65520.0f);
  // Sum widths.
  EXPECT_EQ(hack::SumBytes(32), 1u);
  EXPECT_EQ(hack::SumBytes(64), 1u);
  EXPECT_EQ(hack::SumBytes(128), 2u);
  // INT8.
  const hack::Int8Quant i8 = hack::Int8Params(-2.0f, 3.1f);
  EXPECT_EQ(hack::QuantizeInt8(-2.0f, i8), 0u);
  EXPECT_EQ(hack::QuantizeInt8(3.1f, i8), 255u);
  EXPECT_EQ(hack::QuantizeInt8(1.0f, hack::Int8Params(1.0f, 1.0f)), 0u);
  // HomomorphicDot equals the dot product of the dequantized runs.
  const std::uint32_t a[3] = {1, 200, 37}, b[3] = {3, 0, 2};
  const double sa = 0.01, ma = -1.2, sb = 0.5, mb = 0.25;
  double want = 0;
  std::int64_t dot = 0;
  for (int i = 0; i < 3; ++i) {
    want += (sa * a[i] + ma) * (sb * b[i] + mb);
    dot += std::int64_t{a[i]} * b[i];
  }
  EXPECT_NEAR(hack::HomomorphicDot<double>(dot, 238, 5, 3, sa, ma, sb, mb), want, 1e-12);
}

// NearestCodeAtLeast (the kernels' threshold test) agrees with QuantizeNearest on every fp16 and
// bf16 value for quantizers of ranges narrow and wide, tiny and huge, of either sign.
TEST(HackTest, NearestCodeAtLeastIsQuantizeNearestOnEvery16BitValue) {
  std::mt19937_64 rng(17);
  std::vector<hack::Quant> quants = {
      hack::PartitionQuant(0.0f, 65504.0f), hack::PartitionQuant(-65504.0f, 65504.0f),
      hack::PartitionQuant(-3.0e-5f, 3.0e-5f), hack::PartitionQuant(1000.0f, 1000.5f),
      hack::PartitionQuant(-0.0f, 6.0e-8f)};
  for (int i = 0; i < 40; ++i) {
    const float lo =
        std::ldexp(static_cast<float>(rng() % 2048) - 1024.0f, static_cast<int>(rng() % 30) - 24);
    const float width =
        std::ldexp(static_cast<float>(rng() % 4096 + 1), static_cast<int>(rng() % 24) - 30);
    quants.push_back(hack::PartitionQuant(lo, std::min(lo + width, 60000.0f)));
  }
  for (int e = -12; e <= 12; e += 3) {  // power-of-two scales: exact ties at k - 1/2
    quants.push_back(hack::PartitionQuant(0.0f, std::ldexp(3.0f, e)));
    quants.push_back(hack::PartitionQuant(-std::ldexp(1.0f, e), std::ldexp(2.0f, e)));
  }
  std::uint64_t checked = 0, ties = 0;
  for (const hack::Quant& q : quants) {
    if (!(q.scale > 0.0f)) continue;
    for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
      for (const float x : {HalfBitsToFloat(static_cast<std::uint16_t>(bits)),
                            Bf16BitsToFloat(static_cast<std::uint16_t>(bits))}) {
        if (std::isnan(x)) continue;
        const std::uint32_t code = hack::QuantizeNearest(x, q);
        const float t = (x - q.min) / q.scale;
        if (t == 0.5f || t == 1.5f || t == 2.5f) ++ties;
        for (std::uint32_t k = 1; k <= 3; ++k) {
          ASSERT_EQ(hack::NearestCodeAtLeast(x, q, k), code >= k)
              << "x " << x << " min " << q.min << " scale " << q.scale << " k " << k;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40u * 65536u);
  EXPECT_GT(ties, 100u);
}

TEST(HackTest, CounterRngIsSplitMix64) {
  // Outputs 1 and 2 of SplitMix64 seeded with 0 (reference values of the published generator).
  EXPECT_EQ(hack::Mix64(0x9e3779b97f4a7c15ull), 0xe220a8397b1dcdafull);
  EXPECT_EQ(hack::Mix64(2 * 0x9e3779b97f4a7c15ull), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(hack::StochasticUniform(0, 0), 14819496.0f / 16777216.0f);
  EXPECT_EQ(hack::StochasticUniform(0, 1), 7239838.0f / 16777216.0f);
  EXPECT_EQ(hack::StochasticUniform(12345, 1000), 12271977.0f / 16777216.0f);
  // Roughly uniform.
  double mean = 0;
  for (std::uint64_t i = 0; i < 100000; ++i) {
    const float u = hack::StochasticUniform(42, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    mean += u;
  }
  EXPECT_NEAR(mean / 100000, 0.5, 0.005);
}

TEST(HackTest, SpecialTensors) {
  const KvShape shape{2, 70, 2, 16};
  for (HackOrientation o : {HackOrientation::kChannel, HackOrientation::kToken}) {
    const HackOptions opts = Options(32, o);
    const KvTensor zeros = KvTensor::Zeros(DType::kFloat16, shape);
    EXPECT_TRUE(DecodeChunk(ExpectRoundTrip(zeros, opts))->data == zeros.data);
    KvTensor constant = KvTensor::Zeros(DType::kFloat32, shape);
    for (std::uint64_t i = 0; i < shape.elements(); ++i) {
      StoreLE<float>(constant.data.data() + i * 4, 3.25f);
    }
    EXPECT_TRUE(DecodeChunk(ExpectRoundTrip(constant, opts))->data == constant.data)
        << "constant partitions are exact";
    // The extremes of fp16 in one partition decode to finite values.
    KvTensor extremes = Synth(shape, DType::kFloat16);
    for (std::uint64_t i = 0; i < shape.elements(); i += 5) {
      StoreLE<std::uint16_t>(extremes.data.data() + i * 2, i % 2 ? 0x7bffu : 0xfbffu);
    }
    const KvTensor d = *DecodeChunk(ExpectRoundTrip(extremes, opts));
    for (std::uint64_t i = 0; i < shape.elements(); ++i) {
      ASSERT_TRUE(std::isfinite(ElementAsFloat(d.view(), i))) << i;
    }
  }
}

TEST(HackTest, NonFiniteAndOutOfRangeInputIsRefusedWithItsPosition) {
  KvTensor t = Synth({2, 70, 2, 8}, DType::kFloat32);
  const std::uint64_t at = ((std::uint64_t{1} * 2 + 1) * 70 + 66) * 16 + 8 + 3;  // a tail token
  StoreLE<float>(t.data.data() + 4 * at, std::numeric_limits<float>::quiet_NaN());
  Status s = EncodeHack(t.view()).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("non-finite value at [1, 1, 66, 1, 3]"), std::string::npos)
      << s.message();
  StoreLE<float>(t.data.data() + 4 * at, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(EncodeHack(t.view()).status().code(), StatusCode::kInvalidArgument);
  StoreLE<float>(t.data.data() + 4 * at, 70000.0f);
  s = EncodeHack(t.view()).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at [1, 1, 66, 1, 3] is beyond the fp16 range"), std::string::npos)
      << s.message();
  StoreLE<float>(t.data.data() + 4 * at, 65504.0f);
  EXPECT_TRUE(EncodeHack(t.view()).ok());
  KvTensor bf = Synth({1, 64, 1, 8}, DType::kBFloat16);
  StoreLE<std::uint16_t>(bf.data.data() + 2 * 9, FloatToBf16Bits(-1e6f));
  s = EncodeHack(bf.view()).status();
  EXPECT_NE(s.message().find("at [0, 0, 1, 0, 1]"), std::string::npos) << s.message();
}

TEST(HackTest, OptionsAreValidated) {
  const KvTensor t = Synth({1, 64, 1, 8}, DType::kFloat16);
  HackOptions o;
  o.partition = 48;
  Status s = EncodeHack(t.view(), o).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("partition = 48"), std::string::npos) << s.message();
  o = {};
  o.orientation = static_cast<HackOrientation>(7);
  EXPECT_NE(EncodeHack(t.view(), o).status().message().find("orientation = 7"), std::string::npos);
  o = {};
  o.rounding = static_cast<HackRounding>(9);
  EXPECT_NE(EncodeHack(t.view(), o).status().message().find("rounding = 9"), std::string::npos);
  EXPECT_EQ(*ParseHackOrientation("token"), HackOrientation::kToken);
  EXPECT_EQ(*ParseHackOrientation("channel"), HackOrientation::kChannel);
  EXPECT_FALSE(ParseHackOrientation("row").ok());
  EXPECT_EQ(*ParseHackRounding("stochastic"), HackRounding::kStochastic);
  EXPECT_EQ(*ParseHackRounding("nearest"), HackRounding::kNearest);
  EXPECT_FALSE(ParseHackRounding("up").ok());
  EXPECT_EQ(HackOrientationName(HackOrientation::kChannel), "channel");
  EXPECT_EQ(HackRoundingName(HackRounding::kStochastic), "stochastic");
}

TEST(HackTest, StochasticRoundingIsDeterministicPerSeedAndUnbiased) {
  const KvTensor t = Synth({2, 128, 2, 64}, DType::kFloat16);
  const HackOptions a = Options(64, HackOrientation::kChannel, HackRounding::kStochastic, 1);
  const HackOptions b = Options(64, HackOrientation::kChannel, HackRounding::kStochastic, 2);
  const auto ca = *EncodeHack(t.view(), a);
  EXPECT_EQ(ca, *EncodeHack(t.view(), a)) << "same seed, same bytes";
  EXPECT_NE(ca, *EncodeHack(t.view(), b)) << "different seed, different codes";
  EXPECT_NE(ca, *EncodeHack(t.view(), Options(64, HackOrientation::kChannel)));
  // Round-to-nearest ignores (and does not store) the seed.
  const HackOptions n1 = Options(64, HackOrientation::kChannel, HackRounding::kNearest, 1);
  const HackOptions n2 = Options(64, HackOrientation::kChannel, HackRounding::kNearest, 2);
  EXPECT_EQ(*EncodeHack(t.view(), n1), *EncodeHack(t.view(), n2));
  EXPECT_EQ(UnpackHack(*ParseContainer(*EncodeHack(t.view(), n1)))->options.seed, 0u);
  EXPECT_EQ(UnpackHack(*ParseContainer(ca))->options.seed, 1u);
  // Averaged over seeds, stochastic codes dequantize to the input (scales do not depend on the
  // seed), unlike round-to-nearest's.
  const KvTensor f = Synth({1, 64, 1, 64}, DType::kFloat32);
  const int seeds = 400;
  std::vector<double> mean(f.shape.elements(), 0);
  for (int s = 0; s < seeds; ++s) {
    const HackChunk c = *QuantizeHack(
        f.view(), Options(64, HackOrientation::kChannel, HackRounding::kStochastic, 1000 + s));
    const KvTensor d = DequantizeHack(c, DType::kFloat32);
    for (std::uint64_t i = 0; i < mean.size(); ++i) mean[i] += ElementAsFloat(d.view(), i) / seeds;
  }
  const KvTensor nearest = *DecodeChunk(*EncodeHack(f.view(), {}));
  double bias_sr = 0, bias_rtn = 0;
  for (std::uint64_t i = 0; i < mean.size(); ++i) {
    const double x = ElementAsFloat(f.view(), i);
    bias_sr += std::fabs(mean[i] - x);
    bias_rtn += std::fabs(ElementAsFloat(nearest.view(), i) - x);
  }
  EXPECT_LT(bias_sr, bias_rtn / 4) << "stochastic rounding must be unbiased on average";
}

TEST(HackTest, LlamaShapedChunkMeetsSizeTarget) {
  const KvTensor t = Synth({32, 256, 8, 128}, DType::kFloat16);
  for (HackOrientation o : {HackOrientation::kChannel, HackOrientation::kToken}) {
    HackOptions opts;
    opts.orientation = o;
    auto c = EncodeHack(t.view(), opts);
    ASSERT_TRUE(c.ok());
    // 1024 groups per K|V of 64 x 128 codes: codes 4 MiB, 262144 partitions x 4 B, sums
    // 1024 x (128 + 128) x 1 B, no tail; plus 256 B header/table, 24 B params and padding.
    EXPECT_EQ(c->size(), 5505344u);
    const double ratio = static_cast<double>(c->size()) / (t.shape.elements() * 2.0);
    EXPECT_LE(ratio, 0.17) << "hack-int2 must be at most 17% of fp16, metadata and sums included";
    auto sizes = HackSectionSizes(*ParseContainer(*c));
    EXPECT_EQ(sizes->codes, 4194304u);
    EXPECT_EQ(sizes->scales, 1048576u);
    EXPECT_EQ(sizes->sums, 262144u);
    EXPECT_EQ(sizes->tail, 0u);
  }
}

TEST(HackTest, DispatchThroughEncodeChunk) {
  const KvTensor t = Synth({2, 100, 2, 32}, DType::kBFloat16);
  EncodeOptions o;
  o.codec = CodecId::kHackInt2;
  o.hack = Options(32, HackOrientation::kToken, HackRounding::kStochastic, 5, 3);
  auto c = EncodeChunk(t.view(), o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, *EncodeHack(t.view(), o.hack));
  auto view = ParseContainer(*c);
  EXPECT_EQ(view->header.codec, CodecId::kHackInt2);
  auto d = DecodeChunk(*c);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->data == (*DecodeHack(*view)).data);
  // A container of another codec is not hack-int2's to decode.
  auto raw = ParseContainer(*EncodeChunk(t.view(), EncodeOptions{}));
  EXPECT_EQ(DecodeHack(*raw).status().code(), StatusCode::kInvalidArgument);
}

std::vector<std::byte> SmallContainer() {
  const KvTensor t = Synth({2, 70, 2, 16}, DType::kFloat16);
  return *EncodeHack(t.view(),
                     Options(32, HackOrientation::kChannel, HackRounding::kStochastic, 77, 2));
}

TEST(HackTest, EveryTruncationFails) {
  const std::vector<std::byte> c = SmallContainer();
  for (std::size_t n = 0; n < c.size(); ++n) {
    EXPECT_FALSE(DecodeChunk(std::span(c).first(n)).ok()) << n;
  }
}

TEST(HackTest, ResealedCorruptionNeverCrashesOrPassesSilentlyInCodes) {
  const std::vector<std::byte> c = SmallContainer();
  auto view = ParseContainer(c);
  const std::uint64_t codes_at = view->Find(SectionKind::kCodes)->offset;
  const std::uint64_t codes_len = view->Find(SectionKind::kCodes)->length;
  std::mt19937 rng(1);
  int code_flips = 0, code_errors = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::byte> bad = c;
    // Half the flips land in the codes, the rest anywhere after the section table.
    const bool in_codes = trial % 2 == 1;
    const std::size_t lo = in_codes ? codes_at : kContainerHeaderBytes + 5 * kSectionEntryBytes;
    const std::size_t span = in_codes ? codes_len : bad.size() - lo;
    const std::size_t at = lo + rng() % span;
    bad[at] ^= static_cast<std::byte>(1u + rng() % 255u);
    ResealAll(bad);
    auto d = DecodeChunk(bad);
    code_flips += in_codes;
    if (!d.ok()) {
      code_errors += in_codes;
      EXPECT_TRUE(d.status().code() == StatusCode::kCorruption ||
                  d.status().code() == StatusCode::kUnimplemented ||
                  d.status().code() == StatusCode::kInvalidArgument ||
                  d.status().code() == StatusCode::kOutOfRange)
          << d.status().ToString();
    }
  }
  // A flipped code byte changes its codes' sum unless the changes cancel within one sum (88%
  // of flips are caught here).
  EXPECT_GT(code_errors, code_flips * 4 / 5) << "the stored sums must catch most code flips";
}

TEST(HackTest, StructuralErrorsAreNamed) {
  const std::vector<std::byte> c = SmallContainer();
  auto view = ParseContainer(c);
  auto patch = [&](SectionKind kind, std::size_t at, std::uint8_t value) {
    std::vector<std::byte> bad = c;
    bad[view->Find(kind)->offset + at] = std::byte{value};
    ResealAll(bad);
    return DecodeChunk(bad).status();
  };
  auto has = [](const Status& s, const char* what) {
    return s.message().find(what) != std::string::npos;
  };
  EXPECT_EQ(patch(SectionKind::kParams, 0, 2).code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(has(patch(SectionKind::kParams, 1, 48), "'partition' = 48"));
  EXPECT_TRUE(has(patch(SectionKind::kParams, 2, 2), "'orientation' = 2"));
  EXPECT_TRUE(has(patch(SectionKind::kParams, 3, 2), "'rounding' = 2"));
  EXPECT_TRUE(has(patch(SectionKind::kParams, 4, 2), "'sum_bytes' = 2"));
  EXPECT_TRUE(has(patch(SectionKind::kParams, 6, 1), "'reserved8'"));
  EXPECT_TRUE(has(patch(SectionKind::kParams, 13, 1), "'reserved32'"));
  EXPECT_TRUE(has(patch(SectionKind::kParams, 8, 71), "'sinks' = 71 exceeds tokens = 70"));
  // Partition 64 instead of 32: the section sizes no longer match.
  EXPECT_TRUE(has(patch(SectionKind::kParams, 1, 64), "section is"));
  {
    std::vector<std::byte> bad = c;
    bad[view->Find(SectionKind::kParams)->offset + 3] = std::byte{0};  // nearest, seed 77
    ResealAll(bad);
    EXPECT_TRUE(has(DecodeChunk(bad).status(), "'seed' is not zero with round-to-nearest"));
  }
  EXPECT_TRUE(has(patch(SectionKind::kScales, 1, 0xbc), "scales entry 0"));  // scale < 0
  EXPECT_TRUE(has(patch(SectionKind::kScales, 1, 0x7c), "scales entry 0"));  // scale = inf
  EXPECT_TRUE(has(patch(SectionKind::kScales, 1, 0x7b), "scales entry 0"));  // min + 3 s huge
  EXPECT_TRUE(has(patch(SectionKind::kSums, 0, 0xff), "sum 0 of layer 0 K head 0 block 0"));
  EXPECT_TRUE(has(patch(SectionKind::kTail, 1, 0x7e), "tail value at [0, 0, 0, 0, 0]"));
  EXPECT_TRUE(has(patch(SectionKind::kTail, 1, 0x7c), "tail value at [0, 0, 0, 0, 0]"));
  // A zero-scale partition holding a non-zero code.
  {
    const KvTensor zeros = KvTensor::Zeros(DType::kFloat16, {1, 64, 1, 8});
    std::vector<std::byte> z = *EncodeHack(zeros.view(), Options(64, HackOrientation::kChannel));
    auto zv = ParseContainer(z);
    z[zv->Find(SectionKind::kCodes)->offset] = std::byte{1};
    ResealAll(z);
    EXPECT_TRUE(has(DecodeChunk(z).status(), "has scale 0 but a non-zero code"));
  }
  // A missing or unexpected section.
  {
    std::vector<std::byte> bad = c;
    StoreLE<std::uint32_t>(bad.data() + kContainerHeaderBytes + 4 * kSectionEntryBytes,
                           static_cast<std::uint32_t>(SectionKind::kIndex));
    ResealAll(bad);
    const Status s = DecodeChunk(bad).status();
    EXPECT_EQ(s.code(), StatusCode::kCorruption);
    EXPECT_TRUE(has(s, "unexpected index section")) << s.message();
    StoreLE<std::uint32_t>(bad.data() + kContainerHeaderBytes + 4 * kSectionEntryBytes,
                           static_cast<std::uint32_t>(SectionKind::kCodes));
    ResealAll(bad);
    EXPECT_TRUE(has(DecodeChunk(bad).status(), "more than one codes section"));
  }
}

// InspectHack makes every check of UnpackHack but the codes' (zero-scale codes, sums), with the
// same statuses; its scale check takes a fast path on small values that must agree at the edges.
TEST(HackTest, InspectHackAgreesWithUnpackHackOnAllButTheCodes) {
  const std::vector<std::byte> c = SmallContainer();
  const ContainerView view = *ParseContainer(c);
  const HackStructure st = *InspectHack(view);
  EXPECT_EQ(st.codes.offset, view.Find(SectionKind::kCodes)->offset);
  EXPECT_EQ(st.scales.length, view.Find(SectionKind::kScales)->length);
  EXPECT_EQ(st.layout.partitions() * 4, st.scales.length);
  auto both = [&](SectionKind kind, std::size_t at, std::vector<std::uint8_t> bytes) {
    std::vector<std::byte> bad = c;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      bad[view.Find(kind)->offset + at + i] = std::byte{bytes[i]};
    }
    ResealAll(bad);
    const ContainerView v = *ParseContainer(bad);
    return std::make_pair(InspectHack(v).status(), UnpackHack(v).status());
  };
  struct Case {
    SectionKind kind;
    std::size_t at;
    std::vector<std::uint8_t> bytes;  // little-endian
    bool ok;
  };
  const Case cases[] = {
      {SectionKind::kParams, 1, {48}, false},
      {SectionKind::kScales, 0, {0xff, 0x6f, 0xff, 0xef}, true},   // scale 8188, min -8188
      {SectionKind::kScales, 0, {0x00, 0x70, 0xff, 0x6f}, true},   // scale 8192, min 8188
      {SectionKind::kScales, 0, {0x00, 0x7a, 0x00, 0x00}, false},  // 3 * 49152 >= 65520
      {SectionKind::kScales, 0, {0x00, 0x74, 0x00, 0x7b}, false},  // min 57344 + 3 * 16384
      {SectionKind::kScales, 0, {0x00, 0x74, 0x00, 0xfb}, true},   // min -57344 + 3 * 16384
      {SectionKind::kScales, 0, {0x00, 0x3c, 0x00, 0x7e}, false},  // min NaN
      {SectionKind::kScales, 4, {0x00, 0xbc}, false},              // entry 1: scale -1
      {SectionKind::kScales, 4, {0x00, 0x7c}, false},              // entry 1: scale inf
      {SectionKind::kTail, 1, {0x7e}, false},
  };
  for (const Case& k : cases) {
    const auto [inspect, unpack] = both(k.kind, k.at, k.bytes);
    EXPECT_EQ(inspect.ok(), k.ok) << inspect.ToString();
    EXPECT_EQ(inspect.code(), unpack.code()) << unpack.ToString();
    EXPECT_EQ(inspect.message(), unpack.message());
  }
  // The sums are not InspectHack's business.
  const auto [inspect, unpack] = both(SectionKind::kSums, 0, {0xff});
  EXPECT_TRUE(inspect.ok());
  EXPECT_EQ(unpack.code(), StatusCode::kCorruption);
}

// InspectHackExceptScales makes InspectHack's checks but the scales' values (cuda/leased.h checks
// those on the device and reports them with HackScalesEntryError, InspectHack's own words).
TEST(HackTest, InspectHackExceptScalesLeavesOnlyTheScalesValues) {
  std::vector<std::byte> c = SmallContainer();
  const ContainerView good = *ParseContainer(c);
  const HackStructure all = *InspectHack(good);
  const HackStructure except = *InspectHackExceptScales(good);
  EXPECT_EQ(except.scales.offset, all.scales.offset);
  EXPECT_EQ(except.scales.length, all.scales.length);
  EXPECT_EQ(except.codes.offset, all.codes.offset);
  EXPECT_EQ(except.tail.length, all.tail.length);

  // Entry 1's scale is -1: InspectHack names it, InspectHackExceptScales does not look.
  const std::size_t at = good.Find(SectionKind::kScales)->offset + 4;
  c[at] = std::byte{0x00};
  c[at + 1] = std::byte{0xbc};
  ResealAll(c);
  const ContainerView bad = *ParseContainer(c);
  EXPECT_TRUE(InspectHackExceptScales(bad).ok());
  const Status inspect = InspectHack(bad).status();
  EXPECT_EQ(inspect.code(), StatusCode::kCorruption);
  EXPECT_EQ(inspect.message(), HackScalesEntryError(1).message());

  // Everything else is still checked: a params field, a non-finite unquantized value.
  for (const auto& [kind, offset, value] :
       {std::tuple{SectionKind::kParams, std::size_t{1}, std::uint8_t{48}},
        std::tuple{SectionKind::kTail, std::size_t{1}, std::uint8_t{0x7e}}}) {
    std::vector<std::byte> b = SmallContainer();
    b[good.Find(kind)->offset + offset] = std::byte{value};
    ResealAll(b);
    const ContainerView v = *ParseContainer(b);
    EXPECT_EQ(InspectHackExceptScales(v).status().code(), StatusCode::kCorruption);
    EXPECT_EQ(InspectHackExceptScales(v).status().message(), InspectHack(v).status().message());
  }
}

TEST(HackTest, TokensWithinOnePartitionShareItsScale) {
  // Channel orientation: one quantizer per (channel, block); token orientation: per (token, dim
  // group). Checked through the stored scales' count and a tensor whose channels differ in scale.
  KvTensor t = KvTensor::Zeros(DType::kFloat32, {1, 64, 1, 64});
  for (std::uint32_t kv = 0; kv < 2; ++kv) {
    for (std::uint32_t tok = 0; tok < 64; ++tok) {
      for (std::uint32_t d = 0; d < 64; ++d) {
        const float v = static_cast<float>((tok * 7 + d * 3) % 11) * static_cast<float>(d + 1);
        StoreLE<float>(t.data.data() + 4 * ((kv * 64 + tok) * 64 + d), v);
      }
    }
  }
  const HackChunk ch = *QuantizeHack(t.view(), Options(64, HackOrientation::kChannel));
  const HackChunk tk = *QuantizeHack(t.view(), Options(64, HackOrientation::kToken));
  ASSERT_EQ(ch.quants.size(), 128u);
  ASSERT_EQ(tk.quants.size(), 128u);
  // Channel d of K spans [0, 10 (d + 1)]: its scale grows with d.
  EXPECT_LT(ch.quants[1].scale, ch.quants[63].scale);
  // Every token of K spans the same magnitudes: similar scales.
  EXPECT_NEAR(tk.quants[1].scale, tk.quants[63].scale, tk.quants[1].scale * 0.2);
}

}  // namespace
}  // namespace kvdepot
