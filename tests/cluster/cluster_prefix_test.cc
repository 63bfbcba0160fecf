// Every SDK places a prompt alike (docs/cluster.md, "Prefix locality in requests"), on real
// kvdepotd processes and a real etcd: a prompt stored with the C++ Client::PutPrefix, the C API's
// kvdepot_put_prefix or the Python module's put_prefix — each taking G from its smart client's
// view — lands in groups at the group anchors' owners, and the lookup_prefix of every other SDK
// finds the whole prompt. The Python side runs as a process (prefix_client.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "../client/prefix_prompts.h"
#include "cluster_daemon_fixture.h"
#include "kvdepot/kvdepot.h"

namespace kvdepot::cluster {
namespace {

using std::chrono::milliseconds;

constexpr std::size_t kChunks = 40;
constexpr const char* kModel = "prefix-interop-model";

std::vector<std::uint32_t> PromptTokens(std::uint32_t seed) {
  return test::PromptTokens(seed, kChunks * test::kPromptChunkTokens);
}

Namespace PromptNamespace() {
  return test::PromptNamespace(kModel);
}

client::ClientOptions Smart(const test::KvdepotdChild& seed) {
  client::ClientOptions o = seed.Options(milliseconds(5000));
  o.cluster_routing = client::ClusterRouting::kAuto;
  return o;
}

class ClusterPrefixTest : public ClusterDaemonTest {
 protected:
  void SetUp() override {
    ClusterDaemonTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    for (auto* d : {&d1_, &d2_, &d3_}) nodes_.push_back(StartNode(*d));
    ASSERT_TRUE(AllSee(nodes_, 3));
    auto view = ViewOf(*nodes_[0]);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    view_ = std::move(*view);
    ASSERT_EQ(view_.options().replicas, 1u);
    ASSERT_GT(view_.options().group_chunks, 1u);
    ASSERT_LT(view_.options().group_chunks, kChunks);
  }

  // The keys node `n` holds in its own tiers in the prompts' namespace (SCAN is never forwarded).
  std::set<std::string> HeldBy(std::size_t n) {
    std::set<std::string> out;
    auto conn = client::Connection::Connect(nodes_[n]->Options());
    if (!conn.ok()) return out;
    protocol::ScanRequest q;
    const NamespaceId id = PromptNamespace().Id();
    q.prefix.assign(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
    q.limit = 4096;
    for (;;) {
      auto page = (*conn)->Scan(q);
      if (!page.ok()) return out;
      for (const auto& e : page->entries) out.insert(e.key);
      if (page->next_cursor.empty() || page->entries.empty()) return out;
      q.cursor = page->next_cursor;
    }
  }

  // Every chunk of prompt `seed` is held by its group anchor's owner (by the cluster's G) and by
  // no other node, and groups are spread over more than one node. The spread is checked over the
  // groups of prompts `seed` .. seed + 15 (160 groups), not of this prompt alone: node ids are
  // random per run, so one prompt's 5 groups all land on one of 3 nodes with probability 1 / 81.
  void ExpectAtAnchorOwners(std::uint32_t seed) {
    auto chain = client::MakePrefixChain(PromptNamespace(), PromptTokens(seed),
                                         view_.options().group_chunks);
    ASSERT_TRUE(chain.ok()) << chain.status().ToString();
    const std::vector<std::string> ids = {IdOf(d1_), IdOf(d2_), IdOf(d3_)};
    std::vector<std::set<std::string>> held;
    for (std::size_t n = 0; n < nodes_.size(); ++n) held.push_back(HeldBy(n));
    std::set<std::string> owners;
    for (std::size_t i = 0; i < kChunks; ++i) {
      const std::string owner = view_.PrimaryOwner(PlacementKey(chain->placement[i]))->id;
      owners.insert(owner);
      for (std::size_t n = 0; n < nodes_.size(); ++n) {
        EXPECT_EQ(held[n].count(chain->wire[i]), ids[n] == owner ? 1u : 0u)
            << "prompt " << seed << " chunk " << i << " @node " << n;
      }
    }
    for (std::uint32_t other = seed + 1; other < seed + 16; ++other) {
      auto more = client::MakePrefixChain(PromptNamespace(), PromptTokens(other),
                                          view_.options().group_chunks);
      ASSERT_TRUE(more.ok()) << more.status().ToString();
      for (const auto& key : more->placement) {
        owners.insert(view_.PrimaryOwner(PlacementKey(key))->id);
      }
    }
    EXPECT_GT(owners.size(), 1u) << "prompts' groups should land on several nodes";
  }

  // The C API's kvdepot_lookup_prefix of prompt `seed` through node `n` (G from its view).
  std::size_t CLookupPrefix(std::size_t n, std::uint32_t seed) {
    const test::CPrefixFound found =
        test::CLookupPrefix(nodes_[n]->Options().address, kModel, PromptTokens(seed));
    EXPECT_EQ(found.rc, KVDEPOT_OK) << found.error;
    EXPECT_EQ(found.chunks, kChunks);
    return found.prefix_length;
  }

  // Runs prefix_client.py `op` for prompt `seed` through node `n`; its JSON answer.
  nlohmann::json Python(const std::string& op, std::size_t n, std::uint32_t seed) {
#ifdef KVDEPOT_PYTHON_DIR
    const std::string command =
        "PYTHONPATH='" + std::string(KVDEPOT_PYTHON_DIR) + "' timeout 60 " KVDEPOT_PYTHON3 " '" +
        KVDEPOT_SOURCE_DIR "/tests/cluster/prefix_client.py' " + op + " --address '" +
        nodes_[n]->Options().address + "' --model " + kModel + " --seed " + std::to_string(seed) +
        " --chunks " + std::to_string(kChunks) + " --chunk-tokens " +
        std::to_string(test::kPromptChunkTokens) + " 2>&1";
    std::string out;
    if (FILE* p = ::popen(command.c_str(), "r")) {
      char buf[4096];
      while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
      const int rc = ::pclose(p);
      EXPECT_EQ(rc, 0) << command << "\n" << out;
    }
    const auto j = nlohmann::json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << command << "\n" << out;
    return j;
#else
    ADD_FAILURE() << "the Python module is not built: " << op << " " << n << " " << seed;
    return {};
#endif
  }

  test::TempTestDir d1_{"kvd-prefix"}, d2_{"kvd-prefix"}, d3_{"kvd-prefix"};
  std::vector<std::unique_ptr<test::KvdepotdChild>> nodes_;
  Topology view_;
  const test::PromptValues values_{kChunks};
};

TEST_F(ClusterPrefixTest, CppAndCApiPutPrefixInGroupsAreFoundByTheOtherSdk) {
  client::Client smart(Smart(*nodes_[0]));
  EXPECT_EQ(smart.PrefixGroupChunks(), view_.options().group_chunks);
  auto put = smart.PutPrefix(PromptNamespace(), PromptTokens(1), values_.spans);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(*put, std::vector<StatusCode>(kChunks, StatusCode::kOk));
  ExpectAtAnchorOwners(1);
  EXPECT_EQ(CLookupPrefix(1, 1), kChunks);
  EXPECT_EQ(CLookupPrefix(2, 1), kChunks);

  // The C API's put_prefix through node 2, found by the C++ LookupPrefix through node 1.
  kvdepot_client* c = nullptr;
  ASSERT_EQ(kvdepot_open(nodes_[2]->Options().address.c_str(), 5000, &c), KVDEPOT_OK);
  const kvdepot_namespace ns = test::CPromptNamespace(kModel);
  const auto tokens = PromptTokens(2);
  ASSERT_EQ(kvdepot_put_prefix(c, &ns, tokens.data(), tokens.size(), values_.pointers.data(),
                               values_.lengths.data(), kChunks, 0, nullptr),
            KVDEPOT_OK)
      << kvdepot_last_error(c);
  kvdepot_close(c);
  ExpectAtAnchorOwners(2);
  client::Client other(Smart(*nodes_[1]));
  auto found = other.LookupPrefix(PromptNamespace(), tokens);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->prefix_length, kChunks);
}

TEST_F(ClusterPrefixTest, PythonAndCppPrefixCallsFindWhatTheOtherStored) {
#ifndef KVDEPOT_PYTHON_DIR
  GTEST_SKIP() << "the Python module is not built (sanitizers on or pybind11 missing)";
#endif
  // C++ PutPrefix in groups; Python's lookup_prefix finds the whole prompt through another node.
  client::Client smart(Smart(*nodes_[0]));
  auto put = smart.PutPrefix(PromptNamespace(), PromptTokens(3), values_.spans);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  const nlohmann::json looked = Python("lookup", 1, 3);
  EXPECT_EQ(looked.value("chunks", 0u), kChunks) << looked.dump();
  EXPECT_EQ(looked.value("prefix_length", 0u), kChunks) << looked.dump();

  // Python's put_prefix; the C++ LookupPrefix finds it, and it sits at the anchors' owners.
  const nlohmann::json stored = Python("put", 2, 4);
  EXPECT_EQ(stored.value("stored", 0u), kChunks) << stored.dump();
  ExpectAtAnchorOwners(4);
  auto found = smart.LookupPrefix(PromptNamespace(), PromptTokens(4));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->prefix_length, kChunks);
  // The values are those the C++ test computes (the same prompt and chunk values).
  auto chain =
      client::MakePrefixChain(PromptNamespace(), PromptTokens(4), view_.options().group_chunks);
  ASSERT_TRUE(chain.ok());
  for (std::size_t i = 0; i < kChunks; i += 13) {
    auto got = smart.Get(chain->wire[i], chain->placement[i]);
    ASSERT_TRUE(got.ok() && got->has_value()) << i;
    EXPECT_EQ(**got, values_.values[i]) << i;
  }
}

}  // namespace
}  // namespace kvdepot::cluster
