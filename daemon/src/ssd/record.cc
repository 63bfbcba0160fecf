#include "ssd/record.h"

#include <cstdio>
#include <cstring>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/base/checksum.h"

namespace kvdepot::daemon::ssd {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'D', 'R'};
constexpr std::uint16_t kRecordVersion = 1;
constexpr std::uint16_t kIndexVersion = 1;
constexpr std::size_t kHeaderFixed = 40;  // bytes covered by the checksum before the key

std::uint64_t HeaderChecksum(std::span<const std::byte> block, std::size_t key_len) {
  // Fields 0..31 and the key; the checksum field itself (32..39) is skipped.
  std::byte buf[32 + kMaxRecordKey];
  std::memcpy(buf, block.data(), 32);
  std::memcpy(buf + 32, block.data() + 64, key_len);
  return Checksum64(std::span<const std::byte>(buf, 32 + key_len));
}

}  // namespace

void EncodeRecordHeader(const RecordHeader& h, std::span<std::byte, kBlock> out) {
  std::memset(out.data(), 0, kBlock);
  std::memcpy(out.data(), kMagic, 4);
  StoreLE<std::uint16_t>(out.data() + 4, kRecordVersion);
  StoreLE<std::uint16_t>(out.data() + 6, static_cast<std::uint16_t>(h.key.size()));
  StoreLE<std::uint64_t>(out.data() + 8, h.value_length);
  StoreLE<std::uint64_t>(out.data() + 16, h.value_checksum);
  StoreLE<std::uint64_t>(out.data() + 24, h.sequence);
  std::memcpy(out.data() + 64, h.key.data(), h.key.size());
  StoreLE<std::uint64_t>(out.data() + 32, HeaderChecksum(out, h.key.size()));
}

Result<RecordHeader> DecodeRecordHeader(std::span<const std::byte, kBlock> in) {
  if (std::memcmp(in.data(), kMagic, 4) != 0) return Corruption("ssd record: bad magic");
  if (LoadLE<std::uint16_t>(in.data() + 4) != kRecordVersion) {
    return Corruption("ssd record: unknown version " +
                      std::to_string(LoadLE<std::uint16_t>(in.data() + 4)));
  }
  const std::size_t key_len = LoadLE<std::uint16_t>(in.data() + 6);
  if (key_len == 0 || key_len > kMaxRecordKey) {
    return Corruption("ssd record: key length " + std::to_string(key_len) + " out of range");
  }
  if (LoadLE<std::uint64_t>(in.data() + 32) != HeaderChecksum(in, key_len)) {
    return Corruption("ssd record: header checksum mismatch");
  }
  RecordHeader h;
  h.key.assign(reinterpret_cast<const char*>(in.data() + 64), key_len);
  h.value_length = LoadLE<std::uint64_t>(in.data() + 8);
  h.value_checksum = LoadLE<std::uint64_t>(in.data() + 16);
  h.sequence = LoadLE<std::uint64_t>(in.data() + 24);
  static_assert(kHeaderFixed <= 64);
  return h;
}

std::string EncodeIndexEntry(const Location& loc) {
  std::string out(kIndexEntryBytes, '\0');
  auto* p = reinterpret_cast<std::byte*>(out.data());
  StoreLE<std::uint16_t>(p, kIndexVersion);
  StoreLE<std::uint64_t>(p + 8, loc.segment);
  StoreLE<std::uint64_t>(p + 16, loc.offset);
  StoreLE<std::uint64_t>(p + 24, loc.value_length);
  StoreLE<std::uint64_t>(p + 32, loc.checksum);
  return out;
}

Result<Location> DecodeIndexEntry(std::string_view bytes) {
  if (bytes.size() != kIndexEntryBytes) {
    return Corruption("ssd index entry of " + std::to_string(bytes.size()) + " bytes, expected " +
                      std::to_string(kIndexEntryBytes));
  }
  const auto* p = reinterpret_cast<const std::byte*>(bytes.data());
  if (LoadLE<std::uint16_t>(p) != kIndexVersion) return Corruption("ssd index entry: bad version");
  Location loc;
  loc.segment = LoadLE<std::uint64_t>(p + 8);
  loc.offset = LoadLE<std::uint64_t>(p + 16);
  loc.value_length = LoadLE<std::uint64_t>(p + 24);
  loc.checksum = LoadLE<std::uint64_t>(p + 32);
  if (loc.offset % kBlock != 0) return Corruption("ssd index entry: unaligned offset");
  if (loc.offset > kMaxSegmentBytes || loc.value_length > kMaxSegmentBytes) {
    return Corruption("ssd index entry: offset " + std::to_string(loc.offset) +
                      " or value length " + std::to_string(loc.value_length) +
                      " is beyond the largest segment (" + std::to_string(kMaxSegmentBytes) + ")");
  }
  return loc;
}

std::string SegmentFileName(std::uint64_t id) {
  char name[32];
  std::snprintf(name, sizeof(name), "seg-%016llx.kvs", static_cast<unsigned long long>(id));
  return name;
}

Result<std::uint64_t> ParseSegmentFileName(std::string_view name) {
  if (name.size() != 24 || name.substr(0, 4) != "seg-" || name.substr(20) != ".kvs") {
    return InvalidArgument("not a segment file name: " + std::string(name));
  }
  std::uint64_t id = 0;
  for (char c : name.substr(4, 16)) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return InvalidArgument("not a segment file name: " + std::string(name));
    id = id << 4 | static_cast<std::uint64_t>(d);
  }
  return id;
}

}  // namespace kvdepot::daemon::ssd
