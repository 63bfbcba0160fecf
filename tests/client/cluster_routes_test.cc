// Smart clients (docs/cluster.md, "Smart clients"): the client learns the view from CLUSTER_INFO
// and sends each key's requests to its owner. Three in-process daemons on one static view
// (tests/daemon/in_process_cluster.h); the daemons' forwarded counters show whether a request
// reached its owner directly.
#include "kvdepot/client/cluster_routes.h"

#include <gtest/gtest.h>

#include <array>
#include <set>

#include "../common/random_bytes.h"
#include "../daemon/in_process_cluster.h"
#include "kvdepot/kvdepot.h"

namespace kvdepot::client {
namespace {

using daemon::InProcessCluster;
using protocol::Op;

std::vector<std::byte> ValueFor(std::size_t i) {
  return test::RandomBytes(2048 + 97 * (i % 13), static_cast<std::uint32_t>(500 + i));
}

std::string KeyFor(std::size_t i) {
  return "prompt-9/chunk-" + std::to_string(i);
}

std::vector<std::string> Keys(std::size_t n) {
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < n; ++i) keys.push_back(KeyFor(i));
  return keys;
}

class ClusterRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.Start(3, {.replicas = 1, .group_chunks = 1});
    view_ = cluster_.node(0).source->Current();
  }

  // A smart client seeded with node `seed`.
  ClientOptions Smart(std::size_t seed) {
    ClientOptions o = cluster_.ClientFor(seed);
    o.cluster_routing = ClusterRouting::kAuto;
    return o;
  }
  // A client that knows nothing of the cluster: everything through node `via`.
  ClientOptions Plain(std::size_t via) {
    ClientOptions o = cluster_.ClientFor(via);
    o.cluster_routing = ClusterRouting::kOff;
    return o;
  }

  std::uint64_t Forwarded() const { return cluster_.Forwarded(); }

  std::size_t OwnerOf(const std::string& key) {
    return cluster_.IndexOf(view_->PrimaryOwner(cluster::PlacementKey(key))->id);
  }

  // Every key is held by its owner and by no other node.
  void ExpectOnlyAtOwners(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t node = 0; node < cluster_.size(); ++node) {
        EXPECT_EQ(cluster_.Holds(node, KeyFor(i)), node == OwnerOf(KeyFor(i)))
            << KeyFor(i) << " @" << node;
      }
    }
  }

  InProcessCluster cluster_;
  std::shared_ptr<const cluster::Topology> view_;
};

TEST_F(ClusterRoutesTest, PutsAndGetsGoStraightToTheOwner) {
  Client smart(Smart(0));
  constexpr std::size_t kChunks = 30;
  for (std::size_t i = 0; i < kChunks; ++i) {
    const auto v = ValueFor(i);
    ASSERT_TRUE(smart.Put(KeyFor(i), v).ok()) << i;
  }
  ExpectOnlyAtOwners(kChunks);
  for (std::size_t i = 0; i < kChunks; ++i) {
    auto got = smart.Get(KeyFor(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << i;
    EXPECT_EQ(**got, ValueFor(i));
    std::vector<std::byte> buf(ValueFor(i).size());
    auto into = smart.GetInto(KeyFor(i), {}, std::span<std::byte>(buf));
    ASSERT_TRUE(into.ok() && into->has_value()) << i;
    EXPECT_EQ(buf, ValueFor(i));
  }
  auto missing = smart.Get("never-written");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  EXPECT_EQ(Forwarded(), 0u) << "a request reached a node that does not own its key";
  ASSERT_NE(smart.cluster_routes(), nullptr);
  EXPECT_EQ(smart.cluster_routes()->refreshes(), 1u);
}

TEST_F(ClusterRoutesTest, MultiKeyGetOfA64ChunkPromptArrivesInOrderFromThreeOwners) {
  constexpr std::size_t kChunks = 64;
  Client smart(Smart(1));
  std::vector<std::vector<std::byte>> values;
  std::vector<protocol::PutItemView> items;
  const std::vector<std::string> keys = Keys(kChunks);
  for (std::size_t i = 0; i < kChunks; ++i) values.push_back(ValueFor(i));
  for (std::size_t i = 0; i < kChunks; ++i) items.push_back({keys[i], values[i]});
  auto put = smart.Put(items);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (StatusCode c : *put) EXPECT_EQ(c, StatusCode::kOk);
  ExpectOnlyAtOwners(kChunks);
  std::array<int, 3> owned{};
  for (std::size_t i = 0; i < kChunks; ++i) ++owned[OwnerOf(KeyFor(i))];
  for (int n : owned) EXPECT_GT(n, 0) << "the prompt should be spread over all three nodes";

  std::vector<std::string> wanted = keys;
  wanted.push_back("absent-key");
  std::vector<std::uint32_t> order;
  const Status s = smart.Get(wanted, [&](const GetItem& item) {
    order.push_back(item.index);
    if (item.index < kChunks) {
      ASSERT_TRUE(item.status.ok()) << item.index;
      EXPECT_EQ(std::vector<std::byte>(item.value.begin(), item.value.end()), values[item.index]);
    } else {
      EXPECT_EQ(item.status.code(), StatusCode::kNotFound);
    }
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(order.size(), wanted.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(Forwarded(), 0u);

  // The same twice in a row on the pooled connections, and GET_AS in the same order.
  order.clear();
  ASSERT_TRUE(smart.Get(keys, [&](const GetItem& item) { order.push_back(item.index); }).ok());
  EXPECT_EQ(order.size(), kChunks);
  auto deleted = smart.Delete(std::vector<std::string>{KeyFor(0), KeyFor(1), "absent"});
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted,
            (std::vector<StatusCode>{StatusCode::kOk, StatusCode::kOk, StatusCode::kNotFound}));
  EXPECT_FALSE(cluster_.Holds(OwnerOf(KeyFor(0)), KeyFor(0)));
  EXPECT_EQ(Forwarded(), 0u);
}

TEST_F(ClusterRoutesTest, ResultsAreByteIdenticalToTheForwardingPath) {
  constexpr std::size_t kChunks = 40;
  Client smart(Smart(2));
  Client plain(Plain(0));
  for (std::size_t i = 0; i < kChunks; ++i) {
    const auto v = ValueFor(i);
    // Half written through the forwarding path, half by the smart client.
    ASSERT_TRUE((i % 2 == 0 ? plain.Put(KeyFor(i), v) : smart.Put(KeyFor(i), v)).ok());
  }
  const std::vector<std::string> keys = Keys(kChunks + 2);
  std::vector<std::vector<std::byte>> via_plain, via_smart;
  std::vector<StatusCode> codes_plain, codes_smart;
  ASSERT_TRUE(plain
                  .Get(keys,
                       [&](const GetItem& item) {
                         via_plain.emplace_back(item.value.begin(), item.value.end());
                         codes_plain.push_back(item.status.code());
                       })
                  .ok());
  ASSERT_TRUE(smart
                  .Get(keys,
                       [&](const GetItem& item) {
                         via_smart.emplace_back(item.value.begin(), item.value.end());
                         codes_smart.push_back(item.status.code());
                       })
                  .ok());
  EXPECT_EQ(via_plain, via_smart);
  EXPECT_EQ(codes_plain, codes_smart);
  auto lookup_plain = plain.Lookup(keys);
  auto lookup_smart = smart.Lookup(keys);
  ASSERT_TRUE(lookup_plain.ok() && lookup_smart.ok());
  EXPECT_EQ(lookup_plain->prefix_length, lookup_smart->prefix_length);
  EXPECT_EQ(lookup_plain->tiers, lookup_smart->tiers);
}

TEST_F(ClusterRoutesTest, LookupAcrossOwnersGivesTheLongestPrefixWithoutForwarding) {
  Client smart(Smart(0));
  for (std::size_t i = 0; i < 64; ++i) {
    if (i >= 40 && i != 50) continue;  // a hole at 40, one more chunk after it
    const auto v = ValueFor(i);
    ASSERT_TRUE(smart.Put(KeyFor(i), v).ok());
  }
  const std::uint64_t forwarded = Forwarded();
  auto r = smart.Lookup(Keys(64));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prefix_length, 40u);
  ASSERT_EQ(r->tiers.size(), 64u);
  for (std::size_t i = 0; i < 64; ++i) {
    EXPECT_EQ(r->tiers[i] != protocol::Tier::kNone, i < 40 || i == 50) << i;
  }
  EXPECT_EQ(Forwarded(), forwarded);
  auto prefix = smart.Lookup(Keys(20));
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(prefix->prefix_length, 20u);
}

TEST_F(ClusterRoutesTest, HashTagsAndPlacementKeysRouteTheWholeGroupToOneOwner) {
  Client smart(Smart(0));
  // A hash tag places by the tag on the client and on the daemons alike.
  std::set<std::size_t> holders;
  for (std::size_t i = 0; i < 12; ++i) {
    const std::string key = "{group-a}/chunk-" + std::to_string(i);
    const auto v = ValueFor(i);
    ASSERT_TRUE(smart.Put(key, v).ok());
    for (std::size_t n = 0; n < 3; ++n) {
      if (cluster_.Holds(n, key)) holders.insert(n);
    }
  }
  EXPECT_EQ(holders.size(), 1u);
  EXPECT_EQ(Forwarded(), 0u);
  // An explicit placement key sends every request to the anchor's owner, with the key in the
  // request's placement section: that owner stores and answers them all itself.
  const std::string anchor = KeyFor(0);
  const std::size_t anchor_owner = OwnerOf(anchor);
  const std::vector<std::string> keys = Keys(16);
  const std::vector<std::string> anchors(keys.size(), anchor);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto v = ValueFor(i);
    ASSERT_TRUE(smart.Put(keys[i], v, anchor).ok());
  }
  std::size_t hits = 0;
  ASSERT_TRUE(smart
                  .Get(
                      keys,
                      [&](const GetItem& item) {
                        ASSERT_TRUE(item.status.ok()) << item.index;
                        EXPECT_EQ(std::vector<std::byte>(item.value.begin(), item.value.end()),
                                  ValueFor(item.index));
                        ++hits;
                      },
                      anchors)
                  .ok());
  EXPECT_EQ(hits, keys.size());
  EXPECT_EQ(Forwarded(), 0u);
  for (const std::string& key : keys) {
    for (std::size_t n = 0; n < 3; ++n) {
      EXPECT_EQ(cluster_.Holds(n, key), n == anchor_owner) << key << " @" << n;
    }
  }
  // The same through Put(items) (pipelined per owner) and a LOOKUP: one group, one owner.
  const std::vector<std::string> more = {"more-0", "more-1", "more-2", "more-3"};
  std::vector<std::vector<std::byte>> values;
  std::vector<protocol::PutItemView> items;
  for (std::size_t i = 0; i < more.size(); ++i) values.push_back(ValueFor(100 + i));
  for (std::size_t i = 0; i < more.size(); ++i) items.push_back({more[i], values[i], anchor});
  auto put = smart.Put(items);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  for (StatusCode code : *put) EXPECT_EQ(code, StatusCode::kOk);
  const std::vector<std::string> more_anchors(more.size(), anchor);
  auto lookup = smart.Lookup(more, more_anchors);
  ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
  EXPECT_EQ(lookup->prefix_length, more.size());
  EXPECT_EQ(Forwarded(), 0u);
  for (const std::string& key : more) EXPECT_TRUE(cluster_.Holds(anchor_owner, key)) << key;
}

TEST_F(ClusterRoutesTest, AStoppedMemberIsRoutedAroundWithMissesNotErrors) {
  constexpr std::size_t kChunks = 48;
  ClientOptions o = Smart(0);
  o.cluster_refresh = std::chrono::milliseconds(60000);  // only failures refresh the view
  Client smart(o);
  for (std::size_t i = 0; i < kChunks; ++i) {
    const auto v = ValueFor(i);
    ASSERT_TRUE(smart.Put(KeyFor(i), v).ok());
  }
  const std::uint64_t refreshes = smart.cluster_routes()->refreshes();
  // Node 2 dies; the daemons have not noticed yet (their view still lists it).
  cluster_.StopNode(2);
  std::size_t got = 0, missed = 0;
  const Status s = smart.Get(Keys(kChunks), [&](const GetItem& item) {
    if (item.status.ok()) {
      EXPECT_EQ(std::vector<std::byte>(item.value.begin(), item.value.end()), ValueFor(item.index));
      ++got;
    } else {
      EXPECT_EQ(item.status.code(), StatusCode::kNotFound) << item.status.ToString();
      EXPECT_EQ(OwnerOf(KeyFor(item.index)), 2u) << item.index;
      ++missed;
    }
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got + missed, kChunks);
  EXPECT_GT(missed, 0u);
  for (std::size_t i = 0; i < kChunks; ++i) {
    auto one = smart.Get(KeyFor(i));
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    EXPECT_EQ(one->has_value(), OwnerOf(KeyFor(i)) != 2) << i;
  }
  auto lookup = smart.Lookup(Keys(kChunks));
  ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
  EXPECT_EQ(lookup->tiers.size(), kChunks);
  // Now the membership notices: the view without node 2. The client refreshes after the failures
  // above and writes the dead node's keys to their new owners directly.
  cluster_.SetView(cluster_.View({0, 1}), /*keep_previous=*/false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  const auto new_view = cluster_.node(0).source->Current();
  bool direct = false;
  while (!direct && std::chrono::steady_clock::now() < deadline) {
    const std::uint64_t before = Forwarded();
    for (std::size_t i = 0; i < kChunks; ++i) {
      if (OwnerOf(KeyFor(i)) != 2) continue;
      const auto v = ValueFor(i);
      ASSERT_TRUE(smart.Put(KeyFor(i), v).ok()) << i;
    }
    direct = Forwarded() == before;
  }
  EXPECT_TRUE(direct) << "the client never routed by the new view";
  EXPECT_GT(smart.cluster_routes()->refreshes(), refreshes);
  for (std::size_t i = 0; i < kChunks; ++i) {
    const std::size_t new_owner =
        cluster_.IndexOf(new_view->PrimaryOwner(cluster::PlacementKey(KeyFor(i)))->id);
    auto one = smart.Get(KeyFor(i));
    ASSERT_TRUE(one.ok());
    ASSERT_TRUE(one->has_value()) << i;
    EXPECT_TRUE(cluster_.Holds(new_owner, KeyFor(i))) << i;
  }
}

TEST_F(ClusterRoutesTest, TheCApiRoutesByDefaultAndCanBeTurnedOff) {
  const std::string seed = cluster_.node(0).addr;
  kvdepot_options options{};
  kvdepot_client* c = nullptr;
  ASSERT_EQ(kvdepot_open_ex(seed.c_str(), 10000, &options, &c), KVDEPOT_OK);
  for (std::size_t i = 0; i < 24; ++i) {
    const auto v = ValueFor(i);
    const std::string key = KeyFor(i);
    ASSERT_EQ(kvdepot_put(c, key.data(), key.size(), v.data(), v.size()), KVDEPOT_OK)
        << kvdepot_last_error(c);
  }
  std::vector<const void*> key_ptrs;
  std::vector<size_t> key_lens;
  const std::vector<std::string> keys = Keys(24);
  for (const auto& k : keys) {
    key_ptrs.push_back(k.data());
    key_lens.push_back(k.size());
  }
  size_t prefix = 0;
  ASSERT_EQ(kvdepot_lookup(c, key_ptrs.data(), key_lens.data(), keys.size(), &prefix, nullptr),
            KVDEPOT_OK);
  EXPECT_EQ(prefix, 24u);
  void* value = nullptr;
  size_t len = 0;
  ASSERT_EQ(kvdepot_get(c, keys[5].data(), keys[5].size(), &value, &len), KVDEPOT_OK);
  EXPECT_EQ(
      std::vector<std::byte>(static_cast<std::byte*>(value), static_cast<std::byte*>(value) + len),
      ValueFor(5));
  kvdepot_free(value);
  kvdepot_close(c);
  ExpectOnlyAtOwners(24);
  EXPECT_EQ(Forwarded(), 0u);

  options.cluster_routing = KVDEPOT_CLUSTER_ROUTING_OFF;  // through node 0, which forwards
  ASSERT_EQ(kvdepot_open_ex(seed.c_str(), 10000, &options, &c), KVDEPOT_OK);
  for (std::size_t i = 0; i < 24; ++i) {
    ASSERT_EQ(kvdepot_get(c, keys[i].data(), keys[i].size(), &value, &len), KVDEPOT_OK);
    kvdepot_free(value);
  }
  kvdepot_close(c);
  EXPECT_GT(Forwarded(), 0u);
  options.cluster_routing = 7;
  EXPECT_EQ(kvdepot_open_ex(seed.c_str(), 10000, &options, &c), KVDEPOT_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
}

TEST(ClusterRoutesSingleTest, ADaemonNotInAClusterIsUsedAsBefore) {
  daemon::HostTierOptions host;
  host.capacity_bytes = 16ull << 20;
  daemon::HostTier tier(host);
  daemon::Store store(tier, nullptr);
  daemon::ServerOptions so;
  so.listen = "127.0.0.1:0";
  daemon::Server server(so, store, nullptr);
  ASSERT_TRUE(server.Start().ok());
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(server.tcp_port());
  Client smart(o);  // cluster_routing defaults to kAuto
  const auto v = ValueFor(1);
  ASSERT_TRUE(smart.Put("k1", v).ok());
  auto got = smart.Get("k1");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, v);
  std::vector<std::uint32_t> order;
  ASSERT_TRUE(smart
                  .Get(std::vector<std::string>{"k1", "k2"},
                       [&](const GetItem& item) { order.push_back(item.index); })
                  .ok());
  EXPECT_EQ(order, (std::vector<std::uint32_t>{0, 1}));
  auto lookup = smart.Lookup(std::vector<std::string>{"k1", "k2"});
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->prefix_length, 1u);
  ASSERT_NE(smart.cluster_routes(), nullptr);
  EXPECT_EQ(smart.cluster_routes()->refreshes(), 1u);  // one CLUSTER_INFO, then plain
  ClientOptions off = o;
  off.cluster_routing = ClusterRouting::kOff;
  Client plain(off);
  EXPECT_EQ(plain.cluster_routes(), nullptr);
  ASSERT_TRUE(plain.Get("k1").ok());
  server.Stop();
}

}  // namespace
}  // namespace kvdepot::client
