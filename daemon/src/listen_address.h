// What the daemon's two listeners (native protocol, lm://) share: parsing "HOST:PORT" listen
// addresses (HOST an IPv4 or IPv6 literal, the latter optionally in brackets), the period of
// the per-connection timeout watchdog and the timeouts it enforces.
#pragma once

#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <string>
#include <string_view>

#include "kvdepot/base/status.h"

namespace kvdepot::daemon {

// The endpoint, or kInvalidArgument naming `what` (e.g. "listen address", "lm listen address")
// and the text.
Result<boost::asio::ip::tcp::endpoint> ParseListenAddress(std::string_view what,
                                                          const std::string& listen);

// Why a TCP listener cannot listen on `endpoint`, found by binding and listening on a probe
// socket the way the listeners do (SO_REUSEADDR), then closing it: "address already in use
// (another process listens there)", "address not available (no interface of this host has it)",
// "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)" or the system's text for
// another errno. Empty when the probe succeeds (the failure had another cause, or is gone). For
// error messages after a listener failed; never throws.
std::string ListenFailureCause(const boost::asio::ip::tcp::endpoint& endpoint);

// The watchdog period for a connection's request and idle timeouts (0 = off): a quarter of the
// shortest enabled one, within 10 ms .. 1 s, so a timeout fires at most a tick late; 0 when
// both are off.
std::chrono::milliseconds WatchdogTick(std::chrono::milliseconds request_timeout,
                                       std::chrono::milliseconds idle_timeout);

// A listener's request and idle timeouts (0 = off), swappable while it runs (SIGHUP reload).
// Every connection's watchdog reads them at each tick and re-arms with Tick(), so a new value
// reaches existing connections within one tick (at most 1 s) and new ones at once. A request
// already being read is measured against the new request timeout from its first byte.
// Thread-safe: Set from any thread, read from the I/O threads (relaxed atomics; the two values
// are independent).
class ConnectionTimeouts {
 public:
  ConnectionTimeouts(std::chrono::milliseconds request, std::chrono::milliseconds idle) {
    Set(request, idle);
  }
  void Set(std::chrono::milliseconds request, std::chrono::milliseconds idle) {
    request_ms_.store(request.count(), std::memory_order_relaxed);
    idle_ms_.store(idle.count(), std::memory_order_relaxed);
  }
  std::chrono::milliseconds request() const {
    return std::chrono::milliseconds(request_ms_.load(std::memory_order_relaxed));
  }
  std::chrono::milliseconds idle() const {
    return std::chrono::milliseconds(idle_ms_.load(std::memory_order_relaxed));
  }
  // The watchdog period for the current values: WatchdogTick, or 1 s when both are off (the
  // watchdog keeps ticking so that a reload turning a timeout on reaches open connections).
  std::chrono::milliseconds Tick() const;

  // Which timeout a connection has run past at `now`, if any: the request one when a request
  // started at `request_started` (time_point::max() when none is being read) has been arriving
  // for request(), else the idle one when it moved nothing since `last_progress` for idle() while
  // no store operation was pending (`busy`). A zero timeout is off.
  enum class Expired { kNone, kRequest, kIdle };
  Expired Check(std::chrono::steady_clock::time_point now,
                std::chrono::steady_clock::time_point request_started,
                std::chrono::steady_clock::time_point last_progress, bool busy) const {
    const auto request_timeout = request(), idle_timeout = idle();
    if (request_timeout.count() > 0 &&
        request_started != std::chrono::steady_clock::time_point::max() &&
        now - request_started >= request_timeout) {
      return Expired::kRequest;
    }
    if (idle_timeout.count() > 0 && !busy && now - last_progress >= idle_timeout) {
      return Expired::kIdle;
    }
    return Expired::kNone;
  }

 private:
  std::atomic<std::chrono::milliseconds::rep> request_ms_{0};
  std::atomic<std::chrono::milliseconds::rep> idle_ms_{0};
};

}  // namespace kvdepot::daemon
