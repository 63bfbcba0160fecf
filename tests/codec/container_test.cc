#include "kvdepot/codec/container.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/raw_codec.h"
#include "test_util.h"

namespace kvdepot {
namespace {

using testing::RandomTensor;
using testing::ResealHeader;

std::vector<std::byte> SmallContainer() {
  const KvTensor t = RandomTensor(DType::kFloat16, {1, 3, 1, 2}, 11);
  return *EncodeRaw(t.view());
}

Status ParseStatus(const std::vector<std::byte>& c, bool verify = true) {
  return ParseContainer(c, ParseOptions{verify}).status();
}

void ExpectError(const std::vector<std::byte>& c, StatusCode code, const std::string& needle) {
  const Status s = ParseStatus(c);
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "message '" << s.message() << "' lacks '" << needle << "'";
}

template <typename T>
std::vector<std::byte> Patched(std::vector<std::byte> c, std::size_t offset, T value,
                               bool reseal = true) {
  StoreLE<T>(c.data() + offset, value);
  if (reseal) ResealHeader(c);
  return c;
}

TEST(ContainerTest, CanonicalLayout) {
  const std::vector<std::byte> c = SmallContainer();
  // 64-byte header + one 32-byte entry -> payload at 128; 12 fp16 values = 24 bytes.
  ASSERT_EQ(c.size(), 128u + 24u);
  EXPECT_EQ(std::memcmp(c.data(), kContainerMagic, 8), 0);
  auto view = ParseContainer(c);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->header.codec, CodecId::kRaw);
  EXPECT_EQ(view->header.dtype, DType::kFloat16);
  EXPECT_EQ(view->header.shape, (KvShape{1, 3, 1, 2}));
  ASSERT_EQ(view->sections.size(), 1u);
  EXPECT_EQ(view->sections[0].offset, 128u);
  EXPECT_EQ(view->sections[0].length, 24u);
  EXPECT_NE(view->Find(SectionKind::kPayload), nullptr);
  EXPECT_EQ(view->Find(SectionKind::kTables), nullptr);
  EXPECT_EQ(ContainerSize(std::vector<std::uint64_t>{24}), c.size());
  // Table ends at 160; sections at 192, 256 and 320 (empty).
  EXPECT_EQ(ContainerSize(std::vector<std::uint64_t>{1, 1, 0}), 320u);
  EXPECT_TRUE(VerifyChecksums(*view, c).all_ok());
}

TEST(ContainerTest, TheMagicConstantsAgree) {
  // WriteHeader stores kContainerMagicLE (usable in device code); readers compare kContainerMagic.
  std::byte stored[8];
  container_layout::StoreLittleEndian(stored, kContainerMagicLE, 8);
  EXPECT_EQ(std::memcmp(stored, kContainerMagic, 8), 0);
}

TEST(ContainerTest, SealContainerFillsTheChecksumsContainerWriterWrites) {
  // A GPU encoder writes everything but the checksums (WriteHeader leaves them zero) and seals the
  // container on the host: the result is the bytes ContainerWriter::Finish gives.
  const std::vector<std::byte> sealed = SmallContainer();
  std::vector<std::byte> unsealed = sealed;
  StoreLE<std::uint64_t>(unsealed.data() + container_layout::kOffHeaderChecksum, 0);
  StoreLE<std::uint64_t>(unsealed.data() + kContainerHeaderBytes + container_layout::kEntChecksum,
                         0);
  ASSERT_TRUE(SealContainer(unsealed).ok());
  EXPECT_EQ(unsealed, sealed);
}

TEST(ContainerTest, SealContainerRefusesWhatItCannotSeal) {
  const std::vector<std::byte> c = SmallContainer();
  auto seal_error = [](std::vector<std::byte> bytes) {
    const Status s = SealContainer(bytes);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    return s.message();
  };
  EXPECT_NE(seal_error(std::vector<std::byte>(c.begin(), c.begin() + 40)).find("fixed header"),
            std::string::npos);
  EXPECT_NE(seal_error(Patched<std::uint32_t>(c, container_layout::kOffSectionCount, 0, false))
                .find("section_count 0"),
            std::string::npos);
  std::vector<std::byte> longer = c;
  longer.push_back(std::byte{0});
  EXPECT_NE(seal_error(longer).find("total_bytes 152"), std::string::npos);
  EXPECT_NE(seal_error(Patched<std::uint64_t>(
                           c, kContainerHeaderBytes + container_layout::kEntLength, 4096, false))
                .find("section 0 runs past the end"),
            std::string::npos);
}

TEST(ContainerTest, PeekSectionTableReadsOnlyTheTable) {
  const std::vector<std::byte> c = SmallContainer();
  const std::span<const std::byte> prefix(c.data(), kContainerHeaderBytes + kSectionEntryBytes);
  auto table = PeekSectionTable(prefix);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_EQ(table->size(), 1u);
  EXPECT_EQ((*table)[0].kind, static_cast<std::uint32_t>(SectionKind::kPayload));
  EXPECT_EQ((*table)[0].offset, 128u);
  EXPECT_EQ((*table)[0].length, 24u);
  EXPECT_EQ(PeekSectionTable(prefix.first(kContainerHeaderBytes)).status().code(),
            StatusCode::kCorruption);  // the table is cut off
  std::vector<std::byte> bad = c;
  bad[1] = std::byte{'X'};
  EXPECT_EQ(PeekSectionTable(bad).status().code(), StatusCode::kCorruption);
}

TEST(ContainerTest, WriterPlacesEverySectionAligned) {
  const ContainerWriter::SectionPlan plans[] = {
      {SectionKind::kParams, 5}, {SectionKind::kTables, 0}, {SectionKind::kCodes, 100}};
  auto w = ContainerWriter::Create(CodecId::kCacheGen, DType::kBFloat16, {2, 17, 3, 80}, plans);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (std::size_t i = 0; i < w->section_count(); ++i) {
    for (std::byte& b : w->section(i)) b = static_cast<std::byte>(i + 1);
  }
  const std::vector<std::byte> c = std::move(*w).Finish();
  auto view = ParseContainer(c);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  ASSERT_EQ(view->sections.size(), 3u);
  for (const SectionView& s : view->sections) EXPECT_EQ(s.offset % kSectionAlignment, 0u);
  EXPECT_EQ(view->sections[2].bytes[99], std::byte{3});
  EXPECT_EQ(view->header.codec, CodecId::kCacheGen);
  // The container layer accepts it; the cachegen decoder refuses sections it cannot make sense of.
  EXPECT_EQ(DecodeChunk(c).status().code(), StatusCode::kCorruption);
}

TEST(ContainerTest, WriterRejectsBadPlans) {
  EXPECT_FALSE(ContainerWriter::Create(CodecId::kRaw, DType::kFloat16, {1, 1, 1, 1}, {}).ok());
  const ContainerWriter::SectionPlan plan[] = {{SectionKind::kPayload, 4}};
  EXPECT_FALSE(ContainerWriter::Create(CodecId::kRaw, DType::kFloat16, {0, 1, 1, 1}, plan).ok());
  const ContainerWriter::SectionPlan bad_kind[] = {{static_cast<SectionKind>(77), 4}};
  EXPECT_FALSE(
      ContainerWriter::Create(CodecId::kRaw, DType::kFloat16, {1, 1, 1, 1}, bad_kind).ok());
}

TEST(ContainerTest, EveryTruncationIsAnError) {
  const std::vector<std::byte> c = SmallContainer();
  for (std::size_t n = 0; n < c.size(); ++n) {
    const std::vector<std::byte> cut(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(n));
    for (bool verify : {true, false}) {
      const Status s = ParseStatus(cut, verify);
      EXPECT_FALSE(s.ok()) << "prefix of " << n << " bytes parsed";
      EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    }
    EXPECT_FALSE(DecodeChunk(cut).ok());
  }
}

TEST(ContainerTest, EveryByteFlipIsDetected) {
  const std::vector<std::byte> c = SmallContainer();
  std::mt19937 rng(3);
  for (std::size_t i = 0; i < c.size(); ++i) {
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<std::byte> bad = c;
      const auto mask = static_cast<std::byte>(1u + rng() % 255u);
      bad[i] ^= mask;
      EXPECT_FALSE(ParseStatus(bad).ok()) << "flip at " << i << " went unnoticed";
      // Without checksums the parser still never reads out of bounds (ASan checks this).
      (void)ParseStatus(bad, false);
    }
  }
}

TEST(ContainerTest, RandomGarbageAndAppendedBytes) {
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::byte> junk(rng() % 400);
    for (std::byte& b : junk) b = static_cast<std::byte>(rng());
    if (i % 2 == 0 && junk.size() >= 8) std::memcpy(junk.data(), kContainerMagic, 8);
    EXPECT_FALSE(ParseStatus(junk).ok());
  }
  std::vector<std::byte> longer = SmallContainer();
  longer.push_back(std::byte{0});
  ExpectError(longer, StatusCode::kCorruption, "trailing bytes");
}

TEST(ContainerTest, HostileHeaderFieldsAreNamed) {
  const std::vector<std::byte> c = SmallContainer();
  ExpectError(Patched<std::uint8_t>(c, 0, 0x88, false), StatusCode::kCorruption, "bad magic");
  ExpectError(Patched<std::uint16_t>(c, 8, 2), StatusCode::kUnimplemented, "format version 2");
  ExpectError(Patched<std::uint16_t>(c, 10, 65), StatusCode::kCorruption, "'header_bytes'");
  ExpectError(Patched<std::uint32_t>(c, 36, 0), StatusCode::kCorruption, "'section_count'");
  ExpectError(Patched<std::uint32_t>(c, 36, 17), StatusCode::kCorruption, "'section_count'");
  ExpectError(Patched<std::uint32_t>(c, 36, 3), StatusCode::kCorruption, "truncated");
  ExpectError(Patched<std::uint8_t>(c, 12, 9), StatusCode::kUnimplemented, "'codec'");
  ExpectError(Patched<std::uint8_t>(c, 13, 0), StatusCode::kCorruption, "'dtype'");
  ExpectError(Patched<std::uint8_t>(c, 13, 4), StatusCode::kCorruption, "'dtype'");
  ExpectError(Patched<std::uint16_t>(c, 14, 1), StatusCode::kCorruption, "'flags'");
  ExpectError(Patched<std::uint32_t>(c, 16, 0), StatusCode::kOutOfRange, "layers = 0");
  ExpectError(Patched<std::uint32_t>(c, 20, 3), StatusCode::kCorruption, "'kv'");
  ExpectError(Patched<std::uint32_t>(c, 24, 65537), StatusCode::kOutOfRange, "tokens = 65537");
  ExpectError(Patched<std::uint32_t>(c, 28, 0), StatusCode::kOutOfRange, "kv_heads = 0");
  ExpectError(Patched<std::uint32_t>(c, 32, 4096), StatusCode::kOutOfRange, "head_dim = 4096");
  auto huge = Patched<std::uint32_t>(c, 16, 1024, false);
  huge = Patched<std::uint32_t>(huge, 24, 65536, false);
  huge = Patched<std::uint32_t>(huge, 28, 1024);
  ExpectError(huge, StatusCode::kOutOfRange, "over the limit");
  ExpectError(Patched<std::uint64_t>(c, 48, 1), StatusCode::kCorruption, "'reserved'");
  ExpectError(Patched<std::uint64_t>(c, 40, c.size() + 1), StatusCode::kCorruption, "truncated");
  ExpectError(Patched<std::uint64_t>(c, 40, c.size() - 1), StatusCode::kCorruption,
              "trailing bytes");
  ExpectError(Patched<std::uint64_t>(c, 56, 12345, false), StatusCode::kCorruption,
              "header checksum mismatch");
}

TEST(ContainerTest, HostileSectionEntriesAreNamed) {
  const std::vector<std::byte> c = SmallContainer();
  constexpr std::size_t e = kContainerHeaderBytes;  // first entry
  ExpectError(Patched<std::uint32_t>(c, e + 0, 77), StatusCode::kUnimplemented, "kind 77");
  ExpectError(Patched<std::uint32_t>(c, e + 4, 2), StatusCode::kCorruption, "'flags'");
  ExpectError(Patched<std::uint64_t>(c, e + 8, 96), StatusCode::kCorruption, "'offset'");
  ExpectError(Patched<std::uint64_t>(c, e + 8, 192), StatusCode::kCorruption, "'offset'");
  ExpectError(Patched<std::uint64_t>(c, e + 8, ~0ull - 7), StatusCode::kCorruption, "'offset'");
  ExpectError(Patched<std::uint64_t>(c, e + 16, 25), StatusCode::kCorruption, "'length'");
  ExpectError(Patched<std::uint64_t>(c, e + 16, ~0ull), StatusCode::kCorruption, "'length'");
  ExpectError(Patched<std::uint64_t>(c, e + 16, 23), StatusCode::kCorruption, "ends at");
  ExpectError(Patched<std::uint64_t>(c, e + 24, 1), StatusCode::kCorruption,
              "section 0 (payload): checksum mismatch");
  // Nonzero padding between the table (ends at 96) and the payload (at 128).
  std::vector<std::byte> pad = c;
  pad[100] = std::byte{1};
  ExpectError(pad, StatusCode::kCorruption, "padding byte at offset 100");
}

TEST(ContainerTest, OptionalUnknownSectionIsSkipped) {
  const KvTensor t = RandomTensor(DType::kFloat32, {1, 2, 1, 3}, 2);
  const ContainerWriter::SectionPlan plans[] = {{SectionKind::kMetadata, 7, kSectionFlagOptional},
                                                {SectionKind::kPayload, t.data.size()}};
  auto w = ContainerWriter::Create(CodecId::kRaw, t.dtype, t.shape, plans);
  ASSERT_TRUE(w.ok());
  std::memcpy(w->section(1).data(), t.data.data(), t.data.size());
  std::vector<std::byte> c = std::move(*w).Finish();
  // Turn the metadata section into an unknown (future) kind that is flagged optional.
  c = Patched<std::uint32_t>(c, kContainerHeaderBytes, 1000);
  auto decoded = DecodeChunk(c);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->data, t.data);
  // The same section without the optional flag is refused.
  c = Patched<std::uint32_t>(c, kContainerHeaderBytes + 4, 0);
  ExpectError(c, StatusCode::kUnimplemented, "not marked optional");
}

TEST(ContainerTest, ChecksumReportForInspect) {
  std::vector<std::byte> c = SmallContainer();
  c.back() ^= std::byte{0xff};
  auto view = ParseContainer(c, ParseOptions{false});
  ASSERT_TRUE(view.ok());
  const ChecksumReport report = VerifyChecksums(*view, c);
  EXPECT_TRUE(report.header_ok);
  ASSERT_EQ(report.section_ok.size(), 1u);
  EXPECT_FALSE(report.section_ok[0]);
  EXPECT_FALSE(report.all_ok());
}

}  // namespace
}  // namespace kvdepot
