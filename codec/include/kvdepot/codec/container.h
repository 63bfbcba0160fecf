// The kvdepot chunk container, format v1 (specified byte by byte in docs/format.md).
//
//   [fixed header, 64 bytes][section table, 32 bytes per section][sections, each 64-byte aligned]
//
// The header names the codec, the original dtype and the logical shape
// [layers, 2, tokens, kv_heads, head_dim]; each codec defines which sections it needs. Header
// (with the section table) and every section carry an XXH3-64 checksum.
//
// Parsing is total: any input either parses into a ContainerView whose every span lies inside the
// input, or returns an error naming the offending field. Nothing is allocated in proportion to
// what the input claims, only to what it holds. The layout is canonical (sections in table order,
// each at the next 64-byte boundary, zero padding, no trailing bytes), so a given header and
// section contents have exactly one encoding.
//
// Thread-safety: free functions on values; a ContainerView borrows the input bytes, which must
// outlive it and stay unmodified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/codec_id.h"
#include "kvdepot/codec/container_layout.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {

// Section kinds. Values are stored in containers and must never change. Which kinds a codec uses,
// and their layouts, are in docs/format.md.
enum class SectionKind : std::uint32_t {
  kParams = 1,    // codec parameters
  kPayload = 2,   // raw codec: the tensor itself
  kTables = 3,    // entropy-coder frequency tables
  kScales = 4,    // quantization scales / offsets
  kCodes = 5,     // quantized or entropy-coded data
  kSums = 6,      // per-partition code sums (hack-int2)
  kTail = 7,      // unquantized tail tokens (hack-int2)
  kIndex = 8,     // per-stream offsets into kCodes
  kMetadata = 9,  // free-form key/value metadata (always optional)
};
inline constexpr std::uint32_t kMaxKnownSectionKind = 9;

// "params", "payload", ... ; "unknown" for other values.
std::string_view SectionKindName(std::uint32_t kind);

// Section flag bit 0: a reader that does not know this section's kind may skip it. Every other
// bit must be zero in v1.
inline constexpr std::uint32_t kSectionFlagOptional = 1;

struct SectionView {
  std::uint32_t kind = 0;  // a SectionKind value, or an unknown kind flagged optional
  std::uint32_t flags = 0;
  std::uint64_t offset = 0;  // from the start of the container
  std::uint64_t length = 0;
  std::uint64_t checksum = 0;  // stored XXH3-64 of the section bytes
  std::span<const std::byte> bytes;
};

struct ContainerHeader {
  std::uint16_t version = kContainerVersion;
  CodecId codec = CodecId::kRaw;
  DType dtype = DType::kFloat16;
  KvShape shape;
  std::uint32_t section_count = 0;
  std::uint64_t total_bytes = 0;
  std::uint64_t header_checksum = 0;  // stored
};

struct ContainerView {
  ContainerHeader header;
  std::vector<SectionView> sections;

  // The first section of `kind`, or nullptr.
  const SectionView* Find(SectionKind kind) const;
};

struct ParseOptions {
  // When false, checksums are not verified (for `inspect`, which reports them separately).
  bool verify_checksums = true;
};

// Parses and validates a container. Errors: kCorruption for bad magic, truncation, checksum
// mismatches and layout violations; kUnimplemented for a newer format version or an unknown
// non-optional section kind; kOutOfRange for shapes beyond the limits in tensor.h.
Result<ContainerView> ParseContainer(std::span<const std::byte> bytes,
                                     const ParseOptions& options = {});

// The section table from a container's first bytes (at least kContainerHeaderBytes + its
// section_count x kSectionEntryBytes), without validating anything but the magic, the count and
// the bytes given: for readers that fetch sections selectively (a container in GPU memory), which
// then copy what they need and call ParseContainer. `bytes` of each SectionView is empty.
Result<std::vector<SectionView>> PeekSectionTable(std::span<const std::byte> prefix);

// Checksum verification results, for reporting (ParseContainer already enforces them).
struct ChecksumReport {
  bool header_ok = false;
  std::uint64_t header_computed = 0;
  std::vector<bool> section_ok;
  std::vector<std::uint64_t> section_computed;
  bool all_ok() const;
};
// Precondition: `view` came from ParseContainer over `bytes`.
ChecksumReport VerifyChecksums(const ContainerView& view, std::span<const std::byte> bytes);

// Builds a container in place: plan the section sizes, let the encoder write each section into
// the returned buffer, then Finish() fills in checksums. Lets encoders (CPU or GPU) write sections
// straight into their final position without a copy.
class ContainerWriter {
 public:
  struct SectionPlan {
    SectionKind kind;
    std::uint64_t length;
    std::uint32_t flags = 0;
  };

  // Validates the header fields and section plan and allocates the zeroed container.
  static Result<ContainerWriter> Create(CodecId codec, DType dtype, const KvShape& shape,
                                        std::span<const SectionPlan> sections);

  // Writable bytes of section i (in plan order). Precondition: i < section count.
  std::span<std::byte> section(std::size_t i);
  std::size_t section_count() const { return plans_.size(); }

  // Computes the section and header checksums and returns the finished container.
  std::vector<std::byte> Finish() &&;

 private:
  ContainerWriter() = default;
  std::vector<SectionPlan> plans_;
  std::vector<std::uint64_t> offsets_;
  std::vector<std::byte> bytes_;
};

// Fills in the section checksums and then the header checksum of a container whose header, section
// table and sections are written (container_layout.h's WriteHeader leaves them zero): the last
// step of ContainerWriter::Finish and of the GPU encoders, which write the rest on the device.
// Errors (kCorruption, naming the field): shorter than its header or table, a section count out of
// range, total_bytes not the buffer's size, a section past the end.
Status SealContainer(std::span<std::byte> container);

// Byte size of a container with these section lengths (the same layout ContainerWriter makes).
std::uint64_t ContainerSize(std::span<const std::uint64_t> section_lengths);

}  // namespace kvdepot
