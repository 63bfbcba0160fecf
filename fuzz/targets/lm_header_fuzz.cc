// lm_header: the lm:// listener's request header decoder (kvdepot/protocol/lm_wire.h), in both
// layouts: the layout DetectWire picks, on exactly that many bytes (shorter inputs are zero-padded,
// longer ones cut), and each layout on the raw length.
#include <array>
#include <cstring>

#include "fuzz_targets.h"
#include "kvdepot/protocol/lm_wire.h"

namespace kvdepot::fuzz {

int FuzzLmHeader(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> raw(reinterpret_cast<const std::byte*>(data), size);
  (void)lm::DecodeRequestHeader(raw, lm::Wire::kCurrent);
  (void)lm::DecodeRequestHeader(raw, lm::Wire::kLegacy);
  std::array<std::byte, lm::kRequestHeaderBytes> header{};
  std::memcpy(header.data(), data, std::min(size, header.size()));
  const lm::Wire wire = lm::DetectWire(
      std::span<const std::byte, lm::kWireProbeBytes>(header.data(), lm::kWireProbeBytes));
  auto r = lm::DecodeRequestHeader(std::span(header.data(), lm::RequestHeaderBytes(wire)), wire);
  if (r.ok()) {
    if (r->key.size() > lm::kWireKeyBytes) __builtin_trap();
    if (r->command == lm::kCommandPut && r->length < 0) __builtin_trap();
    if (wire == lm::Wire::kLegacy && r->meta.location != 0) __builtin_trap();
    (void)lm::EncodeReplyHeader(lm::kReplySuccess, r->length, &r->meta);
  }
  return 0;
}

}  // namespace kvdepot::fuzz
