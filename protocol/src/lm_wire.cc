#include "kvdepot/protocol/lm_wire.h"

#include <string_view>

#include "kvdepot/base/byte_order.h"

namespace kvdepot::lm {
namespace {

std::int32_t LoadI32(const std::byte* p) {
  return static_cast<std::int32_t>(LoadLE<std::uint32_t>(p));
}

void StoreI32(std::byte* p, std::int32_t v) {
  StoreLE<std::uint32_t>(p, static_cast<std::uint32_t>(v));
}

}  // namespace

std::string_view WireName(Wire wire) {
  return wire == Wire::kCurrent ? "current" : "legacy";
}

namespace {

// Whether the four bytes at `offset` are printable ASCII (0x20..0x7e): key text, which as an
// int32 field of either v1 layout would be at least 0x20202020.
bool PrintableWord(std::span<const std::byte, kWireProbeBytes> bytes, std::size_t offset) {
  for (std::size_t i = offset; i < offset + 4; ++i) {
    const auto c = std::to_integer<unsigned>(bytes[i]);
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

Wire DetectWire(std::span<const std::byte, kWireProbeBytes> first) {
  return PrintableWord(first, 32) ? Wire::kLegacy : Wire::kCurrent;
}

bool IsVersion0Request(std::span<const std::byte, kWireProbeBytes> first) {
  return PrintableWord(first, 8);
}

Result<Request> DecodeRequestHeader(std::span<const std::byte> bytes, Wire wire) {
  if (bytes.size() != RequestHeaderBytes(wire)) {
    return Corruption("lm: " + std::string(WireName(wire)) + " request header of " +
                      std::to_string(bytes.size()) + " bytes, expected " +
                      std::to_string(RequestHeaderBytes(wire)));
  }
  // The legacy layout is the current one without `location` (offset 16): shape and key move up
  // by 4 bytes.
  const std::size_t shift = wire == Wire::kCurrent ? 0 : 4;
  Request r;
  r.command = LoadI32(&bytes[0]);
  r.length = LoadI32(&bytes[4]);
  if (r.command < kCommandPut || r.command > kCommandHealth) {
    return Corruption("lm: request field 'command' = " + std::to_string(r.command) +
                      " is not a known command [1, 5]");
  }
  if (r.command == kCommandPut && r.length < 0) {
    return Corruption("lm: PUT field 'length' = " + std::to_string(r.length) + " is negative");
  }
  r.meta.fmt = LoadI32(&bytes[8]);
  r.meta.dtype = LoadI32(&bytes[12]);
  r.meta.location = wire == Wire::kCurrent ? LoadI32(&bytes[16]) : 0;
  for (std::size_t i = 0; i < 4; ++i) r.meta.shape[i] = LoadI32(&bytes[20 - shift + 4 * i]);
  std::string_view key(reinterpret_cast<const char*>(&bytes[36 - shift]), kWireKeyBytes);
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
