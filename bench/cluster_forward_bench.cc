// Forwarded GET vs direct GET (docs/cluster.md "Requests", docs/benchmarks.md): two in-process
// daemons on loopback in one cluster view; the keys are all owned by node B. "direct" GETs them
// from B, "forwarded" from A (A -> B -> A -> client, one transient buffer on A). Runs alternate
// (direct, forwarded, direct, ...) so that load from other processes hits both alike; every run
// is printed, then the median ratio.
//
//   kvdepot_cluster_forward_bench [VALUE_BYTES=65536] [GETS_PER_RUN=2000] [RUNS=5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kvdepot/client/client.h"
#include "kvdepot/cluster/topology_source.h"
#include "kvdepot/daemon/cluster_router.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"

namespace {

using namespace kvdepot;
using Clock = std::chrono::steady_clock;

struct Node {
  std::unique_ptr<daemon::HostTier> host;
  std::unique_ptr<daemon::Store> store;
  std::unique_ptr<cluster::StaticTopologySource> source;
  std::unique_ptr<daemon::ClusterRouter> router;
  std::unique_ptr<daemon::Server> server;
  std::string addr;
};

std::unique_ptr<Node> StartNode(const std::string& id) {
  auto n = std::make_unique<Node>();
  n->host = std::make_unique<daemon::HostTier>(daemon::HostTierOptions::With(1ull << 30));
  n->store = std::make_unique<daemon::Store>(*n->host, nullptr);
  n->source = std::make_unique<cluster::StaticTopologySource>(id);
  n->router = std::make_unique<daemon::ClusterRouter>(*n->store, *n->source,
                                                      daemon::ClusterRouterOptions{});
  n->store->SetRouter(n->router.get());
  daemon::ServerOptions o;
  o.listen = "127.0.0.1:0";
  n->server = std::make_unique<daemon::Server>(o, *n->store, nullptr);
  if (Status s = n->server->Start(); !s.ok()) {
    std::fprintf(stderr, "server start failed: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  n->addr = "127.0.0.1:" + std::to_string(n->server->tcp_port());
  return n;
}

struct Run {
  double gets_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
};

Run GetAll(client::Connection& c, const std::vector<std::string>& keys, std::size_t gets) {
  std::vector<double> us;
  us.reserve(gets);
  const auto start = Clock::now();
  for (std::size_t i = 0; i < gets; ++i) {
    const auto t0 = Clock::now();
    auto got = c.Get(keys[i % keys.size()]);
    if (!got.ok() || !got->has_value()) {
      std::fprintf(stderr, "GET failed: %s\n", got.ok() ? "miss" : got.status().ToString().c_str());
      std::exit(1);
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(us.begin(), us.end());
  return {static_cast<double>(gets) / seconds, us[us.size() / 2], us[us.size() * 99 / 100]};
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t value_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 65536;
  const std::size_t gets = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2000;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 5;
  auto a = StartNode(std::string(31, '0') + "a");
  auto b = StartNode(std::string(31, '0') + "b");
  std::vector<cluster::Member> members(2);
  members[0].id = a->source->SelfId();
  members[0].native_addr = a->addr;
  members[1].id = b->source->SelfId();
  members[1].native_addr = b->addr;
  const cluster::Topology view(1, members, {.replicas = 1, .group_chunks = 1});
  a->source->Set(view, false);
  b->source->Set(view, false);

  client::ClientOptions oa, ob;
  oa.address = a->addr;
  ob.address = b->addr;
  auto ca = client::Connection::Connect(oa);
  auto cb = client::Connection::Connect(ob);
  if (!ca.ok() || !cb.ok()) return 1;
  std::vector<std::string> keys;
  const std::vector<std::byte> value(value_bytes, std::byte{0x5a});
  for (int i = 0; keys.size() < 64; ++i) {
    std::string key = "bench-key-" + std::to_string(i);
    if (view.PrimaryOwner(key)->id != members[1].id) continue;
    if (!(*cb)->Put(key, value).ok()) return 1;
    keys.push_back(std::move(key));
  }
  std::printf("value %zu B, %zu GETs per run, 1 connection, sequential\n", value_bytes, gets);
  GetAll(**cb, keys, gets / 4);  // warm-up: connections, caches
  GetAll(**ca, keys, gets / 4);
  std::vector<double> ratios;
  for (int r = 0; r < runs; ++r) {
    const Run direct = GetAll(**cb, keys, gets);
    const Run forwarded = GetAll(**ca, keys, gets);
    ratios.push_back(forwarded.gets_per_s / direct.gets_per_s);
    std::printf(
        "run %d: direct %.0f GET/s p50 %.0f us p99 %.0f us | forwarded %.0f GET/s p50 %.0f us "
        "p99 %.0f us | ratio %.2f\n",
        r, direct.gets_per_s, direct.p50_us, direct.p99_us, forwarded.gets_per_s, forwarded.p50_us,
        forwarded.p99_us, ratios.back());
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("median forwarded/direct throughput ratio: %.2f\n", ratios[ratios.size() / 2]);
  a->server->Stop();
  b->server->Stop();
  a->router.reset();
  b->router.reset();
  return 0;
}
