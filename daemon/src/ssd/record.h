// On-disk formats of the SSD tier (docs/durability.md §Formats): the record written for each value
// in a segment file, and the index entry RocksDB keeps for each key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvdepot/base/status.h"

namespace kvdepot::daemon::ssd {

inline constexpr std::size_t kBlock = 4096;
inline constexpr std::size_t kRecordHeaderBytes = kBlock;  // the header block precedes the value
inline constexpr std::size_t kMaxRecordKey = kBlock - 64;
inline constexpr std::uint32_t kIndexEntryBytes = 40;
// The largest segment file the configuration allows (ssd.segment_size): no record can start or
// end past it, so a decoded index entry's offset + RecordBytes(value_length) cannot overflow.
inline constexpr std::uint64_t kMaxSegmentBytes = std::uint64_t{1} << 40;

inline constexpr std::uint64_t RoundUpBlock(std::uint64_t n) {
  return (n + kBlock - 1) / kBlock * kBlock;
}
// Bytes a record of `value_length` occupies in a segment.
inline constexpr std::uint64_t RecordBytes(std::uint64_t value_length) {
  return kRecordHeaderBytes + RoundUpBlock(value_length);
}

struct RecordHeader {
  std::string key;
  std::uint64_t value_length = 0;
  std::uint64_t value_checksum = 0;  // XXH3-64 of the value bytes
  std::uint64_t sequence = 0;        // write order within the tier
};

// Writes the header block (kBlock bytes, zero-filled past the key). Precondition: key length in
// [1, kMaxRecordKey].
void EncodeRecordHeader(const RecordHeader& h, std::span<std::byte, kBlock> out);
// Parses and verifies a header block; kCorruption naming the field that is wrong.
Result<RecordHeader> DecodeRecordHeader(std::span<const std::byte, kBlock> in);

// Where a key's value lives.
struct Location {
  std::uint64_t segment = 0;
  std::uint64_t offset = 0;  // of the record (its header block)
  std::uint64_t value_length = 0;
  std::uint64_t checksum = 0;
};
std::string EncodeIndexEntry(const Location& loc);
// kCorruption for a wrong size or version, an unaligned offset, or an offset or value length
// beyond kMaxSegmentBytes.
Result<Location> DecodeIndexEntry(std::string_view bytes);

// "seg-<16 hex digits>.kvs" and back (nullopt-like kInvalidArgument for other names).
std::string SegmentFileName(std::uint64_t id);
Result<std::uint64_t> ParseSegmentFileName(std::string_view name);

}  // namespace kvdepot::daemon::ssd
