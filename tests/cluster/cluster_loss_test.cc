// Issue 21 §4 on real kvdepotd processes and a real etcd: prompts PUT by a smart client in groups
// of G chunks (placement keys on the wire) read back byte-identical through the smart client and
// through a client that knows nothing of the cluster; then one node is SIGKILLed while readers
// keep going: no request fails (misses only), and once its lease has expired the prefix each
// prompt keeps is exactly what its placement predicts — the leading chunks whose group's owner
// survived (docs/cluster.md, "Prefix kept after losing a node").
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "cluster_daemon_fixture.h"
#include "kvdepot/cluster/cluster_info.h"
#include "kvdepot/protocol/placement.h"

namespace kvdepot::cluster {
namespace {

using std::chrono::milliseconds;

constexpr std::size_t kPrompts = 24;
constexpr std::size_t kChunksPerPrompt = 32;
constexpr std::size_t kValueBytes = 8 << 10;

std::vector<std::byte> ValueFor(std::size_t prompt, std::size_t chunk) {
  std::vector<std::byte> v(kValueBytes);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<std::byte>((prompt * 131 + chunk * 31 + i * 7) & 0xff);
  }
  return v;
}

struct Prompt {
  std::vector<std::string> keys;       // the chain, chunk 0 first
  std::vector<std::string> placement;  // ChainPlacementKeys(keys, G)
};

client::ClientOptions Smart(const test::KvdepotdChild& seed) {
  client::ClientOptions o = seed.Options(milliseconds(3000));
  o.cluster_routing = client::ClusterRouting::kAuto;
  return o;
}

TEST_F(ClusterDaemonTest, ALostNodeCostsExactlyThePrefixItsPlacementPredicts) {
  test::TempTestDir d1{"kvd-loss"}, d2{"kvd-loss"}, d3{"kvd-loss"};
  std::vector<std::unique_ptr<test::KvdepotdChild>> nodes;
  nodes.push_back(StartNode(d1));
  nodes.push_back(StartNode(d2));
  nodes.push_back(StartNode(d3));
  ASSERT_TRUE(AllSee(nodes, 3));

  auto view = ViewOf(*nodes[0]);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  const std::uint32_t group = view->options().group_chunks;
  ASSERT_EQ(view->options().replicas, 1u);
  ASSERT_LT(group, kChunksPerPrompt);

  std::vector<Prompt> prompts(kPrompts);
  client::Client smart(Smart(*nodes[0]));
  for (std::size_t p = 0; p < kPrompts; ++p) {
    for (std::size_t c = 0; c < kChunksPerPrompt; ++c) {
      prompts[p].keys.push_back("loss/p" + std::to_string(p) + "/c" + std::to_string(c));
    }
    prompts[p].placement = protocol::ChainPlacementKeys(prompts[p].keys, group);
    std::vector<std::vector<std::byte>> values;
    std::vector<protocol::PutItemView> items;
    for (std::size_t c = 0; c < kChunksPerPrompt; ++c) values.push_back(ValueFor(p, c));
    for (std::size_t c = 0; c < kChunksPerPrompt; ++c) {
      items.push_back({prompts[p].keys[c], values[c], prompts[p].placement[c]});
    }
    auto put = smart.Put(items);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    for (StatusCode code : *put) ASSERT_EQ(code, StatusCode::kOk) << "prompt " << p;
  }

  // Byte-identical through the smart client and through node 1 forwarding for a plain client.
  client::ClientOptions plain_options = nodes[1]->Options(milliseconds(3000));
  plain_options.cluster_routing = client::ClusterRouting::kOff;
  client::Client plain(plain_options);
  for (std::size_t p = 0; p < 4; ++p) {
    std::vector<std::vector<std::byte>> via_smart(kChunksPerPrompt), via_plain(kChunksPerPrompt);
    const auto collect = [](std::vector<std::vector<std::byte>>& out) {
      return [&out](const client::GetItem& item) {
        ASSERT_TRUE(item.status.ok()) << item.index << ": " << item.status.ToString();
        out[item.index].assign(item.value.begin(), item.value.end());
      };
    };
    ASSERT_TRUE(smart.Get(prompts[p].keys, collect(via_smart), prompts[p].placement).ok());
    ASSERT_TRUE(plain.Get(prompts[p].keys, collect(via_plain), prompts[p].placement).ok());
    for (std::size_t c = 0; c < kChunksPerPrompt; ++c) {
      ASSERT_EQ(via_smart[c], ValueFor(p, c)) << p << "/" << c;
      ASSERT_EQ(via_plain[c], via_smart[c]) << p << "/" << c;
    }
  }

  // The prediction: with one replica a chunk survives iff its group's owner is not the lost node.
  const std::string lost = IdOf(d3);
  std::vector<std::size_t> predicted(kPrompts, 0);
  std::size_t predicted_total = 0;
  for (std::size_t p = 0; p < kPrompts; ++p) {
    while (predicted[p] < kChunksPerPrompt &&
           view->PrimaryOwner(PlacementKey(prompts[p].placement[predicted[p]]))->id != lost) {
      ++predicted[p];
    }
    predicted_total += predicted[p];
  }

  // Readers under load, through the smart client, across the loss.
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0}, errors{0}, wrong{0};
  std::string first_error;
  std::mutex error_mu;
  std::vector<std::thread> readers;
  for (std::size_t r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      client::Client reader(Smart(*nodes[r]));
      for (std::size_t i = r; !stop.load(); ++i) {
        const Prompt& prompt = prompts[i % kPrompts];
        const Status s = reader.Get(
            prompt.keys,
            [&](const client::GetItem& item) {
              if (item.status.ok() &&
                  std::vector<std::byte>(item.value.begin(), item.value.end()) !=
                      ValueFor(i % kPrompts, item.index)) {
                ++wrong;
              }
            },
            prompt.placement);
        ++reads;
        if (!s.ok()) {
          ++errors;
          std::lock_guard lock(error_mu);
          if (first_error.empty()) first_error = s.ToString();
        }
      }
    });
  }
  const auto wait_reads = [&](std::uint64_t more) {
    const std::uint64_t target = reads.load() + more;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (reads.load() < target && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    return reads.load() >= target;
  };
  EXPECT_TRUE(wait_reads(20));
  nodes[2]->Kill();  // SIGKILL: no graceful leave
  const std::vector<std::unique_ptr<test::KvdepotdChild>*> survivors = {&nodes[0], &nodes[1]};
  const auto survivors_see_two = [&] {
    for (auto* n : survivors) {
      if (MembersSeenBy(**n) != 2) return false;
    }
    return true;
  };
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!survivors_see_two() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(survivors_see_two());
  EXPECT_TRUE(wait_reads(40));  // readers keep going on the new view
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(errors.load(), 0u) << "of " << reads.load() << " reads; first: " << first_error;
  EXPECT_EQ(wrong.load(), 0u);

  // The prefix each prompt keeps, by a LOOKUP through the smart client: exactly the prediction.
  std::size_t kept_total = 0;
  for (std::size_t p = 0; p < kPrompts; ++p) {
    auto lookup = smart.Lookup(prompts[p].keys, prompts[p].placement);
    ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
    EXPECT_EQ(lookup->prefix_length, predicted[p]) << "prompt " << p;
    kept_total += lookup->prefix_length;
  }
  // Two of three nodes survive: some prompts lose part of their prefix, most of the chunks stay.
  EXPECT_LT(predicted_total, kPrompts * kChunksPerPrompt);
  EXPECT_GT(predicted_total, 0u);
  EXPECT_EQ(kept_total, predicted_total);
  std::printf("[ info ] prefix kept after losing 1 of 3 nodes, G = %u: %.3f of %zu chunks\n", group,
              static_cast<double>(kept_total) / (kPrompts * kChunksPerPrompt),
              kPrompts * kChunksPerPrompt);
}

}  // namespace
}  // namespace kvdepot::cluster
