// The chunk container's fixed header and section table as bytes (docs/format.md §1.1): the field
// offsets and the one writer of those bytes. Everything here is KVD_HOST_DEVICE, so that the CPU's
// ContainerWriter (codec/src/container.cc) and the GPU encoders, which build a container in device
// memory (cuda/src/cachegen_encode.cu), write the header through the same code.
//
// The writer leaves every checksum field zero: checksums are XXH3-64 over whole sections, computed
// on the host by SealContainer (container.h) once the sections are written.
//
// Thread-safety: pure functions over caller-owned bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvdepot/codec/numeric.h"

namespace kvdepot {

inline constexpr std::uint16_t kContainerVersion = 1;
inline constexpr std::size_t kContainerHeaderBytes = 64;
inline constexpr std::size_t kSectionEntryBytes = 32;
inline constexpr std::size_t kSectionAlignment = 64;
inline constexpr std::uint32_t kMaxSections = 16;
// "\x89KVD\r\n\x1a\n": the high byte and CR/LF/^Z catch 7-bit and text-mode transfers.
inline constexpr std::uint8_t kContainerMagic[8] = {0x89, 'K', 'V', 'D', 0x0D, 0x0A, 0x1A, 0x0A};
// The same eight bytes read as a little-endian u64 (what the writer stores: a constexpr scalar is
// usable in device code, an array is not).
inline constexpr std::uint64_t kContainerMagicLE = 0x0A1A0A0D44564B89ull;

namespace container_layout {

// Fixed-header field offsets.
inline constexpr std::size_t kOffMagic = 0;
inline constexpr std::size_t kOffVersion = 8;
inline constexpr std::size_t kOffHeaderBytes = 10;
inline constexpr std::size_t kOffCodec = 12;
inline constexpr std::size_t kOffDType = 13;
inline constexpr std::size_t kOffFlags = 14;
inline constexpr std::size_t kOffLayers = 16;
inline constexpr std::size_t kOffKv = 20;
inline constexpr std::size_t kOffTokens = 24;
inline constexpr std::size_t kOffKvHeads = 28;
inline constexpr std::size_t kOffHeadDim = 32;
inline constexpr std::size_t kOffSectionCount = 36;
inline constexpr std::size_t kOffTotalBytes = 40;
inline constexpr std::size_t kOffReserved = 48;
inline constexpr std::size_t kOffHeaderChecksum = 56;

// Section-entry field offsets (entry i starts at kContainerHeaderBytes + i * kSectionEntryBytes).
inline constexpr std::size_t kEntKind = 0;
inline constexpr std::size_t kEntFlags = 4;
inline constexpr std::size_t kEntOffset = 8;
inline constexpr std::size_t kEntLength = 16;
inline constexpr std::size_t kEntChecksum = 24;

// The header's fields other than magic, version, sizes and checksums. `codec` and `dtype` are the
// CodecId and DType values as stored.
struct HeaderFields {
  std::uint8_t codec = 0;
  std::uint8_t dtype = 0;
  std::uint32_t layers = 0;
  std::uint32_t tokens = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint64_t total_bytes = 0;  // the whole container, header to the end of the last section
};

struct SectionEntry {
  std::uint32_t kind = 0;  // a SectionKind value
  std::uint32_t flags = 0;
  std::uint64_t offset = 0;  // from the start of the container, a multiple of kSectionAlignment
  std::uint64_t length = 0;
};

// Stores the low `bytes` bytes of `v` at `p`, little-endian; no alignment needed.
KVD_HOST_DEVICE void StoreLittleEndian(std::byte* p, std::uint64_t v, std::uint32_t bytes) {
  for (std::uint32_t i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

// Writes the 64-byte fixed header and `count` section entries at `out` (which must hold
// kContainerHeaderBytes + count * kSectionEntryBytes bytes). Flags, reserved and checksum fields
// are written as zero. Validation of the values is the caller's (ContainerWriter::Create checks
// them on the CPU; the GPU encoders compute them from a validated shape).
KVD_HOST_DEVICE void WriteHeader(std::byte* out, const HeaderFields& h,
                                 const SectionEntry* sections, std::uint32_t count) {
  StoreLittleEndian(out + kOffMagic, kContainerMagicLE, 8);
  StoreLittleEndian(out + kOffVersion, kContainerVersion, 2);
  StoreLittleEndian(out + kOffHeaderBytes, kContainerHeaderBytes, 2);
  out[kOffCodec] = static_cast<std::byte>(h.codec);
  out[kOffDType] = static_cast<std::byte>(h.dtype);
  StoreLittleEndian(out + kOffFlags, 0, 2);
  StoreLittleEndian(out + kOffLayers, h.layers, 4);
  StoreLittleEndian(out + kOffKv, 2, 4);
  StoreLittleEndian(out + kOffTokens, h.tokens, 4);
  StoreLittleEndian(out + kOffKvHeads, h.kv_heads, 4);
  StoreLittleEndian(out + kOffHeadDim, h.head_dim, 4);
  StoreLittleEndian(out + kOffSectionCount, count, 4);
  StoreLittleEndian(out + kOffTotalBytes, h.total_bytes, 8);
  StoreLittleEndian(out + kOffReserved, 0, 8);
  StoreLittleEndian(out + kOffHeaderChecksum, 0, 8);
  for (std::uint32_t i = 0; i < count; ++i) {
    std::byte* e = out + kContainerHeaderBytes + std::size_t{i} * kSectionEntryBytes;
    StoreLittleEndian(e + kEntKind, sections[i].kind, 4);
    StoreLittleEndian(e + kEntFlags, sections[i].flags, 4);
    StoreLittleEndian(e + kEntOffset, sections[i].offset, 8);
    StoreLittleEndian(e + kEntLength, sections[i].length, 8);
    StoreLittleEndian(e + kEntChecksum, 0, 8);
  }
}

}  // namespace container_layout
}  // namespace kvdepot
