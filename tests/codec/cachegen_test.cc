#include "kvdepot/codec/cachegen.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kvdepot/codec/cachegen_format.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/compare.h"
#include "kvdepot/codec/synth.h"
#include "test_util.h"

namespace kvdepot {
namespace {

using testing::RandomTensor;
using testing::ResealAll;

KvTensor Synth(const KvShape& shape, DType dtype, std::uint64_t seed = 1) {
  return *SynthesizeKv(SynthOptions{shape, seed, dtype});
}

// Encodes, decodes, and checks decode(encode(x)) == quantize-dequantize(x) byte for byte.
std::vector<std::byte> ExpectRoundTrip(const KvTensor& t, const CacheGenOptions& options = {}) {
  auto c = EncodeCacheGen(t.view(), options);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return {};
  auto again = EncodeCacheGen(t.view(), options);
  EXPECT_EQ(*c, *again) << "encoding must be deterministic";
  auto decoded = DecodeChunk(*c);
  EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
  if (!decoded.ok()) return {};
  auto qd = CacheGenQuantizeDequantize(t.view(), options);
  EXPECT_TRUE(qd.ok());
  EXPECT_EQ(decoded->dtype, t.dtype);
  EXPECT_EQ(decoded->shape, t.shape);
  EXPECT_TRUE(decoded->data == qd->data) << "decode(encode(x)) != quantize-dequantize(x)";
  return *c;
}

class CacheGenShapes : public ::testing::TestWithParam<std::tuple<KvShape, DType>> {};

TEST_P(CacheGenShapes, RoundTripEqualsQuantizeDequantize) {
  const auto [shape, dtype] = GetParam();
  const KvTensor t = Synth(shape, dtype, shape.elements());
  ExpectRoundTrip(t);
  // Error stays within what the bins allow: at 32 bins rel L2 is a few percent on synthetic KV.
  auto d = DecodeChunk(*EncodeCacheGen(t.view()));
  auto st = CompareTensors(t.view(), d->view());
  ASSERT_TRUE(st.ok());
  EXPECT_LT(st->rel_l2, shape.layers >= 10 ? 0.15 : 0.08) << shape.ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Awkward, CacheGenShapes,
    ::testing::Values(std::make_tuple(KvShape{1, 1, 1, 64}, DType::kFloat16),
                      std::make_tuple(KvShape{1, 17, 3, 80}, DType::kFloat16),
                      std::make_tuple(KvShape{5, 255, 3, 64}, DType::kBFloat16),
                      std::make_tuple(KvShape{5, 256, 8, 128}, DType::kFloat16),
                      std::make_tuple(KvShape{2, 256, 1, 80}, DType::kFloat32),
                      std::make_tuple(KvShape{32, 17, 8, 128}, DType::kFloat16),
                      std::make_tuple(KvShape{1, 2, 1, 1}, DType::kFloat32),
                      std::make_tuple(KvShape{3, 300, 2, 7}, DType::kFloat16)));

// The GPU encoder's reciprocal step must equal the division step for every frequency and every
// state the encoder can hold ([2^16, 2^32)): around each renormalisation bound and multiple of
// the frequency, and at random.
TEST(CacheGenTest, ReciprocalEncodeStepEqualsTheDivision) {
  std::mt19937_64 rng(44);
  std::uint64_t checked = 0;
  for (std::uint32_t freq = 1; freq <= cachegen::kProbScale; ++freq) {
    const std::uint64_t rcp = cachegen::RansReciprocal(freq);
    const std::uint32_t cum = static_cast<std::uint32_t>(rng() % (cachegen::kProbScale - freq + 1));
    std::vector<std::uint32_t> xs = {cachegen::kStateLow, 0xffffffffu, 0xfffffffeu};
    const std::uint64_t bound = std::uint64_t{freq} << 20;
    for (std::int64_t d = -2; d <= 2; ++d) {
      const std::int64_t v = static_cast<std::int64_t>(bound) + d;
      if (v >= cachegen::kStateLow && v <= 0xffffffffll)
        xs.push_back(static_cast<std::uint32_t>(v));
    }
    for (int i = 0; i < 24; ++i) {
      const std::uint64_t k = rng() % (bound / freq);  // multiples of freq below the bound, +-1
      for (std::int64_t d = -1; d <= 1; ++d) {
        const std::int64_t v = static_cast<std::int64_t>(k * freq) + d;
        if (v >= cachegen::kStateLow && v <= 0xffffffffll)
          xs.push_back(static_cast<std::uint32_t>(v));
      }
      xs.push_back(static_cast<std::uint32_t>(cachegen::kStateLow +
                                              rng() % (0x100000000ull - cachegen::kStateLow)));
    }
    for (const std::uint32_t x : xs) {
      std::uint32_t a = x, b = x;
      std::uint16_t wa = 0, wb = 0;
      const bool ea = cachegen::RansEncodeStep(&a, freq, cum, &wa);
      const bool eb = cachegen::RansEncodeStepRcp(&b, freq, cum, rcp, &wb);
      ASSERT_EQ(ea, eb) << "freq " << freq << " x " << x;
      ASSERT_EQ(a, b) << "freq " << freq << " x " << x;
      if (ea) {
        ASSERT_EQ(wa, wb);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 4096u * 50);
}

// The GPU encoder's quantizer (reciprocal + one correction) must give Quantize's symbol for
// every finite fp16 input under fp16-derived scales: all 63,488 finite fp16 x against 300 scales
// (random data ranges, and ones whose quotients hit the .5 ties).
TEST(CacheGenTest, ReciprocalQuantizerEqualsTheDivision) {
  std::mt19937 rng(45);
  std::vector<float> xs;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float x = HalfBitsToFloat(static_cast<std::uint16_t>(h));
    if (cachegen::IsFiniteFloat(x)) xs.push_back(x);
  }
  std::uniform_real_distribution<float> mag(-16.0f, 16.0f);
  std::uint64_t differ = 0;
  for (int k = 0; k < 300; ++k) {
    float a = std::ldexp(1.0f, static_cast<int>(mag(rng))) * (rng() % 2 ? 1.0f : -1.0f);
    float b = a + std::ldexp(1.0f, static_cast<int>(mag(rng))) * static_cast<float>(1 + rng() % 9);
    if (k % 3 == 0) {  // a tiny range: quotients land on halves of small steps
      a = HalfBitsToFloat(static_cast<std::uint16_t>(rng() & 0x7bffu));
      b = a + HalfBitsToFloat(static_cast<std::uint16_t>(1 + rng() % 64));
    }
    const std::uint32_t bins = 2 + rng() % 63;
    bool ok = false;
    const cachegen::ChannelScale sc =
        cachegen::ScaleFp16(std::min(a, b), std::max(a, b), bins, &ok);
    if (!ok) continue;
    const float rcp = 1.0f / sc.step;
    for (const float x : xs) {
      differ += cachegen::Quantize(x, sc, bins) != cachegen::QuantizeFp16Scale(x, sc, rcp, bins);
    }
    // Exact ties: lo + (j + 0.5) * step.
    for (std::uint32_t j = 0; j + 1 < bins; ++j) {
      const float x = sc.lo + (static_cast<float>(j) + 0.5f) * sc.step;
      differ += cachegen::Quantize(x, sc, bins) != cachegen::QuantizeFp16Scale(x, sc, rcp, bins);
    }
  }
  EXPECT_EQ(differ, 0u);
}

TEST(CacheGenTest, NormalizeFrequenciesIsTheSameInBothWidths) {
  // Totals just below and at 2^20 take the two paths; frequencies must follow the formula.
  for (const std::uint64_t total : {(1ull << 20) - 1, 1ull << 20, 262144ull, 7ull}) {
    std::uint32_t counts[3] = {static_cast<std::uint32_t>(total / 3),
                               static_cast<std::uint32_t>(total / 5), 0};
    counts[2] = static_cast<std::uint32_t>(total - counts[0] - counts[1]);
    std::uint16_t freq[3];
    cachegen::NormalizeFrequencies(counts, 3, freq);
    std::uint32_t sum = 0;
    for (int s = 0; s < 3; ++s) {
      sum += freq[s];
      const auto want = static_cast<std::uint32_t>(std::uint64_t{counts[s]} * 4096 / total);
      if (s != 2) {
        EXPECT_EQ(freq[s], want == 0 && counts[s] != 0 ? 1u : want) << total;
      }
    }
    EXPECT_EQ(sum, 4096u);
  }
}

TEST(CacheGenTest, SpecialTensors) {
  const KvShape shape{2, 33, 3, 16};
  ExpectRoundTrip(KvTensor::Zeros(DType::kFloat16, shape));
  KvTensor constant = KvTensor::Zeros(DType::kFloat32, shape);
  for (std::uint64_t i = 0; i < shape.elements(); ++i)
    StoreLE<float>(constant.data.data() + i * 4, 3.25f);
  auto c = ExpectRoundTrip(constant);
  EXPECT_TRUE(DecodeChunk(c)->data == constant.data) << "constant channels are exact";
  // Uniform noise over all finite fp16 patterns (the worst case for the entropy coder).
  KvTensor noise = KvTensor::Zeros(DType::kFloat16, shape);
  std::mt19937 rng(9);
  for (std::uint64_t i = 0; i < shape.elements(); ++i) {
    std::uint16_t h;
    do h = static_cast<std::uint16_t>(rng());
    while ((h & 0x7c00u) == 0x7c00u);
    StoreLE<std::uint16_t>(noise.data.data() + i * 2, h);
  }
  ExpectRoundTrip(noise);
  // Outlier-heavy: one channel per head 1000x larger.
  KvTensor outliers = Synth(shape, DType::kFloat32);
  for (std::uint64_t i = 0; i < shape.elements(); i += 16) {
    StoreLE<float>(outliers.data.data() + i * 4,
                   LoadLE<float>(outliers.data.data() + i * 4) * 1000);
  }
  ExpectRoundTrip(outliers);
  // Values beyond the fp16 range force fp32 scales.
  KvTensor big = Synth(shape, DType::kFloat32);
  StoreLE<float>(big.data.data(), 1e9f);
  auto cb = ExpectRoundTrip(big);
  auto view = ParseContainer(cb);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(std::to_integer<int>(view->Find(SectionKind::kParams)->bytes[2]), cachegen::kScaleFp32);
  // A range that overflows float is refused.
  StoreLE<float>(big.data.data() + 4 * 16 * 3, -3e38f);
  StoreLE<float>(big.data.data() + 4 * (16 * 3 * 5), 3e38f);
  (void)EncodeCacheGen(big.view());  // either fp32 scales or a clean error, never UB
}

TEST(CacheGenTest, NonFiniteInputIsRefusedWithItsPosition) {
  KvTensor t = Synth({2, 4, 2, 8}, DType::kFloat32);
  StoreLE<float>(t.data.data() + 4 * 75, std::numeric_limits<float>::quiet_NaN());
  const Status s = EncodeCacheGen(t.view()).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("non-finite value at [0, 1, 0, 1, 3]"), std::string::npos)
      << s.message();
  StoreLE<float>(t.data.data() + 4 * 75, std::numeric_limits<float>::infinity());
  EXPECT_FALSE(EncodeCacheGen(t.view()).ok());
}

TEST(CacheGenTest, BinsProfiles) {
  const CacheGenOptions d32 = CacheGenDefaultProfile(32);
  EXPECT_EQ(d32.k_bins[9], 32);
  EXPECT_EQ(d32.k_bins[10], 16);
  EXPECT_EQ(d32.v_bins[1], 32);
  EXPECT_EQ(d32.v_bins[2], 16);
  const CacheGenOptions d5 = CacheGenDefaultProfile(5);
  EXPECT_EQ(d5.k_bins, std::vector<std::uint8_t>(5, 32));
  EXPECT_EQ(d5.v_bins, std::vector<std::uint8_t>(5, 32));
  EXPECT_EQ(*ParseBinsSpec("8", 3), (std::vector<std::uint8_t>{8, 8, 8}));
  EXPECT_EQ(*ParseBinsSpec("32:1,24:2,16", 5), (std::vector<std::uint8_t>{32, 24, 24, 16, 16}));
  EXPECT_FALSE(ParseBinsSpec("1", 3).ok());
  EXPECT_FALSE(ParseBinsSpec("65", 3).ok());
  EXPECT_FALSE(ParseBinsSpec("32:2", 3).ok());
  EXPECT_FALSE(ParseBinsSpec("32,16", 3).ok());
  EXPECT_FALSE(ParseBinsSpec("32:0,16", 3).ok());
  EXPECT_FALSE(ParseBinsSpec("x", 3).ok());
  const KvTensor t = Synth({3, 20, 2, 8}, DType::kFloat16);
  CacheGenOptions custom{{2, 64, 7}, {3, 5, 33}};
  ExpectRoundTrip(t, custom);
  EXPECT_FALSE(EncodeCacheGen(t.view(), CacheGenOptions{{32, 32}, {32, 32, 32}}).ok());
  EXPECT_FALSE(EncodeCacheGen(t.view(), CacheGenOptions{{1, 32, 32}, {}}).ok());
  // Fewer bins, fewer bytes.
  EXPECT_LT(EncodeCacheGen(t.view(), {{8, 8, 8}, {8, 8, 8}})->size(),
            EncodeCacheGen(t.view(), {{32, 32, 32}, {32, 32, 32}})->size());
}

TEST(CacheGenTest, LlamaShapedChunkMeetsSizeTargets) {
  const KvTensor t = Synth({32, 256, 8, 128}, DType::kFloat16);
  auto c = EncodeCacheGen(t.view());
  ASSERT_TRUE(c.ok());
  auto view = ParseContainer(*c);
  auto sizes = CacheGenSectionSizes(*view);
  ASSERT_TRUE(sizes.ok());
  const double overhead = static_cast<double>(sizes->tables + sizes->scales + sizes->index) /
                          static_cast<double>(sizes->total);
  EXPECT_LE(overhead, 0.05) << "tables + scales + index must be at most 5% of the chunk";
  const double entropy_bytes = *CacheGenSymbolEntropyBits(t.view()) / 8;
  const double payload = static_cast<double>(sizes->codes);
  EXPECT_LE(payload, entropy_bytes * 1.02) << "payload within 2% of the empirical entropy";
  EXPECT_GE(payload, entropy_bytes * 0.99);
}

TEST(CacheGenTest, EveryTruncationFails) {
  const KvTensor t = Synth({2, 9, 2, 16}, DType::kFloat16);
  const std::vector<std::byte> c = *EncodeCacheGen(t.view());
  for (std::size_t n = 0; n < c.size(); ++n) {
    EXPECT_FALSE(DecodeChunk(std::span(c).first(n)).ok()) << n;
  }
}

TEST(CacheGenTest, ResealedCorruptionNeverCrashesOrPassesSilently) {
  const KvTensor t = Synth({2, 40, 2, 16}, DType::kFloat16);
  const std::vector<std::byte> c = *EncodeCacheGen(t.view());
  const KvTensor clean = *DecodeChunk(c);
  auto view = ParseContainer(c);
  const std::uint64_t codes_at = view->Find(SectionKind::kCodes)->offset;
  std::mt19937 rng(1);
  int errors = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::byte> bad = c;
    // Half the flips land in the coded words, the rest anywhere after the section table.
    const std::size_t lo = trial % 2 ? codes_at : kContainerHeaderBytes + 5 * kSectionEntryBytes;
    const std::size_t at = lo + rng() % (bad.size() - lo);
    bad[at] ^= static_cast<std::byte>(1u + rng() % 255u);
    ResealAll(bad);
    auto d = DecodeChunk(bad);
    if (!d.ok()) {
      ++errors;
      EXPECT_TRUE(d.status().code() == StatusCode::kCorruption ||
                  d.status().code() == StatusCode::kUnimplemented ||
                  d.status().code() == StatusCode::kInvalidArgument ||
                  d.status().code() == StatusCode::kOutOfRange)
          << d.status().ToString();
    }
  }
  EXPECT_GT(errors, 1500) << "the decoder's own checks must catch most resealed corruption";
}

TEST(CacheGenTest, StructuralErrorsAreNamed) {
  const KvTensor t = Synth({1, 8, 1, 32}, DType::kFloat16);
  const std::vector<std::byte> c = *EncodeCacheGen(t.view());
  auto view = ParseContainer(c);
  auto patch = [&](SectionKind kind, std::size_t at, std::uint8_t value) {
    std::vector<std::byte> bad = c;
    bad[view->Find(kind)->offset + at] = std::byte{value};
    ResealAll(bad);
    return DecodeChunk(bad).status();
  };
  EXPECT_EQ(patch(SectionKind::kParams, 0, 9).code(), StatusCode::kUnimplemented);
  EXPECT_NE(patch(SectionKind::kParams, 1, 11).message().find("prob_bits"), std::string::npos);
  EXPECT_NE(patch(SectionKind::kParams, 2, 2).message().find("scale_dtype"), std::string::npos);
  EXPECT_NE(patch(SectionKind::kParams, 8, 65).message().find("bins of layer 0 K"),
            std::string::npos);
  EXPECT_NE(patch(SectionKind::kTables, 0, 0xff).message().find("sums to"), std::string::npos);
  EXPECT_NE(patch(SectionKind::kIndex, 3, 0x7f).message().find("index"), std::string::npos);
  EXPECT_NE(patch(SectionKind::kScales, 3, 0xfc).message().find("scale of channel"),
            std::string::npos);  // step = -inf
}

}  // namespace
}  // namespace kvdepot
