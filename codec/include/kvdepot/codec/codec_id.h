// Codec identifiers. The numeric values are stored in container headers and chunk namespaces and
// must never change; new codecs take new numbers.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvdepot/base/status.h"

namespace kvdepot {

enum class CodecId : std::uint8_t {
  kRaw = 0,       // passthrough of the original dtype
  kCacheGen = 1,  // quantization + entropy coding (CacheGen)
  kHackInt2 = 2,  // HACK 2-bit homomorphic quantization
};

// "raw", "cachegen", "hack-int2".
std::string_view CodecName(CodecId codec);
// Parses the names above.
Result<CodecId> ParseCodecName(std::string_view name);
// True for the values above (for validating bytes read from a file or a wire).
bool IsValidCodecId(std::uint8_t raw);

}  // namespace kvdepot
