#include "kvdepot/codec/container.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/base/checksum.h"
#include "kvdepot/base/hex.h"

namespace kvdepot {
namespace {

using namespace container_layout;  // field offsets

constexpr std::uint64_t AlignUp(std::uint64_t v) {
  return (v + kSectionAlignment - 1) & ~std::uint64_t{kSectionAlignment - 1};
}

std::uint64_t TableEnd(std::uint32_t section_count) {
  return kContainerHeaderBytes + std::uint64_t{section_count} * kSectionEntryBytes;
}

// Checksum of the fixed header up to (not including) the checksum field, then the section table.
std::uint64_t ComputeHeaderChecksum(std::span<const std::byte> bytes, std::uint32_t sections) {
  Checksum64Builder builder;
  builder.Update(bytes.first(kOffHeaderChecksum));
  builder.Update(bytes.subspan(kContainerHeaderBytes, sections * kSectionEntryBytes));
  return builder.Digest();
}

Status Bad(const std::string& what) {
  return Corruption("container: " + what);
}

std::string SectionLabel(std::size_t i, std::uint32_t kind) {
  return "section " + std::to_string(i) + " (" + std::string(SectionKindName(kind)) + ")";
}

}  // namespace

std::string_view SectionKindName(std::uint32_t kind) {
  switch (kind) {
    case 1: return "params";
    case 2: return "payload";
    case 3: return "tables";
    case 4: return "scales";
    case 5: return "codes";
    case 6: return "sums";
    case 7: return "tail";
    case 8: return "index";
    case 9: return "metadata";
    default: return "unknown";
  }
}

const SectionView* ContainerView::Find(SectionKind kind) const {
  for (const SectionView& s : sections) {
    if (s.kind == static_cast<std::uint32_t>(kind)) return &s;
  }
  return nullptr;
}

bool ChecksumReport::all_ok() const {
  return header_ok && std::all_of(section_ok.begin(), section_ok.end(), [](bool b) { return b; });
}

std::uint64_t ContainerSize(std::span<const std::uint64_t> section_lengths) {
  std::uint64_t end = TableEnd(static_cast<std::uint32_t>(section_lengths.size()));
  for (std::uint64_t len : section_lengths) end = AlignUp(end) + len;
  return end;
}

Result<std::vector<SectionView>> PeekSectionTable(std::span<const std::byte> prefix) {
  if (prefix.size() < kContainerHeaderBytes ||
      std::memcmp(prefix.data() + kOffMagic, kContainerMagic, sizeof(kContainerMagic)) != 0) {
    return Bad("not a container (bad magic or shorter than its header)");
  }
  const std::uint32_t count = LoadLE<std::uint32_t>(prefix.data() + kOffSectionCount);
  if (count > kMaxSections)
    return Bad("header field 'section_count' exceeds " + std::to_string(kMaxSections));
  if (prefix.size() < kContainerHeaderBytes + std::size_t{count} * kSectionEntryBytes) {
    return Bad("the section table extends past the " + std::to_string(prefix.size()) +
               " bytes given");
  }
  std::vector<SectionView> sections(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::byte* e =
        prefix.data() + kContainerHeaderBytes + std::size_t{i} * kSectionEntryBytes;
    sections[i].kind = LoadLE<std::uint32_t>(e + kEntKind);
    sections[i].flags = LoadLE<std::uint32_t>(e + kEntFlags);
    sections[i].offset = LoadLE<std::uint64_t>(e + kEntOffset);
    sections[i].length = LoadLE<std::uint64_t>(e + kEntLength);
    sections[i].checksum = LoadLE<std::uint64_t>(e + kEntChecksum);
  }
  return sections;
}

Result<ContainerView> ParseContainer(std::span<const std::byte> bytes,
                                     const ParseOptions& options) {
  const std::byte* p = bytes.data();
  if (bytes.size() < kContainerHeaderBytes) {
    return Bad("truncated: " + std::to_string(bytes.size()) + " bytes, the fixed header needs " +
               std::to_string(kContainerHeaderBytes));
  }
  if (std::memcmp(p + kOffMagic, kContainerMagic, sizeof(kContainerMagic)) != 0) {
    return Bad("bad magic: not a kvdepot chunk container");
  }
  ContainerView view;
  ContainerHeader& h = view.header;
  h.version = LoadLE<std::uint16_t>(p + kOffVersion);
  if (h.version != kContainerVersion) {
    return Status(StatusCode::kUnimplemented,
                  "container: format version " + std::to_string(h.version) +
                      " is not supported by this build (it reads version " +
                      std::to_string(kContainerVersion) + ")");
  }
  const auto header_bytes = LoadLE<std::uint16_t>(p + kOffHeaderBytes);
  if (header_bytes != kContainerHeaderBytes) {
    return Bad("header field 'header_bytes' = " + std::to_string(header_bytes) + ", expected " +
               std::to_string(kContainerHeaderBytes));
  }
  h.section_count = LoadLE<std::uint32_t>(p + kOffSectionCount);
  if (h.section_count < 1 || h.section_count > kMaxSections) {
    return Bad("header field 'section_count' = " + std::to_string(h.section_count) +
               " is out of range [1, " + std::to_string(kMaxSections) + "]");
  }
  const std::uint64_t table_end = TableEnd(h.section_count);
  if (bytes.size() < table_end) {
    return Bad("truncated: " + std::to_string(bytes.size()) + " bytes, the section table ends at " +
               std::to_string(table_end));
  }
  h.header_checksum = LoadLE<std::uint64_t>(p + kOffHeaderChecksum);
  if (options.verify_checksums) {
    const std::uint64_t computed = ComputeHeaderChecksum(bytes, h.section_count);
    if (computed != h.header_checksum) {
      return Bad("header checksum mismatch (stored " + HexU64(h.header_checksum) + ", computed " +
                 HexU64(computed) + ")");
    }
  }

  const auto codec = std::to_integer<std::uint8_t>(p[kOffCodec]);
  if (!IsValidCodecId(codec)) {
    return Status(StatusCode::kUnimplemented,
                  "container: header field 'codec' = " + std::to_string(codec) +
                      " is not a codec this build knows (0 raw, 1 cachegen, 2 hack-int2)");
  }
  h.codec = static_cast<CodecId>(codec);
  const auto dtype = std::to_integer<std::uint8_t>(p[kOffDType]);
  if (!IsValidDType(dtype)) {
    return Bad("header field 'dtype' = " + std::to_string(dtype) +
               " is invalid (1 fp16, 2 bf16, 3 fp32)");
  }
  h.dtype = static_cast<DType>(dtype);
  if (const auto flags = LoadLE<std::uint16_t>(p + kOffFlags); flags != 0) {
    return Bad("header field 'flags' = " + std::to_string(flags) + ", must be 0 in version 1");
  }
  if (const auto kv = LoadLE<std::uint32_t>(p + kOffKv); kv != 2) {
    return Bad("header field 'kv' = " + std::to_string(kv) + ", must be 2 (K and V)");
  }
  h.shape.layers = LoadLE<std::uint32_t>(p + kOffLayers);
  h.shape.tokens = LoadLE<std::uint32_t>(p + kOffTokens);
  h.shape.kv_heads = LoadLE<std::uint32_t>(p + kOffKvHeads);
  h.shape.head_dim = LoadLE<std::uint32_t>(p + kOffHeadDim);
  if (Status s = ValidateShape(h.shape, h.dtype); !s.ok()) {
    return s.WithContext("container: header field 'shape'");
  }
  if (const auto reserved = LoadLE<std::uint64_t>(p + kOffReserved); reserved != 0) {
    return Bad("header field 'reserved' is not zero");
  }
  h.total_bytes = LoadLE<std::uint64_t>(p + kOffTotalBytes);
  if (h.total_bytes > bytes.size()) {
    return Bad("truncated: " + std::to_string(bytes.size()) + " bytes, header field " +
               "'total_bytes' says " + std::to_string(h.total_bytes));
  }
  if (h.total_bytes < bytes.size()) {
    return Bad(std::to_string(bytes.size() - h.total_bytes) + " trailing bytes after " +
               "'total_bytes' = " + std::to_string(h.total_bytes));
  }

  view.sections.reserve(h.section_count);
  std::uint64_t expected_offset = table_end;
  for (std::uint32_t i = 0; i < h.section_count; ++i) {
    const std::byte* e = p + kContainerHeaderBytes + std::size_t{i} * kSectionEntryBytes;
    SectionView s;
    s.kind = LoadLE<std::uint32_t>(e + kEntKind);
    s.flags = LoadLE<std::uint32_t>(e + kEntFlags);
    s.offset = LoadLE<std::uint64_t>(e + kEntOffset);
    s.length = LoadLE<std::uint64_t>(e + kEntLength);
    s.checksum = LoadLE<std::uint64_t>(e + kEntChecksum);
    const std::string label = SectionLabel(i, s.kind);
    if ((s.flags & ~kSectionFlagOptional) != 0) {
      return Bad(label + ": field 'flags' = " + std::to_string(s.flags) +
                 " has bits that version 1 does not define");
    }
    const bool known = s.kind >= 1 && s.kind <= kMaxKnownSectionKind;
    if (!known && (s.flags & kSectionFlagOptional) == 0) {
      return Status(StatusCode::kUnimplemented,
                    "container: " + label + ": kind " + std::to_string(s.kind) +
                        " is unknown to this build and not marked optional");
    }
    // Padding between the previous end and this section must be zero.
    const std::uint64_t aligned = AlignUp(expected_offset);
    if (s.offset != aligned) {
      return Bad(label + ": field 'offset' = " + std::to_string(s.offset) + ", expected " +
                 std::to_string(aligned) + " (sections follow each other at 64-byte alignment)");
    }
    if (s.offset > h.total_bytes) {
      return Bad(label + ": field 'offset' = " + std::to_string(s.offset) +
                 " is past 'total_bytes' = " + std::to_string(h.total_bytes));
    }
    if (s.length > h.total_bytes - s.offset) {
      return Bad(label + ": field 'length' = " + std::to_string(s.length) + " runs past the end (" +
                 std::to_string(h.total_bytes - s.offset) + " bytes left)");
    }
    for (std::uint64_t k = expected_offset; k < s.offset; ++k) {
      if (p[k] != std::byte{0}) {
        return Bad("padding byte at offset " + std::to_string(k) + " before " + label +
                   " is not zero");
      }
    }
    s.bytes = bytes.subspan(s.offset, s.length);
    expected_offset = s.offset + s.length;
    view.sections.push_back(s);
  }
  if (expected_offset != h.total_bytes) {
    return Bad("the last section ends at " + std::to_string(expected_offset) +
               " but 'total_bytes' = " + std::to_string(h.total_bytes));
  }
  if (options.verify_checksums) {
    for (std::size_t i = 0; i < view.sections.size(); ++i) {
      const SectionView& s = view.sections[i];
      const std::uint64_t computed = Checksum64(s.bytes);
      if (computed != s.checksum) {
        return Bad(SectionLabel(i, s.kind) + ": checksum mismatch (stored " + HexU64(s.checksum) +
                   ", computed " + HexU64(computed) + ")");
      }
    }
  }
  return view;
}

ChecksumReport VerifyChecksums(const ContainerView& view, std::span<const std::byte> bytes) {
  ChecksumReport report;
  report.header_computed = ComputeHeaderChecksum(bytes, view.header.section_count);
  report.header_ok = report.header_computed == view.header.header_checksum;
  for (const SectionView& s : view.sections) {
    const std::uint64_t computed = Checksum64(s.bytes);
    report.section_computed.push_back(computed);
    report.section_ok.push_back(computed == s.checksum);
  }
  return report;
}

Result<ContainerWriter> ContainerWriter::Create(CodecId codec, DType dtype, const KvShape& shape,
                                                std::span<const SectionPlan> sections) {
  if (!IsValidCodecId(static_cast<std::uint8_t>(codec))) {
    return InvalidArgument("container writer: invalid codec id");
  }
  if (!IsValidDType(static_cast<std::uint8_t>(dtype))) {
    return InvalidArgument("container writer: invalid dtype");
  }
  KVD_RETURN_IF_ERROR(ValidateShape(shape, dtype).WithContext("container writer"));
  if (sections.empty() || sections.size() > kMaxSections) {
    return InvalidArgument("container writer: " + std::to_string(sections.size()) +
                           " sections, expected 1 to " + std::to_string(kMaxSections));
  }
  ContainerWriter w;
  w.plans_.assign(sections.begin(), sections.end());
  std::uint64_t end = TableEnd(static_cast<std::uint32_t>(sections.size()));
  for (const SectionPlan& plan : sections) {
    const auto kind = static_cast<std::uint32_t>(plan.kind);
    if ((plan.flags & ~kSectionFlagOptional) != 0) {
      return InvalidArgument("container writer: undefined section flags");
    }
    if (kind < 1 || kind > kMaxKnownSectionKind) {
      return InvalidArgument("container writer: unknown section kind " + std::to_string(kind));
    }
    if (plan.length > kMaxDecodedBytes * 2) {
      return OutOfRange("container writer: section of " + std::to_string(plan.length) +
                        " bytes is over the limit");
    }
    end = AlignUp(end);
    w.offsets_.push_back(end);
    end += plan.length;
  }
  w.bytes_.assign(end, std::byte{0});
  HeaderFields header;
  header.codec = static_cast<std::uint8_t>(codec);
  header.dtype = static_cast<std::uint8_t>(dtype);
  header.layers = shape.layers;
  header.tokens = shape.tokens;
  header.kv_heads = shape.kv_heads;
  header.head_dim = shape.head_dim;
  header.total_bytes = end;
  SectionEntry entries[kMaxSections];
  for (std::size_t i = 0; i < sections.size(); ++i) {
    entries[i] = {static_cast<std::uint32_t>(sections[i].kind), sections[i].flags, w.offsets_[i],
                  sections[i].length};
  }
  WriteHeader(w.bytes_.data(), header, entries, static_cast<std::uint32_t>(sections.size()));
  return w;
}

std::span<std::byte> ContainerWriter::section(std::size_t i) {
  return std::span<std::byte>(bytes_).subspan(offsets_[i], plans_[i].length);
}

std::vector<std::byte> ContainerWriter::Finish() && {
  // Create laid the container out itself: sealing it cannot fail.
  const Status sealed = SealContainer(bytes_);
  (void)sealed;
  return std::move(bytes_);
}

Status SealContainer(std::span<std::byte> c) {
  auto bad = [](const std::string& what) { return Bad("seal: " + what); };
  if (c.size() < kContainerHeaderBytes) {
    return bad(std::to_string(c.size()) + " bytes, shorter than the 64-byte fixed header");
  }
  const auto count = LoadLE<std::uint32_t>(c.data() + kOffSectionCount);
  if (count < 1 || count > kMaxSections) {
    return bad("section_count " + std::to_string(count) + " out of range 1.." +
               std::to_string(kMaxSections));
  }
  if (c.size() < TableEnd(count)) return bad("shorter than its section table");
  const auto total = LoadLE<std::uint64_t>(c.data() + kOffTotalBytes);
  if (total != c.size()) {
    return bad("total_bytes " + std::to_string(total) + " is not the buffer's " +
               std::to_string(c.size()) + " bytes");
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    std::byte* e = c.data() + kContainerHeaderBytes + std::size_t{i} * kSectionEntryBytes;
    const auto offset = LoadLE<std::uint64_t>(e + kEntOffset);
    const auto length = LoadLE<std::uint64_t>(e + kEntLength);
    if (offset > c.size() || length > c.size() - offset) {
      return bad("section " + std::to_string(i) + " runs past the end");
    }
    StoreLE<std::uint64_t>(e + kEntChecksum, Checksum64(c.subspan(offset, length)));
  }
  StoreLE<std::uint64_t>(c.data() + kOffHeaderChecksum, ComputeHeaderChecksum(c, count));
  return Status::Ok();
}

}  // namespace kvdepot
