// kvdepotd's Prometheus metrics (docs/metrics.md lists every one, with PromQL examples).
//
// Two kinds of sources:
//  - per-request counters and histograms, fed by the server through the RequestObserver hooks.
//    The only work on the I/O threads is three relaxed atomic additions into fixed arrays (no
//    lock, no allocation, no label lookup; prometheus-cpp's Histogram takes a mutex per
//    observation, which cost 15-20% of 4 KiB GET throughput on the 2-core dev VM); the arrays
//    are turned into metric families at scrape time;
//  - gauges and counters the components already keep (ServerStats, LmServerStats, each tier's
//    stats), read at scrape time through the sources registered here, so nothing is counted
//    twice.
//
// Tiers report through one generic TierStats; each tier registers a source under its label
// (tier="host" today; the SSD and GPU tiers add "ssd" and "gpu" the same way).
//
// Thread-safety: every method may be called from any thread. Sources run on the HTTP server's
// threads during a scrape: they must be thread-safe and must outlive the Metrics object's last
// Collect (i.e. stop the MetricsHttp before destroying what the sources read).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/daemon/cluster_router.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/kv_events.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/request_observer.h"
#include "kvdepot/daemon/resp_server.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/ssd_tier.h"

namespace prometheus {
class Collectable;
class Counter;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace kvdepot::cluster {
struct MembershipStats;  // kvdepot/cluster/etcd_membership.h
}  // namespace kvdepot::cluster

namespace kvdepot::daemon {

enum class CodecOp { kEncode, kDecode };

class Metrics final : public RequestObserver {
 public:
  explicit Metrics(std::string version);
  ~Metrics() override;
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Registers a tier's stats under label tier=`name` ("host", "ssd", "gpu"); read at every scrape.
  void AddTier(std::string name, std::function<TierStats()> source);
  // The server's connection, byte and refusal counters; read at every scrape.
  void SetServerSource(std::function<ServerStats()> source);
  // The lm:// listener's counters (kvdepot_lm_*: requests by command, hits, dropped PUTs,
  // connections, timeouts, bytes); read at every scrape. Without it the kvdepot_lm_* families
  // are absent (no lm:// listener).
  void SetLmSource(std::function<LmServerStats()> source);
  // The resp:// listener's counters (kvdepot_resp_*: commands, errors, keys read and written,
  // hits, refusals, connections, timeouts, bytes); read at every scrape. Without it the
  // kvdepot_resp_* families are absent (no resp:// listener).
  void SetRespSource(std::function<RespServerStats()> source);
  // The KV-event publisher's counters (kvdepot_events_*: queued, dropped, published, batches,
  // replays, queue depth); read at every scrape. Without it the families are absent (events off).
  void SetEventsSource(std::function<KvEventStats()> source);
  // The SSD tier's own counters (kvdepot_ssd_*: I/O, errors, checksum failures, the I/O path);
  // read at every scrape. Its generic tier series come through AddTier("ssd", ...).
  void SetSsdSource(std::function<SsdTierStats()> source);
  // The cluster membership's state (kvdepot_cluster_*: topology revision, members up, etcd up,
  // fenced, membership changes, ...); read at every scrape. Without it the families are absent
  // (no cluster.etcd).
  void SetClusterSource(std::function<cluster::MembershipStats()> source);
  // The cluster router's counters (kvdepot_cluster_forwarded_total{op}, ..._forward_errors_total
  // {op}, ..._handoff_hits_total, ..._handoff_bytes_total, ..._replica_writes_total); read at
  // every scrape. Without it the families are absent (not in a cluster).
  void SetClusterRouterSource(std::function<ClusterRouterStats()> source);

  // RequestObserver: kvdepot_requests_total, kvdepot_request_duration_seconds,
  // kvdepot_lookup_prefix_chunks, kvdepot_lookup_keys_total.
  void OnRequest(protocol::Op op, StatusCode status,
                 std::chrono::steady_clock::duration latency) override;
  void OnLookup(std::uint32_t prefix_length, std::uint32_t keys) override;

  // One codec call: `raw_bytes` of uncompressed KV in (encode) or out (decode), `encoded_bytes`
  // of container. Fed by whichever component transcodes; the daemon itself does not encode or
  // decode today, so these series appear only once something calls this.
  void ObserveCodec(CodecOp op, std::string_view codec, std::string_view device, double seconds,
                    std::uint64_t raw_bytes, std::uint64_t encoded_bytes);

  // A SIGHUP reload finished (kvdepot_config_reloads_total{result}).
  void OnReload(bool ok);

  // What a /metrics endpoint serves (the registry and the scrape-time collector).
  std::vector<std::weak_ptr<prometheus::Collectable>> Collectables() const;
  // The text exposition format of everything above (for tests and debugging).
  std::string Text() const;

 private:
  class ScrapeCollector;
  struct RequestCounters;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<RequestCounters> requests_;
  std::shared_ptr<ScrapeCollector> collector_;
  prometheus::Family<prometheus::Histogram>* codec_seconds_;
  prometheus::Family<prometheus::Counter>* codec_raw_bytes_;
  prometheus::Family<prometheus::Counter>* codec_encoded_bytes_;
  prometheus::Family<prometheus::Counter>* reloads_;
  std::mutex mu_;  // codec label pairs
};

}  // namespace kvdepot::daemon
