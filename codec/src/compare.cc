#include "kvdepot/codec/compare.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace kvdepot {
namespace {

// Neumaier's compensated sum: the error of adding n terms stays O(eps), not O(n eps).
class CompensatedSum {
 public:
  void Add(double x) {
    const double t = sum_ + x;
    if (std::fabs(sum_) >= std::fabs(x)) {
      compensation_ += (sum_ - t) + x;
    } else {
      compensation_ += (x - t) + sum_;
    }
    sum_ = t;
  }
  double Value() const { return sum_ + compensation_; }

 private:
  double sum_ = 0.0;
  double compensation_ = 0.0;
};

// True when two values of which at least one is not finite count as equal.
bool NonFiniteEqual(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  return x == y;  // infinities of the same sign
}

}  // namespace

Result<CompareStats> CompareTensors(const KvTensorView& a, const KvTensorView& b) {
  if (!(a.shape == b.shape)) {
    return InvalidArgument("compare: shapes differ: a is " + a.shape.ToString() + ", b is " +
                           b.shape.ToString());
  }
  KVD_RETURN_IF_ERROR(a.Validate().WithContext("compare: a"));
  KVD_RETURN_IF_ERROR(b.Validate().WithContext("compare: b"));

  CompareStats stats;
  stats.elements = a.shape.elements();
  stats.bit_exact = a.dtype == b.dtype && a.data.size() == b.data.size() &&
                    std::memcmp(a.data.data(), b.data.data(), a.data.size()) == 0;

  CompensatedSum sum_abs;
  CompensatedSum sum_ref_sq;
  CompensatedSum sum_err_sq;
  std::uint64_t finite_pairs = 0;
  for (std::uint64_t i = 0; i < stats.elements; ++i) {
    const double x = ElementAsFloat(a, i);
    const double y = ElementAsFloat(b, i);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      if (!NonFiniteEqual(x, y)) ++stats.nonfinite_mismatches;
      continue;
    }
    const double d = y - x;
    const double ad = std::fabs(d);
    if (ad > stats.max_abs) stats.max_abs = ad;
    sum_abs.Add(ad);
    sum_ref_sq.Add(x * x);
    sum_err_sq.Add(d * d);
    ++finite_pairs;
  }

  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double ref_sq = sum_ref_sq.Value();
  const double err_sq = sum_err_sq.Value();
  stats.mean_abs = finite_pairs == 0 ? 0.0 : sum_abs.Value() / static_cast<double>(finite_pairs);
  if (err_sq == 0.0) {
    stats.rel_l2 = 0.0;
    stats.snr_db = kInf;
  } else if (ref_sq == 0.0) {
    stats.rel_l2 = kInf;
    stats.snr_db = -kInf;
  } else {
    stats.rel_l2 = std::sqrt(err_sq / ref_sq);
    stats.snr_db = 10.0 * std::log10(ref_sq / err_sq);
  }
  return stats;
}

}  // namespace kvdepot
