// "HOST:PORT" listen addresses (HOST an IPv4 or IPv6 literal, the latter optionally in brackets),
// shared by the daemon's listeners.
#pragma once

#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <boost/asio/ip/tcp.hpp>
#include <string>
#include <string_view>

#include "kvdepot/status.h"

namespace kvdepot::daemon {

// The endpoint, or kInvalidArgument naming `what` (e.g. "listen address", "lm listen address")
// and the text.
Result<boost::asio::ip::tcp::endpoint> ParseListenAddress(std::string_view what,
                                                          const std::string& listen);

}  // namespace kvdepot::daemon
