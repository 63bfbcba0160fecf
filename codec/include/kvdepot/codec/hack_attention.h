// CPU references (float64) of attention over HACK INT2 KV — the exact homomorphic math the CUDA
// kernels implement — and of plain attention over unquantized KV, for tests, accuracy reports and
// machines without a GPU. docs/hack.md §"Homomorphic attention" states the math.
//
// Homomorphic attention (HackDecodeAttention, HackPrefillAttention), per query head q and its KV
// head (query head j reads KV head j / (q_heads / kv_heads): grouped-query attention):
//   - scores of quantized tokens: Q·Kᵀ from the 2-bit K codes. Q is quantized to INT8 (asymmetric,
//     one quantizer per head_dim group of P channels, hack::Int8Params in float) and the integer
//     products are corrected with Q's code sums, K's stored sums (sums section), scales and mins
//     (hack::HomomorphicDot). In the channel orientation, K's per-channel scales of a block are
//     first folded into Q (q'_d = q_d * scale_d, in float) and Q' is quantized per block; the
//     mins contribute Σ_d q_d * min_d per block.
//   - scores of unquantized tokens (sinks, tails): exact q · k.
//   - softmax over the scaled scores in double (max subtracted); the normaliser uses the exact
//     weights p.
//   - P·V: per quantized block, the block's weights p (masked positions 0) are quantized to INT8
//     (asymmetric, one quantizer per block) and multiplied with V's codes, corrected with V's
//     stored sums, scales and mins; unquantized tokens contribute exact p * v.
// With int8_q / int8_p false, Q / P stay exact and the result equals attention over the
// dequantized KV (up to float64 rounding).
//
// A sequence is a list of chunks in token order (a chunk's unquantized sinks and tail sit at their
// token positions). Chunks of one sequence must agree on kv_heads and head_dim and hold `layer`.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {

struct AttentionOptions {
  // Query heads: a positive multiple of the KV heads.
  std::uint32_t q_heads = 0;
  // Multiplies q · k before the softmax; 0 means 1 / sqrt(head_dim).
  double softmax_scale = 0;
  // Homomorphic functions only: quantize Q / P to INT8 (what the kernels do); false keeps them
  // exact.
  bool int8_q = true;
  bool int8_p = true;
};

struct AttentionResult {
  std::vector<double> out;          // [queries][q_heads][head_dim]
  std::vector<std::uint32_t> top1;  // [queries][q_heads]: the position with the largest score
                                    // (the lowest position on ties)
};

// One sequence's chunks, in token order.
using HackSequence = std::span<const HackChunk>;

// Decode attention: one query token (`query`: [q_heads][head_dim]) attending to every token of
// `seq` in layer `layer`. Errors: kInvalidArgument for an empty sequence, inconsistent chunks,
// layer out of range, q_heads not a positive multiple of kv_heads, a query of the wrong size or
// with non-finite values, or a softmax_scale that is negative or not finite.
Result<AttentionResult> HackDecodeAttention(HackSequence seq, std::uint32_t layer,
                                            std::span<const float> query,
                                            const AttentionOptions& options);

// Decode attention over a ragged batch: query b (`queries`: [batch][q_heads][head_dim]) attends to
// sequence b. Results are those of HackDecodeAttention per sequence, concatenated.
Result<AttentionResult> HackDecodeAttentionBatch(std::span<const HackSequence> batch,
                                                 std::uint32_t layer,
                                                 std::span<const float> queries,
                                                 const AttentionOptions& options);

// Causal prefill attention: query i (`queries`: [n][q_heads][head_dim]) sits at position
// first_position + i and attends to positions 0 .. first_position + i. Requires
// first_position + n <= the sequence's token count (kInvalidArgument otherwise). In a block
// that the mask cuts, masked weights are 0 when P is quantized.
Result<AttentionResult> HackPrefillAttention(HackSequence seq, std::uint32_t layer,
                                             std::span<const float> queries,
                                             std::uint32_t first_position,
                                             const AttentionOptions& options);

// Plain attention in float64 over a KV tensor [layers, 2, tokens, kv_heads, head_dim] (one
// sequence, any dtype): the exact reference. Same contracts as the functions above (int8_* are
// ignored).
Result<AttentionResult> DecodeAttention(const KvTensorView& kv, std::uint32_t layer,
                                        std::span<const float> query,
                                        const AttentionOptions& options);
Result<AttentionResult> DecodeAttentionBatch(std::span<const KvTensorView> batch,
                                             std::uint32_t layer, std::span<const float> queries,
                                             const AttentionOptions& options);
Result<AttentionResult> PrefillAttention(const KvTensorView& kv, std::uint32_t layer,
                                         std::span<const float> queries,
                                         std::uint32_t first_position,
                                         const AttentionOptions& options);

}  // namespace kvdepot
