#include "kvdepot/codec/compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// An fp32 tensor of shape [1, 2, n / 2, 1, 1] holding exactly `values` (n even).
KvTensor Fp32(const std::vector<float>& values) {
  const KvShape shape{1, static_cast<std::uint32_t>(values.size() / 2), 1, 1};
  KvTensor t = KvTensor::Zeros(DType::kFloat32, shape);
  std::memcpy(t.data.data(), values.data(), values.size() * sizeof(float));
  return t;
}

// The same for fp16 bit patterns.
KvTensor Fp16(const std::vector<std::uint16_t>& bits) {
  const KvShape shape{1, static_cast<std::uint32_t>(bits.size() / 2), 1, 1};
  KvTensor t = KvTensor::Zeros(DType::kFloat16, shape);
  std::memcpy(t.data.data(), bits.data(), bits.size() * 2);
  return t;
}

CompareStats Compare(const KvTensor& a, const KvTensor& b) {
  Result<CompareStats> r = CompareTensors(a.view(), b.view());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r.value() : CompareStats{};
}

TEST(CompareTest, IdenticalTensors) {
  for (const DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    Result<KvTensor> t = SynthesizeKv({{2, 32, 2, 8}, 3, dtype});
    ASSERT_TRUE(t.ok());
    const CompareStats s = Compare(*t, *t);
    EXPECT_EQ(s.elements, 2u * 2 * 32 * 2 * 8);
    EXPECT_TRUE(s.bit_exact);
    EXPECT_EQ(s.max_abs, 0.0);
    EXPECT_EQ(s.mean_abs, 0.0);
    EXPECT_EQ(s.rel_l2, 0.0);
    EXPECT_EQ(s.snr_db, kInf);
    EXPECT_EQ(s.nonfinite_mismatches, 0u);
  }
}

TEST(CompareTest, KnownPerturbation) {
  const KvTensor a = Fp32({1, 2, 3, 4, 5, 6, 7, 8});  // sum a^2 = 204
  const KvTensor b = Fp32({1.5f, 2, 3, 3.75f, 5, 6, 7, 8});
  const CompareStats s = Compare(a, b);
  EXPECT_EQ(s.elements, 8u);
  EXPECT_FALSE(s.bit_exact);
  EXPECT_EQ(s.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(s.mean_abs, 0.75 / 8);
  EXPECT_DOUBLE_EQ(s.rel_l2, std::sqrt(0.3125 / 204));
  EXPECT_DOUBLE_EQ(s.snr_db, 10 * std::log10(204 / 0.3125));
  EXPECT_EQ(s.nonfinite_mismatches, 0u);
}

// a is the reference: swapping the arguments changes rel_l2 and snr_db.
TEST(CompareTest, ReferenceIsTheFirstArgument) {
  const KvTensor a = Fp32({1, 1, 1, 1});
  const KvTensor b = Fp32({2, 2, 2, 2});
  EXPECT_DOUBLE_EQ(Compare(a, b).rel_l2, 1.0);
  EXPECT_DOUBLE_EQ(Compare(b, a).rel_l2, 0.5);
  EXPECT_DOUBLE_EQ(Compare(a, b).snr_db, 0.0);
}

TEST(CompareTest, ZeroReference) {
  const KvTensor zero = Fp32({0, 0, 0, 0});
  const CompareStats both = Compare(zero, zero);
  EXPECT_TRUE(both.bit_exact);
  EXPECT_EQ(both.rel_l2, 0.0);
  EXPECT_EQ(both.snr_db, kInf);

  const CompareStats nonzero = Compare(zero, Fp32({0, 0, 0.25f, 0}));
  EXPECT_EQ(nonzero.rel_l2, kInf);
  EXPECT_EQ(nonzero.snr_db, -kInf);
  EXPECT_EQ(nonzero.max_abs, 0.25);

  // -0 and +0 are equal values but not equal bytes.
  const CompareStats signed_zero = Compare(zero, Fp32({-0.0f, 0, 0, 0}));
  EXPECT_FALSE(signed_zero.bit_exact);
  EXPECT_EQ(signed_zero.rel_l2, 0.0);
  EXPECT_EQ(signed_zero.snr_db, kInf);
}

TEST(CompareTest, NonFiniteValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float neg_nan = -std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Positions: NaN/NaN (equal), +Inf/+Inf (equal), -Inf/+Inf, 1/NaN, NaN/1, 2/Inf, then finite.
  const KvTensor a = Fp32({nan, inf, -inf, 1, nan, 2, 3, 4});
  const KvTensor b = Fp32({neg_nan, inf, inf, nan, 1, inf, 3.5f, 4});
  const CompareStats s = Compare(a, b);
  EXPECT_EQ(s.elements, 8u);
  EXPECT_EQ(s.nonfinite_mismatches, 4u);
  EXPECT_FALSE(s.bit_exact);
  // Only the last two positions enter the sums.
  EXPECT_EQ(s.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(s.mean_abs, 0.25);
  EXPECT_DOUBLE_EQ(s.rel_l2, 0.5 / 5);
  EXPECT_DOUBLE_EQ(s.snr_db, 10 * std::log10(25 / 0.25));

  // fp16 NaNs with different payloads are equal values, different bytes.
  const KvTensor h1 = Fp16({0x7e00, 0x3c00});
  const KvTensor h2 = Fp16({0x7e01, 0x3c00});
  const CompareStats hs = Compare(h1, h2);
  EXPECT_EQ(hs.nonfinite_mismatches, 0u);
  EXPECT_FALSE(hs.bit_exact);
  EXPECT_EQ(hs.rel_l2, 0.0);
  EXPECT_EQ(hs.snr_db, kInf);

  // No finite pair at all: the sums are empty.
  const CompareStats none = Compare(Fp32({nan, inf}), Fp32({1, 1}));
  EXPECT_EQ(none.nonfinite_mismatches, 2u);
  EXPECT_EQ(none.max_abs, 0.0);
  EXPECT_EQ(none.mean_abs, 0.0);
  EXPECT_EQ(none.rel_l2, 0.0);
}

TEST(CompareTest, DifferentDtypesSameValues) {
  Result<KvTensor> h = SynthesizeKv({{2, 16, 2, 8}, 9, DType::kFloat16});
  ASSERT_TRUE(h.ok());
  for (const DType to : {DType::kFloat32, DType::kFloat16}) {
    Result<KvTensor> f = ConvertDType(h->view(), to);
    ASSERT_TRUE(f.ok());
    const CompareStats s = Compare(*h, *f);
    EXPECT_EQ(s.bit_exact, to == DType::kFloat16);
    EXPECT_EQ(s.rel_l2, 0.0);
    EXPECT_EQ(s.max_abs, 0.0);
    EXPECT_EQ(s.snr_db, kInf);
  }
  // fp32 -> bf16 rounds: small but nonzero error, bounded by bf16's relative precision 2^-8.
  Result<KvTensor> f32 = SynthesizeKv({{2, 16, 2, 8}, 9, DType::kFloat32});
  ASSERT_TRUE(f32.ok());
  Result<KvTensor> bf = ConvertDType(f32->view(), DType::kBFloat16);
  ASSERT_TRUE(bf.ok());
  const CompareStats s = Compare(*f32, *bf);
  EXPECT_FALSE(s.bit_exact);
  EXPECT_GT(s.rel_l2, 0.0);
  EXPECT_LT(s.rel_l2, std::ldexp(1.0, -8));
  EXPECT_GT(s.snr_db, 48.0);
}

TEST(CompareTest, ShapeMismatchNamesBothShapes) {
  const KvTensor a = KvTensor::Zeros(DType::kFloat16, {1, 4, 2, 8});
  const KvTensor b = KvTensor::Zeros(DType::kFloat16, {1, 4, 2, 16});
  const Result<CompareStats> r = CompareTensors(a.view(), b.view());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("[1, 2, 4, 2, 8]"), std::string::npos) << m;
  EXPECT_NE(m.find("[1, 2, 4, 2, 16]"), std::string::npos) << m;
}

TEST(CompareTest, InvalidViewIsAnError) {
  const KvTensor a = KvTensor::Zeros(DType::kFloat16, {1, 4, 2, 8});
  KvTensorView b = a.view();
  b.data = b.data.first(b.data.size() - 2);
  const Result<CompareStats> r = CompareTensors(a.view(), b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind("compare: b: ", 0), 0u) << r.status().message();
}

// Millions of terms whose squares carry 48 significant bits: naive double summation drifts by
// about 1e-11 relative here, far beyond the tolerance.
TEST(CompareTest, LargeTensorSumsAreAccurate) {
  const KvShape shape{8, 1024, 8, 32};  // 4 Mi elements
  const float xs[3] = {0.1f, 0.7f, 1.3f};
  const float ys[3] = {0.15f, 0.6f, 1.35f};
  KvTensor a = KvTensor::Zeros(DType::kFloat32, shape);
  KvTensor b = KvTensor::Zeros(DType::kFloat32, shape);
  const std::uint64_t n = shape.elements();
  for (std::uint64_t i = 0; i < n; ++i) {
    std::memcpy(a.data.data() + i * 4, &xs[i % 3], 4);
    std::memcpy(b.data.data() + i * 4, &ys[i % 3], 4);
  }
  double ref_sq = 0, err_sq = 0, abs_sum = 0;
  for (std::uint64_t j = 0; j < 3; ++j) {
    const double count = static_cast<double>((n - j + 2) / 3);
    const double x = xs[j];
    const double d = static_cast<double>(ys[j]) - x;
    ref_sq += count * x * x;
    err_sq += count * d * d;
    abs_sum += count * std::fabs(d);
  }
  const CompareStats s = Compare(a, b);
  EXPECT_EQ(s.elements, n);
  const double mean_abs = abs_sum / static_cast<double>(n);
  const double rel_l2 = std::sqrt(err_sq / ref_sq);
  EXPECT_NEAR(s.mean_abs, mean_abs, 1e-14 * mean_abs);
  EXPECT_NEAR(s.rel_l2, rel_l2, 1e-14 * rel_l2);
  EXPECT_NEAR(s.snr_db, 10 * std::log10(ref_sq / err_sq), 1e-12);
}

}  // namespace
}  // namespace kvdepot
