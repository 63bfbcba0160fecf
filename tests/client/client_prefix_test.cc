// The prompt-level calls (client.h, "Prompt-level calls"; kvdepot.h, kvdepot_put_prefix and
// kvdepot_lookup_prefix): the chunk keys and group anchors they compute, their argument errors,
// and a round trip through one in-process daemon (not in a cluster: G from the view is 0, chunks
// are placed per key). The cluster cases are in client_prefix_cluster_test.cc and
// tests/cluster/cluster_prefix_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../daemon/in_process_server.h"
#include "kvdepot/client/client.h"
#include "kvdepot/kvdepot.h"
#include "kvdepot/protocol/placement.h"
#include "prefix_prompts.h"

namespace kvdepot::client {
namespace {

using test::kPromptChunkTokens;
using test::PromptTokens;
using test::PromptValues;

constexpr const char* kModel = "prefix-test-model";
constexpr std::uint32_t kChunkTokens = kPromptChunkTokens;

Namespace PromptNamespace() {
  return test::PromptNamespace(kModel);
}

TEST(MakePrefixChainTest, KeysAreLookupPrefixKeysAndAnchorsAreChainPlacementKeys) {
  const auto tokens = PromptTokens(1, 10 * kChunkTokens + 5);  // 10 full chunks and a partial one
  auto full = ChunkKeysForTokens(PromptNamespace(), tokens, /*include_partial_last=*/false);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(full->size(), 10u);
  for (const std::uint32_t g : {0u, 1u, 4u, 8u, 64u}) {
    auto chain = MakePrefixChain(PromptNamespace(), tokens, g);
    ASSERT_TRUE(chain.ok()) << chain.status().ToString();
    EXPECT_EQ(chain->keys, *full) << "G " << g;
    ASSERT_EQ(chain->wire.size(), 10u);
    for (std::size_t i = 0; i < 10; ++i) {
      EXPECT_EQ(chain->wire[i], std::string(reinterpret_cast<const char*>((*full)[i].bytes.data()),
                                            kChunkKeyBytes));
    }
    if (g <= 1) {
      EXPECT_TRUE(chain->placement.empty()) << "G " << g << ": placed per key, no section";
      continue;
    }
    EXPECT_EQ(chain->placement, protocol::ChainPlacementKeys(chain->wire, g));
    for (std::size_t i = 0; i < 10; ++i) {
      EXPECT_EQ(chain->placement[i], chain->wire[i - i % g]) << "G " << g << " chunk " << i;
    }
  }
  // A prompt shorter than one chunk has no chunks; an invalid namespace is refused.
  auto empty = MakePrefixChain(PromptNamespace(), PromptTokens(1, kChunkTokens - 1), 8);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->keys.empty() && empty->wire.empty() && empty->placement.empty());
  Namespace bad = PromptNamespace();
  bad.model.clear();
  EXPECT_EQ(MakePrefixChain(bad, tokens, 8).status().code(), StatusCode::kInvalidArgument);
}

TEST(PutPrefixTest, AWrongChunkCountIsRefusedBeforeAnythingIsSent) {
  // Nothing listens on port 1: an argument error must come back as such, not as unavailable.
  ClientOptions o;
  o.address = "127.0.0.1:1";
  o.timeout = std::chrono::milliseconds(500);
  Client client(o);
  const auto tokens = PromptTokens(1, 3 * kChunkTokens + 7);
  const std::vector<std::byte> v = test::PromptChunkValue(0);
  const std::vector<std::span<const std::byte>> four(4, v), two(2, v);
  for (const auto* values : {&four, &two}) {
    auto r = client.PutPrefix(PromptNamespace(), tokens, *values, 8);
    ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(std::to_string(values->size()) + " chunk values for " +
                                        std::to_string(tokens.size()) + " tokens; expected 3"),
              std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("chunk_tokens = 16"), std::string::npos);
  }
  Namespace bad = PromptNamespace();
  bad.chunk_tokens = 0;
  EXPECT_EQ(client.PutPrefix(bad, tokens, two, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.PrefixGroupChunks(5), 5u) << "an explicit G needs no view";
}

class PrefixDaemonTest : public daemon::InProcessServerTest {
 protected:
  void SetUp() override {
    StartServerWith(daemon::HostTierOptions::With(64ull << 20, daemon::EvictionPolicy::kLru), {});
  }

  ClientOptions Options(ClusterRouting routing) const {
    ClientOptions o = TcpOptions(std::chrono::milliseconds(5000));
    o.cluster_routing = routing;
    return o;
  }
};

TEST_F(PrefixDaemonTest, PutPrefixStoresWhatLookupPrefixFindsWithoutACluster) {
  constexpr std::size_t kChunks = 12;
  const auto tokens = PromptTokens(2, kChunks * kChunkTokens + 3);
  const PromptValues values(kChunks);
  for (const ClusterRouting routing : {ClusterRouting::kAuto, ClusterRouting::kOff}) {
    Client client(Options(routing));
    EXPECT_EQ(client.PrefixGroupChunks(), 0u) << "not in a cluster: placed per key";
    auto put = client.PutPrefix(PromptNamespace(), tokens, values.spans);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    EXPECT_EQ(*put, std::vector<StatusCode>(kChunks, StatusCode::kOk));
    // Any G finds them on a single daemon (it ignores placement keys).
    for (const std::uint32_t g : {0u, 4u}) {
      auto found = client.LookupPrefix(PromptNamespace(), tokens, g);
      ASSERT_TRUE(found.ok()) << found.status().ToString();
      EXPECT_EQ(found->prefix_length, kChunks);
      EXPECT_EQ(found->tiers.size(), kChunks);
    }
    auto chain = MakePrefixChain(PromptNamespace(), tokens, 0);
    ASSERT_TRUE(chain.ok());
    for (std::size_t i = 0; i < kChunks; ++i) {
      auto got = client.Get(chain->wire[i]);
      ASSERT_TRUE(got.ok() && got->has_value()) << i;
      EXPECT_EQ(**got, values.values[i]) << i;
    }
    ASSERT_TRUE(client.Delete(chain->wire).ok());
  }
  // A prompt of no full chunk: nothing to store, nothing to find.
  Client client(Options(ClusterRouting::kAuto));
  auto none = client.PutPrefix(PromptNamespace(), PromptTokens(1, kChunkTokens - 1), {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(PrefixDaemonTest, PutPrefixSplitsBatchesAtTheClientsLimits) {
  constexpr std::size_t kChunks = 9;
  const auto tokens = PromptTokens(3, kChunks * kChunkTokens);
  const PromptValues values(kChunks);
  ClientOptions o = Options(ClusterRouting::kOff);
  o.limits.max_batch = 3;          // LOOKUPs of 3 keys; PUTs of at most 3 chunks ...
  o.limits.max_body_bytes = 2400;  // ... and of 2 here: three ~1.1 KB items are over a body
  Client client(o);
  auto put = client.PutPrefix(PromptNamespace(), tokens, values.spans, 8);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(*put, std::vector<StatusCode>(kChunks, StatusCode::kOk));
  auto found = client.LookupPrefix(PromptNamespace(), tokens, 8);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->prefix_length, kChunks);
}

// The C API's prompt-level and placed calls (declared in kvdepot.h, valid C: c_api_smoke.c).
TEST_F(PrefixDaemonTest, CApiPrefixAndPlacedCalls) {
  kvdepot_client* c = nullptr;
  ASSERT_EQ(kvdepot_open(TcpOptions().address.c_str(), 5000, &c), KVDEPOT_OK);
  const kvdepot_namespace ns = test::CPromptNamespace(kModel);
  constexpr std::size_t kChunks = 5;
  const auto tokens = PromptTokens(4, kChunks * kChunkTokens + 1);
  const PromptValues values(kChunks);
  const void* const* ptrs = values.pointers.data();
  const std::size_t* lens = values.lengths.data();
  std::vector<int> statuses(kChunks, -1);
  ASSERT_EQ(kvdepot_put_prefix(c, &ns, tokens.data(), tokens.size(), ptrs, lens, kChunks, 0,
                               statuses.data()),
            KVDEPOT_OK)
      << kvdepot_last_error(c);
  EXPECT_EQ(statuses, std::vector<int>(kChunks, KVDEPOT_OK));
  std::size_t prefix = 0, n_chunks = 0;
  std::vector<std::uint8_t> tiers(kChunks + 2, 0xff);
  ASSERT_EQ(kvdepot_lookup_prefix(c, &ns, tokens.data(), tokens.size(), 0, &prefix, &n_chunks,
                                  tiers.data(), tiers.size()),
            KVDEPOT_OK)
      << kvdepot_last_error(c);
  EXPECT_EQ(prefix, kChunks);
  EXPECT_EQ(n_chunks, kChunks);
  for (std::size_t i = 0; i < kChunks; ++i) EXPECT_EQ(tiers[i], KVDEPOT_TIER_HOST) << i;
  EXPECT_EQ(tiers[kChunks], 0xff) << "only n_chunks tiers are written";
  // A capacity smaller than the prompt: the first tiers only; NULL tiers and n_chunks are fine.
  ASSERT_EQ(
      kvdepot_lookup_prefix(c, &ns, tokens.data(), tokens.size(), 3, &prefix, nullptr, nullptr, 0),
      KVDEPOT_OK);
  EXPECT_EQ(prefix, kChunks);

  // Argument errors: counts, NULLs.
  EXPECT_EQ(
      kvdepot_put_prefix(c, &ns, tokens.data(), tokens.size(), ptrs, lens, kChunks - 1, 0, nullptr),
      KVDEPOT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvdepot_last_error(c)).find("expected 5"), std::string::npos)
      << kvdepot_last_error(c);
  EXPECT_EQ(
      kvdepot_put_prefix(c, nullptr, tokens.data(), tokens.size(), ptrs, lens, kChunks, 0, nullptr),
      KVDEPOT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvdepot_last_error(c)).find("kvdepot_put_prefix: ns, ns->model"),
            std::string::npos);
  EXPECT_EQ(kvdepot_put_prefix(c, &ns, tokens.data(), tokens.size(), nullptr, nullptr, kChunks, 0,
                               nullptr),
            KVDEPOT_INVALID_ARGUMENT);
  const void* null_value[kChunks] = {};
  EXPECT_EQ(kvdepot_put_prefix(c, &ns, tokens.data(), tokens.size(), null_value, lens, kChunks, 0,
                               nullptr),
            KVDEPOT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvdepot_last_error(c)).find("values[0] is NULL"), std::string::npos);
  EXPECT_EQ(
      kvdepot_lookup_prefix(c, &ns, tokens.data(), tokens.size(), 0, nullptr, nullptr, nullptr, 0),
      KVDEPOT_INVALID_ARGUMENT);
  EXPECT_EQ(
      kvdepot_lookup_prefix(c, &ns, tokens.data(), tokens.size(), 0, &prefix, nullptr, nullptr, 4),
      KVDEPOT_INVALID_ARGUMENT);

  // The placed one-key calls and a placed LOOKUP (a single daemon ignores the placement keys).
  ASSERT_EQ(kvdepot_put_placed(c, "pk-1", 4, "one", 3, "anchor", 6), KVDEPOT_OK);
  void* value = nullptr;
  std::size_t len = 0;
  ASSERT_EQ(kvdepot_get_placed(c, "pk-1", 4, "anchor", 6, &value, &len), KVDEPOT_OK);
  EXPECT_EQ(std::string(static_cast<const char*>(value), len), "one");
  kvdepot_free(value);
  const void* keys[] = {"pk-1", "pk-2"};
  const std::size_t key_lens[] = {4, 4};
  const void* placement[] = {"anchor", nullptr};
  const std::size_t placement_lens[] = {6, 0};
  std::uint8_t two_tiers[2];
  ASSERT_EQ(
      kvdepot_lookup_placed(c, keys, key_lens, placement, placement_lens, 2, &prefix, two_tiers),
      KVDEPOT_OK);
  EXPECT_EQ(prefix, 1u);
  EXPECT_EQ(two_tiers[1], KVDEPOT_TIER_NONE);
  EXPECT_EQ(kvdepot_lookup_placed(c, keys, key_lens, placement, nullptr, 2, &prefix, two_tiers),
            KVDEPOT_INVALID_ARGUMENT);
  EXPECT_EQ(kvdepot_delete_placed(c, "pk-1", 4, "anchor", 6), KVDEPOT_OK);
  EXPECT_EQ(kvdepot_delete_placed(c, "pk-1", 4, nullptr, 0), KVDEPOT_NOT_FOUND);
  kvdepot_close(c);
}

}  // namespace
}  // namespace kvdepot::client
