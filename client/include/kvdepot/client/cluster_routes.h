// Smart-client routing (docs/cluster.md, "Smart clients"): the cluster's topology as a client
// learns it from CLUSTER_INFO (docs/protocol.md, op 14), the owners of a key computed with the
// same placement code as the daemons (cluster/include/kvdepot/cluster/topology.h), and one pool of
// connections per member.
//
// A ClusterRoutes never fails a request by itself: when it knows no cluster (the daemon is not
// clustered, is too old to know CLUSTER_INFO, or no member answered yet) View() is nullptr and the
// caller sends everything to the configured address, as a plain client does. Targets() always
// ends with the configured address, a member that forwards what it does not own.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/client/client.h"
#include "kvdepot/cluster/topology.h"

namespace kvdepot::client {

class ClusterRoutes {
 public:
  // `options.address` is the seed: the first daemon asked for CLUSTER_INFO and the last fallback
  // of every request. Connections to members use `options` with the member's address (with TLS,
  // the same CA, client certificate and key; see OptionsFor).
  explicit ClusterRoutes(ClientOptions options);
  ~ClusterRoutes();
  ClusterRoutes(const ClusterRoutes&) = delete;
  ClusterRoutes& operator=(const ClusterRoutes&) = delete;

  // The view to route by, fetched first when due: never fetched, older than
  // options.cluster_refresh, or marked stale (at most once per kMinRefreshGap). nullptr: send
  // everything to the configured address. While one thread refreshes, the others keep using the
  // previous view (only the first fetch is waited for).
  std::shared_ptr<const cluster::Topology> View();

  // The addresses to try for a key, in order: its owners by `placement_key` (empty: the key's own
  // PlacementKey), best first; then up to two other members (which forward); then the configured
  // address. Members that failed within the last kDownBackoff are moved to the end.
  std::vector<std::string> Targets(const cluster::Topology& view, std::string_view key,
                                   std::string_view placement_key = {}) const;

  // A connection to `address` failed or answered `unavailable` (e.g. a fenced member): the
  // address is avoided for kDownBackoff and the view is refreshed at the next View().
  void ReportFailure(const std::string& address);
  // The next View() refreshes (subject to kMinRefreshGap).
  void MarkStale();

  // A pooled connection to `address` (`reused`: it was idle in the pool, so it may have been
  // closed by the server meanwhile), or a new one (always with `fresh`). Give it back with
  // Release.
  Result<std::unique_ptr<Connection>> Acquire(const std::string& address, bool* reused,
                                              bool fresh = false);
  // Keeps `connection` for reuse (up to options.pool_size per address) unless it is broken.
  void Release(const std::string& address, std::unique_ptr<Connection> connection);

  // How many CLUSTER_INFO answers were taken (tests and diagnostics).
  std::uint64_t refreshes() const;

  static constexpr std::chrono::milliseconds kMinRefreshGap{100};
  static constexpr std::chrono::milliseconds kDownBackoff{1000};
  // The I/O timeout of a CLUSTER_INFO request (at most ClientOptions::timeout).
  static constexpr std::chrono::milliseconds kInfoTimeout{2000};

 private:
  using Clock = std::chrono::steady_clock;
  // Asks the seed, then the known members, for CLUSTER_INFO (each on a new connection with
  // kInfoTimeout); installs the first answer.
  void Refresh();
  // The address requests for member `m` go to: the configured address for the member that
  // answered as the seed (so that a unix: seed keeps its transport), else its native address.
  std::string AddressOf(const cluster::Member& m) const;
  // The options of a connection to `address`: options_ (TLS, token, timeouts alike) with that
  // address. tls_server_name is kept for the seed only: another member's certificate is checked
  // against the host of its advertised address, as the members check each other's.
  ClientOptions OptionsFor(const std::string& address) const;

  const ClientOptions options_;
  std::mutex refresh_mu_;  // one refresh at a time
  mutable std::mutex mu_;  // guards everything below
  std::shared_ptr<const cluster::Topology> view_;
  std::string seed_self_;  // the seed's member id, when the view came from the seed
  bool fetched_ = false;
  bool stale_ = false;
  Clock::time_point fetched_at_{};
  std::uint64_t refreshes_ = 0;
  std::map<std::string, Clock::time_point> down_until_;
  std::map<std::string, std::vector<std::unique_ptr<Connection>>> idle_;
};

}  // namespace kvdepot::client
