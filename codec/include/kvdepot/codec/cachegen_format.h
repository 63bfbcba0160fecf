// CacheGen codec, format constants and the scalar math shared by the CPU reference and the CUDA
// kernels (docs/format.md §1.5 "cachegen" specifies the bytes). Every function here is
// KVD_HOST_DEVICE and uses only exactly-rounded IEEE operations (no fused multiply-add: the CUDA
// translation units that include it are compiled with -fmad=false), which is what makes CPU and
// GPU outputs byte-identical.
//
// Model: per (layer, K|V, channel) — channel = head * head_dim + dim — an asymmetric uniform
// quantizer over the chunk's tokens (lo = min rounded down, step = range / (bins - 1) rounded up,
// both to the container's scale dtype); symbols q in [0, bins) are entropy-coded with rANS,
// one frequency table per (layer, K|V), in groups of 32 channels whose 32 rANS states are
// interleaved into one word stream (one CUDA warp decodes one group, one lane per channel).
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>

#include "kvdepot/codec/numeric.h"

namespace kvdepot::cachegen {

inline constexpr std::uint8_t kParamsVersion = 1;
inline constexpr std::uint32_t kProbBits = 12;  // frequencies sum to 4096
inline constexpr std::uint32_t kProbScale = 1u << kProbBits;
inline constexpr std::uint32_t kStateLow = 1u << 16;  // rANS state lives in [2^16, 2^32)
inline constexpr std::uint32_t kLanes = 32;           // rANS states per group
inline constexpr std::uint32_t kMaxChannelsPerLane = 16;
inline constexpr std::uint32_t kMinBins = 2;
inline constexpr std::uint32_t kMaxBins = 64;
inline constexpr std::uint8_t kScaleFp16 = 1;  // scale dtype codes (as DType)
inline constexpr std::uint8_t kScaleFp32 = 3;

// The params section (docs/format.md §1.5): 8 fixed bytes, then one bins byte per (layer, K|V).
inline constexpr std::uint32_t kParamsFixedBytes = 8;
inline constexpr std::uint32_t kParamsOffVersion = 0;
inline constexpr std::uint32_t kParamsOffProbBits = 1;
inline constexpr std::uint32_t kParamsOffScaleDType = 2;
inline constexpr std::uint32_t kParamsOffChannelsPerLane = 3;
inline constexpr std::uint32_t kParamsOffReserved = 4;  // u32, zero

// The one writer of the params section's fixed bytes, for the CPU encoder and the GPU encoder's
// finalize kernel. `scale_dtype` is kScaleFp16 or kScaleFp32; `channels_per_lane` is
// ChannelsPerLane(tokens). The caller writes the bins bytes that follow.
KVD_HOST_DEVICE void WriteParamsFixed(std::byte* out, std::uint8_t scale_dtype,
                                      std::uint32_t channels_per_lane) {
  out[kParamsOffVersion] = static_cast<std::byte>(kParamsVersion);
  out[kParamsOffProbBits] = static_cast<std::byte>(kProbBits);
  out[kParamsOffScaleDType] = static_cast<std::byte>(scale_dtype);
  out[kParamsOffChannelsPerLane] = static_cast<std::byte>(channels_per_lane);
  for (std::uint32_t i = 0; i < 4; ++i) out[kParamsOffReserved + i] = std::byte{0};
}

KVD_HOST_DEVICE bool IsFiniteFloat(float x) {
  return (FloatBits(x) & 0x7f800000u) != 0x7f800000u;
}

// Channels each lane codes one after the other (so a lane's rANS stream covers
// channels_per_lane * tokens symbols, which amortises the 32-bit state flush): the smallest count
// giving at least 512 symbols per lane, at most kMaxChannelsPerLane.
KVD_HOST_DEVICE std::uint32_t ChannelsPerLane(std::uint32_t tokens) {
  const std::uint32_t cpl = (512u + tokens - 1u) / tokens;
  return cpl < kMaxChannelsPerLane ? cpl : kMaxChannelsPerLane;
}

// Number of groups of one (layer, K|V): each covers kLanes * channels_per_lane channels.
KVD_HOST_DEVICE std::uint32_t GroupsPerLayerKv(std::uint32_t channels,
                                               std::uint32_t channels_per_lane) {
  const std::uint32_t per_group = kLanes * channels_per_lane;
  return (channels + per_group - 1u) / per_group;
}

// Channel coded by `lane` of group `group` in its k-th pass (k < channels_per_lane); may be
// >= channels, in which case the lane is idle in that pass.
KVD_HOST_DEVICE std::uint32_t LaneChannel(std::uint32_t group, std::uint32_t k, std::uint32_t lane,
                                          std::uint32_t channels_per_lane) {
  return (group * channels_per_lane + k) * kLanes + lane;
}

// Deterministic normalisation of symbol counts to frequencies summing to kProbScale: each present
// symbol gets max(1, floor(count * 4096 / total)); the most frequent symbol (lowest index on ties)
// absorbs the difference. Requires total > 0 and bins <= kMaxBins (so it stays >= 1).
KVD_HOST_DEVICE void NormalizeFrequencies(const std::uint32_t* counts, std::uint32_t bins,
                                          std::uint16_t* freq) {
  std::uint64_t total = 0;
  std::uint32_t best = 0;
  for (std::uint32_t s = 0; s < bins; ++s) {
    total += counts[s];
    if (counts[s] > counts[best]) best = s;
  }
  std::int32_t sum = 0;
  // 32-bit arithmetic when it is exact (count * 4096 < 2^32): a 64-bit division costs ~70
  // instructions on a GPU, and a chunk's (layer, K|V) rarely has 2^20 symbols.
  const bool narrow = total < (1ull << 20);
  for (std::uint32_t s = 0; s < bins; ++s) {
    std::uint32_t f = 0;
    if (counts[s] != 0) {
      f = narrow ? (counts[s] * kProbScale) / static_cast<std::uint32_t>(total)
                 : static_cast<std::uint32_t>((static_cast<std::uint64_t>(counts[s]) * kProbScale) /
                                              total);
      if (f == 0) f = 1;
    }
    freq[s] = static_cast<std::uint16_t>(f);
    sum += static_cast<std::int32_t>(f);
  }
  freq[best] = static_cast<std::uint16_t>(static_cast<std::int32_t>(freq[best]) +
                                          static_cast<std::int32_t>(kProbScale) - sum);
}

// The largest fp16 value <= x, as bits (x finite). Infinite when x < -65504.
KVD_HOST_DEVICE std::uint16_t HalfRoundDown(float x) {
#if defined(__CUDA_ARCH__)
  if (x == x) return __half_as_ushort(__float2half_rd(x));
#endif
  std::uint16_t h = FloatToHalfBits(x);
  const float v = HalfBitsToFloat(h);
  if (v > x) {  // step one ulp toward -infinity
    if (h == 0x0000u) return 0x8001u;
    h = (h & 0x8000u) ? static_cast<std::uint16_t>(h + 1u) : static_cast<std::uint16_t>(h - 1u);
  }
  return h;
}

// The smallest fp16 value >= x, as bits (x finite). Infinite when x > 65504.
KVD_HOST_DEVICE std::uint16_t HalfRoundUp(float x) {
#if defined(__CUDA_ARCH__)
  if (x == x) return __half_as_ushort(__float2half_ru(x));
#endif
  std::uint16_t h = FloatToHalfBits(x);
  const float v = HalfBitsToFloat(h);
  if (v < x) {
    if (h == 0x8000u) return 0x0001u;
    h = (h & 0x8000u) ? static_cast<std::uint16_t>(h - 1u) : static_cast<std::uint16_t>(h + 1u);
  }
  return h;
}

// Channel scale from the channel's finite min and max, in float: lo <= min and
// lo + (bins - 1) * step >= max (up to the division's rounding; quantization clamps).
struct ChannelScale {
  float lo;
  float step;  // > 0
};

// Scales as stored with fp16 scale dtype; `ok` is false when lo or step does not fit fp16.
KVD_HOST_DEVICE ChannelScale ScaleFp16(float min, float max, std::uint32_t bins, bool* ok) {
  const std::uint16_t lo_bits = HalfRoundDown(min);
  const float lo = HalfBitsToFloat(lo_bits);
  float step = (max - lo) / static_cast<float>(bins - 1u);
  std::uint16_t step_bits = HalfRoundUp(step);
  if (step_bits == 0x0000u || step_bits == 0x8000u) step_bits = 0x3c00u;  // constant channel: 1
  step = HalfBitsToFloat(step_bits);
  *ok = IsFiniteFloat(lo) && IsFiniteFloat(step);
  return {lo, step};
}

// Scales as stored with fp32 scale dtype. `ok` is false when the range overflows float.
KVD_HOST_DEVICE ChannelScale ScaleFp32(float min, float max, std::uint32_t bins, bool* ok) {
  float step = (max - min) / static_cast<float>(bins - 1u);
  if (step == 0.0f) step = 1.0f;
  *ok = IsFiniteFloat(step);
  return {min, step};
}

// Symbol of x (finite) in [0, bins).
KVD_HOST_DEVICE std::uint32_t Quantize(float x, ChannelScale s, std::uint32_t bins) {
  const float r = rintf((x - s.lo) / s.step);  // ties to even (default rounding mode)
  if (!(r > 0.0f)) return 0;
  const float top = static_cast<float>(bins - 1u);
  return r >= top ? bins - 1u : static_cast<std::uint32_t>(r);
}

// Quantize for fp16-derived scales (ScaleFp16: lo and step fp16 values, step > 0), with the
// division done as in Markstein's method: rcp = RN(1 / step), t = RN(v * rcp), then one
// correction with the exact remainder fma(-step, t, v). Every value involved is a normal float
// (v = x - lo is a difference of fp16 values, step and rcp lie in [2^-24, 2^24]), where that
// gives the correctly rounded quotient: the same symbol as Quantize
// (tests/codec/cachegen_test.cc checks every fp16 x against many scales). The GPU encoder uses
// it: an IEEE division there is ~10 instructions and a slow-path call.
KVD_HOST_DEVICE std::uint32_t QuantizeFp16Scale(float x, ChannelScale s, float rcp,
                                                std::uint32_t bins) {
  const float v = x - s.lo;
  float t = v * rcp;
  t = fmaf(fmaf(-s.step, t, v), rcp, t);
  const float r = rintf(t);
  if (!(r > 0.0f)) return 0;
  const float top = static_cast<float>(bins - 1u);
  return r >= top ? bins - 1u : static_cast<std::uint32_t>(r);
}

KVD_HOST_DEVICE float Dequantize(std::uint32_t q, ChannelScale s) {
  const float scaled = static_cast<float>(q) * s.step;
  return s.lo + scaled;
}

// One rANS encode step; returns true (and the word to emit through *word) when the state had to
// be renormalised first. freq > 0; cum + freq <= kProbScale.
KVD_HOST_DEVICE bool RansEncodeStep(std::uint32_t* state, std::uint32_t freq, std::uint32_t cum,
                                    std::uint16_t* word) {
  std::uint32_t x = *state;
  bool emitted = false;
  const std::uint64_t x_max = (static_cast<std::uint64_t>(kStateLow >> kProbBits) << 16) * freq;
  if (x >= x_max) {
    *word = static_cast<std::uint16_t>(x & 0xffffu);
    x >>= 16;
    emitted = true;
  }
  *state = ((x / freq) << kProbBits) + (x % freq) + cum;
  return emitted;
}

// The reciprocal of a frequency for RansEncodeStepRcp: ceil(2^44 / freq), freq in [1, 4096].
KVD_HOST_DEVICE std::uint64_t RansReciprocal(std::uint32_t freq) {
  return ((1ull << 44) + freq - 1u) / freq;
}

// floor(x / freq) for x < freq * 2^20 (a state after renormalisation), with rcp =
// RansReciprocal(freq): rcp * freq = 2^44 + e with e < freq, so x * rcp / 2^44 = x / freq +
// x * e / (freq * 2^44) and the error term stays below 1 / freq (x * e < freq^2 * 2^20 <= 2^44):
// the floor is exact. Computed as floor((x * hi32(rcp) + hi32(x * lo32(rcp))) / 2^12), which
// drops only a fraction below 1 from an integer before the division by 2^12: two 32-bit
// multiplications instead of a 64 x 64-bit product.
KVD_HOST_DEVICE std::uint32_t RansDivide(std::uint32_t x, std::uint64_t rcp) {
  const auto lo = static_cast<std::uint32_t>(rcp);
  const auto hi = static_cast<std::uint32_t>(rcp >> 32);  // < 2^13
#if defined(__CUDA_ARCH__)
  const std::uint32_t cross = __umulhi(x, lo);
#else
  const auto cross = static_cast<std::uint32_t>((std::uint64_t{x} * lo) >> 32);
#endif
  return static_cast<std::uint32_t>((std::uint64_t{x} * hi + cross) >> 12);
}

// RansEncodeStep with the division done as a multiplication by rcp = RansReciprocal(freq): the
// same state and words (tests/codec/cachegen_format_test.cc), a much shorter dependency chain on
// a GPU, where a 32-bit division is a ~20-instruction sequence.
KVD_HOST_DEVICE bool RansEncodeStepRcp(std::uint32_t* state, std::uint32_t freq, std::uint32_t cum,
                                       std::uint64_t rcp, std::uint16_t* word) {
  std::uint32_t x = *state;
  // x >= freq * 2^20 (the renormalisation bound), without 64-bit arithmetic.
  const bool emitted = (x >> 20) >= freq;
  if (emitted) {
    *word = static_cast<std::uint16_t>(x & 0xffffu);
    x >>= 16;
  }
  const std::uint32_t q = RansDivide(x, rcp);
  *state = (q << kProbBits) + (x - q * freq) + cum;
  return emitted;
}

// One rANS decode step, before renormalisation: returns the slot (state mod 4096); the caller
// maps slot -> symbol and then calls RansDecodeAdvance.
KVD_HOST_DEVICE std::uint32_t RansSlot(std::uint32_t state) {
  return state & (kProbScale - 1u);
}

// Advances the state past a symbol of (freq, cum) found at `slot`. The caller then reads a word
// when the result is below kStateLow.
KVD_HOST_DEVICE std::uint32_t RansDecodeAdvance(std::uint32_t state, std::uint32_t slot,
                                                std::uint32_t freq, std::uint32_t cum) {
  return freq * (state >> kProbBits) + slot - cum;
}

}  // namespace kvdepot::cachegen
