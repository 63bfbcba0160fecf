// Comparison statistics between a reference KV tensor and another (e.g. a decoded one), used by
// codec tests, benchmarks and the lossy-codec quality reports.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {

// Statistics of b against the reference a. Sums run over the "finite pairs": positions where both
// a and b are finite. A position where a or b is NaN or infinite is counted in
// nonfinite_mismatches unless the two are equal there (NaN and NaN of any payload and sign count
// as equal; +Inf equals only +Inf), and is excluded from the sums either way.
struct CompareStats {
  std::uint64_t elements = 0;  // all positions (shape.elements())
  double max_abs = 0;          // max |a - b| over finite pairs; 0 when there are none
  double mean_abs = 0;         // mean |a - b| over finite pairs; 0 when there are none
  // ||a - b||_2 / ||a||_2: 0 when both norms are 0; +inf when only ||a - b||_2 is nonzero.
  double rel_l2 = 0;
  // 10 log10(sum a^2 / sum (a - b)^2): +inf when sum (a - b)^2 is 0 (identical finite values);
  // -inf when a is all zero and b is not.
  double snr_db = 0;
  bool bit_exact = false;  // same dtype and identical bytes (so -0 vs +0 or NaN payloads differ)
  std::uint64_t nonfinite_mismatches = 0;
};

// Compares b against the reference a, element by element, as double (the dtypes may differ:
// fp16 and fp32 holding the same values give rel_l2 0 but bit_exact false). Sums are accumulated
// in double with compensated (Neumaier) summation.
// Errors: kInvalidArgument when the shapes differ (naming both) or a view fails Validate()
// (prefixed with "compare: a" / "compare: b").
Result<CompareStats> CompareTensors(const KvTensorView& a, const KvTensorView& b);

}  // namespace kvdepot
