// How kvdepot stores chunks that come from LMCache (docs/lmcache.md): the key namespace shared by
// the lm:// listener, the native-backend library (libkvdepot_lmcache.so) and the Python adapter,
// and the fixed header kept in front of each value so that LMCache's metadata (memory format,
// dtype, shape, location) comes back with the bytes.
//
// Stored key:   namespace id (16 bytes) ‖ LMCache key bytes (1..150 on the lm:// wire).
// Stored value: a 32-byte LmValueHeader (little-endian, below) ‖ the payload LMCache sent.
//
// This is a persistent format (the SSD tier keeps values): changing it means a new magic.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvdepot/base/status.h"

namespace kvdepot::lm {

inline constexpr std::size_t kNamespaceIdBytes = 16;
inline constexpr std::size_t kValueHeaderBytes = 32;
inline constexpr std::string_view kDefaultNamespace = "lmcache";
// "KVLM" read as a little-endian u32.
inline constexpr std::uint32_t kValueMagic = 0x4d4c564bu;

// LMCache's metadata of one chunk, as its wire protocol carries it (signed 32-bit integers; the
// meaning of the codes is LMCache's: MemoryFormat, DTYPE_TO_INT, LOCATION_TO_INT). kvdepot stores
// and echoes them without interpreting them. All zero means "not known" (chunks stored by the
// native-backend library, which receives bytes only).
struct ValueHeader {
  std::int32_t fmt = 0;
  std::int32_t dtype = 0;
  std::int32_t location = 0;
  std::array<std::int32_t, 4> shape{};
};

// The 16-byte namespace id of an LMCache namespace name (any bytes, 1..256):
// SHA-256("kvdepot.lm.v1" ‖ 0x00 ‖ u32le(len) ‖ name)[0..16). Distinct from every chunk-key
// namespace (whose digests use the domain "kvdepot.ns.v1"). Empty or too long: InvalidArgument.
Result<std::string> NamespaceId(std::string_view name);

// Layout: u32 magic, i32 fmt, i32 dtype, i32 location, i32 shape[4], all little-endian.
void EncodeValueHeader(const ValueHeader& header, std::byte* out /* kValueHeaderBytes */);

// Corruption when `value` is shorter than the header or its magic is wrong (e.g. a native client
// wrote into the namespace).
Result<ValueHeader> DecodeValueHeader(std::span<const std::byte> value);

}  // namespace kvdepot::lm
