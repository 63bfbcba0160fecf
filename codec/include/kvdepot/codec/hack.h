// The HACK INT2 codec (codec id `hack-int2`): 2-bit asymmetric quantization in partitions of P
// elements with per-partition fp16 scale and min and stored code sums, which attention consumes
// without dequantizing (homomorphic quantization; hack_attention.h has the CPU reference of that
// attention). CPU reference; the CUDA kernels produce and consume identical bytes through the
// shared math in hack_format.h. Format and measurements: docs/hack.md.
//
// Thread-safety: stateless functions; safe to call concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {

// How K is partitioned (V is always per channel over P-token blocks). Values are stored.
enum class HackOrientation : std::uint8_t {
  kChannel = hack::kOrientChannel,  // K per channel over P-token blocks (KIVI; HACK's artifact)
  kToken = hack::kOrientToken,      // K per token along head_dim (the HACK paper)
};
// Rounding of the 2-bit codes. Values are stored.
enum class HackRounding : std::uint8_t {
  kNearest = hack::kRoundNearest,        // round to nearest, ties to even
  kStochastic = hack::kRoundStochastic,  // floor(v + u), u from hack::StochasticUniform(seed, i)
};

// "channel" / "token"; "nearest" / "stochastic".
std::string_view HackOrientationName(HackOrientation orientation);
Result<HackOrientation> ParseHackOrientation(std::string_view name);
std::string_view HackRoundingName(HackRounding rounding);
Result<HackRounding> ParseHackRounding(std::string_view name);

struct HackOptions {
  std::uint32_t partition = hack::kDefaultPartition;        // P: 32, 64 or 128
  HackOrientation orientation = HackOrientation::kChannel;  // measured better: docs/hack.md
  HackRounding rounding = HackRounding::kNearest;           // measured better: docs/hack.md
  // Stochastic rounding's seed (stored in params; identical seed, identical codes on CPU and GPU).
  // Ignored, and stored as 0, with round-to-nearest.
  std::uint64_t seed = 0;
  // Leading tokens kept unquantized (attention sinks; for the first chunk of a sequence). The
  // blocks start after them, so the tail becomes (tokens - sinks) mod P (HackUnquantizedTokens).
  // Values above the chunk's token count mean all of its tokens.
  std::uint32_t sinks = 0;
};

// The tokens a chunk of `shape` encoded with `options` keeps unquantized in each (layer, K|V,
// head): the first min(options.sinks, tokens) (the sinks), and the tail after the P-token blocks,
// which start after the sinks: (tokens - sinks) mod P. So sinks that are not a multiple of P also
// lengthen the tail (256 tokens, P 64, sinks 4: 4 sinks + 60 tail). Precondition: a valid
// partition (ValidateHackOptions).
struct HackUnquantized {
  std::uint32_t sinks = 0;
  std::uint32_t tail = 0;
};
HackUnquantized HackUnquantizedTokens(const KvShape& shape, const HackOptions& options);

// The hack::Layout (hack_format.h) of a chunk of `shape` encoded with `options`, sinks clamped to
// the token count as QuantizeHack stores them: the one place a layout is made from a shape and
// options (the CPU and GPU codecs take theirs from here; the attention kernels fill theirs from
// the cache's fields, which carry no options). Precondition: a valid partition
// (ValidateHackOptions).
hack::Layout HackLayoutFor(const KvShape& shape, const HackOptions& options);

// Byte lengths of the four data sections of a chunk of `layout` whose values are `dtype` (the
// params section is always hack::kParamsBytes).
struct HackSectionBytes {
  std::uint64_t codes = 0;
  std::uint64_t scales = 0;
  std::uint64_t sums = 0;
  std::uint64_t tail = 0;
};
HackSectionBytes HackSectionBytesFor(const hack::Layout& layout, DType dtype);

// OK when partition is 32, 64 or 128 and the enums hold known values; kInvalidArgument naming the
// field otherwise.
Status ValidateHackOptions(const HackOptions& options);

// A hack-int2 chunk unpacked: what the container stores, one value per array entry, in the
// layout of hack_format.h (for the attention references, tests and tools).
struct HackChunk {
  DType dtype = DType::kFloat16;
  KvShape shape;
  HackOptions options;  // as stored: sinks <= tokens, seed 0 unless stochastic
  hack::Layout layout;
  std::vector<std::uint8_t> codes;  // [layout.codes()], each 0..3
  std::vector<hack::Quant> quants;  // [layout.partitions()]
  std::vector<std::uint16_t> sums;  // [layout.sums()]
  std::vector<float> unquantized;   // [layout.unquantized_elements()], values of `dtype`
};

// Quantizes a chunk: what EncodeHack stores. Errors: kInvalidArgument for invalid options, an
// invalid view, and input values that are not finite or whose magnitude exceeds 65504 (the fp16
// range of the stored scales and mins), naming the first such position
// "[layer, kv, token, head, dim]"; such chunks can be stored with the raw codec.
Result<HackChunk> QuantizeHack(const KvTensorView& tensor, const HackOptions& options = {});

// Encodes a chunk into a hack-int2 container (sections params, scales, sums, codes, tail).
// Errors: as QuantizeHack.
Result<std::vector<std::byte>> EncodeHack(const KvTensorView& tensor,
                                          const HackOptions& options = {});

// What a hack-int2 container holds, learned without reading its codes or sums: the checks of
// UnpackHack on the section set and sizes, the params fields, the scales and the unquantized
// values (same status codes), plus where each data section lies. For decoders whose codes stay in
// device memory (cuda/leased.h): the device kernels read any code bytes safely, while the sums'
// agreement with the codes is left unchecked.
struct HackStructure {
  DType dtype = DType::kFloat16;
  KvShape shape;
  HackOptions options;  // as stored
  hack::Layout layout;
  SectionView scales, sums, codes, tail;  // offsets from the container's start
};
Result<HackStructure> InspectHack(const ContainerView& view);

// InspectHack without reading the scales' values (their section's size is checked): for readers
// that check the scales where they lie — cuda/leased.h checks them on the device, with the rule
// above, and reports the first bad entry with HackScalesEntryError.
Result<HackStructure> InspectHackExceptScales(const ContainerView& view);

// The kCorruption status InspectHack and UnpackHack return when scales entry `entry` (partition
// order) breaks the rule above.
Status HackScalesEntryError(std::size_t entry);

// Validates and unpacks a parsed hack-int2 container. Every structural property is checked
// (section set and sizes, params fields, finite non-negative scales with min + 3 * scale < 65520,
// codes of zero-scale partitions are 0, every stored sum equals the sum of its codes, unquantized
// values finite and within the fp16 range); any mismatch is kCorruption, a newer params version
// kUnimplemented, a container of another codec kInvalidArgument.
Result<HackChunk> UnpackHack(const ContainerView& view);

// The tensor a chunk decodes to, in `dtype`: each code dequantized (min + code * scale, in float)
// and rounded to `dtype`; unquantized tokens copied (exact when `dtype` is the chunk's).
KvTensor DequantizeHack(const HackChunk& chunk, DType dtype);

// Decodes a parsed hack-int2 container into a tensor of its original dtype (UnpackHack, then
// DequantizeHack). Never returns partial data.
Result<KvTensor> DecodeHack(const ContainerView& view);

// Byte counts of a hack-int2 container, for `inspect`, tests and benchmarks.
struct HackSizes {
  std::uint64_t params = 0;
  std::uint64_t scales = 0;
  std::uint64_t sums = 0;
  std::uint64_t codes = 0;
  std::uint64_t tail = 0;
  std::uint64_t total = 0;  // the container, headers and padding included
};
Result<HackSizes> HackSectionSizes(const ContainerView& view);

}  // namespace kvdepot
