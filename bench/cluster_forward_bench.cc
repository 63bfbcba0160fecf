// Forwarded GET vs direct GET (docs/cluster.md "Requests", docs/benchmarks.md): two in-process
// daemons on loopback in one cluster view; the keys are all owned by node B. "direct" GETs them
// from B, "forwarded" from A (A -> B -> A -> client, one transient buffer on A). Runs alternate
// (direct, forwarded, direct, ...) so that load from other processes hits both alike; every run
// is printed, then the median ratio.
//
// With the mode "tls", it compares the hop itself over TLS and over plain TCP instead: two pairs
// of nodes, one whose peers speak TLS (docs/cluster.md, "TLS between members"; a self-signed
// certificate for 127.0.0.1 made with the openssl CLI) and one plain; the client reaches each
// forwarding node over its Unix socket, so only the peer connection differs. Runs alternate
// (plain, TLS, ...). Values at most 512 MiB in all per node (the key count shrinks with size).
//
//   kvdepot_cluster_forward_bench [VALUE_BYTES=65536] [GETS_PER_RUN=2000] [RUNS=5] [tls]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvdepot/client/client.h"
#include "kvdepot/cluster/topology_source.h"
#include "kvdepot/daemon/cluster_router.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"
#include "net/tls_context.h"

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

// `tls`: the node's listener and its peer connections speak TLS with that certificate, which is
// also the CA. `unix_path`: a Unix socket too.
std::unique_ptr<Node> StartNode(const std::string& id, const daemon::TlsOptions& tls = {},
                                const std::string& unix_path = "") {
  auto n = std::make_unique<Node>();
  n->host = std::make_unique<daemon::HostTier>(daemon::HostTierOptions::With(1ull << 30));
  n->store = std::make_unique<daemon::Store>(*n->host, nullptr);
  n->source = std::make_unique<cluster::StaticTopologySource>(id);
  daemon::ClusterRouterOptions ro;
  if (tls.enabled()) {
    auto peer_tls = daemon::MakeTlsContext(daemon::TlsRole::kPeerClient, tls, tls.cert_file,
                                           "the benchmark's CA");
    if (!peer_tls.ok()) {
      std::fprintf(stderr, "peer TLS: %s\n", peer_tls.status().ToString().c_str());
      std::exit(1);
    }
    ro.peer_tls = *std::move(peer_tls);
    ro.peer_tls_trust = "the benchmark's CA " + tls.cert_file;
  }
  n->router = std::make_unique<daemon::ClusterRouter>(*n->store, *n->source, std::move(ro));
  n->store->SetRouter(n->router.get());
  daemon::ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.tls = tls;
  o.unix_path = unix_path;
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

// Two nodes in one view (replicas 1, groups of 1) and keys all owned by B, stored there.
struct Pair {
  std::unique_ptr<Node> a, b;
  std::vector<std::string> keys;
};

Pair StartPair(std::size_t value_bytes, std::size_t key_count, const daemon::TlsOptions& tls = {},
               const std::string& a_unix = "") {
  Pair p;
  p.a = StartNode(std::string(31, '0') + "a", tls, a_unix);
  p.b = StartNode(std::string(31, '0') + "b", tls);
  std::vector<cluster::Member> members(2);
  members[0].id = p.a->source->SelfId();
  members[0].native_addr = p.a->addr;
  members[1].id = p.b->source->SelfId();
  members[1].native_addr = p.b->addr;
  const cluster::Topology view(1, members, {.replicas = 1, .group_chunks = 1});
  p.a->source->Set(view, false);
  p.b->source->Set(view, false);
  for (int i = 0; p.keys.size() < key_count; ++i) {
    std::string key = "bench-key-" + std::to_string(i);
    if (view.PrimaryOwner(key)->id != members[1].id) continue;
    auto value = p.b->store->Allocate(key, value_bytes);
    if (!value.ok()) {
      std::fprintf(stderr, "allocate: %s\n", value.status().ToString().c_str());
      std::exit(1);
    }
    std::fill((*value)->mutable_bytes().begin(), (*value)->mutable_bytes().end(), std::byte{0x5a});
    p.b->store->Put(
        key, *std::move(value), [](const Status&) {}, daemon::Route::kLocal);
    p.keys.push_back(std::move(key));
  }
  return p;
}

void StopPair(Pair& p) {
  p.a->server->Stop();
  p.b->server->Stop();
  p.a->router.reset();
  p.b->router.reset();
}

std::unique_ptr<client::Connection> ConnectTo(const std::string& address) {
  client::ClientOptions o;
  o.address = address;
  auto c = client::Connection::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "connect %s: %s\n", address.c_str(), c.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*c);
}

// One side of a comparison: a connection and the keys it GETs.
struct Side {
  const char* name;
  client::Connection& connection;
  const std::vector<std::string>& keys;
};

// Warms both sides up, then runs `runs` rounds of `gets` GETs alternating base, other; prints
// every run and the median of other/base throughput.
void Alternate(const Side& base, const Side& other, std::size_t gets, int runs) {
  GetAll(base.connection, base.keys, std::max<std::size_t>(gets / 4, 1));  // connections, caches
  GetAll(other.connection, other.keys, std::max<std::size_t>(gets / 4, 1));
  std::vector<double> ratios;
  for (int r = 0; r < runs; ++r) {
    const Run b = GetAll(base.connection, base.keys, gets);
    const Run o = GetAll(other.connection, other.keys, gets);
    ratios.push_back(o.gets_per_s / b.gets_per_s);
    std::printf(
        "run %d: %s %.1f GET/s p50 %.0f us p99 %.0f us | %s %.1f GET/s p50 %.0f us p99 %.0f us | "
        "ratio %.2f\n",
        r, base.name, b.gets_per_s, b.p50_us, b.p99_us, other.name, o.gets_per_s, o.p50_us,
        o.p99_us, ratios.back());
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("median %s/%s throughput ratio: %.2f\n", other.name, base.name,
              ratios[ratios.size() / 2]);
}

// Forwarded GETs, the hop over TLS vs over plain TCP.
int TlsVsPlain(std::size_t value_bytes, std::size_t gets, int runs, std::size_t key_count) {
  char dir_template[] = "/tmp/kvd-fwd-tls-XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  if (dir == nullptr) return 1;
  const std::string base = std::string(dir) + "/member";
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 -keyout " +
      base + ".key -out " + base + ".crt >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "openssl req failed: %s\n", cmd.c_str());
    return 1;
  }
  Pair plain = StartPair(value_bytes, key_count, {}, std::string(dir) + "/plain.sock");
  Pair tls = StartPair(value_bytes, key_count, {base + ".crt", base + ".key", ""},
                       std::string(dir) + "/tls.sock");
  auto cp = ConnectTo(std::string("unix:") + dir + "/plain.sock");
  auto ct = ConnectTo(std::string("unix:") + dir + "/tls.sock");
  std::printf(
      "value %zu B, %zu keys, %zu GETs per run, 1 client connection (Unix socket) to the "
      "forwarding node, sequential; the hop over plain TCP vs TLS\n",
      value_bytes, key_count, gets);
  Alternate({"forwarded-over-TCP", *cp, plain.keys}, {"forwarded-over-TLS", *ct, tls.keys}, gets,
            runs);
  StopPair(plain);
  StopPair(tls);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t value_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 65536;
  const std::size_t gets = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2000;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 5;
  const bool tls = argc > 4 && std::string(argv[4]) == "tls";
  const std::size_t key_count =
      std::clamp<std::size_t>((512ull << 20) / std::max<std::size_t>(value_bytes, 1), 1, 64);
  if (tls) return TlsVsPlain(value_bytes, gets, runs, key_count);
  Pair p = StartPair(value_bytes, key_count);
  auto ca = ConnectTo(p.a->addr);
  auto cb = ConnectTo(p.b->addr);
  std::printf("value %zu B, %zu GETs per run, 1 connection, sequential\n", value_bytes, gets);
  Alternate({"direct", *cb, p.keys}, {"forwarded", *ca, p.keys}, gets, runs);
  StopPair(p);
  return 0;
}
