// HACK INT2 codec (`hack-int2`): format constants, the chunk layout and the scalar math shared by
// the CPU reference (codec/src/hack.cc, hack_attention.cc) and the CUDA kernels. The bytes are
// specified in docs/hack.md §"Container format"; design and measurements are in docs/hack.md.
//
// Every function here but QuantizeInt8 is KVD_HOST_DEVICE and uses only exactly-rounded IEEE
// operations (binary32 +, -, *, / and rintf/floorf; one binary64 fused multiply-add in
// NearestCodeAtLeast), which is what makes CPU and GPU codes byte-identical (QuantizeInt8 is
// host-only: the kernels round its exact product with a binary32 fused multiply-add). CUDA
// translation units that include it must keep IEEE division (no --use_fast_math, no
// -prec-div=false); contraction into fused multiply-add cannot change any result below (the only
// product feeding an addition, code * scale, is exact).
//
// Model. A chunk [layers, 2, tokens, kv_heads, head_dim] is cut, per (layer, K|V, head), into
//   - `sinks` leading tokens kept unquantized (the attention sinks of a sequence's first chunk),
//   - `blocks` = (tokens - sinks) / P full blocks of P (= the partition size) tokens, quantized,
//   - a tail of the remaining (tokens - sinks) mod P tokens kept unquantized
//     ("requantization elimination": an unfilled block is never quantized).
// One quantized (layer, K|V, head, block) is a *group* of P x head_dim 2-bit codes. Inside a group
// the codes are stored with the inner dimension of the attention product they feed contiguous:
// K token-major ([t][d], the head_dim runs of Q·Kᵀ), V channel-major ([d][t], the token runs of
// P·V). A group is cut into *partitions*, each with its own fp16 scale and min (asymmetric
// quantization, x ≈ min + scale · code, code in 0..3):
//   - V, and K in the `channel` orientation: one partition per channel, over the block's P tokens;
//   - K in the `token` orientation (the paper's): one partition per (token, dim group), a dim group
//     being P consecutive head_dim channels (the last one shorter when P does not divide head_dim).
// Code sums ("summation elimination") are stored per row of the inner dimension: for V per
// (channel, block) — V's partitions — and for K per (token, dim group) in both orientations (the
// paper's K partitions; in the channel orientation the sums that the min of the INT8-quantized,
// scale-folded query multiplies). Groups are numbered ((layer * 2 + kv) * kv_heads + head) *
// blocks + block; codes, partitions and sums are stored group after group in that order.
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>

#include "kvdepot/codec/cachegen_format.h"
#include "kvdepot/codec/container_layout.h"
#include "kvdepot/codec/numeric.h"

namespace kvdepot::hack {

inline constexpr std::uint8_t kParamsVersion = 1;
inline constexpr std::uint32_t kParamsBytes = 24;
inline constexpr std::uint32_t kMaxCode = 3;       // 2-bit codes 0..3
inline constexpr std::uint32_t kCodesPerByte = 4;  // code i at bits 2 (i mod 4) of byte i / 4
inline constexpr std::uint32_t kPartitionEntryBytes = 4;  // fp16 scale, fp16 min
inline constexpr std::uint32_t kDefaultPartition = 64;
inline constexpr std::uint32_t kMaxInt8Code = 255;  // Q and P codes (unsigned, asymmetric)
// The largest magnitude the codec accepts (fp16's largest finite value): scales and mins are fp16.
inline constexpr float kMaxAbsValue = 65504.0f;
// Floats at or above this round to +infinity in fp16.
inline constexpr float kFp16Overflow = 65520.0f;

// Orientation of K's partitions (params byte 2); V is always per channel over P-token blocks.
inline constexpr std::uint8_t kOrientChannel = 0;  // K per channel over P-token blocks (KIVI)
inline constexpr std::uint8_t kOrientToken = 1;    // K per token along head_dim (HACK paper)
// Rounding of the 2-bit codes (params byte 3).
inline constexpr std::uint8_t kRoundNearest = 0;
inline constexpr std::uint8_t kRoundStochastic = 1;

KVD_HOST_DEVICE bool IsValidPartition(std::uint32_t p) {
  return p == 32 || p == 64 || p == 128;
}

// Bytes of one stored code sum: a sum covers at most P codes of value <= 3, so u8 holds it for
// P <= 85 (P = 32, 64) and u16 beyond (P = 128).
KVD_HOST_DEVICE std::uint32_t SumBytes(std::uint32_t partition) {
  return partition * kMaxCode <= 255u ? 1u : 2u;
}

// The params section (docs/hack.md, "Container format"): kParamsBytes bytes at these offsets.
inline constexpr std::uint32_t kParamsOffVersion = 0;
inline constexpr std::uint32_t kParamsOffPartition = 1;
inline constexpr std::uint32_t kParamsOffOrientation = 2;
inline constexpr std::uint32_t kParamsOffRounding = 3;
inline constexpr std::uint32_t kParamsOffSumBytes = 4;
inline constexpr std::uint32_t kParamsOffReserved8 = 5;    // 3 bytes, zero
inline constexpr std::uint32_t kParamsOffSinks = 8;        // u32
inline constexpr std::uint32_t kParamsOffReserved32 = 12;  // u32, zero
inline constexpr std::uint32_t kParamsOffSeed = 16;        // u64

// The one writer of the params section, for the CPU encoder (codec/src/hack.cc) and the GPU
// quantizer (cuda/src/hack_quantize.cu): all kParamsBytes bytes, reserved fields zero. The seed is
// stored only with stochastic rounding (round-to-nearest stores 0, which the parser requires).
KVD_HOST_DEVICE void WriteParams(std::byte* out, std::uint32_t partition, std::uint8_t orientation,
                                 std::uint8_t rounding, std::uint32_t sinks, std::uint64_t seed) {
  for (std::uint32_t i = 0; i < kParamsBytes; ++i) out[i] = std::byte{0};
  out[kParamsOffVersion] = static_cast<std::byte>(kParamsVersion);
  out[kParamsOffPartition] = static_cast<std::byte>(partition);
  out[kParamsOffOrientation] = static_cast<std::byte>(orientation);
  out[kParamsOffRounding] = static_cast<std::byte>(rounding);
  out[kParamsOffSumBytes] = static_cast<std::byte>(SumBytes(partition));
  container_layout::StoreLittleEndian(out + kParamsOffSinks, sinks, 4);
  const std::uint64_t stored_seed = rounding == kRoundStochastic ? seed : 0;
  container_layout::StoreLittleEndian(out + kParamsOffSeed, stored_seed, 8);
}

KVD_HOST_DEVICE std::uint32_t MinU32(std::uint32_t a, std::uint32_t b) {
  return a < b ? a : b;
}

// The chunk layout: every count and index that follows from the shape and the params. Plain data;
// indices are 64-bit so that no shape within tensor.h's limits overflows them.
struct Layout {
  std::uint32_t layers = 0;
  std::uint32_t tokens = 0;
  std::uint32_t heads = 0;      // kv_heads
  std::uint32_t dim = 0;        // head_dim
  std::uint32_t partition = 0;  // P: 32, 64 or 128
  std::uint32_t sinks = 0;      // <= tokens
  std::uint8_t orientation = kOrientChannel;

  // Full blocks per (layer, K|V, head).
  KVD_HOST_DEVICE std::uint32_t blocks() const { return (tokens - sinks) / partition; }
  KVD_HOST_DEVICE std::uint32_t quantized_tokens() const { return blocks() * partition; }
  // First token of the tail (tokens [sinks, tail_begin) are quantized).
  KVD_HOST_DEVICE std::uint32_t tail_begin() const { return sinks + quantized_tokens(); }
  // Unquantized tokens per (layer, K|V, head): the sinks, then the tail.
  KVD_HOST_DEVICE std::uint32_t unquantized_tokens() const { return tokens - quantized_tokens(); }
  KVD_HOST_DEVICE bool quantized(std::uint32_t token) const {
    return token >= sinks && token < tail_begin();
  }
  // Index u (0 .. unquantized_tokens()) of an unquantized token in the tail section.
  KVD_HOST_DEVICE std::uint32_t unquantized_index(std::uint32_t token) const {
    return token < sinks ? token : token - quantized_tokens();
  }
  // The token of unquantized index u (inverse of unquantized_index).
  KVD_HOST_DEVICE std::uint32_t unquantized_token(std::uint32_t u) const {
    return u < sinks ? u : u + quantized_tokens();
  }
  // Dim groups of head_dim (K's per-token sums; the token orientation's K partitions).
  KVD_HOST_DEVICE std::uint32_t dim_groups() const { return (dim + partition - 1u) / partition; }
  KVD_HOST_DEVICE std::uint32_t dim_group_size(std::uint32_t g) const {
    return MinU32(partition, dim - g * partition);
  }

  KVD_HOST_DEVICE std::uint64_t groups_per_kv() const {
    return std::uint64_t{layers} * heads * blocks();
  }
  KVD_HOST_DEVICE std::uint64_t group(std::uint32_t layer, std::uint32_t kv, std::uint32_t head,
                                      std::uint32_t block) const {
    return ((std::uint64_t{layer} * 2u + kv) * heads + head) * blocks() + block;
  }

  // ---- codes: P * dim per group ----
  KVD_HOST_DEVICE std::uint32_t codes_per_group() const { return partition * dim; }
  KVD_HOST_DEVICE std::uint64_t codes() const { return 2u * groups_per_kv() * codes_per_group(); }
  KVD_HOST_DEVICE std::uint64_t code_base(std::uint64_t group_index) const {
    return group_index * codes_per_group();
  }
  // Code of (token t of the block, channel d) within a group of kind kv.
  KVD_HOST_DEVICE std::uint32_t code_offset(std::uint32_t kv, std::uint32_t t,
                                            std::uint32_t d) const {
    return kv == 0 ? t * dim + d : d * partition + t;
  }

  // ---- partitions (one fp16 scale + fp16 min each) ----
  KVD_HOST_DEVICE std::uint32_t partitions_per_group(std::uint32_t kv) const {
    return kv == 0 && orientation == kOrientToken ? partition * dim_groups() : dim;
  }
  KVD_HOST_DEVICE std::uint64_t partitions() const {
    return groups_per_kv() * (partitions_per_group(0) + partitions_per_group(1));
  }
  KVD_HOST_DEVICE std::uint64_t partition_base(std::uint32_t layer, std::uint32_t kv,
                                               std::uint32_t head, std::uint32_t block) const {
    const std::uint64_t per_layer_kv = std::uint64_t{heads} * blocks();
    const std::uint64_t layer_base =
        std::uint64_t{layer} * per_layer_kv * (partitions_per_group(0) + partitions_per_group(1));
    const std::uint64_t kv_base = kv == 0 ? 0 : per_layer_kv * partitions_per_group(0);
    return layer_base + kv_base +
           (std::uint64_t{head} * blocks() + block) * partitions_per_group(kv);
  }
  // Partition holding (token t of the block, channel d) within a group of kind kv.
  KVD_HOST_DEVICE std::uint32_t partition_offset(std::uint32_t kv, std::uint32_t t,
                                                 std::uint32_t d) const {
    return kv == 0 && orientation == kOrientToken ? t * dim_groups() + d / partition : d;
  }
  // Elements of partition p (within a group of kind kv).
  KVD_HOST_DEVICE std::uint32_t partition_size(std::uint32_t kv, std::uint32_t p) const {
    return kv == 0 && orientation == kOrientToken ? dim_group_size(p % dim_groups()) : partition;
  }
  // Element i (< partition_size) of partition p: its token in the block and channel.
  KVD_HOST_DEVICE void partition_element(std::uint32_t kv, std::uint32_t p, std::uint32_t i,
                                         std::uint32_t* t, std::uint32_t* d) const {
    if (kv == 0 && orientation == kOrientToken) {
      *t = p / dim_groups();
      *d = (p % dim_groups()) * partition + i;
    } else {
      *t = i;
      *d = p;
    }
  }

  // ---- code sums: K per (token, dim group), V per channel ----
  KVD_HOST_DEVICE std::uint32_t sums_per_group(std::uint32_t kv) const {
    return kv == 0 ? partition * dim_groups() : dim;
  }
  KVD_HOST_DEVICE std::uint64_t sums() const {
    return groups_per_kv() * (sums_per_group(0) + sums_per_group(1));
  }
  KVD_HOST_DEVICE std::uint64_t sum_base(std::uint32_t layer, std::uint32_t kv, std::uint32_t head,
                                         std::uint32_t block) const {
    const std::uint64_t per_layer_kv = std::uint64_t{heads} * blocks();
    const std::uint64_t layer_base =
        std::uint64_t{layer} * per_layer_kv * (sums_per_group(0) + sums_per_group(1));
    const std::uint64_t kv_base = kv == 0 ? 0 : per_layer_kv * sums_per_group(0);
    return layer_base + kv_base + (std::uint64_t{head} * blocks() + block) * sums_per_group(kv);
  }
  KVD_HOST_DEVICE std::uint32_t sum_offset(std::uint32_t kv, std::uint32_t t,
                                           std::uint32_t d) const {
    return kv == 0 ? t * dim_groups() + d / partition : d;
  }

  // ---- unquantized tokens: [layer][kv][u][head][dim] in the container's dtype ----
  KVD_HOST_DEVICE std::uint64_t unquantized_elements() const {
    return std::uint64_t{layers} * 2u * unquantized_tokens() * heads * dim;
  }
  KVD_HOST_DEVICE std::uint64_t unquantized_offset(std::uint32_t layer, std::uint32_t kv,
                                                   std::uint32_t u, std::uint32_t head,
                                                   std::uint32_t d) const {
    return (((std::uint64_t{layer} * 2u + kv) * unquantized_tokens() + u) * heads + head) * dim + d;
  }

  // Flat index of (layer, kv, token, head, d) in the chunk tensor (C order): the stochastic
  // rounding counter.
  KVD_HOST_DEVICE std::uint64_t element_index(std::uint32_t layer, std::uint32_t kv,
                                              std::uint32_t token, std::uint32_t head,
                                              std::uint32_t d) const {
    return (((std::uint64_t{layer} * 2u + kv) * tokens + token) * heads + head) * dim + d;
  }
};

// ---- 2-bit quantization ----

// A partition's quantizer: x ≈ min + scale * code. Both values are fp16-representable, scale >= 0
// and min + 3 * scale < 65520 (so every dequantized value is finite in fp16).
struct Quant {
  float scale;
  float min;
};

// The quantizer of a partition whose finite values lie in [mn, mx] (|mn|, |mx| <= 65504):
// min = the largest fp16 <= mn; scale = the smallest fp16 >= (mx - min) / 3, one fp16 ulp less
// when min + 3 * scale would reach 65520. A constant partition gets scale 0.
KVD_HOST_DEVICE Quant PartitionQuant(float mn, float mx) {
  const float lo = HalfBitsToFloat(cachegen::HalfRoundDown(mn));
  const std::uint16_t bits = cachegen::HalfRoundUp((mx - lo) / 3.0f);
  float scale = HalfBitsToFloat(bits);
  if (!(lo + 3.0f * scale < kFp16Overflow)) {
    scale = HalfBitsToFloat(static_cast<std::uint16_t>(bits - 1u));
  }
  return {scale, lo};
}

// Round-to-nearest code of x: clamp(rint((x - min) / scale), 0, 3) (ties to even); 0 when
// scale == 0.
KVD_HOST_DEVICE std::uint32_t QuantizeNearest(float x, Quant q) {
  if (!(q.scale > 0.0f)) return 0;
  const float r = rintf((x - q.min) / q.scale);
  if (!(r > 0.0f)) return 0;
  return r >= 3.0f ? kMaxCode : static_cast<std::uint32_t>(r);
}

// QuantizeNearest(x, q) >= k, for k in 1..3 and q.scale > 0, without the division. rint(fl(d / s))
// (d = fl(x - min), s = scale) reaches k exactly when d / s lies above the point where the
// correctly rounded quotient reaches k - 1/2 and rint takes it up: 0.5 + 2^-25 (strictly: the tie
// there rounds down to 0.5, whose rint is 0), 1.5 - 2^-24 (inclusive: that tie rounds up to 1.5,
// rint 2), 2.5 + 2^-23 (strictly). The point times s is exact in double (25 x 24 bits), so one
// double fused multiply-add gives d - point * s with its exact sign. Kernels search code
// thresholds with it (cuda/src/hack_quantize.cu); hack_test.cc checks it against QuantizeNearest
// on every 16-bit value.
KVD_HOST_DEVICE bool NearestCodeAtLeast(float x, Quant q, std::uint32_t k) {
  const double point = k == 1 ? 0.5 + 0x1p-25 : k == 2 ? 1.5 - 0x1p-24 : 2.5 + 0x1p-23;
  const double r = fma(-point, static_cast<double>(q.scale), static_cast<double>(x - q.min));
  return k == 2 ? r >= 0.0 : r > 0.0;
}

// Stochastic-rounding code of x with uniform u in [0, 1): clamp(floor((x - min) / scale + u), 0,
// 3), so that E[code] = (x - min) / scale inside the range; 0 when scale == 0.
KVD_HOST_DEVICE std::uint32_t QuantizeStochastic(float x, Quant q, float u) {
  if (!(q.scale > 0.0f)) return 0;
  const float r = floorf((x - q.min) / q.scale + u);
  if (!(r > 0.0f)) return 0;
  return r >= 3.0f ? kMaxCode : static_cast<std::uint32_t>(r);
}

// min + code * scale (the product is exact).
KVD_HOST_DEVICE float Dequantize(std::uint32_t code, Quant q) {
  return q.min + static_cast<float>(code) * q.scale;
}

// ---- counter-based RNG for stochastic rounding ----

// SplitMix64's output function (Steele, Lea, Flood 2014).
KVD_HOST_DEVICE std::uint64_t Mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// SplitMix64's state advances by this much per output.
inline constexpr std::uint64_t kStochasticStep = 0x9e3779b97f4a7c15ull;

// The uniform in [0, 1) of a SplitMix64 generator in state `state`: the top 24 bits of its
// output, times 2^-24. Exact in float.
KVD_HOST_DEVICE float StochasticUniformOfState(std::uint64_t state) {
  const std::uint64_t z = Mix64(state);
  return static_cast<float>(static_cast<std::uint32_t>(z >> 40)) * (1.0f / 16777216.0f);
}

// The uniform in [0, 1) that rounds element `index` (Layout::element_index) of a chunk encoded
// with `seed`: output index + 1 of a SplitMix64 generator seeded with `seed` (its state after n
// steps is seed + n * kStochasticStep).
KVD_HOST_DEVICE float StochasticUniform(std::uint64_t seed, std::uint64_t index) {
  return StochasticUniformOfState(seed + (index + 1u) * kStochasticStep);
}

// ---- INT8 quantization of Q and P (computed at attention time, never stored) ----

// Asymmetric unsigned 8-bit: x ≈ min + scale * code, code in 0..255, over values in [mn, mx].
// A code is the exact product (x - min) * inv, inv = 1 / scale, rounded once to the nearest
// integer (ties to even), where x - min and inv are rounded to float: a GPU computes the same code
// with one subtraction and one fused multiply-add (docs/hack-gpu.md, "Decode attention"); the
// product of two floats is exact in double.
struct Int8Quant {
  float scale;  // (mx - mn) / 255; 0 for a constant run
  float inv;    // 1 / scale (at most FLT_MAX); 0 when scale is 0
  float min;
};

KVD_HOST_DEVICE Int8Quant Int8Params(float mn, float mx) {
  const float scale = (mx - mn) / static_cast<float>(kMaxInt8Code);
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  return {scale, inv < 3.40282347e38f ? inv : 3.40282347e38f, mn};
}

inline std::uint32_t QuantizeInt8(float x, Int8Quant q) {
  const float d = x - q.min;
  const double r = nearbyint(static_cast<double>(d) * static_cast<double>(q.inv));
  if (!(r > 0.0)) return 0;
  return r >= 255.0 ? kMaxInt8Code : static_cast<std::uint32_t>(r);
}

// The homomorphic product of two asymmetrically quantized runs of n elements,
//   Σ_i (sa·a_i + ma)(sb·b_i + mb) = sa·sb·Σ a_i b_i + sa·mb·Σ a_i + ma·sb·Σ b_i + n·ma·mb,
// from the integer dot product of the codes and the two code sums (for a stored operand, the sum
// read from the `sums` section instead of recomputed). F is float (kernels) or double (reference).
template <typename F>
KVD_HOST_DEVICE F HomomorphicDot(std::int64_t dot, std::uint32_t sum_a, std::uint32_t sum_b,
                                 std::uint32_t n, F sa, F ma, F sb, F mb) {
  return sa * sb * static_cast<F>(dot) + sa * mb * static_cast<F>(sum_a) +
         ma * sb * static_cast<F>(sum_b) + static_cast<F>(n) * ma * mb;
}

}  // namespace kvdepot::hack
