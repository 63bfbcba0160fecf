// ssd_record: the SSD tier's on-disk decoders (daemon/src/ssd/record.h): the record header block,
// the RocksDB index entry and segment file names. Byte 0 picks the decoder; for the record
// header, bit 7 of byte 0 asks for the header checksum to be made right first (docs/durability.md
// gives its definition), so that mutations get past it.
#include <array>
#include <cstring>
#include <limits>
#include <string_view>

#include "fuzz_targets.h"
#include "kvdepot/base/byte_order.h"
#include "kvdepot/base/checksum.h"
#include "ssd/record.h"

namespace kvdepot::fuzz {
namespace ssd = daemon::ssd;

int FuzzSsdRecord(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t which = data[0];
  ++data;
  --size;
  switch (which % 3) {
    case 0: {
      alignas(64) static std::array<std::byte, ssd::kBlock> block;
      block.fill(std::byte{0});
      std::memcpy(block.data(), data, std::min(size, block.size()));
      if (which & 0x80) {
        const std::size_t key_len = LoadLE<std::uint16_t>(block.data() + 6);
        if (key_len <= ssd::kMaxRecordKey) {
          std::array<std::byte, 32 + ssd::kMaxRecordKey> covered;
          std::memcpy(covered.data(), block.data(), 32);
          std::memcpy(covered.data() + 32, block.data() + 64, key_len);
          StoreLE<std::uint64_t>(block.data() + 32,
                                 Checksum64(std::span(covered.data(), 32 + key_len)));
        }
      }
      auto h = ssd::DecodeRecordHeader(block);
      if (h.ok()) {
        if (h->key.empty() || h->key.size() > ssd::kMaxRecordKey) __builtin_trap();
        std::array<std::byte, ssd::kBlock> again;
        ssd::EncodeRecordHeader(*h, again);
        auto back = ssd::DecodeRecordHeader(again);
        if (!back.ok() || back->key != h->key || back->value_length != h->value_length) {
          __builtin_trap();
        }
      }
      break;
    }
    case 1: {
      auto loc = ssd::DecodeIndexEntry(std::string_view(reinterpret_cast<const char*>(data), size));
      if (loc.ok()) {
        // The tier computes offset + RecordBytes(value_length) for a decoded entry: a valid
        // entry must not make that overflow.
        const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
        if (loc->value_length > max - ssd::kRecordHeaderBytes - ssd::kBlock ||
            loc->offset > max - ssd::RecordBytes(loc->value_length)) {
          __builtin_trap();
        }
        if (ssd::DecodeIndexEntry(ssd::EncodeIndexEntry(*loc)).status().code() != StatusCode::kOk) {
          __builtin_trap();
        }
      }
      break;
    }
    case 2: {
      auto id =
          ssd::ParseSegmentFileName(std::string_view(reinterpret_cast<const char*>(data), size));
      if (id.ok() && ssd::SegmentFileName(*id) !=
                         std::string_view(reinterpret_cast<const char*>(data), size)) {
        // Upper-case hex is refused, so a parsed name is the canonical one.
        __builtin_trap();
      }
      break;
    }
  }
  return 0;
}

}  // namespace kvdepot::fuzz
