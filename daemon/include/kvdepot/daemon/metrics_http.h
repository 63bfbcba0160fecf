// kvdepotd's HTTP endpoint for operators: GET /metrics (Prometheus text format, from a Metrics
// object) and GET /healthz on one address (config key metrics.listen).
//
// /healthz answers 200 "ok" while the daemon is serving, 503 "starting" before and 503
// "draining" once a stop has begun (a second line may add detail: SetHealthDetail), so a load
// balancer or orchestrator stops sending work before connections close. It is served by
// prometheus-cpp's Exposer (CivetWeb) itself: the Exposer takes CivetWeb callbacks, and a
// begin_request callback answers /healthz before CivetWeb looks for a handler (docs/metrics.md).
// Everything else is left to the Exposer.
//
// Thread-safety: SetHealth may be called from any thread; requests are served on CivetWeb's own
// threads (2), never on the protocol server's I/O threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/metrics.h"

namespace kvdepot::daemon {

enum class Health { kStarting, kServing, kDraining };

class MetricsHttp {
 public:
  // Starts serving on `listen` (HOST:PORT, port 0 = ephemeral; IPv6 as [::1]:PORT). `metrics`
  // must outlive the returned object. kUnavailable when the address cannot be bound, its message
  // the cause alone (e.g. "address already in use (another process listens there)"): the caller
  // names the setting and the address. CivetWeb's own messages go to the log at
  // debug level.
  static Result<std::unique_ptr<MetricsHttp>> Start(const std::string& listen,
                                                    const Metrics& metrics);
  // Stops serving; returns once in-flight requests have finished.
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  std::uint16_t port() const { return port_; }
  void SetHealth(Health health);
  // A line appended to /healthz's body (its status code stays the one SetHealth decides), e.g.
  // the cluster's "cluster: etcd unreachable since ..., serving topology revision R"; called at
  // every /healthz request on CivetWeb's threads, so it must be cheap and thread-safe. Empty
  // text adds nothing.
  void SetHealthDetail(std::function<std::string()> detail);

  struct State;  // shared with the CivetWeb callback

 private:
  MetricsHttp() = default;
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::uint16_t port_ = 0;
};

}  // namespace kvdepot::daemon
