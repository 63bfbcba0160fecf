// Synthetic KV with the statistical structure of real KV, for tests and benchmarks.
//
// The model (documented with its parameters and a calibration table in docs/synth.md):
//   K: per-(layer, head, channel) bias and scale, a few outlier channels with a much larger bias,
//      a low-rank component shared by the channels of a head, AR(1) smoothness across tokens, all
//      in the pre-rotation signal, which is then rotated by RoPE (Llama style: theta 10000,
//      position = token index, channel i paired with i + head_dim / 2; with an odd head_dim the
//      last channel is not rotated).
//   V: per-channel mean and scale, close to Gaussian, weak AR(1) correlation across tokens.
//   The first layer has weak K biases and small V; deeper layers have strong K biases.
//
// Determinism: the output depends only on the options (no global state, no std:: distributions)
// and is identical across runs on a given platform; cos/sin/log come from the C library, so
// other platforms may differ in the last bits of some elements. Every (layer, head, K|V) block
// has its own random stream, drawn token by token, so the tensor for a shape is the leading
// sub-tensor of the tensor for any shape that is at least as large in layers, tokens and kv_heads
// (same head_dim, seed and dtype).
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {

struct SynthOptions {
  KvShape shape;
  std::uint64_t seed = 0;
  DType dtype = DType::kFloat16;
};

// Generates KV of options.shape in options.dtype. Values are computed in double, rounded to float,
// then to the dtype with numeric.h's round-to-nearest-even; they stay far below the fp16 range.
// Errors: kInvalidArgument for an invalid dtype; ValidateShape's kOutOfRange for a bad shape
// (both prefixed with "synth: ").
Result<KvTensor> SynthesizeKv(const SynthOptions& options);

}  // namespace kvdepot
