// Deterministic payloads for the tests: n bytes from a 64-bit Mersenne Twister seeded with `seed`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kvdepot::test {

inline std::vector<std::byte> RandomBytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

}  // namespace kvdepot::test
