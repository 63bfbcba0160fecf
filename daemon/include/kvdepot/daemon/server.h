// kvdepotd's network server: protocol v1 (docs/protocol.md) over TCP and a Unix domain socket,
// on a Boost.Asio io_context run by a configurable number of I/O threads.
//
// Per connection: requests are read one frame at a time and answered as they complete (pipelined;
// a GET streams one response frame per key, in the order asked). Responses are written with
// scatter/gather straight from stored values (no copy); a value is kept alive by the write that
// sends it. When a connection's queued output exceeds `max_output_bytes`, the server stops reading
// its requests until the client has read enough (backpressure: a slow reader cannot grow the
// daemon's memory). A malformed frame gets one error frame and closes that connection only.
// Time is bounded too: a request must arrive whole within `request_timeout` of its first byte,
// and a connection that moves nothing for `idle_timeout` is closed (both without an error frame).
//
// Responses to one connection go out in the order its requests were read; a response that waits
// for the SSD tier holds back the ones after it (a GET's frames must stay in key order anyway).
//
// Security (docs/security.md): with `auth` set, the first request on every connection must be an
// AUTH with a listed token; anything else, or a wrong token, is answered `unauthenticated` and the
// connection closes. An authenticated connection reaches only its token's namespaces: a request
// naming another namespace's key is answered `permission_denied` before the store is touched, a
// SCAN lists only allowed namespaces' keys and STATS lists only their quotas. With `tls.cert_file`
// set the TCP listener speaks TLS (optionally requiring client certificates); the Unix socket
// stays plain (its file permissions guard it).
//
// Same-host zero-copy (docs/gpu-tier.md): MAP hands a Unix-socket client the host arena's fd
// (SCM_RIGHTS) and the GPU pool's IPC handle; LEASE_GET answers (offset, length, lease id) and
// the connection keeps a reference to each leased value until RELEASE or until it closes, so a
// crashed client leaks nothing and no leased byte is freed or reused. A key only on the SSD tier
// is read into the host arena first (asynchronously, paced like a GET's keys) and leased there.
// GET_AS transcodes on a worker pool.
//
// Thread-safety: Start/Stop/Wait from one controlling thread; the handlers run on the I/O threads
// and never block on I/O (disk reads and writes go through the store's asynchronous calls).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/auth.h"
#include "kvdepot/daemon/request_observer.h"
#include "kvdepot/daemon/store.h"
#include "kvdepot/daemon/transcoder.h"
#include "kvdepot/protocol/protocol.h"

namespace kvdepot::daemon {

// TLS for the TCP listener (PEM files). cert_file empty: plain TCP.
struct TlsOptions {
  std::string cert_file;       // the server's certificate chain
  std::string key_file;        // its private key
  std::string client_ca_file;  // non-empty: clients must present a certificate signed by this CA
  bool enabled() const { return !cert_file.empty(); }
};

struct ServerOptions {
  std::string listen = "127.0.0.1:7600";  // HOST:PORT; empty = no TCP listener; port 0 = ephemeral
  std::string unix_path;                  // empty = no Unix socket
  // The socket file's permission bits (connecting needs write permission) and group (empty: the
  // process's own); docs/operations.md shows how to let an engine's user in.
  std::uint32_t unix_mode = 0660;
  std::string unix_group;
  std::uint32_t io_threads = 2;
  protocol::Limits limits;
  std::uint64_t max_output_bytes = 64ull << 20;  // per connection, before reading pauses
  // Stop(): how long connections may take to finish before they are closed regardless.
  std::chrono::milliseconds drain_timeout{10000};
  std::shared_ptr<const Authenticator> auth;  // null: no authentication (every key reachable)
  TlsOptions tls;
  // GET_AS: worker threads that transcode (never the I/O threads).
  std::uint32_t transcode_threads = 2;
  // LEASE_GET: bytes one connection may hold leased at once; a lease over it answers
  // resource_exhausted (a client must not pin the whole tier).
  std::uint64_t max_lease_bytes = 256ull << 20;
  // A request whose header and body have not all arrived this long after its first byte closes
  // its connection (slow or stalled senders). 0 = no limit.
  std::chrono::milliseconds request_timeout{30000};
  // A connection that moves no byte in either direction for this long, with no store operation
  // pending, is closed: an idle client, or one that stopped reading its responses. 0 = no limit.
  std::chrono::milliseconds idle_timeout{600000};
};

struct ServerStats {
  std::uint64_t connections_open = 0;
  std::uint64_t connections_total = 0;
  std::uint64_t requests = 0;
  std::uint64_t protocol_errors = 0;  // malformed frames (connection closed)
  std::uint64_t auth_failures = 0;    // connections refused: no AUTH first, or a wrong token
  std::uint64_t tls_handshake_failures = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t request_timeouts = 0;  // connections closed by request_timeout
  std::uint64_t idle_timeouts = 0;     // connections closed by idle_timeout
};

class Server {
 public:
  // `store` must outlive the server, and so must `observer` (optional; see request_observer.h).
  // `hooks` sets GET_AS's GPU path and its metrics (see transcoder.h).
  Server(const ServerOptions& options, Store& store, RequestObserver* observer = nullptr,
         TranscoderHooks hooks = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listeners and starts the I/O threads. Errors name the address (e.g. in use) or the
  // TLS file that cannot be loaded.
  Status Start();
  // The bound TCP port (useful with port 0), or 0 without a TCP listener.
  std::uint16_t tcp_port() const;
  // Stops accepting, lets every request already read finish and its responses be written, then
  // closes all connections. Returns once the I/O threads have exited. Idempotent.
  void Stop();

  ServerStats stats() const;

  // Replaces request_timeout and idle_timeout (0 = off) for new and open connections alike; an
  // open connection picks them up at its watchdog's next tick (within 1 s). Any thread, any time
  // (SIGHUP reload).
  void SetTimeouts(std::chrono::milliseconds request_timeout,
                   std::chrono::milliseconds idle_timeout);

  // Adds an object to the STATS document under `name` (e.g. "lm", "resp": the other listeners'
  // counters, so that one STATS shows the whole daemon). `object_json` returns a JSON object's
  // text and runs on an I/O thread at every STATS; it must not block. Any thread, any time; the
  // source must stay valid until Stop() returns.
  void AddStatsSection(std::string name, std::function<std::string()> object_json);

  // Liveness probe for the service watchdog: posts a no-op to every I/O thread's queue and runs
  // `done` (on an I/O thread) once all of them have run it, i.e. once every event loop has gone
  // round. `done` never runs when a loop is stuck or the server is stopped. Call after Start().
  void Probe(std::function<void()> done);

  class Impl;  // defined in server.cc

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvdepot::daemon
