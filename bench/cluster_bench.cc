// Cluster benchmark (issue 21 §5; docs/benchmarks.md "Cluster", docs/cluster.md): a local etcd and
// real kvdepotd processes on loopback, as `make cluster-demo` starts them.
//
//  a) aggregate GET throughput of 1, 2 and 3 daemons driven like a smart client (CLUSTER_INFO,
//     each key's owner by cluster::Topology, each GET to its owner on a connection per node), for
//     1 MiB and 8 MiB values; runs alternate 1, 2, 3, forwarded, 1, 2, 3, ... in one process;
//  b) the daemons' CPU (utime + stime from /proc/PID/stat) per request and per GB on the direct
//     path and on the forwarded one (every GET sent to one node that owns none of the keys read);
//  c) longest-prefix LOOKUP of a 128-chunk prompt whose chunks have 0-5 owners other than the node
//     asked (6 daemons): p50/p99;
//  d) time to detect a dead node: SIGKILL one of 3 daemons, time until every survivor's view drops
//     it, and what GETs of its keys through the survivors return meanwhile (lease 2 s and 6 s).
//
//   kvdepot_cluster_bench [--seconds S=2] [--rounds R=3] [--threads T=4] [--lookups L=2000]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd_fixture.h"
#include "daemon/kvdepotd_child.h"
#include "kvdepot/client/client.h"
#include "kvdepot/cluster/cluster_info.h"
#include "kvdepot/cluster/topology.h"

namespace {

using namespace kvdepot;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// ---- the daemons ------------------------------------------------------------------------------

struct Node {
  std::unique_ptr<test::TempTestDir> dir;
  std::unique_ptr<test::KvdepotdChild> process;
  std::string addr;  // native TCP address, advertised in the cluster
};

struct LocalCluster {
  std::string name;
  std::vector<Node> nodes;
};

Node StartDaemon(const test::EtcdProcess& etcd, const std::string& cluster,
                 const std::string& lease_ttl) {
  Node n;
  n.dir = std::make_unique<test::TempTestDir>("kvd-cbench");
  n.addr = "127.0.0.1:" + std::to_string(test::FreeLoopbackPort());
  n.process = std::make_unique<test::KvdepotdChild>(
      n.dir->path(), (n.dir->path() / "s.sock").string(),
      std::vector<std::string>{"--listen", n.addr, "--cluster-etcd", etcd.endpoint(),
                               "--cluster-name", cluster, "--cluster-advertise", n.addr,
                               "--cluster-lease-ttl", lease_ttl, "--host-capacity", "512MiB",
                               "--log-level", "warn"});
  if (!n.process->WaitReady()) {
    std::fprintf(stderr, "kvdepotd did not start; see %s/daemon.log\n", n.dir->path().c_str());
    std::exit(1);
  }
  return n;
}

client::ClientOptions TcpOptions(const std::string& addr) {
  client::ClientOptions o;
  o.address = addr;
  o.timeout = milliseconds(10000);
  return o;
}

Result<std::string> ClusterInfoOf(const std::string& addr) {
  KVD_ASSIGN_OR_RETURN(auto c, client::Connection::Connect(TcpOptions(addr)));
  return c->ClusterInfo();
}

std::size_t MembersSeenBy(const std::string& addr) {
  auto info = ClusterInfoOf(addr);
  if (!info.ok()) return 0;
  auto view = cluster::TopologyFromClusterInfo(*info);
  return view.ok() ? view->members().size() : 0;
}

LocalCluster StartCluster(const test::EtcdProcess& etcd, const std::string& name, std::size_t n,
                          const std::string& lease_ttl = "2s") {
  LocalCluster c{name, {}};
  for (std::size_t i = 0; i < n; ++i) c.nodes.push_back(StartDaemon(etcd, name, lease_ttl));
  const auto end = Clock::now() + std::chrono::seconds(20);
  for (const Node& node : c.nodes) {
    while (MembersSeenBy(node.addr) != n) {
      if (Clock::now() > end) {
        std::fprintf(stderr, "cluster %s: %s does not see %zu members\n", name.c_str(),
                     node.addr.c_str(), n);
        std::exit(1);
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  return c;
}

// CPU seconds (user + system) a process has used, from /proc/PID/stat.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // field 3 is the state
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double DaemonsCpuSeconds(const LocalCluster& c) {
  double total = 0;
  for (const Node& n : c.nodes) total += ProcessCpuSeconds(n.process->pid());
  return total;
}

double SelfCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// ---- the client paths --------------------------------------------------------------------------

// How the benchmark reaches the cluster. One per client thread.
class ClusterClient {
 public:
  virtual ~ClusterClient() = default;
  // The value's size, nullopt on a miss.
  virtual Result<std::optional<std::size_t>> GetInto(const std::string& key,
                                                     std::span<std::byte> out) = 0;
  virtual Status Put(const std::string& key, std::span<const std::byte> value) = 0;
};

// The SDK's smart client (client::Client with cluster_routing auto, docs/cluster.md "Smart
// clients"): it learns the view from the seed's CLUSTER_INFO and sends each request to its key's
// owner over its own per-member connection pools.
class SdkSmartClient final : public ClusterClient {
 public:
  static std::unique_ptr<ClusterClient> Connect(const std::string& seed_addr) {
    client::ClientOptions options = TcpOptions(seed_addr);
    options.cluster_routing = client::ClusterRouting::kAuto;
    auto client = std::unique_ptr<SdkSmartClient>(new SdkSmartClient(std::move(options)));
    if (!client->client_.Ping().ok()) return nullptr;
    return client;
  }

  Result<std::optional<std::size_t>> GetInto(const std::string& key,
                                             std::span<std::byte> out) override {
    return client_.GetInto(key, {}, out);
  }
  Status Put(const std::string& key, std::span<const std::byte> value) override {
    return client_.Put(key, value);
  }

 private:
  explicit SdkSmartClient(client::ClientOptions options) : client_(std::move(options)) {}
  client::Client client_;
};

// A client that knows nothing of the cluster: every request to one node (forwarded by it).
class SingleNodeClient final : public ClusterClient {
 public:
  static std::unique_ptr<ClusterClient> Connect(const std::string& addr) {
    auto c = client::Connection::Connect(TcpOptions(addr));
    if (!c.ok()) return nullptr;
    return std::unique_ptr<ClusterClient>(new SingleNodeClient(std::move(*c)));
  }
  Result<std::optional<std::size_t>> GetInto(const std::string& key,
                                             std::span<std::byte> out) override {
    return connection_->GetInto(key, {}, out);
  }
  Status Put(const std::string& key, std::span<const std::byte> value) override {
    return connection_->Put(key, value);
  }

 private:
  explicit SingleNodeClient(std::unique_ptr<client::Connection> c) : connection_(std::move(c)) {}
  std::unique_ptr<client::Connection> connection_;
};

// The smart client the throughput runs use: the SDK's.
std::unique_ptr<ClusterClient> MakeSmartClient(const std::string& seed_addr) {
  return SdkSmartClient::Connect(seed_addr);
}

// ---- a) and b): throughput and CPU
// ---------------------------------------------------------------

struct RunResult {
  std::string config;
  std::size_t value_bytes = 0;
  std::uint64_t gets = 0, misses = 0, errors = 0;
  double wall_s = 0, daemon_cpu_s = 0, client_cpu_s = 0;
  double p50_us = 0, p99_us = 0;
  double GBps() const { return static_cast<double>(gets * value_bytes) / wall_s / 1e9; }
  double Rps() const { return static_cast<double>(gets) / wall_s; }
  double CpuUsPerGet() const { return daemon_cpu_s / static_cast<double>(gets) * 1e6; }
  double CpuSPerGB() const {
    return daemon_cpu_s / (static_cast<double>(gets * value_bytes) / 1e9);
  }
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

// `threads` clients made by `make`, each GETting `keys` in turn (from its own offset) for
// `seconds`.
RunResult RunGets(const std::string& config, const LocalCluster& cluster,
                  const std::function<std::unique_ptr<ClusterClient>()>& make,
                  const std::vector<std::string>& keys, std::size_t value_bytes, int threads,
                  double seconds) {
  std::vector<std::unique_ptr<ClusterClient>> clients;
  for (int t = 0; t < threads; ++t) {
    clients.push_back(make());
    if (clients.back() == nullptr) {
      std::fprintf(stderr, "%s: cannot connect\n", config.c_str());
      std::exit(1);
    }
  }
  RunResult r;
  r.config = config;
  r.value_bytes = value_bytes;
  std::mutex mu;
  std::vector<double> latencies_us;
  std::atomic<bool> stop{false};
  const double cpu0 = DaemonsCpuSeconds(cluster);
  const double self0 = SelfCpuSeconds();
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<std::byte> buffer(value_bytes);
      std::vector<double> mine;
      std::uint64_t gets = 0, misses = 0, errors = 0;
      for (std::size_t i = static_cast<std::size_t>(t) * 7; !stop.load(); ++i) {
        const Clock::time_point t0 = Clock::now();
        auto got = clients[t]->GetInto(keys[i % keys.size()], buffer);
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        ++gets;
        if (!got.ok())
          ++errors;
        else if (!got->has_value())
          ++misses;
      }
      std::lock_guard lock(mu);
      r.gets += gets;
      r.misses += misses;
      r.errors += errors;
      latencies_us.insert(latencies_us.end(), mine.begin(), mine.end());
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (auto& w : workers) w.join();
  r.wall_s = Seconds(Clock::now() - start);
  r.daemon_cpu_s = DaemonsCpuSeconds(cluster) - cpu0;
  r.client_cpu_s = SelfCpuSeconds() - self0;
  r.p50_us = Percentile(latencies_us, 0.50);
  r.p99_us = Percentile(latencies_us, 0.99);
  return r;
}

void PrintRun(const RunResult& r) {
  std::printf(
      "  %-10s %5zu KiB  %7.3f GB/s  %7.0f req/s  p50 %7.0f us  p99 %7.0f us  daemons %5.2f "
      "cpu-s (%6.1f us/GET, %5.2f s/GB)  client %5.2f cpu-s  misses %llu errors %llu\n",
      r.config.c_str(), r.value_bytes >> 10, r.GBps(), r.Rps(), r.p50_us, r.p99_us, r.daemon_cpu_s,
      r.CpuUsPerGet(), r.CpuSPerGB(), r.client_cpu_s, static_cast<unsigned long long>(r.misses),
      static_cast<unsigned long long>(r.errors));
  std::fflush(stdout);
}

std::vector<std::byte> Payload(std::size_t bytes, std::size_t seed) {
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; i += 4096) v[i] = static_cast<std::byte>((i >> 12) + seed);
  return v;
}

void Throughput(const test::EtcdProcess& etcd, int rounds, int threads, double seconds) {
  std::printf("\n== a/b) GET throughput, %d client threads, %.1f s runs, alternating ==\n", threads,
              seconds);
  std::vector<LocalCluster> clusters;
  for (std::size_t n = 1; n <= 3; ++n) {
    clusters.push_back(StartCluster(etcd, "bench" + std::to_string(n), n));
  }
  const LocalCluster& three = clusters[2];
  for (const std::size_t value_bytes : {std::size_t{1} << 20, std::size_t{8} << 20}) {
    const std::size_t count = value_bytes == (1u << 20) ? 128 : 32;  // 128 or 256 MiB per cluster
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < count; ++i) {
      keys.push_back("bench/" + std::to_string(value_bytes >> 20) + "m/" + std::to_string(i));
    }
    for (const LocalCluster& c : clusters) {
      auto writer = MakeSmartClient(c.nodes[0].addr);
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (Status s = writer->Put(keys[i], Payload(value_bytes, i)); !s.ok()) {
          std::fprintf(stderr, "PUT %s: %s\n", keys[i].c_str(), s.ToString().c_str());
          std::exit(1);
        }
      }
    }
    // Forwarded: the keys node 0 of the 3-node cluster does not own, all sent to node 0.
    auto info = ClusterInfoOf(three.nodes[0].addr);
    auto view = cluster::TopologyFromClusterInfo(*info);
    std::vector<std::string> not_at_entry;
    for (const std::string& k : keys) {
      if (view->PrimaryOwner(cluster::PlacementKey(k))->native_addr != three.nodes[0].addr)
        not_at_entry.push_back(k);
    }
    std::printf("%zu KiB values: %zu keys (%zu not owned by the forwarding node)\n",
                value_bytes >> 10, keys.size(), not_at_entry.size());
    for (int round = 0; round < rounds; ++round) {
      std::vector<RunResult> runs;
      for (std::size_t n = 0; n < 3; ++n) {
        const LocalCluster& c = clusters[n];
        runs.push_back(RunGets(
            std::to_string(n + 1) + " daemon" + (n ? "s" : ""), c,
            [&c] { return MakeSmartClient(c.nodes[0].addr); }, keys, value_bytes, threads,
            seconds));
        PrintRun(runs.back());
      }
      runs.push_back(RunGets(
          "3 fwd", three, [&three] { return SingleNodeClient::Connect(three.nodes[0].addr); },
          not_at_entry, value_bytes, threads, seconds));
      PrintRun(runs.back());
      std::printf(
          "  round %d ratios: 2/1 %.2f, 3/1 %.2f (GB/s); forwarded/direct(3) %.2f; CPU per GET "
          "forwarded/direct(3) %.2f; one daemon core serves %.2f GB/s direct (1 / daemon s per "
          "GB of the 3-daemon run)\n",
          round + 1, runs[1].GBps() / runs[0].GBps(), runs[2].GBps() / runs[0].GBps(),
          runs[3].GBps() / runs[2].GBps(), runs[3].CpuUsPerGet() / runs[2].CpuUsPerGet(),
          1 / runs[2].CpuSPerGB());
    }
  }
  for (LocalCluster& c : clusters) {
    for (Node& n : c.nodes) n.process->Stop();
  }
}

// ---- c) LOOKUP across owners -------------------------------------------------------------------

void Lookups(const test::EtcdProcess& etcd, int calls) {
  constexpr std::size_t kNodes = 6, kChunks = 128;
  std::printf("\n== c) LOOKUP of a %zu-chunk prompt through one node, by owners asked ==\n",
              kChunks);
  LocalCluster c = StartCluster(etcd, "lookup", kNodes);
  auto info = ClusterInfoOf(c.nodes[0].addr);
  auto view = cluster::TopologyFromClusterInfo(*info);
  // Candidate keys by primary owner; the entry node is node 0.
  std::map<std::string, std::vector<std::string>> by_owner;
  for (std::size_t i = 0; by_owner.size() < kNodes || i < 20000; ++i) {
    const std::string key = "lookup/" + std::to_string(i);
    by_owner[view->PrimaryOwner(cluster::PlacementKey(key))->native_addr].push_back(key);
  }
  std::vector<std::string> others;  // the other nodes' addresses
  for (const Node& n : c.nodes) {
    if (n.addr != c.nodes[0].addr) others.push_back(n.addr);
  }
  // prompts[k]: 128 keys owned round-robin by k nodes other than the entry (k = 0: the entry).
  std::vector<std::vector<std::string>> prompts(kNodes);
  std::map<std::string, std::size_t> used;  // candidates taken, per owner
  for (std::size_t k = 0; k < kNodes; ++k) {
    for (std::size_t i = 0; i < kChunks; ++i) {
      const std::string& owner = k == 0 ? c.nodes[0].addr : others[i % k];
      prompts[k].push_back(by_owner[owner].at(used[owner]++));
    }
  }
  auto writer = MakeSmartClient(c.nodes[0].addr);
  const auto value = Payload(4096, 1);
  for (const auto& prompt : prompts) {
    for (const std::string& key : prompt) (void)writer->Put(key, value);
  }
  auto entry = client::Connection::Connect(TcpOptions(c.nodes[0].addr));
  if (!entry.ok()) {
    std::fprintf(stderr, "LOOKUP: %s\n", entry.status().ToString().c_str());
    std::exit(1);
  }
  std::vector<std::vector<double>> latencies(kNodes);
  std::size_t short_prefix = 0;
  constexpr int kSlices = 4;  // 0..5 owners, then again: load changes hit every case alike
  for (int slice = 0; slice < kSlices; ++slice) {
    for (std::size_t k = 0; k < kNodes; ++k) {
      for (int i = 0; i < calls / kSlices; ++i) {
        const Clock::time_point t0 = Clock::now();
        auto r = (*entry)->Lookup(prompts[k]);
        latencies[k].push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        if (!r.ok() || r->prefix_length != kChunks) ++short_prefix;
      }
    }
  }
  for (std::size_t k = 0; k < kNodes; ++k) {
    std::printf("  %zu other owners: p50 %7.0f us  p99 %7.0f us  (%zu calls)\n", k,
                Percentile(latencies[k], 0.5), Percentile(latencies[k], 0.99), latencies[k].size());
  }
  std::printf("  LOOKUPs that did not find the whole prefix: %zu\n", short_prefix);
  for (Node& n : c.nodes) n.process->Stop();
}

// ---- d) a dead node ---------------------------------------------------------------------------

void DeadNode(const test::EtcdProcess& etcd, const std::string& lease_ttl) {
  std::printf("\n== d) SIGKILL one of 3 daemons, lease_ttl %s ==\n", lease_ttl.c_str());
  LocalCluster c = StartCluster(etcd, "dead" + lease_ttl, 3, lease_ttl);
  const Node& victim = c.nodes[2];
  auto info = ClusterInfoOf(c.nodes[0].addr);
  auto view = cluster::TopologyFromClusterInfo(*info);
  std::vector<std::string> victim_keys;
  {
    auto writer = MakeSmartClient(c.nodes[0].addr);
    const auto value = Payload(65536, 2);
    for (int i = 0; victim_keys.size() < 64; ++i) {
      const std::string key = "dead/" + std::to_string(i);
      (void)writer->Put(key, value);
      if (view->PrimaryOwner(cluster::PlacementKey(key))->native_addr == victim.addr) {
        victim_keys.push_back(key);
      }
    }
  }
  // GETs of the victim's keys through the survivors, from the kill on.
  std::atomic<bool> stop{false};
  struct Get {
    Clock::time_point at;  // when it was answered
    double latency_ms;
    int outcome;  // 0 hit, 1 miss, 2 error
  };
  std::vector<Get> gets;  // the getter's, read once it has stopped
  std::thread getter([&] {
    std::vector<std::unique_ptr<client::Connection>> survivors;
    for (int n = 0; n < 2; ++n) {
      auto conn = client::Connection::Connect(TcpOptions(c.nodes[n].addr));
      if (conn.ok()) survivors.push_back(std::move(*conn));
    }
    for (std::size_t i = 0; !stop.load(); ++i) {
      const Clock::time_point t0 = Clock::now();
      auto got = survivors[i % survivors.size()]->Get(victim_keys[i % victim_keys.size()]);
      const Clock::time_point t1 = Clock::now();
      gets.push_back({t1, Seconds(t1 - t0) * 1e3, !got.ok() ? 2 : got->has_value() ? 0 : 1});
      if (!got.ok()) {
        auto conn = client::Connection::Connect(TcpOptions(c.nodes[i % 2].addr));
        if (conn.ok()) survivors[i % survivors.size()] = std::move(*conn);
      }
    }
  });
  std::this_thread::sleep_for(milliseconds(200));
  const Clock::time_point killed_at = Clock::now();
  victim.process->Kill();
  std::vector<double> dropped_s(2, -1);
  while (dropped_s[0] < 0 || dropped_s[1] < 0) {
    for (int n = 0; n < 2; ++n) {
      if (dropped_s[n] < 0 && MembersSeenBy(c.nodes[n].addr) == 2) {
        dropped_s[n] = Seconds(Clock::now() - killed_at);
      }
    }
    if (Seconds(Clock::now() - killed_at) > 60) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::this_thread::sleep_for(milliseconds(500));
  stop.store(true);
  getter.join();
  std::printf("  survivors' views drop the dead node after %.2f s and %.2f s\n", dropped_s[0],
              dropped_s[1]);
  // GETs after the kill: outcomes and the slowest, before and after the views changed.
  const double all_dropped = std::max(dropped_s[0], dropped_s[1]);
  std::size_t hits = 0, misses = 0, errors = 0, before = 0;
  double slowest_before = 0, slowest_after = 0, first_miss = -1;
  for (const Get& g : gets) {
    const double at_s = Seconds(g.at - killed_at);
    if (at_s < 0) continue;
    (g.outcome == 0 ? hits : g.outcome == 1 ? misses : errors)++;
    if (g.outcome == 1 && first_miss < 0) first_miss = at_s;
    if (at_s <= all_dropped) {
      ++before;
      slowest_before = std::max(slowest_before, g.latency_ms);
    } else {
      slowest_after = std::max(slowest_after, g.latency_ms);
    }
  }
  std::printf(
      "  GETs of its keys through the survivors after the kill: %zu (hits %zu, misses %zu, errors "
      "%zu); first miss %.3f s after the kill; slowest GET %.1f ms before the views changed "
      "(%zu GETs), %.1f ms after\n",
      hits + misses + errors, hits, misses, errors, first_miss, slowest_before, before,
      slowest_after);
  for (Node& n : c.nodes) {
    if (n.process->pid() > 0) n.process->Stop();
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  int rounds = 3, threads = 4, lookups = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (flag == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (flag == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (flag == "--lookups")
      lookups = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s (--seconds, --rounds, --threads, --lookups)\n",
                   argv[i]);
      return 2;
    }
  }
  if (!test::EtcdInstalled()) {
    std::fprintf(stderr, "%s is not installed (scripts/install-deps.sh installs etcd-server)\n",
                 test::kEtcdBinary);
    return 1;
  }
  test::EtcdProcess etcd;
  if (!etcd.Start()) {
    std::fprintf(stderr, "etcd did not start; see %s/etcd.log\n", etcd.dir().c_str());
    return 1;
  }
  std::printf("kvdepot_cluster_bench: etcd %s, %u CPUs online\n", etcd.endpoint().c_str(),
              std::thread::hardware_concurrency());
  Throughput(etcd, rounds, threads, seconds);
  Lookups(etcd, lookups);
  DeadNode(etcd, "2s");
  DeadNode(etcd, "6s");
  return 0;
}
