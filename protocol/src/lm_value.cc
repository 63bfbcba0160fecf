#include "kvdepot/protocol/lm_value.h"

#include "kvdepot/base/byte_order.h"
#include "kvdepot/protocol/sha256.h"

namespace kvdepot::lm {

Result<std::string> NamespaceId(std::string_view name) {
  if (name.empty() || name.size() > 256) {
    return InvalidArgument("lmcache namespace name of " + std::to_string(name.size()) +
                           " bytes is out of range [1, 256]");
  }
  static constexpr std::string_view kDomain{"kvdepot.lm.v1\0", 14};
  std::byte len[4];
  StoreLE<std::uint32_t>(len, static_cast<std::uint32_t>(name.size()));
  Sha256 h;
  h.Update(std::as_bytes(std::span(kDomain.data(), kDomain.size())));
  h.Update(len);
  h.Update(std::as_bytes(std::span(name.data(), name.size())));
  const Sha256Digest d = h.Finish();
  return std::string(reinterpret_cast<const char*>(d.data()), kNamespaceIdBytes);
}

void EncodeValueHeader(const ValueHeader& header, std::byte* out) {
  StoreLE<std::uint32_t>(out, kValueMagic);
  StoreLE<std::uint32_t>(out + 4, static_cast<std::uint32_t>(header.fmt));
  StoreLE<std::uint32_t>(out + 8, static_cast<std::uint32_t>(header.dtype));
  StoreLE<std::uint32_t>(out + 12, static_cast<std::uint32_t>(header.location));
  for (std::size_t i = 0; i < 4; ++i) {
    StoreLE<std::uint32_t>(out + 16 + 4 * i, static_cast<std::uint32_t>(header.shape[i]));
  }
}

Result<ValueHeader> DecodeValueHeader(std::span<const std::byte> value) {
  if (value.size() < kValueHeaderBytes) {
    return Corruption("lmcache value of " + std::to_string(value.size()) +
                      " bytes is shorter than its 32-byte header");
  }
  if (LoadLE<std::uint32_t>(value.data()) != kValueMagic) {
    return Corruption("lmcache value header: bad magic (not stored through an LMCache front end)");
  }
  ValueHeader h;
  h.fmt = static_cast<std::int32_t>(LoadLE<std::uint32_t>(value.data() + 4));
  h.dtype = static_cast<std::int32_t>(LoadLE<std::uint32_t>(value.data() + 8));
  h.location = static_cast<std::int32_t>(LoadLE<std::uint32_t>(value.data() + 12));
  for (std::size_t i = 0; i < 4; ++i) {
    h.shape[i] = static_cast<std::int32_t>(LoadLE<std::uint32_t>(value.data() + 16 + 4 * i));
  }
  return h;
}

}  // namespace kvdepot::lm
