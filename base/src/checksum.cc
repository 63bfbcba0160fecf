#include "kvdepot/base/checksum.h"

// Header-only xxHash: kvdepot_codec has no run-time dependency on libxxhash, so GPU test binaries
// built here run on machines without it.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvdepot {

std::uint64_t Checksum64(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

Checksum64Builder::Checksum64Builder() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Checksum64Builder::~Checksum64Builder() {
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void Checksum64Builder::Update(std::span<const std::byte> bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}

std::uint64_t Checksum64Builder::Digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

}  // namespace kvdepot
