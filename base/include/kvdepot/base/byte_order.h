// Little-endian loads and stores on byte buffers (every kvdepot format and protocol is
// little-endian). Callers bound-check; these functions do not.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kvdepot {

static_assert(std::endian::native == std::endian::little,
              "kvdepot assumes a little-endian host (x86-64, AArch64)");

template <typename T>
inline T LoadLE(const std::byte* p) {
  static_assert(std::is_trivially_copyable_v<T>);
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
inline void StoreLE(std::byte* p, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace kvdepot
