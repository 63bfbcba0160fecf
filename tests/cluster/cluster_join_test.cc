// A node joins a loaded cluster of real kvdepotd processes on a real etcd while a reader keeps
// reading every prompt through the nodes (issue 21 §4 "Join a node"): the hit rate for the
// existing prompts stays above 90% in every window, no GET fails, the new node ends up holding
// only the keys it now owns (about 1/(N+1) of the data, moved by hand-off reads), and it then
// serves them from its own tiers.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "../common/wait.h"
#include "cluster_daemon_fixture.h"
#include "kvdepot/cluster/cluster_info.h"

namespace kvdepot::cluster {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using test::WaitFor;

constexpr std::size_t kPrompts = 64;
constexpr std::size_t kChunksPerPrompt = 8;
constexpr std::size_t kChunkBytes = 64 << 10;
constexpr auto kWindow = milliseconds(250);

std::vector<std::byte> ChunkValue(std::size_t i) {
  std::vector<std::byte> v(kChunkBytes);
  for (std::size_t b = 0; b < v.size(); b += 64) v[b] = static_cast<std::byte>((b / 64 + i) & 0xff);
  v[0] = static_cast<std::byte>(i & 0xff);
  v[1] = static_cast<std::byte>((i >> 8) & 0xff);
  return v;
}

// A number from a node's STATS document: tiers.host.<field>.
std::uint64_t HostStat(const test::KvdepotdChild& node, const char* field) {
  auto c = client::Connection::Connect(node.Options());
  if (!c.ok()) return 0;
  auto stats = (*c)->Stats();
  if (!stats.ok()) return 0;
  const auto j = nlohmann::json::parse(*stats, nullptr, false);
  if (j.is_discarded()) return 0;
  return j["tiers"]["host"].value(field, std::uint64_t{0});
}

// One GET of the reader: when it ended, through which node, and what it found.
struct Read {
  Clock::time_point at;
  std::size_t node = 0;
  enum { kHit, kMiss, kError } outcome = kHit;
};

TEST_F(ClusterDaemonTest, AJoiningNodeTakesItsShareByHandOffWithoutLosingHits) {
  std::vector<std::unique_ptr<test::TempTestDir>> dirs;
  std::vector<std::unique_ptr<test::KvdepotdChild>> nodes;
  for (int i = 0; i < 3; ++i) {
    dirs.push_back(std::make_unique<test::TempTestDir>("kvd-join"));
    nodes.push_back(StartNode(*dirs.back()));
  }
  ASSERT_TRUE(AllSee(nodes, 3));

  std::vector<std::string> keys;
  std::vector<std::vector<std::byte>> values;
  for (std::size_t p = 0; p < kPrompts; ++p) {
    for (std::size_t c = 0; c < kChunksPerPrompt; ++c) {
      keys.push_back("join-prompt-" + std::to_string(p) + "/chunk-" + std::to_string(c));
      values.push_back(ChunkValue(keys.size() - 1));
    }
  }
  for (std::size_t n = 0; n < 3; ++n) {  // each prompt PUT through one of the nodes
    auto c = client::Connection::Connect(nodes[n]->Options());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (std::size_t i = n * kChunksPerPrompt; i < keys.size(); i += 3 * kChunksPerPrompt) {
      for (std::size_t k = i; k < i + kChunksPerPrompt; ++k) {
        ASSERT_TRUE((*c)->Put(keys[k], values[k]).ok()) << keys[k];
      }
    }
  }

  // The reader: every key in turn, key i of pass p through node (i + p) % readable (so each key
  // is read through several nodes), one connection per node, until told to stop.
  dirs.push_back(std::make_unique<test::TempTestDir>("kvd-join"));
  std::atomic<std::size_t> readable{3};
  std::atomic<std::size_t> passes{0};
  std::atomic<bool> stop{false};
  std::mutex reads_mu;
  std::vector<Read> reads;
  std::vector<std::string> failures;
  std::vector<client::ClientOptions> targets;
  for (const auto& n : nodes) targets.push_back(n->Options());
  targets.push_back(targets.back());  // the 4th node's socket, as StartNode will place it
  targets.back().address = "unix:" + (dirs.back()->path() / "s.sock").string();
  std::thread reader([&] {
    std::vector<std::unique_ptr<client::Connection>> conns(targets.size());
    for (std::size_t pass = 0; !stop.load(); ++pass) {
      for (std::size_t i = 0; i < keys.size() && !stop.load(); ++i) {
        const std::size_t node = (i + pass) % readable.load();
        Read r;
        r.node = node;
        if (conns[node] == nullptr || conns[node]->broken()) {
          auto c = client::Connection::Connect(targets[node]);
          if (c.ok()) conns[node] = std::move(*c);
        }
        if (conns[node] == nullptr || conns[node]->broken()) {
          r.outcome = Read::kError;
        } else if (auto got = conns[node]->Get(keys[i]); !got.ok()) {
          r.outcome = Read::kError;
          std::lock_guard lock(reads_mu);
          failures.push_back("node " + std::to_string(node) + " " + keys[i] + ": " +
                             got.status().ToString());
        } else if (!got->has_value()) {
          r.outcome = Read::kMiss;
        } else if (**got != values[i]) {
          r.outcome = Read::kError;
          std::lock_guard lock(reads_mu);
          failures.push_back("node " + std::to_string(node) + " " + keys[i] + ": wrong bytes");
        }
        r.at = Clock::now();
        std::lock_guard lock(reads_mu);
        reads.push_back(r);
      }
      passes.store(pass + 1);
    }
  });
  const auto stop_reader = [&] {
    stop.store(true);
    if (reader.joinable()) reader.join();
  };

  // One whole pass before the join, then the 4th node starts; the reader uses it once it lists
  // the cluster (as a client that learned the new topology would).
  ASSERT_TRUE(WaitFor([&] { return passes.load() >= 1; }, milliseconds(15000))) << passes.load();
  nodes.push_back(StartNode(*dirs.back()));
  const bool joined = WaitFor([&] { return MembersSeenBy(*nodes[3]) == 4; }, milliseconds(10000));
  if (joined) readable.store(4);
  const bool all_joined = joined && AllSee(nodes, 4);
  // Two whole passes once every node has seen the join: each key is then read through at least
  // one node that is not its previous owner, which hands it over to its new owner.
  const std::size_t after = passes.load();
  const bool read_after =
      all_joined && WaitFor([&] { return passes.load() >= after + 3; }, milliseconds(20000));
  stop_reader();
  ASSERT_TRUE(all_joined) << "the 4th node did not join: "
                          << ReadAll(dirs[3]->path() / "daemon.log");
  ASSERT_TRUE(read_after) << "the reader did not finish its passes after the join";

  // No GET failed or returned wrong bytes; more than 90% hits in every window, overall and for the
  // GETs through the new node alone (whose view starts with the join).
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures, first: " << failures.front();
  ASSERT_FALSE(reads.empty());
  const Clock::time_point first = reads.front().at;
  std::map<std::size_t, std::array<std::size_t, 2>> all, through_new;  // window -> {hits, reads}
  for (const Read& r : reads) {
    const auto window = static_cast<std::size_t>((r.at - first) / kWindow);
    all[window][0] += r.outcome == Read::kHit ? 1 : 0;
    ++all[window][1];
    if (r.node == 3) {
      through_new[window][0] += r.outcome == Read::kHit ? 1 : 0;
      ++through_new[window][1];
    }
  }
  const auto expect_hits_above_90_percent = [&](const char* through, const auto& windows) {
    for (const auto& [window, counts] : windows) {
      if (counts[1] < 10) continue;  // the last, cut-off window
      EXPECT_GT(static_cast<double>(counts[0]), 0.9 * static_cast<double>(counts[1]))
          << through << ", window " << window << " (" << kWindow.count() << " ms): " << counts[0]
          << " hits of " << counts[1] << " reads";
    }
  };
  expect_hits_above_90_percent("all nodes", all);
  expect_hits_above_90_percent("the new node", through_new);

  // The new node holds exactly the keys it owns in the 4-member view (copied across by hand-off),
  // about 1/4 of the data: within 1.5x of 1/(N+1) = 0.25, and more than nothing.
  auto info_conn = client::Connection::Connect(nodes[3]->Options());
  ASSERT_TRUE(info_conn.ok());
  auto info = (*info_conn)->ClusterInfo();
  ASSERT_TRUE(info.ok());
  auto view = TopologyFromClusterInfo(*info);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  const std::string new_id = ReadAll(dirs[3]->path() / "cluster-node-id").substr(0, 32);
  std::vector<std::size_t> owned;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (view->IsOwner(new_id, PlacementKey(keys[i]))) owned.push_back(i);
  }
  ASSERT_TRUE(WaitFor([&] { return HostStat(*nodes[3], "chunks") == owned.size(); }))
      << HostStat(*nodes[3], "chunks") << " chunks at the new node, which owns " << owned.size();
  const double moved = static_cast<double>(HostStat(*nodes[3], "bytes")) /
                       static_cast<double>(keys.size() * kChunkBytes);
  EXPECT_GT(moved, 0.0);
  EXPECT_LE(moved, 1.5 / 4);
  std::printf("join: %zu of %zu keys moved to the new node (%.3f of the bytes; 1/(N+1) = 0.250)\n",
              owned.size(), keys.size(), moved);

  // Afterwards the new owner answers its keys from its own host tier.
  const std::uint64_t hits_before = HostStat(*nodes[3], "hits");
  for (std::size_t i : owned) {
    auto got = (*info_conn)->Get(keys[i]);
    ASSERT_TRUE(got.ok() && got->has_value()) << keys[i];
    EXPECT_EQ(**got, values[i]);
  }
  EXPECT_EQ(HostStat(*nodes[3], "hits") - hits_before, owned.size());
}

}  // namespace
}  // namespace kvdepot::cluster
