// Hexadecimal text: the one encoder and decoder every kvdepot library uses (chunk keys, namespace
// ids, checksums in messages, escaped bytes in logs and error messages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvdepot {

// Two lowercase hex digits per byte, in order.
std::string HexLower(std::span<const std::uint8_t> bytes);
std::string HexLower(std::string_view bytes);

// `value` as exactly 16 lowercase hex digits, most significant first.
std::string HexU64(std::uint64_t value);

// The value of one hex digit (either case), or -1 when `c` is not one.
int HexDigitValue(char c);

// The bytes that `hex` (an even number of hex digits, either case) spells; nullopt otherwise.
std::optional<std::string> HexDecode(std::string_view hex);

// Appends `\xNN` (lowercase) for byte `c`: how logs and error messages show unprintable bytes.
void AppendHexEscape(std::string& out, unsigned char c);

}  // namespace kvdepot
