// The placement section (kFlagPlacement) and the prefix-chain placement keys (placement.h).
#include "kvdepot/protocol/placement.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/protocol/protocol.h"

namespace kvdepot::protocol {
namespace {

std::vector<std::byte> Join(std::vector<std::byte> a, const std::vector<std::byte>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PlacementSectionTest, RoundTripBeforeTheOpsBody) {
  const std::string anchor(48, '\x07');
  const std::vector<std::string_view> placement = {anchor, "", anchor};
  const std::vector<std::string> keys = {"a", "b", "c"};
  const std::vector<std::byte> body =
      Join(EncodePlacementSection(placement).value(), EncodeKeyList(keys).value());
  auto split = SplitPlacementSection(body, Limits{});
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  ASSERT_EQ(split->placement_keys.size(), 3u);
  EXPECT_EQ(split->placement_keys[0], anchor);
  EXPECT_EQ(split->placement_keys[1], "");  // placed by the item's own key
  EXPECT_EQ(split->placement_keys[2], anchor);
  auto list = DecodeKeyList(split->rest, Limits{});
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->size(), 3u);
  EXPECT_TRUE(CheckPlacementCount(Op::kGet, 3, list->size()).ok());
  // The streaming reader's path: the u32, then the entries decoded on their own.
  const auto section = LoadLE<std::uint32_t>(body.data());
  auto entries = DecodePlacementEntries(
      std::span<const std::byte>(body).subspan(kPlacementSectionLengthBytes, section), Limits{});
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(*entries, split->placement_keys);
}

TEST(PlacementSectionTest, MalformedSectionsAreRefusedNamingTheEntry) {
  Limits l;
  l.max_key_bytes = 8;
  l.max_batch = 4;
  const std::vector<std::string_view> two = {"anchor", "x"};
  std::vector<std::byte> section = EncodePlacementSection(two).value();
  // Fewer bytes than the u32.
  EXPECT_EQ(SplitPlacementSection(std::span(section).first(3), l).status().code(),
            StatusCode::kInvalidArgument);
  // The section claims more than the body holds.
  auto cut = SplitPlacementSection(std::span(section).first(section.size() - 1), l);
  EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cut.status().message().find("runs past the body"), std::string::npos);
  // An entry cut off inside the section (its length claims more than the section holds).
  std::vector<std::byte> bad = section;
  StoreLE<std::uint16_t>(bad.data() + 4 + 2 + 6, 5);  // entry 1 says 5 bytes, 1 present
  auto past = SplitPlacementSection(bad, l);
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("placement key 1"), std::string::npos);
  // A placement key over max_key_bytes.
  const std::vector<std::string_view> big = {"123456789"};
  auto over = SplitPlacementSection(EncodePlacementSection(big).value(), l);
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(over.status().message().find("placement key 0"), std::string::npos);
  // More entries than max_batch.
  const std::vector<std::string_view> many(5, "k");
  EXPECT_EQ(SplitPlacementSection(EncodePlacementSection(many).value(), l).status().code(),
            StatusCode::kOutOfRange);
  // A section length over its bound, whatever the body.
  std::vector<std::byte> huge(4);
  StoreLE<std::uint32_t>(huge.data(), static_cast<std::uint32_t>(MaxPlacementSectionBytes(l) + 1));
  EXPECT_EQ(SplitPlacementSection(huge, l).status().code(), StatusCode::kOutOfRange);
  // A count that does not match the items.
  const Status mismatch = CheckPlacementCount(Op::kLookup, 2, 3);
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("lookup: the placement section has 2 entries for 3 items"),
            std::string::npos);
  // An encoder refuses what the u16 length cannot carry.
  const std::string too_long(70000, 'k');
  const std::vector<std::string_view> one = {too_long};
  EXPECT_EQ(EncodePlacementSection(one).status().code(), StatusCode::kOutOfRange);
}

TEST(PlacementSectionTest, FlagOnlyOnRoutedOpsAndWidensTheBodyBound) {
  std::array<std::byte, kFrameHeaderBytes> buf{};
  FrameHeader h;
  h.flags = kFlagPlacement;
  for (Op op : {Op::kPut, Op::kGet, Op::kGetAs, Op::kLookup, Op::kDelete}) {
    h.type = static_cast<std::uint8_t>(op);
    EncodeFrameHeader(h, buf.data());
    EXPECT_TRUE(DecodeFrameHeader(buf, Limits{}, false).ok()) << OpName(op);
    EXPECT_TRUE(AcceptsPlacement(op));
  }
  for (Op op : {Op::kLeaseGet, Op::kMap, Op::kScan, Op::kPing, Op::kStats}) {
    h.type = static_cast<std::uint8_t>(op);
    EncodeFrameHeader(h, buf.data());
    const Status s = DecodeFrameHeader(buf, Limits{}, false).status();
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << OpName(op);
    EXPECT_NE(s.message().find("placement"), std::string::npos);
  }
  // A response never carries it.
  h.type = static_cast<std::uint8_t>(Op::kGet) | kResponseBit;
  EncodeFrameHeader(h, buf.data());
  EXPECT_FALSE(DecodeFrameHeader(buf, Limits{}, true).ok());
  Limits l;
  l.max_batch = 2;
  l.max_key_bytes = 4;
  EXPECT_EQ(MaxRequestBody(Op::kGet, l, kFlagPlacement),
            MaxRequestBody(Op::kGet, l) + 4 + 2 * (2 + 4));
  EXPECT_EQ(MaxRequestBody(Op::kScan, l, kFlagPlacement), MaxRequestBody(Op::kScan, l));
}

TEST(ChainPlacementTest, ChunksArePlacedByTheirGroupsAnchor) {
  const std::vector<std::string> chain = {"c0", "c1", "c2", "c3", "c4", "c5", "c6"};
  EXPECT_EQ(ChainPlacementKeys(chain, 3),
            (std::vector<std::string>{"c0", "c0", "c0", "c3", "c3", "c3", "c6"}));
  EXPECT_EQ(ChainPlacementKeys(chain, 1), chain);
  EXPECT_EQ(ChainPlacementKeys(chain, 0), chain);
  // A shorter chain (a PUT of its first chunks only) agrees with the longer one.
  const auto longer = ChainPlacementKeys(chain, 4);
  const auto shorter = ChainPlacementKeys(std::span(chain).first(5), 4);
  EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), longer.begin()));
  EXPECT_EQ(GroupAnchorIndex(9, 4), 8u);
}

}  // namespace
}  // namespace kvdepot::protocol
