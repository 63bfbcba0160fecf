#include "kvdepot/lm_wire.h"

#include <string_view>

#include "kvdepot/byte_order.h"

namespace kvdepot::lm {
namespace {

std::int32_t LoadI32(const std::byte* p) {
  return static_cast<std::int32_t>(LoadLE<std::uint32_t>(p));
}

void StoreI32(std::byte* p, std::int32_t v) {
  StoreLE<std::uint32_t>(p, static_cast<std::uint32_t>(v));
}

}  // namespace

Result<Request> DecodeRequestHeader(std::span<const std::byte> bytes,
                                    std::uint64_t max_value_bytes) {
  if (bytes.size() != kRequestHeaderBytes) {
    return Corruption("lm: request header of " + std::to_string(bytes.size()) +
                      " bytes, expected " + std::to_string(kRequestHeaderBytes));
  }
  Request r;
  r.command = LoadI32(&bytes[0]);
  r.length = LoadI32(&bytes[4]);
  if (r.command < kCommandPut || r.command > kCommandHealth) {
    return Corruption("lm: request field 'command' = " + std::to_string(r.command) +
                      " is not a known command [1, 5]");
  }
  if (r.command == kCommandPut &&
      (r.length < 0 || static_cast<std::uint64_t>(r.length) > max_value_bytes)) {
    return Corruption("lm: PUT field 'length' = " + std::to_string(r.length) +
                      " is out of range [0, " + std::to_string(max_value_bytes) + "]");
  }
  r.meta.fmt = LoadI32(&bytes[8]);
  r.meta.dtype = LoadI32(&bytes[12]);
  r.meta.location = LoadI32(&bytes[16]);
  for (std::size_t i = 0; i < 4; ++i) r.meta.shape[i] = LoadI32(&bytes[20 + 4 * i]);
  std::string_view key(reinterpret_cast<const char*>(&bytes[36]), kWireKeyBytes);
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  const auto first = key.find_first_not_of(kSpace);
  if (first != std::string_view::npos) {
    r.key = std::string(key.substr(first, key.find_last_not_of(kSpace) - first + 1));
  }
  return r;
}

std::array<std::byte, kReplyHeaderBytes> EncodeReplyHeader(std::int32_t code, std::int32_t length,
                                                           const ValueHeader* meta) {
  ValueHeader m;
  m.fmt = 1;
  m.dtype = 2;
  if (meta != nullptr) m = *meta;
  std::array<std::byte, kReplyHeaderBytes> out{};
  StoreI32(&out[0], code);
  StoreI32(&out[4], length);
  StoreI32(&out[8], m.fmt);
  StoreI32(&out[12], m.dtype);
  for (std::size_t i = 0; i < 4; ++i) StoreI32(&out[16 + 4 * i], m.shape[i]);
  StoreI32(&out[32], m.location);
  return out;
}

}  // namespace kvdepot::lm
