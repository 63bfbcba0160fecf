// Protocol bodies of MAP, LEASE_GET, RELEASE and GET_AS: round trips, and every truncation or
// flipped reserved byte is an error, never a crash.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvdepot/protocol/protocol.h"

namespace kvdepot::protocol {
namespace {

TEST(ZeroCopyProtocolTest, MapInfoRoundTrip) {
  MapInfo m;
  m.host_arena_bytes = 1ull << 30;
  m.gpu_pool_bytes = 8ull << 30;
  m.gpu_device = 3;
  for (std::size_t i = 0; i < m.ipc_handle.size(); ++i) m.ipc_handle[i] = std::byte(i * 7);
  const auto body = EncodeMapInfo(m);
  ASSERT_EQ(body.size(), kMapResponseBytes);
  auto back = DecodeMapInfo(body);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->host_arena_bytes, m.host_arena_bytes);
  EXPECT_EQ(back->gpu_pool_bytes, m.gpu_pool_bytes);
  EXPECT_EQ(back->gpu_device, 3);
  EXPECT_EQ(back->ipc_handle, m.ipc_handle);
  for (std::size_t n = 0; n < body.size(); ++n) {
    EXPECT_FALSE(DecodeMapInfo(std::span(body).first(n)).ok()) << n;
  }
  auto bad = body;
  bad[20] = std::byte{1};  // reserved
  EXPECT_EQ(DecodeMapInfo(bad).status().code(), StatusCode::kCorruption);
}

TEST(ZeroCopyProtocolTest, LeaseGetRequestRoundTrip) {
  const std::vector<std::string> keys = {"a", "bb", std::string(48, 'k')};
  const auto body = EncodeLeaseGetRequest(Tier::kHost, keys).value();
  auto v = DecodeLeaseGetRequest(body, Limits{});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->tier, Tier::kHost);
  ASSERT_EQ(v->keys.size(), 3u);
  EXPECT_EQ(v->keys[2], keys[2]);
  for (std::size_t n = 0; n < body.size(); ++n) {
    EXPECT_FALSE(DecodeLeaseGetRequest(std::span(body).first(n), Limits{}).ok()) << n;
  }
  auto ssd = EncodeLeaseGetRequest(Tier::kSsd, keys).value();
  EXPECT_EQ(DecodeLeaseGetRequest(ssd, Limits{}).status().code(), StatusCode::kInvalidArgument);
  auto reserved = body;
  reserved[2] = std::byte{9};
  EXPECT_EQ(DecodeLeaseGetRequest(reserved, Limits{}).status().code(), StatusCode::kCorruption);
}

TEST(ZeroCopyProtocolTest, LeasesRoundTrip) {
  std::vector<Lease> leases(3);
  leases[0] = {StatusCode::kOk, Tier::kHost, 17, 4096, 1000};
  leases[1] = {StatusCode::kNotFound, Tier::kNone, 0, 0, 0};
  leases[2] = {StatusCode::kOk, Tier::kGpu, 18, 1ull << 33, 5};
  const auto body = EncodeLeases(leases);
  ASSERT_EQ(body.size(), 4 + 3 * kLeaseEntryBytes);
  auto back = DecodeLeases(body);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)[0].lease_id, 17u);
  EXPECT_EQ((*back)[0].offset, 4096u);
  EXPECT_EQ((*back)[1].status, StatusCode::kNotFound);
  EXPECT_EQ((*back)[2].tier, Tier::kGpu);
  EXPECT_EQ((*back)[2].offset, 1ull << 33);
  for (std::size_t n = 0; n < body.size(); ++n) {
    EXPECT_FALSE(DecodeLeases(std::span(body).first(n)).ok()) << n;
  }
  auto overflow = body;
  for (int i = 0; i < 8; ++i) overflow[4 + 16 + i] = std::byte{0xff};  // offset of entry 0
  EXPECT_EQ(DecodeLeases(overflow).status().code(), StatusCode::kCorruption);
}

TEST(ZeroCopyProtocolTest, LeaseIdsAndGetAs) {
  const std::vector<std::uint64_t> ids = {1, 2, ~0ull};
  const auto body = EncodeLeaseIds(ids);
  auto back = DecodeLeaseIds(body, Limits{});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, ids);
  for (std::size_t n = 0; n < body.size(); ++n) {
    EXPECT_FALSE(DecodeLeaseIds(std::span(body).first(n), Limits{}).ok()) << n;
  }
  Limits small;
  small.max_batch = 2;
  EXPECT_EQ(DecodeLeaseIds(body, small).status().code(), StatusCode::kOutOfRange);

  const std::vector<std::string> keys = {"x"};
  const auto as_body = EncodeGetAsRequest(1, keys).value();
  auto as = DecodeGetAsRequest(as_body, Limits{});
  ASSERT_TRUE(as.ok());
  EXPECT_EQ(as->codec, 1);
  EXPECT_EQ(as->keys[0], "x");
  EXPECT_EQ(DecodeGetAsRequest(EncodeGetAsRequest(9, keys).value(), Limits{}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ZeroCopyProtocolTest, NewOpsAreKnownAndBounded) {
  Limits l;
  for (std::uint8_t op = 8; op <= kMaxOp; ++op) {
    FrameHeader h;
    h.type = op;
    std::byte raw[kFrameHeaderBytes];
    EncodeFrameHeader(h, raw);
    EXPECT_TRUE(DecodeFrameHeader(raw, l, false).ok()) << int(op);
    EXPECT_NE(OpName(static_cast<Op>(op)), "unknown");
  }
  EXPECT_EQ(MaxRequestBody(Op::kMap, l), 0u);
  EXPECT_EQ(MaxRequestBody(Op::kRelease, l), 4 + 8ull * l.max_batch);
  EXPECT_GT(MaxRequestBody(Op::kLeaseGet, l), MaxRequestBody(Op::kGet, l));
}

}  // namespace
}  // namespace kvdepot::protocol
