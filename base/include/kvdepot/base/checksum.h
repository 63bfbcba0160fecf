// The checksum of the container format: XXH3-64 (xxHash 0.8, XXH3_64bits, seed 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvdepot {

std::uint64_t Checksum64(std::span<const std::byte> bytes);

// Incremental form: Checksum64 of the concatenation of every Update.
class Checksum64Builder {
 public:
  Checksum64Builder();
  ~Checksum64Builder();
  Checksum64Builder(const Checksum64Builder&) = delete;
  Checksum64Builder& operator=(const Checksum64Builder&) = delete;

  void Update(std::span<const std::byte> bytes);
  std::uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

}  // namespace kvdepot
