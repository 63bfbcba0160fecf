// The request and reply headers of LMCache's remote-server wire protocol (docs/lmcache.md, pinned
// to lmcache/v1/protocol.py), as the lm:// listener reads and writes them. Integers are int32,
// native-endian on LMCache's side; kvdepot reads and writes them little-endian (x86-64, aarch64).
//
//   client -> server: command, length, fmt, dtype, location, shape[4], key (150 bytes, space
//                     padded) = 186 bytes, then `length` payload bytes for PUT
//   server -> client: code, length, fmt, dtype, shape[4], location = 36 bytes, then the payload
//
// Decoding is total: any 186 bytes either decode into a request the listener can act on, or give
// kCorruption naming the field (the listener answers 400 and closes the connection: the stream
// cannot be resynchronised).
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kvdepot/lm_value.h"
#include "kvdepot/status.h"

namespace kvdepot::lm {

inline constexpr std::size_t kWireKeyBytes = 150;
inline constexpr std::size_t kRequestHeaderBytes = 9 * 4 + kWireKeyBytes;  // 186
inline constexpr std::size_t kReplyHeaderBytes = 9 * 4;                    // 36

inline constexpr std::int32_t kCommandPut = 1, kCommandGet = 2, kCommandExist = 3, kCommandList = 4,
                              kCommandHealth = 5;
inline constexpr std::int32_t kReplySuccess = 200, kReplyFail = 400;

struct Request {
  std::int32_t command = 0;  // one of kCommand*
  // PUT: the payload length, in [0, max_value_bytes]; other commands: as sent (LMCache sends 0).
  std::int32_t length = 0;
  ValueHeader meta;
  std::string key;  // whitespace stripped on both ends, as LMCache's server does; may be empty
};

// Decodes one request header. Errors (kCorruption): `bytes` not kRequestHeaderBytes long, an
// unknown command, a PUT length that is negative or above `max_value_bytes`.
Result<Request> DecodeRequestHeader(std::span<const std::byte> bytes,
                                    std::uint64_t max_value_bytes);

// The reply header. Replies without a value carry fmt 1 and dtype 2 (float16), as LMCache's
// server sends them; `meta` (may be null) replaces them for a GET hit.
std::array<std::byte, kReplyHeaderBytes> EncodeReplyHeader(std::int32_t code, std::int32_t length,
                                                           const ValueHeader* meta = nullptr);

}  // namespace kvdepot::lm
