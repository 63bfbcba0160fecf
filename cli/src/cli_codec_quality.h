// The attention-error part of `kvdepot codec compare`: how much B, as a restored copy of A,
// changes attention (kv_quality.h's probe queries), next to what hack-int2 at its default and at
// its recommended options does to A (docs/hack.md "Choosing hack-int2 options" explains the
// comparison).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "cli_json.h"
#include "kvdepot/base/status.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/kv_quality.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot::cli {

// hack-int2 at some options applied to A, measured like B; no quality when A cannot be encoded
// so (note says why).
struct HackReference {
  std::optional<KvQuality> quality;
  double of_fp16 = 0;  // the container's bytes over A's fp16 bytes
  std::string note;
};

struct AttentionComparison {
  KvQuality measured;         // B against A
  HackReference defaults;     // HackOptions{}
  HackReference recommended;  // RecommendedHackOptions()
  std::uint32_t queries_per_layer = 0;
};

// The setting docs/hack.md recommends ("Choosing hack-int2 options"): partition 32, the rest
// default.
HackOptions RecommendedHackOptions();

// Errors: what KvQualityProbe::Create / Measure return (a shape mismatch, non-finite probes).
Result<AttentionComparison> CompareAttention(const KvTensor& a, const KvTensor& b,
                                             std::uint32_t queries_per_layer);

void PrintAttentionComparison(const AttentionComparison& c, std::ostream& out);
Json AttentionComparisonJson(const AttentionComparison& c);

}  // namespace kvdepot::cli
