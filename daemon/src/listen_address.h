// What the daemon's two listeners (native protocol, lm://) share: parsing "HOST:PORT" listen
// addresses (HOST an IPv4 or IPv6 literal, the latter optionally in brackets) and the period of
// the per-connection timeout watchdog.
#pragma once

#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <string>
#include <string_view>

#include "kvdepot/status.h"

namespace kvdepot::daemon {

// The endpoint, or kInvalidArgument naming `what` (e.g. "listen address", "lm listen address")
// and the text.
Result<boost::asio::ip::tcp::endpoint> ParseListenAddress(std::string_view what,
                                                          const std::string& listen);

// The watchdog period for a connection's request and idle timeouts (0 = off): a quarter of the
// shortest enabled one, within 10 ms .. 1 s, so a timeout fires at most a tick late; 0 when
// both are off (no watchdog).
std::chrono::milliseconds WatchdogTick(std::chrono::milliseconds request_timeout,
                                       std::chrono::milliseconds idle_timeout);

}  // namespace kvdepot::daemon
