// The CacheGen codec (codec id `cachegen`): per-channel asymmetric quantization with a per-layer
// bit profile, then rANS entropy coding. CPU reference; the CUDA kernels in cuda/ produce and
// consume identical bytes. Format: docs/format.md §1.5; design and measurements: docs/cachegen.md.
//
// Thread-safety: stateless functions; safe to call concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {

// Quantization bins per layer for K and for V (each in [2, 64]). Empty vectors mean the default
// profile for the tensor's layer count (CacheGenDefaultProfile).
struct CacheGenOptions {
  std::vector<std::uint8_t> k_bins;
  std::vector<std::uint8_t> v_bins;
};

// LMCache's default allocation: K 32 bins for layers 0-9 then 16; V 32 bins for layers 0-1 then
// 16; models with fewer than 10 layers get 32 everywhere.
CacheGenOptions CacheGenDefaultProfile(std::uint32_t layers);

// `options` with each empty bins profile taken from CacheGenDefaultProfile(layers), checked: a
// profile has one entry per layer, each in [2, 64]. Errors: kInvalidArgument naming the profile
// (K or V) and the layer. What EncodeCacheGen and the GPU encoder use.
Result<CacheGenOptions> ResolveCacheGenOptions(const CacheGenOptions& options,
                                               std::uint32_t layers);

// Parses a bins spec for `layers` layers: "B" (every layer) or "B1:N1,B2:N2,...,Bk": B1 bins for
// the first N1 layers, then B2 for N2 layers, ..., Bk for the remaining ones. Errors name the
// offending part.
Result<std::vector<std::uint8_t>> ParseBinsSpec(std::string_view spec, std::uint32_t layers);

// Encodes a chunk. Errors: kInvalidArgument for non-finite input values (naming the first
// position; CacheGen is lossy and cannot carry NaN/Inf — store such chunks with the raw codec)
// and for bins outside [2, 64] or a profile whose length differs from the layer count.
Result<std::vector<std::byte>> EncodeCacheGen(const KvTensorView& tensor,
                                              const CacheGenOptions& options = {});

// Decodes a parsed cachegen container into a tensor of its original dtype. Every structural
// property is checked (section sizes, table sums, stream lengths, final rANS states); any
// mismatch is kCorruption and no tensor is returned.
Result<KvTensor> DecodeCacheGen(const ContainerView& view);

// What decode(encode(x)) returns, computed directly: quantize then dequantize each element with
// the scales the encoder would choose. For tests and rate-distortion measurements.
Result<KvTensor> CacheGenQuantizeDequantize(const KvTensorView& tensor,
                                            const CacheGenOptions& options = {});

// The empirical entropy, in bits, of the chunk's symbols under the codec's model (one symbol
// distribution per (layer, K|V)): the size an ideal entropy coder would reach with exact
// frequencies. Benchmarks compare the coded payload with it.
Result<double> CacheGenSymbolEntropyBits(const KvTensorView& tensor,
                                         const CacheGenOptions& options = {});

// A cachegen container's sections after every structural check that does not need the rANS
// streams themselves: params (version, prob_bits, scale dtype, channels per lane, bins), table
// sizes and sums, finite positive scales, an index in order that ends at the codes' end. Used by
// the CPU decoder and by the GPU decoder's host side. The pointers point into `view`.
struct CacheGenSections {
  std::uint8_t scale_dtype = 0;     // cachegen::kScaleFp16 or kScaleFp32
  std::vector<std::uint8_t> bins;   // [layer * 2 + kv]
  std::uint64_t table_entries = 0;  // sum of the bins: u16 frequencies in the tables section
  const SectionView* params = nullptr;
  const SectionView* tables = nullptr;
  const SectionView* scales = nullptr;
  const SectionView* index = nullptr;
  const SectionView* codes = nullptr;
};
// kInvalidArgument for another codec, kUnimplemented for another params version, kCorruption for
// anything else, with a message naming the field.
Result<CacheGenSections> ValidateCacheGenSections(const ContainerView& view);

// Byte counts of a cachegen container, for `inspect` and benchmarks.
struct CacheGenSizes {
  std::uint64_t params = 0;
  std::uint64_t tables = 0;
  std::uint64_t scales = 0;
  std::uint64_t index = 0;
  std::uint64_t codes = 0;
  std::uint64_t total = 0;  // the container, headers and padding included
};
Result<CacheGenSizes> CacheGenSectionSizes(const ContainerView& view);

}  // namespace kvdepot
