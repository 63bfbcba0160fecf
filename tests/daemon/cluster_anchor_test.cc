// Group placement on the wire (docs/cluster.md, "Prefix locality in requests"): requests that
// carry placement keys (protocol::kFlagPlacement) are routed by their group's anchor, so a
// prompt's chunks land on one owner per group of G; malformed placement sections are refused
// without harming the connection; a single daemon ignores them.
#include <gtest/gtest.h>

#include <set>

#include "../common/random_bytes.h"
#include "in_process_cluster.h"
#include "in_process_server.h"
#include "kvdepot/base/byte_order.h"
#include "kvdepot/protocol/placement.h"
#include "socket_test_util.h"

namespace kvdepot::daemon {
namespace {

using protocol::Op;

constexpr std::uint32_t kGroup = 8;
constexpr std::size_t kChunks = 64;

Namespace PromptNamespace() {
  Namespace ns;
  ns.model = "anchor-test";
  ns.chunk_tokens = 16;
  return ns;
}

std::vector<std::uint32_t> PromptTokens() {
  std::vector<std::uint32_t> tokens(kChunks * PromptNamespace().chunk_tokens);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>(i * 7 + 3);
  return tokens;
}

// The prompt's 64 chunk keys (48 binary bytes each), in prefix order.
std::vector<std::string> PromptKeys() {
  auto keys = ChunkKeysForTokens(PromptNamespace(), PromptTokens(), false);
  EXPECT_TRUE(keys.ok());
  std::vector<std::string> wire;
  for (const ChunkKey& k : *keys) {
    wire.emplace_back(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size());
  }
  return wire;
}

std::vector<std::byte> ValueFor(std::size_t i) {
  return test::RandomBytes(2048, static_cast<std::uint32_t>(500 + i));
}

// The one frame answering a request on `fd`: its header and body.
std::pair<protocol::FrameHeader, std::vector<std::byte>> ReadFrame(int fd) {
  std::array<std::byte, protocol::kFrameHeaderBytes> head{};
  EXPECT_EQ(::recv(fd, head.data(), head.size(), MSG_WAITALL), static_cast<ssize_t>(head.size()));
  auto h = protocol::DecodeFrameHeader(head, protocol::Limits{}, true);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  if (!h.ok()) return {};
  std::vector<std::byte> body(h->body_length);
  if (!body.empty()) {
    EXPECT_EQ(::recv(fd, body.data(), body.size(), MSG_WAITALL), static_cast<ssize_t>(body.size()));
  }
  return {*h, std::move(body)};
}

void SendFrame(int fd, Op op, std::uint16_t flags, std::uint64_t id,
               const std::vector<std::byte>& body) {
  protocol::FrameHeader h;
  h.type = static_cast<std::uint8_t>(op);
  h.flags = flags;
  h.request_id = id;
  h.body_length = static_cast<std::uint32_t>(body.size());
  std::vector<std::byte> frame(protocol::kFrameHeaderBytes);
  protocol::EncodeFrameHeader(h, frame.data());
  frame.insert(frame.end(), body.begin(), body.end());
  ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
}

// PING on `fd` answers ok: the connection survived what came before.
void ExpectAlive(int fd, std::uint64_t id) {
  SendFrame(fd, Op::kPing, 0, id, {});
  auto [h, body] = ReadFrame(fd);
  EXPECT_EQ(h.request_id, id);
  EXPECT_EQ(h.status, 0);
}

std::vector<std::byte> Join(std::vector<std::byte> a, const std::vector<std::byte>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class ClusterAnchorTest : public ::testing::Test {
 protected:
  std::unique_ptr<client::Client> ClientOf(std::size_t node) {
    return std::make_unique<client::Client>(cluster_.ClientFor(node));
  }
  std::string OwnerOf(std::string_view placement_key) {
    const auto view = cluster_.node(0).source->Current();
    return view->PrimaryOwner(cluster::PlacementKey(placement_key))->id;
  }

  InProcessCluster cluster_;
};

TEST_F(ClusterAnchorTest, APromptPutWithAnchorsLandsOnOneOwnerPerGroup) {
  cluster_.Start(3, {.replicas = 1, .group_chunks = kGroup});
  const std::vector<std::string> keys = PromptKeys();
  ASSERT_EQ(keys.size(), kChunks);
  const std::vector<std::string> anchors = protocol::ChainPlacementKeys(keys, kGroup);
  std::vector<std::vector<std::byte>> values;
  std::vector<protocol::PutItemView> items;
  for (std::size_t i = 0; i < kChunks; ++i) values.push_back(ValueFor(i));
  for (std::size_t i = 0; i < kChunks; ++i) items.push_back({keys[i], values[i], anchors[i]});
  auto put = ClientOf(0)->Put(items);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (StatusCode c : *put) EXPECT_EQ(c, StatusCode::kOk);

  // Every chunk is held by its group anchor's owner only: ceil(64 / 8) = 8 groups, each whole on
  // one node.
  std::size_t placed_differently = 0;
  std::set<std::size_t> groups;
  for (std::size_t i = 0; i < kChunks; ++i) {
    const std::size_t owner = cluster_.IndexOf(OwnerOf(anchors[i]));
    groups.insert(protocol::GroupAnchorIndex(i, kGroup));
    for (std::size_t n = 0; n < cluster_.size(); ++n) {
      EXPECT_EQ(cluster_.Holds(n, keys[i]), n == owner) << "chunk " << i << " node " << n;
    }
    if (OwnerOf(keys[i]) != OwnerOf(anchors[i])) ++placed_differently;
  }
  EXPECT_EQ(groups.size(), (kChunks + kGroup - 1) / kGroup);
  EXPECT_GT(placed_differently, 0u);  // per-key placement would have scattered them
  std::size_t stored = 0;
  for (std::size_t n = 0; n < cluster_.size(); ++n) {
    stored += cluster_.node(n).host->stats().chunks;
  }
  EXPECT_EQ(stored, kChunks);  // one copy each, nothing on the forwarding node

  // Through every node: GET with the anchors is byte-identical, LOOKUP finds the whole prefix in
  // one parallel round (at most one LOOKUP per peer).
  for (std::size_t n = 0; n < cluster_.size(); ++n) {
    auto c = ClientOf(n);
    std::size_t got = 0;
    const Status s = c->Get(
        keys,
        [&](const client::GetItem& item) {
          ASSERT_TRUE(item.status.ok()) << "node " << n << " chunk " << item.index;
          EXPECT_TRUE(std::equal(item.value.begin(), item.value.end(), values[item.index].begin(),
                                 values[item.index].end()));
          ++got;
        },
        anchors);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(got, kChunks);
    const std::uint64_t before =
        cluster_.node(n).router->stats().forwarded[static_cast<std::size_t>(Op::kLookup)];
    auto prefix = c->LookupPrefix(PromptNamespace(), PromptTokens(), kGroup);
    ASSERT_TRUE(prefix.ok()) << prefix.status().ToString();
    EXPECT_EQ(prefix->prefix_length, kChunks) << "node " << n;
    const std::uint64_t after =
        cluster_.node(n).router->stats().forwarded[static_cast<std::size_t>(Op::kLookup)];
    EXPECT_LE(after - before, cluster_.size() - 1);
    auto lookup = c->Lookup(keys, anchors);
    ASSERT_TRUE(lookup.ok());
    EXPECT_EQ(lookup->prefix_length, kChunks);
  }

  // DELETE with the anchors reaches the owners.
  auto deleted = ClientOf(1)->Delete(keys, anchors);
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  for (StatusCode c : *deleted) EXPECT_EQ(c, StatusCode::kOk);
  for (std::size_t i = 0; i < kChunks; ++i) {
    for (std::size_t n = 0; n < cluster_.size(); ++n) EXPECT_FALSE(cluster_.Holds(n, keys[i]));
  }
}

// After a join, a GET with the anchors asks the group's previous owner (hand-off) and copies the
// group's chunks to its new owner.
TEST_F(ClusterAnchorTest, HandOffFollowsTheAnchors) {
  cluster_.Start(3, {.replicas = 1, .group_chunks = kGroup});
  cluster_.SetView(cluster_.View({0, 1}), /*keep_previous=*/false);
  const std::vector<std::string> keys = PromptKeys();
  const std::vector<std::string> anchors = protocol::ChainPlacementKeys(keys, kGroup);
  std::vector<std::vector<std::byte>> values;
  std::vector<protocol::PutItemView> items;
  for (std::size_t i = 0; i < kChunks; ++i) values.push_back(ValueFor(i));
  for (std::size_t i = 0; i < kChunks; ++i) items.push_back({keys[i], values[i], anchors[i]});
  ASSERT_TRUE(ClientOf(0)->Put(items).ok());
  cluster_.SetView(cluster_.View({0, 1, 2}), /*keep_previous=*/true);  // node 2 joins
  std::size_t moved = 0;
  for (std::size_t i = 0; i < kChunks; ++i) {
    if (cluster_.IndexOf(OwnerOf(anchors[i])) == 2) ++moved;
  }
  ASSERT_GT(moved, 0u);
  ASSERT_EQ(moved % kGroup, 0u);  // whole groups move
  std::size_t got = 0;
  const Status s = ClientOf(2)->Get(
      keys,
      [&](const client::GetItem& item) {
        ASSERT_TRUE(item.status.ok()) << "chunk " << item.index;
        EXPECT_TRUE(std::equal(item.value.begin(), item.value.end(), values[item.index].begin(),
                               values[item.index].end()));
        ++got;
      },
      anchors);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got, kChunks);
  EXPECT_EQ(cluster_.node(2).router->stats().handoff_hits, moved);
  for (std::size_t i = 0; i < kChunks; ++i) {
    if (cluster_.IndexOf(OwnerOf(anchors[i])) == 2) {
      EXPECT_TRUE(cluster_.Holds(2, keys[i])) << "chunk " << i;
    }
  }
}

TEST_F(ClusterAnchorTest, RequestsWithoutPlacementKeysArePlacedPerKey) {
  cluster_.Start(3, {.replicas = 1, .group_chunks = kGroup});
  const std::vector<std::string> keys = PromptKeys();
  auto c = ClientOf(2);
  for (std::size_t i = 0; i < 16; ++i) ASSERT_TRUE(c->Put(keys[i], ValueFor(i)).ok());
  for (std::size_t i = 0; i < 16; ++i) {
    const std::size_t owner = cluster_.IndexOf(OwnerOf(keys[i]));
    for (std::size_t n = 0; n < cluster_.size(); ++n) {
      EXPECT_EQ(cluster_.Holds(n, keys[i]), n == owner) << "chunk " << i;
    }
  }
  auto prefix = ClientOf(0)->Lookup(std::span<const std::string>(keys).first(16));
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(prefix->prefix_length, 16u);
}

TEST_F(ClusterAnchorTest, MalformedPlacementSectionsAreRefusedAndTheConnectionSurvives) {
  cluster_.Start(3, {.replicas = 1, .group_chunks = kGroup});
  const int fd = test_socket::ConnectLoopback(cluster_.node(0).server->tcp_port());
  ASSERT_GE(fd, 0);
  const std::vector<std::string> keys = {"k0", "k1", "k2"};
  const std::vector<std::byte> key_list = protocol::EncodeKeyList(keys).value();
  const std::vector<std::string_view> two = {"a", "b"};
  const std::vector<std::byte> short_section = protocol::EncodePlacementSection(two).value();

  // GET with 2 placement keys for 3 items: invalid_argument naming the counts.
  SendFrame(fd, Op::kGet, protocol::kFlagPlacement, 1, Join(short_section, key_list));
  auto [h1, b1] = ReadFrame(fd);
  EXPECT_EQ(h1.request_id, 1u);
  EXPECT_EQ(h1.status, static_cast<std::uint16_t>(StatusCode::kInvalidArgument));
  const std::string m1(reinterpret_cast<const char*>(b1.data()), b1.size());
  EXPECT_NE(m1.find("2 entries for 3 items"), std::string::npos) << m1;
  ExpectAlive(fd, 2);

  // LOOKUP whose section claims more bytes than the body holds.
  std::vector<std::byte> overrun(4);
  StoreLE<std::uint32_t>(overrun.data(), 1000);
  SendFrame(fd, Op::kLookup, protocol::kFlagPlacement, 3, Join(overrun, key_list));
  auto [h3, b3] = ReadFrame(fd);
  EXPECT_EQ(h3.status, static_cast<std::uint16_t>(StatusCode::kInvalidArgument));
  ExpectAlive(fd, 4);

  // PUT whose section's count does not match: refused before any value is stored; its body is
  // read and dropped.
  const std::vector<std::byte> value = ValueFor(1);
  const std::vector<protocol::PutItemView> items = {{"p0", value}, {"p1", value}, {"p2", value}};
  SendFrame(fd, Op::kPut, protocol::kFlagPlacement, 5,
            Join(short_section, protocol::EncodePutBody(items).value()));
  auto [h5, b5] = ReadFrame(fd);
  EXPECT_EQ(h5.request_id, 5u);
  EXPECT_EQ(h5.status, static_cast<std::uint16_t>(StatusCode::kInvalidArgument));
  ExpectAlive(fd, 6);
  // PUT whose section runs past the body.
  SendFrame(fd, Op::kPut, protocol::kFlagPlacement, 7, Join(overrun, {}));
  auto [h7, b7] = ReadFrame(fd);
  EXPECT_EQ(h7.status, static_cast<std::uint16_t>(StatusCode::kInvalidArgument));
  ExpectAlive(fd, 8);
  // A placement key over max_key_bytes (256).
  const std::string long_key(300, 'x');
  const std::vector<std::string_view> one_long = {long_key};
  const std::vector<std::string> one = {"k0"};
  SendFrame(fd, Op::kDelete, protocol::kFlagPlacement, 9,
            Join(protocol::EncodePlacementSection(one_long).value(),
                 protocol::EncodeKeyList(one).value()));
  auto [h9, b9] = ReadFrame(fd);
  EXPECT_EQ(h9.status, static_cast<std::uint16_t>(StatusCode::kOutOfRange));
  ExpectAlive(fd, 10);
  ::close(fd);
  for (std::size_t n = 0; n < cluster_.size(); ++n) {
    for (const char* k : {"p0", "p1", "p2"}) EXPECT_FALSE(cluster_.Holds(n, k));
  }
  // The daemon serves on.
  EXPECT_TRUE(ClientOf(0)->Ping().ok());
}

class SingleDaemonPlacementTest : public InProcessServerTest {};

TEST_F(SingleDaemonPlacementTest, ASingleDaemonAcceptsAndIgnoresPlacementKeys) {
  StartServerWith(HostTierOptions{}, ServerOptions{});
  client::Client c(TcpOptions());
  const std::vector<std::string> keys = PromptKeys();
  const std::vector<std::string> anchors = protocol::ChainPlacementKeys(keys, kGroup);
  const std::vector<std::byte> value = ValueFor(0);
  std::vector<protocol::PutItemView> items;
  for (std::size_t i = 0; i < 10; ++i) items.push_back({keys[i], value, anchors[i]});
  auto put = c.Put(items);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  auto lookup = c.Lookup(std::span<const std::string>(keys).first(10));  // no placement keys
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->prefix_length, 10u);
  auto placed = c.LookupPrefix(PromptNamespace(), PromptTokens(), kGroup);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  EXPECT_EQ(placed->prefix_length, 10u);
  // A placement list of the wrong length is refused by the client before sending.
  EXPECT_EQ(c.Lookup(keys, std::span<const std::string>(anchors).first(3)).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvdepot::daemon
