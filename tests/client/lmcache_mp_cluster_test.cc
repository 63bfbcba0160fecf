// The LMCache MP connector as a smart client (docs/cluster.md, "Smart clients"): against three
// in-process daemons its workers send each key straight to its owner.
#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <map>

#include "../daemon/in_process_cluster.h"
#include "lmcache_mp_connector.h"

namespace kvdepot::python::lmcache_mp {
namespace {

std::vector<std::byte> Filled(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 17 + seed) & 0xff);
  return v;
}

// Waits (bounded) for the completion of `id`.
Completion WaitFor(Connector& c, std::uint64_t id) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{c.event_fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    for (Completion& x : c.DrainCompletions()) {
      if (x.future_id == id) return x;
    }
  }
  ADD_FAILURE() << "batch " << id << " did not complete within 10 s";
  return {};
}

std::uint64_t Forwarded(daemon::InProcessCluster& cluster) {
  std::uint64_t sum = 0;
  for (std::size_t n = 0; n < cluster.size(); ++n) {
    for (std::uint64_t f : cluster.node(n).router->stats().forwarded) sum += f;
  }
  return sum;
}

TEST(LmcacheMpClusterTest, WorkersSendEachKeyToItsOwner) {
  daemon::InProcessCluster cluster;
  cluster.Start(3, {.replicas = 1, .group_chunks = 1});
  const auto view = cluster.node(0).source->Current();
  ConnectorOptions o;
  o.client = cluster.ClientFor(0);  // cluster_routing: kAuto, the default
  o.workers = 2;
  auto made = Connector::Create(std::move(o));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Connector& c = **made;

  std::vector<std::string> keys;
  std::vector<std::vector<std::byte>> values;
  for (int i = 0; i < 24; ++i) {
    keys.push_back("m@00000000@0@" + std::to_string(i));
    values.push_back(Filled(5000 + static_cast<std::size_t>(i), i));
  }
  std::vector<std::span<const std::byte>> sources(values.begin(), values.end());
  auto set = c.SubmitSet(keys, sources);
  ASSERT_TRUE(set.ok());
  Completion done = WaitFor(c, *set);
  EXPECT_TRUE(done.ok) << done.error;
  for (const std::string& key : keys) {
    const std::string owner = view->PrimaryOwner(cluster::PlacementKey(key))->id;
    for (std::size_t n = 0; n < 3; ++n) {
      EXPECT_EQ(cluster.Holds(n, key), cluster.node(n).id == owner) << key << " @" << n;
    }
  }

  std::vector<std::vector<std::byte>> outs;
  for (const auto& v : values) outs.emplace_back(v.size());
  std::vector<std::span<std::byte>> targets(outs.begin(), outs.end());
  auto get = c.SubmitGet(keys, targets);
  ASSERT_TRUE(get.ok());
  done = WaitFor(c, *get);
  EXPECT_TRUE(done.ok) << done.error;
  EXPECT_EQ(outs, values);

  std::vector<std::string> probe = keys;
  probe.push_back("m@00000000@0@absent");
  auto exists = c.SubmitExists(probe);
  ASSERT_TRUE(exists.ok());
  done = WaitFor(c, *exists);
  EXPECT_TRUE(done.ok) << done.error;
  std::vector<std::uint8_t> expect(keys.size(), 1);
  expect.push_back(0);
  EXPECT_EQ(done.per_key, expect);

  auto del = c.SubmitDelete(keys);
  ASSERT_TRUE(del.ok());
  done = WaitFor(c, *del);
  EXPECT_EQ(done.per_key, std::vector<std::uint8_t>(keys.size(), 1));
  EXPECT_EQ(Forwarded(cluster), 0u) << "a request reached a node that does not own its key";
  c.Close();
}

}  // namespace
}  // namespace kvdepot::python::lmcache_mp
