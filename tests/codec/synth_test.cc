#include "kvdepot/codec/synth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "kvdepot/codec/tensor.h"

namespace kvdepot {
namespace {

KvTensor Synth(const KvShape& shape, std::uint64_t seed, DType dtype = DType::kFloat32) {
  Result<KvTensor> r = SynthesizeKv({shape, seed, dtype});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : KvTensor{};
}

// Element (layer, kv, token, head, channel) of a C-order KV tensor as double.
double At(const KvTensor& t, std::uint32_t layer, std::uint32_t kv, std::uint32_t token,
          std::uint32_t head, std::uint32_t channel) {
  const KvShape& s = t.shape;
  const std::uint64_t i =
      (((std::uint64_t{layer} * 2 + kv) * s.tokens + token) * s.kv_heads + head) * s.head_dim +
      channel;
  return ElementAsFloat(t.view(), i);
}

// Per-channel statistics over tokens for K (kv 0) or V (kv 1), one entry per (layer, head,
// channel).
struct ChannelStats {
  std::vector<double> mean, stddev, rms, lag1, kurtosis;
};

ChannelStats Channels(const KvTensor& t, std::uint32_t kv) {
  const KvShape& s = t.shape;
  ChannelStats out;
  std::vector<double> x(s.tokens);
  for (std::uint32_t l = 0; l < s.layers; ++l) {
    for (std::uint32_t h = 0; h < s.kv_heads; ++h) {
      for (std::uint32_t c = 0; c < s.head_dim; ++c) {
        double sum = 0, sum_sq = 0;
        for (std::uint32_t tok = 0; tok < s.tokens; ++tok) {
          x[tok] = At(t, l, kv, tok, h, c);
          sum += x[tok];
          sum_sq += x[tok] * x[tok];
        }
        const double n = s.tokens;
        const double mean = sum / n;
        double var = 0, cov1 = 0, m4 = 0;
        for (std::uint32_t tok = 0; tok < s.tokens; ++tok) {
          const double d = x[tok] - mean;
          var += d * d;
          m4 += d * d * d * d;
          if (tok > 0) cov1 += d * (x[tok - 1] - mean);
        }
        out.mean.push_back(mean);
        out.stddev.push_back(std::sqrt(var / n));
        out.rms.push_back(std::sqrt(sum_sq / n));
        out.lag1.push_back(var > 0 ? cov1 / var : 0.0);
        out.kurtosis.push_back(var > 0 ? (m4 / n) / ((var / n) * (var / n)) : 0.0);
      }
    }
  }
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x;
  return s / static_cast<double>(v.size());
}

void ExpectAllFiniteAndBounded(const KvTensor& t) {
  const std::uint64_t n = t.shape.elements();
  for (std::uint64_t i = 0; i < n; ++i) {
    const float f = ElementAsFloat(t.view(), i);
    ASSERT_TRUE(std::isfinite(f)) << "element " << i;
    ASSERT_LT(std::fabs(f), 100.0f) << "element " << i;
  }
}

TEST(SynthTest, DeterministicForEachDtype) {
  const KvShape shape{2, 64, 3, 16};
  for (const DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    const KvTensor a = Synth(shape, 7, dtype);
    const KvTensor b = Synth(shape, 7, dtype);
    EXPECT_EQ(a.dtype, dtype);
    EXPECT_EQ(a.shape, shape);
    ASSERT_EQ(a.data.size(), shape.elements() * DTypeSize(dtype));
    EXPECT_EQ(a.data, b.data);
    ExpectAllFiniteAndBounded(a);
  }
}

TEST(SynthTest, DifferentSeedsDiffer) {
  const KvShape shape{1, 8, 1, 4};
  const KvTensor a = Synth(shape, 1);
  const KvTensor b = Synth(shape, 2);
  const KvTensor c = Synth(shape, 0);
  EXPECT_NE(a.data, b.data);
  EXPECT_NE(a.data, c.data);
  // No element should coincide by accident beyond chance.
  int equal = 0;
  for (std::uint64_t i = 0; i < shape.elements(); ++i) {
    equal += ElementAsFloat(a.view(), i) == ElementAsFloat(b.view(), i);
  }
  EXPECT_LT(equal, 2);
}

// The 16-bit outputs are the fp32 output rounded with numeric.h (ConvertDType).
TEST(SynthTest, HalfDtypesAreRoundedFloat) {
  const KvShape shape{2, 33, 2, 10};
  const KvTensor f32 = Synth(shape, 3, DType::kFloat32);
  for (const DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    Result<KvTensor> converted = ConvertDType(f32.view(), dtype);
    ASSERT_TRUE(converted.ok()) << converted.status().ToString();
    EXPECT_EQ(Synth(shape, 3, dtype).data, converted->data);
  }
}

// Each (layer, head) block has its own stream drawn token by token: a smaller shape is the leading
// sub-tensor of a larger one with the same head_dim.
TEST(SynthTest, SmallerShapeIsLeadingSubTensor) {
  const KvShape small{2, 20, 2, 12};
  const KvShape large{3, 50, 5, 12};
  const KvTensor a = Synth(small, 11);
  const KvTensor b = Synth(large, 11);
  for (std::uint32_t l = 0; l < small.layers; ++l) {
    for (std::uint32_t kv = 0; kv < 2; ++kv) {
      for (std::uint32_t t = 0; t < small.tokens; ++t) {
        for (std::uint32_t h = 0; h < small.kv_heads; ++h) {
          for (std::uint32_t c = 0; c < small.head_dim; ++c) {
            ASSERT_EQ(At(a, l, kv, t, h, c), At(b, l, kv, t, h, c))
                << l << " " << kv << " " << t << " " << h << " " << c;
          }
        }
      }
    }
  }
}

TEST(SynthTest, AwkwardShapes) {
  const KvShape shapes[] = {
      {1, 1, 1, 1},    // everything 1: no RoPE pair
      {2, 1, 4, 16},   // one token
      {3, 17, 2, 1},   // head_dim 1
      {2, 9, 3, 3},    // odd head_dim: one pair, last channel unrotated
      {1, 40, 1, 7},   // one head, odd head_dim
      {1, 5, 1, 2},    // one pair
      {4, 3, 1, 129},  // odd, above the 32-per-outlier step
  };
  for (const KvShape& shape : shapes) {
    SCOPED_TRACE(shape.ToString());
    for (const DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
      const KvTensor t = Synth(shape, 5, dtype);
      ASSERT_EQ(t.data.size(), shape.elements() * DTypeSize(dtype));
      ExpectAllFiniteAndBounded(t);
    }
    EXPECT_EQ(Synth(shape, 5).data, Synth(shape, 5).data);
  }
}

TEST(SynthTest, RejectsInvalidShapesAndDtypes) {
  struct Case {
    KvShape shape;
    DType dtype;
    StatusCode code;
    const char* names;
  };
  const Case cases[] = {
      {{0, 4, 1, 8}, DType::kFloat16, StatusCode::kOutOfRange, "layers"},
      {{1, 0, 1, 8}, DType::kFloat16, StatusCode::kOutOfRange, "tokens"},
      {{1, 4, 0, 8}, DType::kFloat16, StatusCode::kOutOfRange, "kv_heads"},
      {{1, 4, 1, 0}, DType::kFloat16, StatusCode::kOutOfRange, "head_dim"},
      {{1, 4, 1, kMaxHeadDim + 1}, DType::kFloat16, StatusCode::kOutOfRange, "head_dim"},
      {{1, kMaxTokens + 1, 1, 8}, DType::kFloat16, StatusCode::kOutOfRange, "tokens"},
      {{1024, 65536, 8, 128}, DType::kFloat32, StatusCode::kOutOfRange, "bytes"},
      {{1, 4, 1, 8}, static_cast<DType>(9), StatusCode::kInvalidArgument, "dtype"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shape.ToString());
    const Result<KvTensor> r = SynthesizeKv({c.shape, 1, c.dtype});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code);
    EXPECT_EQ(r.status().message().rfind("synth: ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(c.names), std::string::npos) << r.status().message();
  }
}

// The structure the model promises (docs/synth.md), with tolerances wide enough for any seed.
class SynthStatsTest : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(SynthStatsTest, KHasOutlierChannelsAndVDoesNot) {
  const KvTensor t = Synth({4, 256, 8, 64}, GetParam());
  const ChannelStats k = Channels(t, 0);
  const ChannelStats v = Channels(t, 1);
  const double k_ratio = *std::max_element(k.rms.begin(), k.rms.end()) / Median(k.rms);
  const double v_ratio = *std::max_element(v.rms.begin(), v.rms.end()) / Median(v.rms);
  EXPECT_GT(k_ratio, 2.5);
  EXPECT_LT(v_ratio, 2.5);
  EXPECT_GT(k_ratio, v_ratio + 0.5);
}

TEST_P(SynthStatsTest, KIsSmootherAcrossTokensThanV) {
  const KvTensor t = Synth({3, 512, 4, 32}, GetParam());
  const double k_lag1 = Mean(Channels(t, 0).lag1);
  const double v_lag1 = Mean(Channels(t, 1).lag1);
  EXPECT_GT(k_lag1, 0.2);
  EXPECT_LT(std::fabs(v_lag1 - 0.06), 0.05);
  EXPECT_GT(k_lag1, v_lag1 + 0.1);
}

TEST_P(SynthStatsTest, VIsCenteredAndNearGaussian) {
  const KvTensor t = Synth({3, 512, 4, 32}, GetParam());
  const ChannelStats v = Channels(t, 1);
  double sum = 0, sum_sq = 0;
  for (std::size_t i = 0; i < v.mean.size(); ++i) {
    sum += v.mean[i];
    sum_sq += v.stddev[i] * v.stddev[i] + v.mean[i] * v.mean[i];
  }
  const double n = static_cast<double>(v.mean.size());
  const double mean = sum / n;
  const double stddev = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_LT(std::fabs(mean), 0.1 * stddev);
  EXPECT_NEAR(Median(v.kurtosis), 3.0, 0.3);
}

// RoPE rotates pair 0 (channels 0 and head_dim / 2) by 1 radian per token, so the strong K biases
// of deeper layers show up in channel 0 as a line at 1 rad/token in the spectrum.
TEST_P(SynthStatsTest, KChannelZeroOscillatesAtTheRopeFrequency) {
  const KvTensor t = Synth({2, 512, 8, 16}, GetParam());
  const auto power = [&](double w) {
    double total = 0;
    for (std::uint32_t h = 0; h < t.shape.kv_heads; ++h) {
      double re = 0, im = 0;
      for (std::uint32_t tok = 0; tok < t.shape.tokens; ++tok) {
        const double x = At(t, 1, 0, tok, h, 0);
        re += x * std::cos(w * tok);
        im -= x * std::sin(w * tok);
      }
      total += re * re + im * im;
    }
    return total;
  };
  const double at_rope = power(1.0);
  EXPECT_GT(at_rope, 20 * power(2.0));
  EXPECT_GT(at_rope, 20 * power(0.5));
  EXPECT_GT(at_rope, 20 * power(std::numbers::pi));
}

INSTANTIATE_TEST_SUITE_P(SynthSeeds, SynthStatsTest, ::testing::Values(0u, 1u, 2u, 12345u));

}  // namespace
}  // namespace kvdepot
