#include "kvdepot/protocol/protocol.h"

#include <gtest/gtest.h>

#include <random>

namespace kvdepot::protocol {
namespace {

std::vector<std::byte> Prefix(const std::vector<std::byte>& v, std::size_t n) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)};
}

TEST(ProtocolTest, FrameHeaderRoundTripAndValidation) {
  FrameHeader h;
  h.type = static_cast<std::uint8_t>(Op::kGet) | kResponseBit;
  h.flags = kFlagMore;
  h.request_id = 0x1122334455667788ull;
  h.body_length = 1234;
  h.status = 2;
  std::byte buf[kFrameHeaderBytes];
  EncodeFrameHeader(h, buf);
  auto d = DecodeFrameHeader(buf, Limits{}, /*expect_response=*/true);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->request_id, h.request_id);
  EXPECT_EQ(d->op(), Op::kGet);
  EXPECT_TRUE(d->is_response());
  EXPECT_EQ(d->status, 2);
  EXPECT_FALSE(DecodeFrameHeader(buf, Limits{}, /*expect_response=*/false).ok());
  Limits small;
  small.max_body_bytes = 100;
  EXPECT_NE(DecodeFrameHeader(buf, small, true).status().message().find("exceeds the limit"),
            std::string::npos);
  buf[5] = std::byte{9};  // unknown op
  EXPECT_EQ(DecodeFrameHeader(buf, Limits{}, true).status().code(), StatusCode::kCorruption);
}

// Requests may carry only `from_peer` (docs/protocol.md), responses only `more`.
TEST(ProtocolTest, FlagsAreDefinedPerDirection) {
  std::array<std::byte, kFrameHeaderBytes> buf{};
  FrameHeader h;
  h.type = static_cast<std::uint8_t>(Op::kGet);
  h.flags = kFlagFromPeer;
  EncodeFrameHeader(h, buf.data());
  auto request = DecodeFrameHeader(buf, Limits{}, /*expect_response=*/false);
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ(request->flags, kFlagFromPeer);
  h.flags = kFlagMore;
  EncodeFrameHeader(h, buf.data());
  EXPECT_EQ(DecodeFrameHeader(buf, Limits{}, false).status().code(), StatusCode::kCorruption);
  h.type |= kResponseBit;
  h.flags = kFlagFromPeer;
  EncodeFrameHeader(h, buf.data());
  EXPECT_EQ(DecodeFrameHeader(buf, Limits{}, true).status().code(), StatusCode::kCorruption);
  h.type = static_cast<std::uint8_t>(Op::kClusterInfo);
  h.flags = 0;
  EncodeFrameHeader(h, buf.data());
  EXPECT_TRUE(DecodeFrameHeader(buf, Limits{}, false).ok());
  EXPECT_EQ(OpName(Op::kClusterInfo), "cluster_info");
  EXPECT_EQ(MaxRequestBody(Op::kClusterInfo, Limits{}), 0u);
}

TEST(ProtocolTest, BodiesRoundTrip) {
  const std::vector<std::string> keys = {"a", std::string(256, 'k'), std::string("\0x", 2)};
  const std::vector<std::byte> kl_body = EncodeKeyList(keys).value();  // the views point into it
  auto kl = DecodeKeyList(kl_body, Limits{});
  ASSERT_TRUE(kl.ok());
  ASSERT_EQ(kl->size(), 3u);
  EXPECT_EQ((*kl)[2], std::string_view("\0x", 2));

  const std::vector<std::byte> v1(5, std::byte{1}), v2;
  const PutItemView items[] = {{"k1", v1}, {"k2", v2}};
  const std::vector<std::byte> put_body = EncodePutBody(items).value();
  auto put = DecodePutBody(put_body, Limits{});
  ASSERT_TRUE(put.ok());
  EXPECT_EQ((*put)[0].value.size(), 5u);
  EXPECT_EQ((*put)[1].key, "k2");

  LookupResult lr{2, {Tier::kHost, Tier::kSsd, Tier::kNone}};
  auto lr2 = DecodeLookupResult(EncodeLookupResult(lr));
  ASSERT_TRUE(lr2.ok());
  EXPECT_EQ(lr2->prefix_length, 2u);
  EXPECT_EQ(lr2->tiers, lr.tiers);

  ScanRequest q{10, Tier::kHost, "ns", "cursor"};
  auto q2 = DecodeScanRequest(EncodeScanRequest(q).value(), Limits{});
  ASSERT_TRUE(q2.ok());
  EXPECT_EQ(q2->prefix, "ns");
  EXPECT_EQ(q2->cursor, "cursor");
  ScanResult r{{{"a", 10, Tier::kHost, 5}}, "a"};
  auto r2 = DecodeScanResult(EncodeScanResult(r));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->entries[0].value_bytes, 10u);
  EXPECT_EQ(r2->next_cursor, "a");
}

TEST(ProtocolTest, LimitsAreEnforcedWithNamedFields) {
  Limits l;
  l.max_batch = 2;
  l.max_key_bytes = 4;
  const std::vector<std::string> three = {"a", "b", "c"};
  EXPECT_EQ(DecodeKeyList(EncodeKeyList(three).value(), l).status().code(),
            StatusCode::kOutOfRange);
  const std::vector<std::string> long_key = {"abcde"};
  const Status s = DecodeKeyList(EncodeKeyList(long_key).value(), l).status();
  EXPECT_NE(s.message().find("key 0 length 5"), std::string::npos) << s.message();
  l.max_value_bytes = 3;
  const std::vector<std::byte> big(4);
  const PutItemView items[] = {{"k", big}};
  EXPECT_EQ(DecodePutBody(EncodePutBody(items).value(), l).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(MaxRequestBody(Op::kPing, Limits{}), 0u);
  EXPECT_EQ(MaxRequestBody(Op::kGet, l), 4u + 2u * 6u);
}

TEST(ProtocolTest, RequestEncodersRefuseWhatTheWireCannotCarry) {
  // A key's length is a u16: one over 65,535 bytes is refused, never wrapped.
  const std::vector<std::string> huge = {std::string(65536, 'k')};
  const Status key = EncodeKeyList(huge).status();
  EXPECT_EQ(key.code(), StatusCode::kOutOfRange);
  EXPECT_NE(key.message().find("key of 65536 bytes"), std::string::npos) << key.message();
  EXPECT_EQ(EncodeGetAsRequest(1, huge).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(EncodeLeaseGetRequest(Tier::kHost, huge).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(EncodeScanRequest(ScanRequest{5, Tier::kNone, huge[0], ""}).status().code(),
            StatusCode::kOutOfRange);
  const std::vector<std::string> longest = {std::string(65535, 'k')};
  EXPECT_TRUE(EncodeKeyList(longest).ok());
  // A frame's body_length is a u32: a PUT whose body would pass 4 GiB - 1 is refused.
  EXPECT_EQ(EncodeSinglePutHead("k", 0xffffffffull).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(EncodeSinglePutHead(huge[0], 1).status().code(), StatusCode::kOutOfRange);
  const auto head = EncodeSinglePutHead("key", 5);
  ASSERT_TRUE(head.ok());
  const std::vector<std::byte> value(5, std::byte{1});
  const PutItemView item[] = {{"key", value}};
  std::vector<std::byte> body = *head;
  body.insert(body.end(), value.begin(), value.end());
  EXPECT_EQ(body, EncodePutBody(item).value());  // one layout, two writers that agree
}

TEST(ProtocolTest, EveryTruncationAndRandomBytesFailCleanly) {
  const std::vector<std::string> keys = {"key-one", "key-two"};
  const std::vector<std::byte> kl = EncodeKeyList(keys).value();
  const std::vector<std::byte> v(9, std::byte{7});
  const PutItemView items[] = {{"k", v}, {"k2", v}};
  const std::vector<std::byte> put = EncodePutBody(items).value();
  const std::vector<std::byte> scan =
      EncodeScanRequest(ScanRequest{5, Tier::kNone, "p", "c"}).value();
  for (std::size_t n = 0; n < kl.size(); ++n)
    EXPECT_FALSE(DecodeKeyList(Prefix(kl, n), Limits{}).ok());
  for (std::size_t n = 0; n < put.size(); ++n)
    EXPECT_FALSE(DecodePutBody(Prefix(put, n), Limits{}).ok());
  for (std::size_t n = 0; n < scan.size(); ++n) {
    EXPECT_FALSE(DecodeScanRequest(Prefix(scan, n), Limits{}).ok());
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> junk(rng() % 64);
    for (auto& b : junk) b = static_cast<std::byte>(rng() % (i % 2 ? 4 : 256));
    (void)DecodeKeyList(junk, Limits{});
    (void)DecodePutBody(junk, Limits{});
    (void)DecodeScanRequest(junk, Limits{});
    (void)DecodeScanResult(junk);
    (void)DecodeLookupResult(junk);
    (void)DecodeStatusList(junk);
    (void)DecodeGetItemPrefix(junk);
    (void)DecodeFrameHeader(junk, Limits{}, i % 3 == 0);
  }
}

}  // namespace
}  // namespace kvdepot::protocol
