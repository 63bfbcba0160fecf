// Requests in a cluster (docs/cluster.md, "Requests"): three in-process daemons sharing one view.
// Forwarding, replicas, one-round LOOKUP, dead and misbehaving peers, hand-off, fencing, the
// one-hop rule, CLUSTER_INFO and the router's metrics.
#include "kvdepot/daemon/cluster_router.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "../common/random_bytes.h"
#include "in_process_cluster.h"
#include "kvdepot/daemon/metrics.h"
#include "socket_test_util.h"

namespace kvdepot::daemon {
namespace {

using namespace std::chrono_literals;
using protocol::Op;

std::vector<std::byte> ValueFor(std::size_t i, std::size_t size = 4096) {
  return test::RandomBytes(size, static_cast<std::uint32_t>(1000 + i));
}

std::string KeyFor(std::size_t i) {
  return "prompt-7/chunk-" + std::to_string(i);
}

// The ids of `key`'s owners in `view`.
std::vector<std::string> OwnerIds(const cluster::Topology& view, const std::string& key) {
  std::vector<std::string> ids;
  for (const cluster::Member* m : view.Owners(cluster::PlacementKey(key))) ids.push_back(m->id);
  return ids;
}

// A listening socket that never accepts: connects complete (the kernel's backlog), requests are
// never answered — a hung peer.
class SilentPeer {
 public:
  SilentPeer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 16);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentPeer() { ::close(fd_); }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

// Accepts connections and answers every request with `reply` bytes, then closes.
class GarbagePeer {
 public:
  explicit GarbagePeer(std::vector<std::byte> reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 16);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~GarbagePeer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }
  int served() const { return served_.load(); }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::byte buf[4096];
      pollfd q{c, POLLIN, 0};
      if (::poll(&q, 1, 2000) > 0 && ::recv(c, buf, sizeof buf, 0) > 0) {
        ::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
        ++served_;
      }
      ::close(c);
    }
  }
  std::vector<std::byte> reply_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> served_{0};
  std::thread thread_;
};

// Answers one LOOKUP per connection ("all present, in host memory"), then closes it: every
// pooled connection to it is stale by the next request.
class OneReplyPeer {
 public:
  OneReplyPeer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 16);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneReplyPeer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_.load(); }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      ++connections_;
      std::array<std::byte, protocol::kFrameHeaderBytes> head{};
      if (::recv(c, head.data(), head.size(), MSG_WAITALL) == static_cast<ssize_t>(head.size())) {
        auto h = protocol::DecodeFrameHeader(head, protocol::Limits{}, false);
        std::vector<std::byte> body(h.ok() ? h->body_length : 0);
        if (h.ok() &&
            ::recv(c, body.data(), body.size(), MSG_WAITALL) == static_cast<ssize_t>(body.size())) {
          auto keys = protocol::DecodeKeyList(body, protocol::Limits{});
          protocol::LookupResult result;
          result.tiers.assign(keys.ok() ? keys->size() : 0, protocol::Tier::kHost);
          result.prefix_length = static_cast<std::uint32_t>(result.tiers.size());
          const std::vector<std::byte> reply_body = protocol::EncodeLookupResult(result);
          protocol::FrameHeader r;
          r.type = h->type | protocol::kResponseBit;
          r.request_id = h->request_id;
          r.body_length = static_cast<std::uint32_t>(reply_body.size());
          std::vector<std::byte> reply(protocol::kFrameHeaderBytes);
          protocol::EncodeFrameHeader(r, reply.data());
          reply.insert(reply.end(), reply_body.begin(), reply_body.end());
          ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        }
      }
      ::close(c);
    }
  }
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

class ClusterRouterTest : public ::testing::Test {
 protected:
  std::unique_ptr<client::Connection> Connect(std::size_t node) {
    auto c = client::Connection::Connect(cluster_.ClientFor(node));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // PUTs keys [0, n) through node `via`.
  void PutPrompt(std::size_t via, std::size_t n) {
    auto c = Connect(via);
    ASSERT_NE(c, nullptr);
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = ValueFor(i);
      const Status s = c->Put(KeyFor(i), v);
      ASSERT_TRUE(s.ok()) << KeyFor(i) << ": " << s.ToString();
    }
  }

  std::uint64_t Requests(std::size_t node) { return cluster_.node(node).server->stats().requests; }
  ClusterRouterStats RouterStats(std::size_t node) { return cluster_.node(node).router->stats(); }

  InProcessCluster cluster_;
};

TEST_F(ClusterRouterTest, PutThroughOneNodeIsReadableEverywhereAndStoredOnlyAtItsOwner) {
  cluster_.Start(3, {.replicas = 1, .group_chunks = 1});
  constexpr std::size_t kChunks = 30;
  PutPrompt(0, kChunks);
  const auto view = cluster_.node(0).source->Current();
  std::array<std::size_t, 3> held{};
  for (std::size_t i = 0; i < kChunks; ++i) {
    const std::vector<std::string> owners = OwnerIds(*view, KeyFor(i));
    ASSERT_EQ(owners.size(), 1u);
    for (std::size_t n = 0; n < 3; ++n) {
      EXPECT_EQ(cluster_.Holds(n, KeyFor(i)), cluster_.node(n).id == owners[0]) << i << " @" << n;
      held[n] += cluster_.Holds(n, KeyFor(i)) ? 1 : 0;
    }
  }
  for (std::size_t n = 0; n < 3; ++n) EXPECT_GT(held[n], 0u) << "node " << n << " owns nothing";
  for (std::size_t n = 0; n < 3; ++n) {
    auto c = Connect(n);
    ASSERT_NE(c, nullptr);
    for (std::size_t i = 0; i < kChunks; ++i) {
      auto got = c->Get(KeyFor(i));
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_TRUE(got->has_value()) << KeyFor(i) << " via node " << n;
      EXPECT_EQ(**got, ValueFor(i));
    }
  }
  // Reads through a non-owner copy nothing there.
  for (std::size_t n = 0; n < 3; ++n) {
    EXPECT_EQ(cluster_.node(n).store->Scan("", "", 1000, protocol::Tier::kNone).entries.size(),
              held[n]);
  }
  EXPECT_GT(RouterStats(0).forwarded[static_cast<std::size_t>(Op::kPut)], 0u);
  EXPECT_EQ(RouterStats(0).forward_errors[static_cast<std::size_t>(Op::kPut)], 0u);
}

TEST_F(ClusterRouterTest, WithAuthOnPeersPresentTheDaemonsToken) {
  cluster_.Start(3, {.replicas = 1, .group_chunks = 1}, InProcessCluster::DefaultRouterOptions(),
                 "cluster-test-token-0123456789");
  constexpr std::size_t kChunks = 12;
  PutPrompt(2, kChunks);
  auto c = Connect(0);
  ASSERT_NE(c, nullptr);
  for (std::size_t i = 0; i < kChunks; ++i) {
    auto got = c->Get(KeyFor(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << KeyFor(i);
    EXPECT_EQ(**got, ValueFor(i));
  }
  for (std::size_t n = 0; n < 3; ++n) {
    for (const Op op : {Op::kGet, Op::kPut}) {
      EXPECT_EQ(RouterStats(n).forward_errors[static_cast<std::size_t>(op)], 0u);
    }
  }
}

TEST_F(ClusterRouterTest, TwoReplicasStoreTwoCopiesWhicheverNodeTheClientPicks) {
  cluster_.Start(3, {.replicas = 2, .group_chunks = 1});
  constexpr std::size_t kChunks = 24;
  PutPrompt(1, kChunks);
  const auto view = cluster_.node(0).source->Current();
  for (std::size_t i = 0; i < kChunks; ++i) {
    const std::vector<std::string> owners = OwnerIds(*view, KeyFor(i));
    ASSERT_EQ(owners.size(), 2u);
    int copies = 0;
    for (std::size_t n = 0; n < 3; ++n) {
      const bool owner =
          std::find(owners.begin(), owners.end(), cluster_.node(n).id) != owners.end();
      EXPECT_EQ(cluster_.Holds(n, KeyFor(i)), owner) << i << " @" << n;
      copies += cluster_.Holds(n, KeyFor(i)) ? 1 : 0;
    }
    EXPECT_EQ(copies, 2);
  }
  // Node 1 owned some of the keys: it stored them and sent each to the other replica.
  std::uint64_t replica_writes = 0;
  for (std::size_t n = 0; n < 3; ++n) replica_writes += RouterStats(n).replica_writes;
  EXPECT_GT(replica_writes, 0u);
  // DELETE through any node removes every copy.
  auto c = Connect(2);
  ASSERT_NE(c, nullptr);
  const std::vector<std::string> keys = {KeyFor(0), KeyFor(1)};
  auto deleted = c->Delete(keys);
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ(*deleted, (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kOk}));
  for (std::size_t n = 0; n < 3; ++n) {
    EXPECT_FALSE(cluster_.Holds(n, KeyFor(0)));
    EXPECT_FALSE(cluster_.Holds(n, KeyFor(1)));
  }
}

TEST_F(ClusterRouterTest, LookupAcrossOwnersTakesOneRoundTripPerPeer) {
  cluster_.Start(3, {.replicas = 1, .group_chunks = 1});
  constexpr std::size_t kPrompt = 40, kCached = 29;
  PutPrompt(0, kCached);
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < kPrompt; ++i) keys.push_back(KeyFor(i));
  auto c = Connect(0);
  ASSERT_NE(c, nullptr);
  const std::uint64_t before1 = Requests(1), before2 = Requests(2);
  const std::uint64_t forwarded_before =
      RouterStats(0).forwarded[static_cast<std::size_t>(Op::kLookup)];
  auto r = c->Lookup(keys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prefix_length, kCached);
  ASSERT_EQ(r->tiers.size(), kPrompt);
  for (std::size_t i = 0; i < kPrompt; ++i) {
    EXPECT_EQ(r->tiers[i] != protocol::Tier::kNone, i < kCached) << i;
  }
  // One LOOKUP to each other owner, sent in parallel.
  EXPECT_EQ(Requests(1) - before1, 1u);
  EXPECT_EQ(Requests(2) - before2, 1u);
  EXPECT_EQ(RouterStats(0).forwarded[static_cast<std::size_t>(Op::kLookup)] - forwarded_before, 2u);
}

TEST_F(ClusterRouterTest, DeadOrHungPeersGiveMissesNotErrorsAndNoHang) {
  SilentPeer hung;
  cluster_.Start(3, {.replicas = 1, .group_chunks = 1});
  cluster::Member fake;
  fake.id = std::string(32, 'f');
  fake.native_addr = hung.addr();
  fake.capacity_bytes = 64ull << 20;
  constexpr std::size_t kChunks = 30;
  PutPrompt(0, kChunks);
  cluster_.StopNode(2);
  cluster_.SetView(cluster_.View({0, 1, 2}, {fake}), /*keep_previous=*/false);
  const auto view = cluster_.node(0).source->Current();
  auto c = Connect(0);
  ASSERT_NE(c, nullptr);
  const auto start = std::chrono::steady_clock::now();
  std::size_t at_dead = 0, at_hung = 0;
  for (std::size_t i = 0; i < kChunks; ++i) {
    const std::string owner = OwnerIds(*view, KeyFor(i))[0];
    auto got = c->Get(KeyFor(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    if (cluster_.Holds(0, KeyFor(i))) {
      // Held here (node 0 owned it in the first view): answered without asking anyone.
      ASSERT_TRUE(got->has_value());
      EXPECT_EQ(**got, ValueFor(i));
    } else if (owner == cluster_.node(2).id) {
      ++at_dead;
      EXPECT_FALSE(got->has_value());
    } else if (owner == fake.id) {
      ++at_hung;
      EXPECT_FALSE(got->has_value());
    } else if (cluster_.Holds(cluster_.IndexOf(owner), KeyFor(i))) {
      ASSERT_TRUE(got->has_value());
      EXPECT_EQ(**got, ValueFor(i));
    }
  }
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < kChunks; ++i) keys.push_back(KeyFor(i));
  auto r = c->Lookup(keys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(at_dead + at_hung, 0u);
  // The hung peer costs at most one timeout per request (500 ms), the dead one none.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms * (at_hung + 2) + 5s);
  // A write whose only owner is down fails, quickly.
  for (std::size_t i = kChunks; i < kChunks + 40; ++i) {
    if (OwnerIds(*view, KeyFor(i))[0] != cluster_.node(2).id) continue;
    const Status s = c->Put(KeyFor(i), ValueFor(i));
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    break;
  }
  EXPECT_GT(RouterStats(0).forward_errors[static_cast<std::size_t>(Op::kGet)], 0u);
}

// A member killed before its lease expires is still in every view: a LOOKUP at a node that does
// not own a key asks the key's next replica when its first owner cannot answer.
TEST_F(ClusterRouterTest, LookupAsksTheNextReplicaWhileADeadOwnerIsStillInTheView) {
  cluster_.Start(3, {.replicas = 2, .group_chunks = 1});
  constexpr std::size_t kChunks = 60;
  PutPrompt(0, kChunks);
  const auto view = cluster_.node(0).source->Current();
  std::size_t behind_dead_owner = 0;  // keys node 0 must ask of node 2 first
  for (std::size_t i = 0; i < kChunks; ++i) {
    const std::vector<std::string> owners = OwnerIds(*view, KeyFor(i));
    ASSERT_EQ(owners.size(), 2u);
    if (!cluster_.Holds(0, KeyFor(i)) && owners[0] == cluster_.node(2).id) ++behind_dead_owner;
  }
  ASSERT_GT(behind_dead_owner, 0u);
  cluster_.StopNode(2);
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < kChunks; ++i) keys.push_back(KeyFor(i));
  auto c = Connect(0);
  ASSERT_NE(c, nullptr);
  auto r = c->Lookup(keys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prefix_length, kChunks);
  for (std::size_t i = 0; i < kChunks; ++i) {
    EXPECT_NE(r->tiers[i], protocol::Tier::kNone) << KeyFor(i);
  }
  EXPECT_GT(RouterStats(0).forward_errors[static_cast<std::size_t>(Op::kLookup)], 0u);
  // GET agrees: every key is read through node 0.
  for (std::size_t i = 0; i < kChunks; ++i) {
    auto got = c->Get(KeyFor(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << KeyFor(i);
    EXPECT_EQ(**got, ValueFor(i));
  }
}

TEST_F(ClusterRouterTest, MalformedPeerRepliesAreMissesAndTheNodeKeepsServing) {
  std::vector<std::byte> junk(24, std::byte{'X'});
  GarbagePeer garbage(junk);
  // A well-framed reply with the wrong request id.
  std::vector<std::byte> wrong(protocol::kFrameHeaderBytes);
  protocol::FrameHeader h;
  h.type = static_cast<std::uint8_t>(Op::kGet) | protocol::kResponseBit;
  h.request_id = 999;
  protocol::EncodeFrameHeader(h, wrong.data());
  GarbagePeer mismatched(wrong);
  cluster_.Start(2, {.replicas = 1, .group_chunks = 1});
  std::vector<cluster::Member> fakes(2);
  fakes[0].id = std::string(32, 'e');
  fakes[0].native_addr = garbage.addr();
  fakes[1].id = std::string(32, 'f');
  fakes[1].native_addr = mismatched.addr();
  for (auto& f : fakes) f.capacity_bytes = 64ull << 20;
  cluster_.SetView(cluster_.View({0, 1}, fakes), false);
  const auto view = cluster_.node(0).source->Current();
  auto c = Connect(0);
  ASSERT_NE(c, nullptr);
  std::size_t asked_fakes = 0;
  for (std::size_t i = 0; i < 24; ++i) {
    const std::string owner = OwnerIds(*view, KeyFor(i))[0];
    if (owner != fakes[0].id && owner != fakes[1].id) continue;
    ++asked_fakes;
    auto got = c->Get(KeyFor(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_FALSE(got->has_value());
    std::vector<std::string> one = {KeyFor(i)};
    auto r = c->Lookup(one);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->prefix_length, 0u);
  }
  EXPECT_GT(asked_fakes, 0u);
  EXPECT_GT(garbage.served() + mismatched.served(), 0);
  auto pong = c->Ping();
  EXPECT_TRUE(pong.ok()) << pong.ToString();
}

TEST_F(ClusterRouterTest, AConnectionThePeerClosedIsReplacedWithoutAMiss) {
  OneReplyPeer peer;
  cluster_.Start(1, {.replicas = 1, .group_chunks = 1});
  cluster::Member fake;
  fake.id = std::string(32, 'f');
  fake.native_addr = peer.addr();
  fake.capacity_bytes = 1ull << 40;  // owns (nearly) every key
  cluster_.SetView(cluster_.View({0}, {fake}), false);
  const auto view = cluster_.node(0).source->Current();
  std::vector<std::string> keys;
  for (std::size_t i = 0; keys.size() < 3; ++i) {
    if (OwnerIds(*view, KeyFor(i))[0] == fake.id) keys.push_back(KeyFor(i));
  }
  auto c = Connect(0);
  ASSERT_NE(c, nullptr);
  for (int round = 0; round < 3; ++round) {
    auto r = c->Lookup(keys);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->prefix_length, keys.size()) << "round " << round;
  }
  EXPECT_EQ(peer.connections(), 3);
  EXPECT_EQ(RouterStats(0).forward_errors[static_cast<std::size_t>(Op::kLookup)], 0u);
}

TEST_F(ClusterRouterTest, HandOffHitCopiesTheChunkToItsNewOwner) {
  cluster_.Start(3, {.replicas = 1, .group_chunks = 1});
  const cluster::Topology two = cluster_.View({0, 1});
  cluster_.SetView(two, false);
  constexpr std::size_t kChunks = 40;
  PutPrompt(0, kChunks);
  // Node 2 joins; the two-node view stays as the previous one (the hand-off grace period).
  const cluster::Topology three = cluster_.View({0, 1, 2});
  cluster_.SetView(three, /*keep_previous=*/true);
  std::vector<std::size_t> moved;
  for (std::size_t i = 0; i < kChunks; ++i) {
    if (OwnerIds(three, KeyFor(i))[0] == cluster_.node(2).id) moved.push_back(i);
  }
  ASSERT_GE(moved.size(), 2u) << "placement moved too few keys for this test";
  // Through a third node (node 0 or 1 is not the new owner) and through the new owner itself.
  for (std::size_t j = 0; j < moved.size(); ++j) {
    const std::size_t i = moved[j];
    const std::size_t via = j % 2 == 0 ? 2 : (cluster_.Holds(0, KeyFor(i)) ? 1 : 0);
    EXPECT_FALSE(cluster_.Holds(2, KeyFor(i)));
    auto c = Connect(via);
    ASSERT_NE(c, nullptr);
    auto got = c->Get(KeyFor(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << KeyFor(i) << " via node " << via;
    EXPECT_EQ(**got, ValueFor(i));
    // The copy reaches the new owner (at once when it asked; a forwarded PUT otherwise).
    EXPECT_TRUE(test::WaitFor([&] { return cluster_.Holds(2, KeyFor(i)); }, 5s)) << KeyFor(i);
  }
  std::uint64_t hits = 0, bytes = 0;
  for (std::size_t n = 0; n < 3; ++n) {
    hits += RouterStats(n).handoff_hits;
    bytes += RouterStats(n).handoff_bytes;
  }
  EXPECT_EQ(hits, moved.size());
  EXPECT_EQ(bytes, moved.size() * 4096);
  // The grace period ends: the new owner answers alone, from its copy.
  cluster_.SetView(cluster_.View({0, 1, 2}), false);
  auto c = Connect(2);
  ASSERT_NE(c, nullptr);
  auto got = c->Get(KeyFor(moved[0]));
  ASSERT_TRUE(got.ok() && got->has_value());
}

TEST_F(ClusterRouterTest, FencedNodeForwardsWritesItDoesNotOwnAndRefusesTheRest) {
  cluster_.Start(3, {.replicas = 1, .group_chunks = 1});
  cluster_.node(0).source->SetFenced(true);
  auto c = Connect(0);
  ASSERT_NE(c, nullptr);
  const auto view = cluster_.node(0).source->Current();
  constexpr std::size_t kChunks = 30;
  std::size_t refused = 0;
  for (std::size_t i = 0; i < kChunks; ++i) {
    const Status s = c->Put(KeyFor(i), ValueFor(i));
    const std::string owner = OwnerIds(*view, KeyFor(i))[0];
    EXPECT_FALSE(cluster_.Holds(0, KeyFor(i))) << "a fenced node stored " << KeyFor(i);
    if (owner == cluster_.node(0).id) {
      // Its only owner is fenced: refused, stored nowhere.
      ++refused;
      EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
      EXPECT_FALSE(cluster_.Holds(1, KeyFor(i)) || cluster_.Holds(2, KeyFor(i)));
    } else {
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(cluster_.Holds(cluster_.IndexOf(owner), KeyFor(i)));
    }
  }
  EXPECT_GT(refused, 0u);
  // Writes sent straight to the other members are unaffected.
  auto other = Connect(1);
  ASSERT_NE(other, nullptr);
  EXPECT_TRUE(other->Put(KeyFor(100), ValueFor(100)).ok());
}

TEST_F(ClusterRouterTest, RequestsMarkedFromAPeerAreNeverForwarded) {
  cluster_.Start(3, {.replicas = 1, .group_chunks = 1});
  PutPrompt(1, 20);
  const auto view = cluster_.node(0).source->Current();
  std::size_t key = 20;
  for (std::size_t i = 0; i < 20; ++i) {
    if (OwnerIds(*view, KeyFor(i))[0] == cluster_.node(1).id) {
      key = i;
      break;
    }
  }
  ASSERT_LT(key, 20u);
  const int fd = test_socket::ConnectLoopback(cluster_.node(0).server->tcp_port());
  ASSERT_GE(fd, 0);
  const std::vector<std::string> keys = {KeyFor(key)};
  auto body = protocol::EncodeKeyList(keys);
  ASSERT_TRUE(body.ok());
  protocol::FrameHeader h;
  h.type = static_cast<std::uint8_t>(Op::kGet);
  h.flags = protocol::kFlagFromPeer;
  h.request_id = 7;
  h.body_length = static_cast<std::uint32_t>(body->size());
  std::vector<std::byte> frame(protocol::kFrameHeaderBytes);
  protocol::EncodeFrameHeader(h, frame.data());
  frame.insert(frame.end(), body->begin(), body->end());
  const std::uint64_t before = Requests(1);
  ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  std::array<std::byte, protocol::kFrameHeaderBytes + protocol::kGetItemPrefixBytes> reply{};
  ASSERT_EQ(::recv(fd, reply.data(), reply.size(), MSG_WAITALL),
            static_cast<ssize_t>(reply.size()));
  ::close(fd);
  auto rh = protocol::DecodeFrameHeader(reply, protocol::Limits{}, true);
  ASSERT_TRUE(rh.ok());
  EXPECT_EQ(rh->status, static_cast<std::uint16_t>(StatusCode::kNotFound));
  EXPECT_EQ(Requests(1), before);
  EXPECT_EQ(RouterStats(0).forwarded[static_cast<std::size_t>(Op::kGet)], 0u);
}

TEST_F(ClusterRouterTest, ClusterInfoDescribesTheViewAndMetricsCountForwarding) {
  cluster_.Start(3, {.replicas = 2, .group_chunks = 4});
  auto c = Connect(1);
  ASSERT_NE(c, nullptr);
  auto text = c->ClusterInfo();
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const auto j = nlohmann::json::parse(*text);
  EXPECT_TRUE(j["clustered"].get<bool>());
  EXPECT_EQ(j["self"], cluster_.node(1).id);
  EXPECT_FALSE(j["fenced"].get<bool>());
  EXPECT_EQ(j["placement"]["replicas"], 2);
  EXPECT_EQ(j["placement"]["group_chunks"], 4);
  ASSERT_EQ(j["members"].size(), 3u);
  for (const auto& m : j["members"]) {
    EXPECT_EQ(m["state"], "up");
    EXPECT_EQ(m["id"].get<std::string>().size(), 32u);
    EXPECT_FALSE(m["addr"].get<std::string>().empty());
  }
  EXPECT_TRUE(j["previous"].is_null());

  PutPrompt(1, 10);
  Metrics metrics("test");
  metrics.SetClusterRouterSource([this] { return RouterStats(1); });
  const std::string exposition = metrics.Text();
  for (const char* name :
       {"kvdepot_cluster_forwarded_total{op=\"put\"}", "kvdepot_cluster_forward_errors_total",
        "kvdepot_cluster_handoff_hits_total", "kvdepot_cluster_handoff_bytes_total",
        "kvdepot_cluster_replica_writes_total"}) {
    EXPECT_NE(exposition.find(name), std::string::npos) << name;
  }
}

TEST(ClusterInfoTest, ADaemonNotInAClusterSaysSo) {
  EXPECT_FALSE(nlohmann::json::parse(NotClusteredInfoJson())["clustered"].get<bool>());
  EXPECT_TRUE(nlohmann::json::parse(NotClusteredInfoJson())["members"].empty());
}

}  // namespace
}  // namespace kvdepot::daemon
