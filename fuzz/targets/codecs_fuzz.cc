// codecs: every decoder (raw, cachegen, hack-int2) through DecodeChunk on a container parsed
// without checksum verification, so that mutations reach the codec's own parsing instead of
// stopping at a checksum mismatch.
#include "fuzz_targets.h"
#include "kvdepot/codec.h"
#include "kvdepot/container.h"

namespace kvdepot::fuzz {

// Shapes that decode to more than this are skipped: the limits in tensor.h allow 1 GiB, which is
// correct but makes each run too slow to fuzz (the decoders' size checks are exercised anyway
// by smaller shapes).
constexpr std::uint64_t kMaxFuzzDecodedBytes = 16u << 20;

int FuzzCodecs(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  ParseOptions no_checksums;
  no_checksums.verify_checksums = false;
  auto view = ParseContainer(bytes, no_checksums);
  if (!view.ok()) return 0;
  if (view->header.shape.elements() * DTypeSize(view->header.dtype) > kMaxFuzzDecodedBytes) {
    return 0;
  }
  auto tensor = DecodeChunk(*view);
  if (tensor.ok() && !tensor->view().Validate().ok())
    __builtin_trap();  // a decoded tensor is whole
  return 0;
}

}  // namespace kvdepot::fuzz
