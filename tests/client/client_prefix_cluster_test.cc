// The prompt-level calls in a cluster (docs/cluster.md, "Prefix locality in requests"): every
// SDK takes G from the smart client's view, so the C++ Client::PutPrefix, the C API's
// kvdepot_put_prefix / kvdepot_lookup_prefix and LookupPrefix place a prompt's chunks alike: each
// chunk at its group anchor's owner, found without a forward. Three in-process daemons with
// G = 4 (tests/daemon/in_process_cluster.h); the real-etcd version, with Python, is
// tests/cluster/cluster_prefix_test.cc.
#include <gtest/gtest.h>

#include <set>

#include "../daemon/in_process_cluster.h"
#include "kvdepot/client/client.h"
#include "kvdepot/kvdepot.h"
#include "prefix_prompts.h"

namespace kvdepot::client {
namespace {

using daemon::InProcessCluster;
using test::PromptValues;

constexpr std::uint32_t kGroup = 4;
constexpr std::size_t kChunks = 22;  // 5 full groups and a partial one
constexpr const char* kModel = "prefix-cluster-model";

Namespace PromptNamespace() {
  return test::PromptNamespace(kModel);
}

std::vector<std::uint32_t> Tokens(std::uint32_t seed) {
  return test::PromptTokens(seed, kChunks * test::kPromptChunkTokens);
}

class PrefixClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.Start(3, {.replicas = 1, .group_chunks = kGroup});
    view_ = cluster_.node(0).source->Current();
  }

  ClientOptions Options(std::size_t seed, ClusterRouting routing) const {
    ClientOptions o = cluster_.ClientFor(seed);
    o.cluster_routing = routing;
    return o;
  }

  std::uint64_t Forwarded() const { return cluster_.Forwarded(); }

  // Every chunk of `tokens` is held by its group anchor's owner and by no other node; the groups
  // are spread over more than one node.
  void ExpectAtAnchorOwners(const std::vector<std::uint32_t>& tokens) {
    auto chain = MakePrefixChain(PromptNamespace(), tokens, kGroup);
    ASSERT_TRUE(chain.ok());
    std::set<std::size_t> owners;
    for (std::size_t i = 0; i < kChunks; ++i) {
      const std::size_t owner =
          cluster_.IndexOf(view_->PrimaryOwner(cluster::PlacementKey(chain->placement[i]))->id);
      owners.insert(owner);
      for (std::size_t n = 0; n < cluster_.size(); ++n) {
        EXPECT_EQ(cluster_.Holds(n, chain->wire[i]), n == owner) << "chunk " << i << " @" << n;
      }
    }
    EXPECT_GT(owners.size(), 1u) << "the prompt's groups should land on several nodes";
  }

  InProcessCluster cluster_;
  std::shared_ptr<const cluster::Topology> view_;
  const PromptValues values_{kChunks};
};

TEST_F(PrefixClusterTest, CppPutPrefixInGroupsIsFoundByTheCApiAndLookupPrefix) {
  const auto tokens = Tokens(1);
  Client smart(Options(0, ClusterRouting::kAuto));
  EXPECT_EQ(smart.PrefixGroupChunks(), kGroup) << "G comes from the view";
  auto put = smart.PutPrefix(PromptNamespace(), tokens, values_.spans);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(*put, std::vector<StatusCode>(kChunks, StatusCode::kOk));
  ExpectAtAnchorOwners(tokens);

  // The C API, seeded at another node, with G from its own view.
  const test::CPrefixFound c_found =
      test::CLookupPrefix(cluster_.ClientFor(2).address, kModel, tokens);
  ASSERT_EQ(c_found.rc, KVDEPOT_OK) << c_found.error;
  EXPECT_EQ(c_found.prefix_length, kChunks);
  EXPECT_EQ(c_found.chunks, kChunks);
  auto found = smart.LookupPrefix(PromptNamespace(), tokens);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->prefix_length, kChunks);
  EXPECT_EQ(Forwarded(), 0u) << "a prefix request reached a node that does not own its group";

  // The chunks read back through the placed C GET, each by its anchor.
  kvdepot_client* c = nullptr;
  ASSERT_EQ(kvdepot_open(cluster_.ClientFor(2).address.c_str(), 5000, &c), KVDEPOT_OK);
  auto chain = MakePrefixChain(PromptNamespace(), tokens, kGroup);
  ASSERT_TRUE(chain.ok());
  for (std::size_t i = 0; i < kChunks; ++i) {
    void* value = nullptr;
    std::size_t len = 0;
    ASSERT_EQ(
        kvdepot_get_placed(c, chain->wire[i].data(), chain->wire[i].size(),
                           chain->placement[i].data(), chain->placement[i].size(), &value, &len),
        KVDEPOT_OK)
        << i << ": " << kvdepot_last_error(c);
    EXPECT_EQ(std::vector<std::byte>(static_cast<std::byte*>(value),
                                     static_cast<std::byte*>(value) + len),
              values_.values[i]);
    kvdepot_free(value);
  }
  EXPECT_EQ(Forwarded(), 0u);
  kvdepot_close(c);
}

TEST_F(PrefixClusterTest, CApiPutPrefixIsFoundByCppLookupPrefix) {
  const auto tokens = Tokens(2);
  kvdepot_client* c = nullptr;
  ASSERT_EQ(kvdepot_open(cluster_.ClientFor(1).address.c_str(), 5000, &c), KVDEPOT_OK);
  const kvdepot_namespace ns = test::CPromptNamespace(kModel);
  ASSERT_EQ(kvdepot_put_prefix(c, &ns, tokens.data(), tokens.size(), values_.pointers.data(),
                               values_.lengths.data(), kChunks, 0, nullptr),
            KVDEPOT_OK)
      << kvdepot_last_error(c);
  kvdepot_close(c);
  ExpectAtAnchorOwners(tokens);
  Client smart(Options(0, ClusterRouting::kAuto));
  auto found = smart.LookupPrefix(PromptNamespace(), tokens);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->prefix_length, kChunks);
  EXPECT_EQ(Forwarded(), 0u);

  // A client that knows nothing of the cluster goes through a member that forwards: with the
  // cluster's G it finds the whole prompt; placed per key (its default: it has no view) it asks
  // each chunk's own owner, which misses the chunks placed elsewhere.
  Client plain(Options(0, ClusterRouting::kOff));
  EXPECT_EQ(plain.PrefixGroupChunks(), 0u);
  auto with_g = plain.LookupPrefix(PromptNamespace(), tokens, kGroup);
  ASSERT_TRUE(with_g.ok()) << with_g.status().ToString();
  EXPECT_EQ(with_g->prefix_length, kChunks);
  auto per_key = plain.LookupPrefix(PromptNamespace(), tokens);
  ASSERT_TRUE(per_key.ok()) << per_key.status().ToString();
  EXPECT_LT(per_key->prefix_length, kChunks);
}

}  // namespace
}  // namespace kvdepot::client
