#include "kvdepot/codec/codec_id.h"

#include <string>

namespace kvdepot {

std::string_view CodecName(CodecId codec) {
  switch (codec) {
    case CodecId::kRaw: return "raw";
    case CodecId::kCacheGen: return "cachegen";
    case CodecId::kHackInt2: return "hack-int2";
  }
  return "invalid";
}

Result<CodecId> ParseCodecName(std::string_view name) {
  if (name == "raw") return CodecId::kRaw;
  if (name == "cachegen") return CodecId::kCacheGen;
  if (name == "hack-int2") return CodecId::kHackInt2;
  return InvalidArgument("unknown codec '" + std::string(name) +
                         "' (expected raw, cachegen or hack-int2)");
}

bool IsValidCodecId(std::uint8_t raw) {
  return raw <= 2;
}

}  // namespace kvdepot
