// kvdepotd's resp:// listener: the Redis protocol (RESP2 and RESP3, docs/resp.md), so that
// redis-cli, redis-benchmark, redis-py and LMCache's Redis-speaking connectors (legacy
// `redis://`, MP mode's `resp` and `valkey` L2 adapters) store values in kvdepot unchanged.
//
// Values go through the Store like native PUTs (same tiers, eviction, capacity and counters),
// under the RESP key's raw bytes: the keyspace is the native protocol's default namespace, shared
// with it (a key SET here is a native GET away, and the reverse). A SET's value is read from the
// socket straight into the stored buffer (Store::Allocate, then Put); a GET's reply is written
// from the stored buffer (gather writes). kvdepot has no key expiry: SET's EX/PX/EXAT/PXAT/KEEPTTL
// are refused with an error saying so.
//
// Per connection, requests are executed one at a time in the order read and their replies are
// written in that order (pipelining: replies are batched until the input runs dry). A client that
// breaks the protocol gets one "-ERR Protocol error: ..." line and its connection closed; other
// connections are not affected. No client can stop or crash the daemon.
//
// Security: with `auth` set, nothing but AUTH, HELLO (with AUTH) and QUIT runs before a successful
// AUTH with one of kvdepot's tokens (docs/security.md); a token reaches only the keys its scope
// allows (AuthScope::AllowsKey).
//
// Thread-safety: Start/Stop from one controlling thread; stats() and SetTimeouts from any thread.
// Handlers never block (store calls that complete on another thread are posted back).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/auth.h"
#include "kvdepot/daemon/store.h"

namespace kvdepot::daemon {

struct RespServerOptions {
  std::string listen;  // HOST:PORT; empty = off; port 0 = ephemeral
  std::uint32_t io_threads = 2;
  // The native listener's limits (limits.max_value_bytes, limits.max_key_bytes): a SET value over
  // max_value_bytes is answered with an error and its bytes are read and dropped, unbuffered.
  std::uint64_t max_value_bytes = 64ull << 20;
  std::uint32_t max_key_bytes = 1024;
  std::shared_ptr<const Authenticator> auth;  // null: no authentication (every key reachable)
  std::chrono::milliseconds drain_timeout{10000};
  // A request not fully received this long after its first byte closes the connection; 0 = off.
  std::chrono::milliseconds request_timeout{30000};
  // A connection moving no byte either way this long, outside a store operation, is closed.
  std::chrono::milliseconds idle_timeout{600000};
  std::string version = "0.1.0";  // kvdepotd's, shown by INFO and HELLO
};

struct RespServerStats {
  std::uint64_t connections_open = 0;
  std::uint64_t connections_total = 0;
  std::uint64_t commands = 0;        // requests executed (errors included)
  std::uint64_t command_errors = 0;  // requests answered with an error reply
  std::uint64_t gets = 0;            // keys read by GET, MGET and SET ... GET
  std::uint64_t get_hits = 0;
  std::uint64_t sets = 0;              // keys written by SET and MSET
  std::uint64_t values_oversized = 0;  // SET values over max_value_bytes (read and dropped)
  std::uint64_t auth_failures = 0;     // AUTH / HELLO AUTH with a wrong token, commands before AUTH
  std::uint64_t protocol_errors = 0;   // connections closed for breaking the protocol
  std::uint64_t request_timeouts = 0;
  std::uint64_t idle_timeouts = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
};

class RespServer {
 public:
  // `store` must outlive the server.
  RespServer(const RespServerOptions& options, Store& store);
  ~RespServer();
  RespServer(const RespServer&) = delete;
  RespServer& operator=(const RespServer&) = delete;

  // Binds options.listen and starts the I/O threads. InvalidArgument for a bad address,
  // Unavailable when it cannot be bound.
  Status Start();
  // The bound port (useful with port 0); 0 before Start.
  std::uint16_t port() const;
  // Stops accepting, lets each connection finish the requests it has read (up to drain_timeout),
  // closes every connection and joins the I/O threads. Idempotent; a no-op before Start.
  void Stop();

  RespServerStats stats() const;

  // Replaces request_timeout and idle_timeout (0 = off) for new and open connections alike
  // (within a watchdog tick). Any thread, any time (SIGHUP reload).
  void SetTimeouts(std::chrono::milliseconds request_timeout,
                   std::chrono::milliseconds idle_timeout);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvdepot::daemon
