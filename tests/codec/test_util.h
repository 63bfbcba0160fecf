// Helpers shared by the codec tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/base/checksum.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot::testing {

// A tensor of random finite values (never all zeros: zeros hide unwritten outputs).
inline KvTensor RandomTensor(DType dtype, const KvShape& shape, std::uint64_t seed) {
  KvTensor t = KvTensor::Zeros(dtype, shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const std::uint64_t n = shape.elements();
  for (std::uint64_t i = 0; i < n; ++i) {
    const float f = dist(rng);
    if (dtype == DType::kFloat32) {
      std::memcpy(t.data.data() + i * 4, &f, 4);
    } else {
      const std::uint16_t h = dtype == DType::kFloat16 ? FloatToHalfBits(f) : FloatToBf16Bits(f);
      std::memcpy(t.data.data() + i * 2, &h, 2);
    }
  }
  return t;
}

// Recomputes the header checksum of a container whose header or table was patched, so tests can
// reach the field checks behind it.
inline void ResealHeader(std::vector<std::byte>& c) {
  const auto sections = LoadLE<std::uint32_t>(c.data() + 36);
  Checksum64Builder b;
  b.Update(std::span<const std::byte>(c).first(56));
  const std::size_t table = std::size_t{sections} * kSectionEntryBytes;
  if (c.size() >= kContainerHeaderBytes + table) {
    b.Update(std::span<const std::byte>(c).subspan(kContainerHeaderBytes, table));
  }
  StoreLE<std::uint64_t>(c.data() + 56, b.Digest());
}

}  // namespace kvdepot::testing

namespace kvdepot::testing {

// Recomputes every section checksum and then the header checksum, so that tests reach the
// codec's own structural checks behind them.
inline void ResealAll(std::vector<std::byte>& c) {
  const auto sections = LoadLE<std::uint32_t>(c.data() + 36);
  for (std::uint32_t i = 0; i < sections; ++i) {
    std::byte* e = c.data() + kContainerHeaderBytes + i * kSectionEntryBytes;
    const auto offset = LoadLE<std::uint64_t>(e + 8);
    const auto length = LoadLE<std::uint64_t>(e + 16);
    StoreLE<std::uint64_t>(e + 24,
                           Checksum64(std::span<const std::byte>(c).subspan(offset, length)));
  }
  ResealHeader(c);
}

}  // namespace kvdepot::testing
