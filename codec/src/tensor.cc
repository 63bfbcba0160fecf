#include "kvdepot/codec/tensor.h"

#include <cstring>
#include <initializer_list>
#include <string>

#include "kvdepot/codec/numeric.h"

namespace kvdepot {

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat32: return "fp32";
  }
  return "invalid";
}

Result<DType> ParseDType(std::string_view name) {
  if (name == "fp16" || name == "float16" || name == "f16") return DType::kFloat16;
  if (name == "bf16" || name == "bfloat16") return DType::kBFloat16;
  if (name == "fp32" || name == "float32" || name == "f32") return DType::kFloat32;
  return InvalidArgument("unknown dtype '" + std::string(name) + "' (expected fp16, bf16 or fp32)");
}

std::size_t DTypeSize(DType dtype) {
  return dtype == DType::kFloat32 ? 4 : 2;
}

bool IsValidDType(std::uint8_t raw) {
  return raw >= 1 && raw <= 3;
}

namespace {
// "[a, b, ...]", appended piecewise (GCC 12 -O3 warns falsely on "[" + std::to_string(...)).
std::string Bracketed(std::initializer_list<std::uint64_t> values) {
  std::string out = "[";
  for (const std::uint64_t v : values) {
    if (out.size() > 1) out += ", ";
    out += std::to_string(v);
  }
  return out + "]";
}
}  // namespace

std::string KvShape::ToString() const {
  return Bracketed({layers, 2, tokens, kv_heads, head_dim});
}

std::string ElementPosition(std::uint32_t layer, std::uint32_t kv, std::uint32_t token,
                            std::uint32_t head, std::uint32_t dim) {
  return Bracketed({layer, kv, token, head, dim});
}

std::string ElementPosition(const KvShape& shape, std::uint64_t index) {
  const std::uint64_t d = index % shape.head_dim;
  index /= shape.head_dim;
  const std::uint64_t h = index % shape.kv_heads;
  index /= shape.kv_heads;
  const std::uint64_t t = index % shape.tokens;
  index /= shape.tokens;
  return Bracketed({index / 2, index % 2, t, h, d});
}

namespace {
Status CheckDim(const char* name, std::uint32_t value, std::uint32_t max) {
  if (value >= 1 && value <= max) return Status::Ok();
  return OutOfRange(std::string(name) + " = " + std::to_string(value) + " is out of range [1, " +
                    std::to_string(max) + "]");
}
}  // namespace

Status ValidateShape(const KvShape& shape, DType dtype) {
  KVD_RETURN_IF_ERROR(CheckDim("layers", shape.layers, kMaxLayers));
  KVD_RETURN_IF_ERROR(CheckDim("tokens", shape.tokens, kMaxTokens));
  KVD_RETURN_IF_ERROR(CheckDim("kv_heads", shape.kv_heads, kMaxKvHeads));
  KVD_RETURN_IF_ERROR(CheckDim("head_dim", shape.head_dim, kMaxHeadDim));
  const std::uint64_t bytes = shape.elements() * DTypeSize(dtype);
  if (bytes > kMaxDecodedBytes) {
    return OutOfRange("shape " + shape.ToString() + " in " + std::string(DTypeName(dtype)) +
                      " is " + std::to_string(bytes) + " bytes, over the limit of " +
                      std::to_string(kMaxDecodedBytes));
  }
  return Status::Ok();
}

Status KvTensorView::Validate() const {
  if (!IsValidDType(static_cast<std::uint8_t>(dtype))) return InvalidArgument("invalid dtype");
  KVD_RETURN_IF_ERROR(ValidateShape(shape, dtype));
  const std::uint64_t want = shape.elements() * DTypeSize(dtype);
  if (data.size() != want) {
    return InvalidArgument("tensor of shape " + shape.ToString() + " in " +
                           std::string(DTypeName(dtype)) + " needs " + std::to_string(want) +
                           " bytes, got " + std::to_string(data.size()));
  }
  return Status::Ok();
}

KvTensor KvTensor::Zeros(DType dtype, const KvShape& shape) {
  KvTensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.data.assign(shape.elements() * DTypeSize(dtype), std::byte{0});
  return t;
}

float ElementAsFloat(const KvTensorView& t, std::uint64_t i) {
  if (t.dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, t.data.data() + i * 4, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, t.data.data() + i * 2, 2);
  return t.dtype == DType::kFloat16 ? HalfBitsToFloat(h) : Bf16BitsToFloat(h);
}

Result<KvTensor> ConvertDType(const KvTensorView& in, DType to) {
  KVD_RETURN_IF_ERROR(in.Validate());
  KvTensor out = KvTensor::Zeros(to, in.shape);
  if (in.dtype == to) {
    std::memcpy(out.data.data(), in.data.data(), in.data.size());
    return out;
  }
  const std::uint64_t n = in.shape.elements();
  std::byte* dst = out.data.data();
  for (std::uint64_t i = 0; i < n; ++i) {
    const float f = ElementAsFloat(in, i);
    if (to == DType::kFloat32) {
      std::memcpy(dst + i * 4, &f, 4);
    } else {
      const std::uint16_t h = to == DType::kFloat16 ? FloatToHalfBits(f) : FloatToBf16Bits(f);
      std::memcpy(dst + i * 2, &h, 2);
    }
  }
  return out;
}

}  // namespace kvdepot
