// How much a restored (decoded) KV tensor changes attention: the metric of the hack-int2 quality
// study (bench/hack_quality.cc, docs/hack.md "Choosing hack-int2 options") and of
// `kvdepot codec compare`.
//
// Probe queries (no real queries travel with stored KV): for each layer and each of
// `queries_per_layer` probes, per KV head, the original K row of that head at a uniformly drawn
// position plus Gaussian noise of the head's K standard deviation (RMS over the layer's tokens and
// channels), one query head per KV head; std::mt19937_64(seed) with std::normal_distribution, so
// the draw is reproducible with one standard library. Each query attends to the whole sequence
// (decode attention, softmax scale 1/sqrt(head_dim)). The error is the relative L2 of the attention
// outputs against exact float64 attention over the original tensor, over all probes, heads and
// layers; top1 is the fraction of (probe, head) whose most-attended position is the exact one's.
//
// Thread-safety: KvQualityProbe is immutable after Create; Measure may run concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/hack_attention.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {

struct KvQualityOptions {
  std::uint32_t queries_per_layer = 64;
  std::uint64_t seed = 0;
};

struct KvQuality {
  double k_rel_l2 = 0;     // ||K - K'|| / ||K|| over all layers and heads
  double v_rel_l2 = 0;     // same for V
  double attn_rel_l2 = 0;  // attention-output relative L2 (file comment)
  double top1 = 0;         // fraction of (probe, head) keeping the exact top-1 position
};

// The probe queries of `original`: [layer] -> [probe][kv_heads][head_dim] flattened.
std::vector<std::vector<float>> ProbeQueries(const KvTensorView& original,
                                             const KvQualityOptions& options);

// Holds the original tensor, its probe queries and the exact attention outputs, so that many
// restored versions of one original are measured without recomputing them.
class KvQualityProbe {
 public:
  // Errors: kInvalidArgument for an invalid view or queries_per_layer 0.
  static Result<KvQualityProbe> Create(const KvTensorView& original,
                                       const KvQualityOptions& options = {});

  // Errors: kInvalidArgument when `restored` has another shape (naming both) or is invalid.
  Result<KvQuality> Measure(const KvTensorView& restored) const;

  const KvTensor& original() const { return original_; }

 private:
  KvTensor original_;
  std::uint32_t queries_per_layer_ = 0;
  std::vector<std::vector<float>> queries_;  // ProbeQueries
  std::vector<AttentionResult> exact_;       // [layer]: every probe's exact result, in order
};

// Token slices and their concatenation (for cutting a sequence into chunks and reassembling it).
// SliceTokens: tokens [first, first + count) of `t` (precondition: within t's tokens, count > 0).
KvTensor SliceTokens(const KvTensorView& t, std::uint32_t first, std::uint32_t count);
// ConcatTokens: the parts one after the other along tokens. Errors: kInvalidArgument when the
// list is empty or the parts differ in dtype, layers, kv_heads or head_dim.
Result<KvTensor> ConcatTokens(std::span<const KvTensor> parts);

}  // namespace kvdepot
