#include "kvdepot/daemon/metrics.h"

#include "kvdepot/base/hex.h"
#include "kvdepot/cluster/etcd_membership.h"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <utility>

#include "kvdepot/codec/codec_id.h"
#include "process_metrics.h"

namespace kvdepot::daemon {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr std::size_t kOps = protocol::kMaxOp + 1;  // protocol::Op values are 1..kMaxOp
constexpr std::size_t kStatuses = 16;               // StatusCode values are 0..12
// Request latencies from tens of microseconds (a host-tier hit over a Unix socket) to seconds
// (large values to a slow reader, SSD reads under load), in nanoseconds.
constexpr std::array<std::uint64_t, 17> kLatencyBoundsNs = {
    50'000,      100'000,       250'000,       500'000,       1'000'000,     2'500'000,
    5'000'000,   10'000'000,    25'000'000,    50'000'000,    100'000'000,   250'000'000,
    500'000'000, 1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
// Prefix hits in chunks (256 tokens each): 0 .. 4096 chunks (1M tokens).
constexpr std::array<std::uint64_t, 14> kPrefixBounds = {0,  1,   2,   4,   8,    16,   32,
                                                         64, 128, 256, 512, 1024, 2048, 4096};

// Index of the first bound >= v (Prometheus buckets count values <= their bound); size() = +Inf.
template <std::size_t N>
std::size_t BucketOf(const std::array<std::uint64_t, N>& bounds, std::uint64_t v) {
  std::size_t i = 0;
  while (i < N && v > bounds[i]) ++i;
  return i;
}

template <std::size_t N>
ClientMetric HistogramSample(std::vector<ClientMetric::Label> labels,
                             const std::array<std::uint64_t, N>& bounds, double scale,
                             const std::array<std::atomic<std::uint64_t>, N + 1>& buckets,
                             double sum) {
  ClientMetric m;
  m.label = std::move(labels);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= N; ++i) {
    cumulative += buckets[i].load(std::memory_order_relaxed);
    ClientMetric::Bucket b;
    b.cumulative_count = cumulative;
    b.upper_bound =
        i < N ? static_cast<double>(bounds[i]) * scale : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back(b);
  }
  m.histogram.sample_count = cumulative;
  m.histogram.sample_sum = sum;
  return m;
}

// Outcomes exported for every operation from the start, at zero until they happen, so that
// rates and alerts over them work before the first one (docs/metrics.md); other codes appear
// with their first occurrence.
bool AlwaysExported(StatusCode status) {
  switch (status) {
    case StatusCode::kOk:
    case StatusCode::kNotFound:
    case StatusCode::kOutOfRange:
    case StatusCode::kResourceExhausted:
    case StatusCode::kInternal: return true;
    default: return false;
  }
}

std::string OpLabel(std::size_t op) {
  return std::string(protocol::OpName(static_cast<protocol::Op>(op)));
}
const prometheus::Histogram::BucketBoundaries kCodecBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};

MetricFamily NewFamily(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void Add(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

// One family with a single unlabelled series.
struct UnlabelledRow {
  const char* name;
  const char* help;
  MetricType type;
  std::uint64_t value;
};

template <std::size_t N>
void AddRows(const UnlabelledRow (&rows)[N], std::vector<MetricFamily>& out) {
  for (const UnlabelledRow& r : rows) {
    auto f = NewFamily(r.name, r.help, r.type);
    Add(f, {}, static_cast<double>(r.value));
    out.push_back(std::move(f));
  }
}

}  // namespace

// Per-request counts: relaxed atomic additions on the I/O threads, read at scrape time.
struct Metrics::RequestCounters {
  struct alignas(64) PerOp {
    std::array<std::atomic<std::uint64_t>, kStatuses> by_status{};
    std::array<std::atomic<std::uint64_t>, kLatencyBoundsNs.size() + 1> latency{};
    std::atomic<std::uint64_t> latency_sum_ns{0};
  };
  std::array<PerOp, kOps> ops;
  alignas(64) std::array<std::atomic<std::uint64_t>, kPrefixBounds.size() + 1> prefix{};
  std::atomic<std::uint64_t> prefix_sum{0};
  std::atomic<std::uint64_t> lookup_keys{0};

  void Collect(std::vector<MetricFamily>& out) const {
    auto requests = NewFamily("kvdepot_requests_total",
                              "Requests answered, by operation and outcome (docs/metrics.md)",
                              MetricType::Counter);
    auto durations = NewFamily("kvdepot_request_duration_seconds",
                               "Time from a request's header read to its last response byte "
                               "handed to the socket",
                               MetricType::Histogram);
    for (std::size_t op = 1; op < kOps; ++op) {
      for (std::size_t st = 0; st < kStatuses; ++st) {
        const std::uint64_t n = ops[op].by_status[st].load(std::memory_order_relaxed);
        if (n == 0 && !AlwaysExported(static_cast<StatusCode>(st))) continue;
        Add(requests,
            {{"op", OpLabel(op)},
             {"status", std::string(StatusCodeName(static_cast<StatusCode>(st)))}},
            static_cast<double>(n));
      }
      durations.metric.push_back(HistogramSample(
          {{"op", OpLabel(op)}}, kLatencyBoundsNs, 1e-9, ops[op].latency,
          static_cast<double>(ops[op].latency_sum_ns.load(std::memory_order_relaxed)) * 1e-9));
    }
    auto prefix_family =
        NewFamily("kvdepot_lookup_prefix_chunks",
                  "Longest cached prefix found by a LOOKUP, in chunks", MetricType::Histogram);
    prefix_family.metric.push_back(
        HistogramSample({}, kPrefixBounds, 1.0, prefix,
                        static_cast<double>(prefix_sum.load(std::memory_order_relaxed))));
    auto keys =
        NewFamily("kvdepot_lookup_keys_total", "Keys asked for by LOOKUPs", MetricType::Counter);
    Add(keys, {}, static_cast<double>(lookup_keys.load(std::memory_order_relaxed)));
    out.push_back(std::move(requests));
    out.push_back(std::move(durations));
    out.push_back(std::move(prefix_family));
    out.push_back(std::move(keys));
  }
};

// Everything read from the components' own stats at scrape time.
class Metrics::ScrapeCollector final : public prometheus::Collectable {
 public:
  ScrapeCollector(std::string version, std::shared_ptr<const RequestCounters> requests)
      : requests_(std::move(requests)),
        version_(std::move(version)),
        start_time_(
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count()) {}

  void AddTier(std::string name, std::function<TierStats()> source) {
    std::lock_guard lock(mu_);
    tiers_.emplace_back(std::move(name), std::move(source));
  }
  void SetServer(std::function<ServerStats()> source) {
    std::lock_guard lock(mu_);
    server_ = std::move(source);
  }
  void SetSsd(std::function<SsdTierStats()> source) {
    std::lock_guard lock(mu_);
    ssd_ = std::move(source);
  }
  void SetLm(std::function<LmServerStats()> source) {
    std::lock_guard lock(mu_);
    lm_ = std::move(source);
  }
  void SetResp(std::function<RespServerStats()> source) {
    std::lock_guard lock(mu_);
    resp_ = std::move(source);
  }
  void SetEvents(std::function<KvEventStats()> source) {
    std::lock_guard lock(mu_);
    events_ = std::move(source);
  }
  void SetCluster(std::function<cluster::MembershipStats()> source) {
    std::lock_guard lock(mu_);
    cluster_ = std::move(source);
  }
  void SetClusterRouter(std::function<ClusterRouterStats()> source) {
    std::lock_guard lock(mu_);
    cluster_router_ = std::move(source);
  }

  std::vector<MetricFamily> Collect() const override {
    std::lock_guard lock(mu_);
    std::vector<MetricFamily> out;
    requests_->Collect(out);
    auto info = NewFamily("kvdepot_build_info", "kvdepotd's version (the value is always 1)",
                          MetricType::Gauge);
    Add(info, {{"version", version_}}, 1);
    out.push_back(std::move(info));
    auto start = NewFamily("kvdepot_start_time_seconds",
                           "Start time of kvdepotd since the Unix epoch", MetricType::Gauge);
    Add(start, {}, start_time_);
    out.push_back(std::move(start));
    if (server_) CollectServer(server_(), out);
    CollectTiers(out);
    if (ssd_) CollectSsd(ssd_(), out);
    if (lm_) CollectLm(lm_(), out);
    if (resp_) CollectResp(resp_(), out);
    CollectProcessMetrics(out);
    if (events_) CollectEvents(events_(), out);
    if (cluster_) CollectCluster(cluster_(), out);
    if (cluster_router_) CollectClusterRouter(cluster_router_(), out);
    return out;
  }

 private:
  static void CollectServer(const ServerStats& s, std::vector<MetricFamily>& out) {
    const UnlabelledRow rows[] = {
        {"kvdepot_connections_open", "Client connections open now", MetricType::Gauge,
         s.connections_open},
        {"kvdepot_connections_accepted_total", "Client connections accepted", MetricType::Counter,
         s.connections_total},
        {"kvdepot_protocol_errors_total", "Malformed frames received (each closes its connection)",
         MetricType::Counter, s.protocol_errors},
        {"kvdepot_request_timeouts_total",
         "Connections closed because a request did not arrive whole within limits.request_timeout",
         MetricType::Counter, s.request_timeouts},
        {"kvdepot_idle_timeouts_total",
         "Connections closed after moving nothing for limits.idle_timeout", MetricType::Counter,
         s.idle_timeouts},
        {"kvdepot_network_receive_bytes_total", "Protocol bytes read from clients",
         MetricType::Counter, s.bytes_in},
        {"kvdepot_network_transmit_bytes_total", "Protocol bytes written to clients",
         MetricType::Counter, s.bytes_out},
        {"kvdepot_auth_failures_total",
         "Connections refused by authentication (a request before AUTH, a wrong or malformed "
         "token)",
         MetricType::Counter, s.auth_failures},
        {"kvdepot_tls_handshake_failures_total",
         "TCP connections closed because their TLS handshake failed", MetricType::Counter,
         s.tls_handshake_failures},
    };
    AddRows(rows, out);
  }

  static void CollectLm(const LmServerStats& s, std::vector<MetricFamily>& out) {
    auto requests =
        NewFamily("kvdepot_lm_requests_total", "lm:// (LMCache protocol) requests read, by command",
                  MetricType::Counter);
    const std::pair<const char*, std::uint64_t> commands[] = {{"put", s.puts},
                                                              {"get", s.gets},
                                                              {"exist", s.exists},
                                                              {"list", s.lists},
                                                              {"health", s.health}};
    for (const auto& [command, n] : commands) {
      Add(requests, {{"command", command}}, static_cast<double>(n));
    }
    out.push_back(std::move(requests));
    auto hits = NewFamily("kvdepot_lm_hits_total",
                          "lm:// GETs that returned a value and EXISTs that found the key",
                          MetricType::Counter);
    Add(hits, {{"command", "get"}}, static_cast<double>(s.get_hits));
    Add(hits, {{"command", "exist"}}, static_cast<double>(s.exist_hits));
    out.push_back(std::move(hits));
    const UnlabelledRow rows[] = {
        {"kvdepot_lm_puts_dropped_total",
         "lm:// PUT payloads read but not stored (no room, empty key, a failed durable write)",
         MetricType::Counter, s.puts_dropped},
        {"kvdepot_lm_puts_oversized_total",
         "lm:// PUT payloads over lm.max_value_bytes, read and dropped", MetricType::Counter,
         s.puts_oversized},
        {"kvdepot_lm_legacy_connections_total",
         "lm:// connections that spoke LMCache's legacy wire (182-byte requests)",
         MetricType::Counter, s.legacy_connections},
        {"kvdepot_lm_wire_refused_total",
         "lm:// connections refused for speaking the wire layout lm.wire excludes",
         MetricType::Counter, s.wire_refused},
        {"kvdepot_lm_connections_open", "lm:// connections open now", MetricType::Gauge,
         s.connections_open},
        {"kvdepot_lm_connections_accepted_total", "lm:// connections accepted", MetricType::Counter,
         s.connections_total},
        {"kvdepot_lm_protocol_errors_total", "lm:// connections closed for breaking the protocol",
         MetricType::Counter, s.protocol_errors},
        {"kvdepot_lm_request_timeouts_total",
         "lm:// connections closed because a request did not arrive whole within "
         "limits.request_timeout",
         MetricType::Counter, s.request_timeouts},
        {"kvdepot_lm_idle_timeouts_total",
         "lm:// connections closed after moving nothing for limits.idle_timeout",
         MetricType::Counter, s.idle_timeouts},
        {"kvdepot_lm_network_receive_bytes_total", "Bytes read from lm:// clients",
         MetricType::Counter, s.bytes_in},
        {"kvdepot_lm_network_transmit_bytes_total", "Bytes written to lm:// clients",
         MetricType::Counter, s.bytes_out},
    };
    AddRows(rows, out);
  }

  static void CollectCluster(const cluster::MembershipStats& s, std::vector<MetricFamily>& out) {
    const UnlabelledRow rows[] = {
        {"kvdepot_cluster_topology_revision",
         "etcd revision of the topology this node serves (docs/cluster.md)", MetricType::Gauge,
         static_cast<std::uint64_t>(s.topology_revision)},
        {"kvdepot_cluster_members_up", "Members in the topology this node serves",
         MetricType::Gauge, static_cast<std::uint64_t>(s.members_up)},
        {"kvdepot_cluster_etcd_up", "1 while etcd answers this node, 0 while it does not",
         MetricType::Gauge, s.etcd_up ? 1u : 0u},
        {"kvdepot_cluster_fenced",
         "1 while this node holds no lease etcd confirmed within the lease TTL (it acts as owner "
         "of nothing)",
         MetricType::Gauge, s.fenced ? 1u : 0u},
        {"kvdepot_cluster_membership_changes_total",
         "Topologies published after the first (joins, losses, restarts of members)",
         MetricType::Counter, static_cast<std::uint64_t>(s.membership_changes)},
        {"kvdepot_cluster_registrations_total",
         "Times this node registered with a fresh lease (1 at start, +1 per re-registration)",
         MetricType::Counter, static_cast<std::uint64_t>(s.registrations)},
        {"kvdepot_cluster_lease_expiries_total", "Times this node found its lease gone",
         MetricType::Counter, static_cast<std::uint64_t>(s.lease_expiries)},
        {"kvdepot_cluster_id_clashes_total",
         "Registrations refused because another live member holds this node's id",
         MetricType::Counter, static_cast<std::uint64_t>(s.id_clashes)},
        {"kvdepot_cluster_corrupt_records_total",
         "Member records skipped because they could not be read (counted at every poll)",
         MetricType::Counter, static_cast<std::uint64_t>(s.corrupt_records)},
        {"kvdepot_cluster_placement_mismatches_total",
         "Member records advertising other cluster.replicas/group_chunks than this node's "
         "(counted at every poll)",
         MetricType::Counter, static_cast<std::uint64_t>(s.placement_mismatches)},
    };
    AddRows(rows, out);
  }

  static void CollectClusterRouter(const ClusterRouterStats& s, std::vector<MetricFamily>& out) {
    auto forwarded = NewFamily("kvdepot_cluster_forwarded_total",
                               "Requests this node sent to another cluster member, by native op",
                               MetricType::Counter);
    auto errors = NewFamily("kvdepot_cluster_forward_errors_total",
                            "Of those, requests that failed (peer down, timeout, bad reply, error)",
                            MetricType::Counter);
    for (const protocol::Op op :
         {protocol::Op::kGet, protocol::Op::kPut, protocol::Op::kLookup, protocol::Op::kDelete}) {
      const std::string name(protocol::OpName(op));
      Add(forwarded, {{"op", name}},
          static_cast<double>(s.forwarded[static_cast<std::size_t>(op)]));
      Add(errors, {{"op", name}},
          static_cast<double>(s.forward_errors[static_cast<std::size_t>(op)]));
    }
    out.push_back(std::move(forwarded));
    out.push_back(std::move(errors));
    const UnlabelledRow rows[] = {
        {"kvdepot_cluster_handoff_hits_total",
         "Misses at a key's owners answered by a previous owner during a hand-off (and copied "
         "to the owners)",
         MetricType::Counter, s.handoff_hits},
        {"kvdepot_cluster_handoff_bytes_total", "Value bytes of those hand-off hits",
         MetricType::Counter, s.handoff_bytes},
        {"kvdepot_cluster_replica_writes_total",
         "PUTs an owner sent on to the key's other owners (cluster.replicas > 1)",
         MetricType::Counter, s.replica_writes},
    };
    AddRows(rows, out);
  }

  static void CollectEvents(const KvEventStats& s, std::vector<MetricFamily>& out) {
    const UnlabelledRow rows[] = {
        {"kvdepot_events_queued_total", "KV events accepted into the publisher's queue",
         MetricType::Counter, s.events_queued},
        {"kvdepot_events_dropped_total",
         "KV events dropped because the queue (events.queue_size) was full", MetricType::Counter,
         s.events_dropped},
        {"kvdepot_events_skipped_total",
         "KV events of keys that name no chunk (neither a chunk key nor an LMCache key)",
         MetricType::Counter, s.events_skipped},
        {"kvdepot_events_published_total", "KV events sent in a batch", MetricType::Counter,
         s.events_published},
        {"kvdepot_events_batches_total", "KV-event batches (ZeroMQ messages) published",
         MetricType::Counter, s.batches_published},
        {"kvdepot_events_send_errors_total", "KV-event batches ZeroMQ refused to send",
         MetricType::Counter, s.send_errors},
        {"kvdepot_events_replay_requests_total", "Replay requests served", MetricType::Counter,
         s.replay_requests},
        {"kvdepot_events_replayed_batches_total", "Batches sent again to replay requests",
         MetricType::Counter, s.replay_batches_sent},
        {"kvdepot_events_queue_depth", "KV events waiting for the publisher thread",
         MetricType::Gauge, s.queue_depth},
    };
    AddRows(rows, out);
  }

  static void CollectResp(const RespServerStats& s, std::vector<MetricFamily>& out) {
    const UnlabelledRow rows[] = {
        {"kvdepot_resp_commands_total", "resp:// (Redis protocol) commands executed",
         MetricType::Counter, s.commands},
        {"kvdepot_resp_command_errors_total", "resp:// commands answered with an error reply",
         MetricType::Counter, s.command_errors},
        {"kvdepot_resp_keys_read_total", "Keys read by resp:// GET, MGET, STRLEN and SET ... GET",
         MetricType::Counter, s.gets},
        {"kvdepot_resp_hits_total", "Keys read over resp:// that were found", MetricType::Counter,
         s.get_hits},
        {"kvdepot_resp_keys_written_total", "Keys written by resp:// SET and MSET",
         MetricType::Counter, s.sets},
        {"kvdepot_resp_values_oversized_total",
         "resp:// SET values over limits.max_value_bytes (refused, their bytes dropped)",
         MetricType::Counter, s.values_oversized},
        {"kvdepot_resp_auth_failures_total",
         "resp:// AUTH/HELLO with a wrong token, and commands refused before AUTH",
         MetricType::Counter, s.auth_failures},
        {"kvdepot_resp_connections_open", "resp:// connections open now", MetricType::Gauge,
         s.connections_open},
        {"kvdepot_resp_connections_accepted_total", "resp:// connections accepted",
         MetricType::Counter, s.connections_total},
        {"kvdepot_resp_protocol_errors_total",
         "resp:// connections closed for breaking the protocol", MetricType::Counter,
         s.protocol_errors},
        {"kvdepot_resp_request_timeouts_total",
         "resp:// connections closed because a request did not arrive whole within "
         "limits.request_timeout",
         MetricType::Counter, s.request_timeouts},
        {"kvdepot_resp_idle_timeouts_total",
         "resp:// connections closed after moving nothing for limits.idle_timeout",
         MetricType::Counter, s.idle_timeouts},
        {"kvdepot_resp_network_receive_bytes_total", "Bytes read from resp:// clients",
         MetricType::Counter, s.bytes_in},
        {"kvdepot_resp_network_transmit_bytes_total", "Bytes written to resp:// clients",
         MetricType::Counter, s.bytes_out},
    };
    AddRows(rows, out);
  }

  static void CollectSsd(const SsdTierStats& s, std::vector<MetricFamily>& out) {
    const UnlabelledRow rows[] = {
        {"kvdepot_ssd_reads_total", "Chunk reads from segment files (verified)",
         MetricType::Counter, s.reads},
        {"kvdepot_ssd_read_bytes_total", "Bytes read from segment files", MetricType::Counter,
         s.read_bytes},
        {"kvdepot_ssd_writes_total", "Chunk records written to segment files", MetricType::Counter,
         s.writes},
        {"kvdepot_ssd_write_bytes_total", "Bytes written to segment files", MetricType::Counter,
         s.write_bytes},
        {"kvdepot_ssd_read_errors_total", "Segment reads that failed (EIO, ...)",
         MetricType::Counter, s.read_errors},
        {"kvdepot_ssd_write_errors_total", "Chunk writes that failed (ENOSPC, EIO, ...)",
         MetricType::Counter, s.write_errors},
        {"kvdepot_ssd_checksum_failures_total",
         "Chunks whose stored copy failed verification (removed, served as misses)",
         MetricType::Counter, s.checksum_failures},
        {"kvdepot_ssd_demotions_refused_total",
         "Host-tier evictions refused for now because the SSD write buffer was full (the value "
         "stayed in memory)",
         MetricType::Counter, s.demotions_refused},
        {"kvdepot_ssd_demotions_dropped_total",
         "Host-tier evictions of values too large for a segment (never written)",
         MetricType::Counter, s.demotions_dropped},
        {"kvdepot_ssd_segments", "Segment files", MetricType::Gauge, s.segments},
        {"kvdepot_ssd_segments_evicted_total", "Segments dropped to stay within capacity",
         MetricType::Counter, s.segments_evicted},
        {"kvdepot_ssd_live_bytes", "Bytes of chunks the index points to", MetricType::Gauge,
         s.live_bytes},
        {"kvdepot_ssd_write_buffer_bytes", "Evicted values waiting for their SSD write",
         MetricType::Gauge, s.write_buffer_bytes},
        {"kvdepot_ssd_recovered_chunks", "Chunks found valid in the index at start",
         MetricType::Gauge, s.recovered_chunks},
    };
    AddRows(rows, out);
    auto path = NewFamily("kvdepot_ssd_io_info", "The SSD tier's I/O path (the value is always 1)",
                          MetricType::Gauge);
    Add(path, {{"path", s.io_path}, {"direct_io", s.direct_io ? "true" : "false"}}, 1);
    out.push_back(std::move(path));
  }

  void CollectTiers(std::vector<MetricFamily>& out) const {
    struct Column {
      const char* name;
      const char* help;
      MetricType type;
      std::uint64_t TierStats::*field;
    };
    static const Column kColumns[] = {
        {"kvdepot_tier_used_bytes", "Bytes charged to the tier (stored and in flight)",
         MetricType::Gauge, &TierStats::bytes},
        {"kvdepot_tier_capacity_bytes", "Byte capacity of the tier", MetricType::Gauge,
         &TierStats::capacity},
        {"kvdepot_tier_chunks", "Entries held by the tier", MetricType::Gauge, &TierStats::chunks},
        {"kvdepot_tier_hits_total", "Reads that found the key in the tier", MetricType::Counter,
         &TierStats::hits},
        {"kvdepot_tier_misses_total", "Reads that did not find the key in the tier",
         MetricType::Counter, &TierStats::misses},
        {"kvdepot_tier_evictions_total", "Entries dropped to make room", MetricType::Counter,
         &TierStats::evictions},
        {"kvdepot_tier_demotions_total", "Entries moved down to a lower tier", MetricType::Counter,
         &TierStats::demotions},
        {"kvdepot_tier_promotions_total", "Entries copied up into the tier from a lower one",
         MetricType::Counter, &TierStats::promotions},
        {"kvdepot_tier_inserts_total", "Entries written to the tier", MetricType::Counter,
         &TierStats::inserts},
        {"kvdepot_tier_rejections_total", "Writes refused for lack of room", MetricType::Counter,
         &TierStats::rejected},
    };
    std::vector<std::pair<std::string, TierStats>> stats;
    for (const auto& [name, source] : tiers_) stats.emplace_back(name, source());
    for (const Column& c : kColumns) {
      auto f = NewFamily(c.name, c.help, c.type);
      for (const auto& [name, st] : stats)
        Add(f, {{"tier", name}}, static_cast<double>(st.*c.field));
      out.push_back(std::move(f));
    }
    auto used = NewFamily("kvdepot_namespace_used_bytes",
                          "Bytes charged to a namespace that has a quota", MetricType::Gauge);
    auto quota =
        NewFamily("kvdepot_namespace_quota_bytes", "Byte quota of a namespace", MetricType::Gauge);
    for (const auto& [name, st] : stats) {
      for (const NamespaceUsage& ns : st.namespaces) {
        const std::string id = HexLower(ns.id);
        Add(used, {{"namespace", id}, {"tier", name}}, static_cast<double>(ns.bytes));
        Add(quota, {{"namespace", id}, {"tier", name}}, static_cast<double>(ns.quota));
      }
    }
    out.push_back(std::move(used));
    out.push_back(std::move(quota));
  }

  const std::shared_ptr<const RequestCounters> requests_;
  const std::string version_;
  const double start_time_;
  mutable std::mutex mu_;  // guards the source lists; a scrape holds it while it reads them
  std::vector<std::pair<std::string, std::function<TierStats()>>> tiers_;
  std::function<ServerStats()> server_;
  std::function<SsdTierStats()> ssd_;
  std::function<LmServerStats()> lm_;
  std::function<RespServerStats()> resp_;
  std::function<KvEventStats()> events_;
  std::function<cluster::MembershipStats()> cluster_;
  std::function<ClusterRouterStats()> cluster_router_;
};

Metrics::Metrics(std::string version)
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(std::make_shared<RequestCounters>()),
      collector_(std::make_shared<ScrapeCollector>(std::move(version), requests_)) {
  codec_seconds_ = &prometheus::BuildHistogram()
                        .Name("kvdepot_codec_duration_seconds")
                        .Help("Time of one codec call, by operation, codec and device")
                        .Register(*registry_);
  codec_raw_bytes_ = &prometheus::BuildCounter()
                          .Name("kvdepot_codec_raw_bytes_total")
                          .Help("Uncompressed KV bytes encoded or decoded")
                          .Register(*registry_);
  codec_encoded_bytes_ = &prometheus::BuildCounter()
                              .Name("kvdepot_codec_encoded_bytes_total")
                              .Help("Container bytes produced by encoding or read by decoding")
                              .Register(*registry_);
  reloads_ = &prometheus::BuildCounter()
                  .Name("kvdepot_config_reloads_total")
                  .Help("Configuration reloads (SIGHUP), by result")
                  .Register(*registry_);
  // Every series below exists from the start, at zero (docs/metrics.md).
  reloads_->Add({{"result", "ok"}});
  reloads_->Add({{"result", "error"}});
  for (const CodecId codec : {CodecId::kRaw, CodecId::kCacheGen, CodecId::kHackInt2}) {
    for (const char* op : {"encode", "decode"}) {
      const std::map<std::string, std::string> labels = {
          {"op", op}, {"codec", std::string(CodecName(codec))}, {"device", "cpu"}};
      codec_seconds_->Add(labels, kCodecBuckets);
      codec_raw_bytes_->Add(labels);
      codec_encoded_bytes_->Add(labels);
    }
  }
}

Metrics::~Metrics() = default;

void Metrics::AddTier(std::string name, std::function<TierStats()> source) {
  collector_->AddTier(std::move(name), std::move(source));
}

void Metrics::SetClusterRouterSource(std::function<ClusterRouterStats()> source) {
  collector_->SetClusterRouter(std::move(source));
}

void Metrics::SetServerSource(std::function<ServerStats()> source) {
  collector_->SetServer(std::move(source));
}

void Metrics::SetSsdSource(std::function<SsdTierStats()> source) {
  collector_->SetSsd(std::move(source));
}

void Metrics::SetLmSource(std::function<LmServerStats()> source) {
  collector_->SetLm(std::move(source));
}

void Metrics::SetRespSource(std::function<RespServerStats()> source) {
  collector_->SetResp(std::move(source));
}

void Metrics::SetEventsSource(std::function<KvEventStats()> source) {
  collector_->SetEvents(std::move(source));
}

void Metrics::SetClusterSource(std::function<cluster::MembershipStats()> source) {
  collector_->SetCluster(std::move(source));
}

void Metrics::OnRequest(protocol::Op op, StatusCode status,
                        std::chrono::steady_clock::duration latency) {
  const auto o = static_cast<std::size_t>(op);
  const auto s = static_cast<std::size_t>(status);
  if (o == 0 || o >= kOps || s >= kStatuses) return;  // not a protocol v1 operation or code
  const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(
      0, std::chrono::duration_cast<std::chrono::nanoseconds>(latency).count()));
  RequestCounters::PerOp& c = requests_->ops[o];
  c.by_status[s].fetch_add(1, std::memory_order_relaxed);
  c.latency[BucketOf(kLatencyBoundsNs, ns)].fetch_add(1, std::memory_order_relaxed);
  c.latency_sum_ns.fetch_add(ns, std::memory_order_relaxed);
}

void Metrics::OnLookup(std::uint32_t prefix_length, std::uint32_t keys) {
  requests_->prefix[BucketOf(kPrefixBounds, prefix_length)].fetch_add(1, std::memory_order_relaxed);
  requests_->prefix_sum.fetch_add(prefix_length, std::memory_order_relaxed);
  requests_->lookup_keys.fetch_add(keys, std::memory_order_relaxed);
}

void Metrics::ObserveCodec(CodecOp op, std::string_view codec, std::string_view device,
                           double seconds, std::uint64_t raw_bytes, std::uint64_t encoded_bytes) {
  const std::map<std::string, std::string> labels = {
      {"op", op == CodecOp::kEncode ? "encode" : "decode"},
      {"codec", std::string(codec)},
      {"device", std::string(device)}};
  std::lock_guard lock(mu_);
  codec_seconds_->Add(labels, kCodecBuckets).Observe(seconds);
  codec_raw_bytes_->Add(labels).Increment(static_cast<double>(raw_bytes));
  codec_encoded_bytes_->Add(labels).Increment(static_cast<double>(encoded_bytes));
}

void Metrics::OnReload(bool ok) {
  reloads_->Add({{"result", ok ? "ok" : "error"}}).Increment();
}

std::vector<std::weak_ptr<prometheus::Collectable>> Metrics::Collectables() const {
  return {registry_, collector_};
}

std::string Metrics::Text() const {
  std::vector<MetricFamily> families = registry_->Collect();
  for (auto& f : collector_->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace kvdepot::daemon
