// lm_header: the lm:// listener's request header decoder (kvdepot/lm_wire.h), on exactly 186
// bytes (shorter inputs are zero-padded, longer ones cut) and on the raw length.
#include <array>
#include <cstring>

#include "fuzz_targets.h"
#include "kvdepot/lm_wire.h"

namespace kvdepot::fuzz {

int FuzzLmHeader(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> raw(reinterpret_cast<const std::byte*>(data), size);
  (void)lm::DecodeRequestHeader(raw, 64u << 20);
  std::array<std::byte, lm::kRequestHeaderBytes> header{};
  std::memcpy(header.data(), data, std::min(size, header.size()));
  auto r = lm::DecodeRequestHeader(header, 64u << 20);
  if (r.ok()) {
    if (r->key.size() > lm::kWireKeyBytes) __builtin_trap();
    if (r->command == lm::kCommandPut && (r->length < 0 || r->length > (64 << 20))) {
      __builtin_trap();
    }
    (void)lm::EncodeReplyHeader(lm::kReplySuccess, r->length, &r->meta);
  }
  return 0;
}

}  // namespace kvdepot::fuzz
