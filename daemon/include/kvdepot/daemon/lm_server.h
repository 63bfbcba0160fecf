// kvdepotd's lm:// listener: the wire protocol of LMCache's remote server (`lmcache.v1.server`,
// docs/lmcache.md), so that an LMCache engine configured with `remote_url: lm://HOST:PORT` stores
// its chunks in kvdepot unchanged.
//
// Chunks go through the Store like native PUTs (same tiers, eviction, capacity and counters),
// under the key `lm::NamespaceId(options.namespace_name) ‖ LMCache key`, with LMCache's metadata in
// a 32-byte header in front of the payload (kvdepot/lm_value.h).
//
// Unlike LMCache's own server: many clients are served concurrently on Asio I/O threads; the host
// tier's capacity holds (a PUT that cannot be stored is read and dropped, and the connection keeps
// working — the protocol has no reply to PUT, so a payload over max_value_bytes is read and dropped
// too); a client that breaks the protocol (unknown command, negative length) gets one header with
// code 400 and its connection closed; a client that disconnects mid-message is closed. No client
// can stop or crash the daemon. Both of LMCache's wire layouts are served (LmWireMode).
//
// Per connection, requests are handled one at a time in the order read (LMCache's client waits
// for each reply anyway); a GET's value is written straight from the stored buffer.
//
// Thread-safety: Start/Stop from one controlling thread; stats() from any thread. Handlers never
// block (store calls that complete on another thread are posted back to the connection's thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/store.h"

namespace kvdepot::daemon {

// Which of LMCache's two wire layouts (kvdepot/lm_wire.h) the listener speaks. kAuto tells them
// apart by each connection's first request (lm::DetectWire); kCurrent / kLegacy accept only that
// layout and refuse a client of the other at its first request (a 400 in its own layout, the
// connection closed, a warning logged) instead of letting it hang.
enum class LmWireMode { kAuto, kCurrent, kLegacy };
Result<LmWireMode> ParseLmWireMode(std::string_view name);  // "auto", "current", "legacy"
std::string_view LmWireModeName(LmWireMode mode);

struct LmServerOptions {
  std::string listen;                      // HOST:PORT; empty = off; port 0 = ephemeral
  std::string namespace_name = "lmcache";  // selects the 16-byte key prefix (lm_value.h)
  // As many as the native listener: 8 clients on one thread halve PUT throughput.
  std::uint32_t io_threads = 2;
  // A PUT payload over this is read and dropped (counted in puts_dropped and puts_oversized);
  // the connection keeps working. 128 MiB holds a 405B-class chunk (Llama-3.1-405B: 126 MiB of
  // fp16 KV per 256 tokens). At most 2^31 - 1 (LMCache's length field is an int32).
  std::uint64_t max_value_bytes = 128ull << 20;
  LmWireMode wire = LmWireMode::kAuto;
  std::uint32_t max_list_keys = 65536;  // LIST answers at most this many keys
  std::chrono::milliseconds drain_timeout{10000};
  // A request (header and PUT payload) not fully received this long after its first byte closes
  // the connection. 0 = no limit.
  std::chrono::milliseconds request_timeout{30000};
  // A connection that moves no byte either way for this long, outside a store operation, is
  // closed (idle, or not reading its reply). 0 = no limit.
  std::chrono::milliseconds idle_timeout{600000};
};

struct LmServerStats {
  std::uint64_t connections_open = 0;
  std::uint64_t connections_total = 0;
  std::uint64_t puts = 0;            // PUT headers read
  std::uint64_t puts_dropped = 0;    // PUT payloads read but not stored (no room, empty key, ...)
  std::uint64_t puts_oversized = 0;  // of those, payloads over max_value_bytes
  std::uint64_t legacy_connections = 0;  // connections that spoke the legacy layout
  std::uint64_t wire_refused = 0;        // connections refused for the layout lm.wire excludes
  std::uint64_t gets = 0;
  std::uint64_t get_hits = 0;
  std::uint64_t exists = 0;
  std::uint64_t exist_hits = 0;
  std::uint64_t lists = 0;
  std::uint64_t health = 0;
  std::uint64_t protocol_errors = 0;   // connections closed for breaking the protocol
  std::uint64_t request_timeouts = 0;  // connections closed by request_timeout
  std::uint64_t idle_timeouts = 0;     // connections closed by idle_timeout
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
};

class LmServer {
 public:
  // `store` must outlive the server.
  LmServer(const LmServerOptions& options, Store& store);
  ~LmServer();
  LmServer(const LmServer&) = delete;
  LmServer& operator=(const LmServer&) = delete;

  // Binds options.listen and starts the I/O threads. InvalidArgument for a bad address or
  // namespace name, Unavailable when the address cannot be bound.
  Status Start();
  // The bound port (useful with port 0); 0 before Start.
  std::uint16_t port() const;
  // Stops accepting, lets each connection finish the request it is in (up to drain_timeout),
  // closes every connection and joins the I/O threads. Idempotent; a no-op before Start.
  void Stop();

  LmServerStats stats() const;

  // Replaces request_timeout and idle_timeout (0 = off) for new and open connections alike; an
  // open connection picks them up at its watchdog's next tick (within 1 s). Any thread, any time,
  // before or after Start (SIGHUP reload).
  void SetTimeouts(std::chrono::milliseconds request_timeout,
                   std::chrono::milliseconds idle_timeout);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvdepot::daemon
