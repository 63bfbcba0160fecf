#include "kvdepot/base/hex.h"

namespace kvdepot {
namespace {

constexpr char kDigits[] = "0123456789abcdef";

}  // namespace

std::string HexLower(std::span<const std::uint8_t> bytes) {
  std::string hex(2 * bytes.size(), '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    hex[2 * i] = kDigits[bytes[i] >> 4];
    hex[2 * i + 1] = kDigits[bytes[i] & 0x0f];
  }
  return hex;
}

std::string HexLower(std::string_view bytes) {
  return HexLower(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
}

std::string HexU64(std::uint64_t value) {
  std::string hex(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4)
    hex[static_cast<std::size_t>(i)] = kDigits[value & 0xf];
  return hex;
}

int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string bytes(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const int hi = HexDigitValue(hex[2 * i]), lo = HexDigitValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    bytes[i] = static_cast<char>(hi << 4 | lo);
  }
  return bytes;
}

void AppendHexEscape(std::string& out, unsigned char c) {
  out += "\\x";
  out += kDigits[c >> 4];
  out += kDigits[c & 0x0f];
}

}  // namespace kvdepot
