// The request and reply headers of LMCache's remote-server wire protocol (docs/lmcache.md, pinned
// to lmcache/v1/protocol.py), as the lm:// listener reads and writes them. Integers are int32,
// native-endian on LMCache's side; kvdepot reads and writes them little-endian (x86-64, aarch64).
// LMCache has used two layouts (Wire):
//
//   kCurrent  client -> server: command, length, fmt, dtype, location, shape[4], key (150 bytes,
//                               space padded) = 186 bytes, then `length` payload bytes for PUT
//             server -> client: code, length, fmt, dtype, shape[4], location = 36 bytes, then
//                               the payload
//   kLegacy   the same without `location`: 182-byte requests, 32-byte replies (LMCache before
//             `location` was added to its metadata messages; no HEALTH command)
//
// The two are told apart by a connection's first 36 bytes (DetectWire). Decoding is total: any
// header either decodes into a request the listener can act on, or gives kCorruption naming the
// field (the listener answers 400 and closes the connection: the stream cannot be
// resynchronised).
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvdepot/base/status.h"
#include "kvdepot/protocol/lm_value.h"

namespace kvdepot::lm {

inline constexpr std::size_t kWireKeyBytes = 150;
inline constexpr std::size_t kRequestHeaderBytes = 9 * 4 + kWireKeyBytes;        // 186
inline constexpr std::size_t kReplyHeaderBytes = 9 * 4;                          // 36
inline constexpr std::size_t kLegacyRequestHeaderBytes = 8 * 4 + kWireKeyBytes;  // 182
inline constexpr std::size_t kLegacyReplyHeaderBytes = 8 * 4;                    // 32
// What DetectWire needs: the first 36 bytes of a connection's first request.
inline constexpr std::size_t kWireProbeBytes = 36;

enum class Wire { kCurrent, kLegacy };
std::string_view WireName(Wire wire);  // "current", "legacy"
constexpr std::size_t RequestHeaderBytes(Wire wire) {
  return wire == Wire::kCurrent ? kRequestHeaderBytes : kLegacyRequestHeaderBytes;
}
constexpr std::size_t ReplyHeaderBytes(Wire wire) {
  return wire == Wire::kCurrent ? kReplyHeaderBytes : kLegacyReplyHeaderBytes;
}

// The layout of a request from its first kWireProbeBytes bytes. Bytes 32..35 are the current
// layout's shape[3] and the legacy layout's first four key bytes: kLegacy when all four are
// printable ASCII (0x20..0x7e), which as a current-layout shape dimension would be at least
// 0x20202020 (539 million) — no tensor dimension LMCache sends; kCurrent otherwise.
Wire DetectWire(std::span<const std::byte, kWireProbeBytes> first);

// Whether the first bytes are a request of LMCache's v0 remote protocol (`lmcache/protocol.py`:
// command, length, then the key at offset 8; pickled tensors), which kvdepot does not serve:
// bytes 8..11 (`fmt` in both v1 layouts, a small MemoryFormat value) are printable ASCII.
bool IsVersion0Request(std::span<const std::byte, kWireProbeBytes> first);

inline constexpr std::int32_t kCommandPut = 1, kCommandGet = 2, kCommandExist = 3, kCommandList = 4,
                              kCommandHealth = 5;
inline constexpr std::int32_t kReplySuccess = 200, kReplyFail = 400;

struct Request {
  std::int32_t command = 0;  // one of kCommand*
  // PUT: the payload length, >= 0 (the listener checks it against its limit: a payload over it
  // is read and dropped, so the stream stays in step); other commands: as sent (LMCache sends 0).
  std::int32_t length = 0;
  ValueHeader meta;  // location 0 from a kLegacy header
  std::string key;   // whitespace stripped on both ends, as LMCache's server does; may be empty
};

// Decodes one request header of `wire`'s layout. Errors (kCorruption): `bytes` not
// RequestHeaderBytes(wire) long, an unknown command, a negative PUT length.
Result<Request> DecodeRequestHeader(std::span<const std::byte> bytes, Wire wire);

// The reply header in the current layout; a kLegacy reply is its first kLegacyReplyHeaderBytes
// (the same fields without the trailing `location`). Replies without a value carry fmt 1 and
// dtype 2 (float16), as LMCache's server sends them; `meta` (may be null) replaces them for a GET
// hit.
std::array<std::byte, kReplyHeaderBytes> EncodeReplyHeader(std::int32_t code, std::int32_t length,
                                                           const ValueHeader* meta = nullptr);

}  // namespace kvdepot::lm
