// KV tensors: element types, the logical chunk shape [layers, 2 (K,V), tokens, kv_heads, head_dim],
// and owning / non-owning tensor values. Data is always C order, little-endian.
//
// Thread-safety: plain values; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"

namespace kvdepot {

// Element type of the original (unencoded) KV. The numeric values are stored in the container
// header and must never change.
enum class DType : std::uint8_t {
  kFloat16 = 1,   // IEEE 754 binary16
  kBFloat16 = 2,  // bfloat16 (upper half of binary32)
  kFloat32 = 3,   // IEEE 754 binary32
};

// "fp16", "bf16", "fp32".
std::string_view DTypeName(DType dtype);
// Accepts "fp16"/"float16"/"f16", "bf16"/"bfloat16", "fp32"/"float32"/"f32".
Result<DType> ParseDType(std::string_view name);
// Bytes per element: 2, 2, 4. Precondition: a valid DType.
std::size_t DTypeSize(DType dtype);
// True for the three values above (for validating bytes read from a file or a wire).
bool IsValidDType(std::uint8_t raw);

// Bounds every kvdepot component accepts for a chunk. They keep hostile input from driving large
// allocations: a shape within them decodes to at most kMaxDecodedBytes.
inline constexpr std::uint32_t kMaxLayers = 1024;
inline constexpr std::uint32_t kMaxTokens = 65536;
inline constexpr std::uint32_t kMaxKvHeads = 1024;
inline constexpr std::uint32_t kMaxHeadDim = 1024;
inline constexpr std::uint64_t kMaxDecodedBytes = std::uint64_t{1} << 30;  // 1 GiB

// Logical shape [layers, 2, tokens, kv_heads, head_dim]; the K/V axis is always 2.
struct KvShape {
  std::uint32_t layers = 0;
  std::uint32_t tokens = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;

  std::uint64_t elements() const {
    return std::uint64_t{layers} * 2 * tokens * kv_heads * head_dim;
  }
  // "[2, 2, 256, 4, 16]"
  std::string ToString() const;
  friend bool operator==(const KvShape&, const KvShape&) = default;
};

// "[layer, kv, token, head, dim]": how error messages name one element of a KV tensor, from its
// coordinates or from its flat (C order) index in a tensor of `shape`.
std::string ElementPosition(std::uint32_t layer, std::uint32_t kv, std::uint32_t token,
                            std::uint32_t head, std::uint32_t dim);
std::string ElementPosition(const KvShape& shape, std::uint64_t index);

// OK when every dimension is within [1, its kMax*] and elements * DTypeSize(dtype) is at most
// kMaxDecodedBytes; otherwise kOutOfRange naming the dimension ("tokens = 0 is out of range
// [1, 65536]").
Status ValidateShape(const KvShape& shape, DType dtype);

// A non-owning view of a C-order tensor. Invariant (checked by Validate): data.size() ==
// shape.elements() * DTypeSize(dtype).
struct KvTensorView {
  DType dtype = DType::kFloat16;
  KvShape shape;
  std::span<const std::byte> data;

  Status Validate() const;
};

// An owning tensor.
struct KvTensor {
  DType dtype = DType::kFloat16;
  KvShape shape;
  std::vector<std::byte> data;

  // A zero-filled tensor. Precondition: ValidateShape(shape, dtype).ok().
  static KvTensor Zeros(DType dtype, const KvShape& shape);

  KvTensorView view() const { return {dtype, shape, data}; }
};

// Element-wise conversion between dtypes (round-to-nearest-even, NaN stays NaN, see numeric.h).
// Converting to the same dtype copies.
Result<KvTensor> ConvertDType(const KvTensorView& in, DType to);

// Element i of `t` as float (for comparisons and statistics). Precondition: i < elements.
float ElementAsFloat(const KvTensorView& t, std::uint64_t i);

}  // namespace kvdepot
