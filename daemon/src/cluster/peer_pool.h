// Connections from this daemon to the other members of its cluster (docs/cluster.md, "Requests").
//
// One dedicated thread runs an io_context with asynchronous sockets to the peers: a request path
// (an I/O thread of a front end, an SSD thread) only posts a call and gets its answer through a
// callback, on the pool's thread; nothing ever blocks waiting for a peer. Per peer (a native
// "host:port"): at most `connections_per_peer` connections, each carrying one call at a time;
// further calls queue, up to `max_queued_per_peer` (then fail with resource_exhausted at once).
// Every call has a deadline (`timeout`): past it its connection is closed and the call fails with
// unavailable. A peer that refused a connection is skipped (unavailable at once) until a backoff
// doubling from `backoff_min` to `backoff_max` has passed.
//
// With `tls`, a new connection does a TLS handshake first (its certificate must name the host of
// the peer's address: IP subjectAltName for an IP, DNS name otherwise; the context presents this
// node's certificate to listeners that require one); the connect, the handshake and the AUTH
// share the call's deadline. A failed connect or handshake is logged (one line per peer per
// 10 s) with the peer and the reason, e.g. the certificate that did not verify.
//
// Every request carries protocol::kFlagFromPeer, so the peer answers it from its own tiers. With
// a token, a new connection sends AUTH first (inside the TLS session when there is one).
//
// Thread-safety: Call may be called from any thread; callbacks run on the pool's thread and must
// not block.
#pragma once

#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/protocol/protocol.h"

namespace kvdepot::daemon::cluster_peer {

struct PeerPoolOptions {
  std::string token;  // AUTH token for peers; "" when the cluster runs without auth
  std::chrono::milliseconds timeout{2000};
  std::uint32_t connections_per_peer = 4;
  std::uint32_t max_queued_per_peer = 1024;
  std::chrono::milliseconds backoff_min{50};
  std::chrono::milliseconds backoff_max{2000};
  protocol::Limits limits;  // bounds on what a peer's response may claim
  // Non-null: connections speak TLS with this client context (net/tls_context.h).
  std::shared_ptr<boost::asio::ssl::context> tls;
  std::string tls_trust;  // what verifies peers, for errors (e.g. "cluster.tls_ca_file /ca.pem")
};

// One request to a peer. The request body is `body` followed by `value`'s bytes when set (a PUT
// sends the stored buffer without copying it).
struct PeerRequest {
  protocol::Op op = protocol::Op::kPing;
  std::vector<std::byte> body;
  ValueRef value;
  // For a one-key GET: where an ok answer's value goes (the transient buffer on this node).
  std::function<Result<std::shared_ptr<Value>>(std::size_t)> allocate;
};

// The peer's answer: its status and body (an error message when not ok); for a GET with
// `allocate`, the value and its tier instead of the body.
struct PeerResponse {
  StatusCode status = StatusCode::kOk;
  std::vector<std::byte> body;
  ValueRef value;
  protocol::Tier tier = protocol::Tier::kNone;
};

using PeerCallback = std::function<void(Result<PeerResponse>)>;

class PeerPool {
 public:
  explicit PeerPool(PeerPoolOptions options);
  // Shutdown().
  ~PeerPool();
  // Fails every queued and running call (unavailable) and joins the thread; idempotent. Calls
  // made meanwhile (by callbacks) or afterwards are answered unavailable too.
  void Shutdown();
  PeerPool(const PeerPool&) = delete;
  PeerPool& operator=(const PeerPool&) = delete;

  // Sends `request` to the peer at `address` ("host:port"); `done` runs exactly once. A transport
  // failure, timeout, malformed reply or a stopped pool is unavailable (or resource_exhausted for
  // a full queue); a well-formed error reply is a PeerResponse with its status.
  void Call(const std::string& address, PeerRequest request, PeerCallback done);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvdepot::daemon::cluster_peer
