#include "listen_address.h"

#include <algorithm>
#include <cstdlib>

namespace kvdepot::daemon {

Result<boost::asio::ip::tcp::endpoint> ParseListenAddress(std::string_view what,
                                                          const std::string& listen) {
  const std::string name(what);
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument(name + " '" + listen + "' is not HOST:PORT");
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port_text = listen.substr(colon + 1);
  char* end = nullptr;
  const unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port > 65535) {
    return InvalidArgument(name + " '" + listen + "': bad port '" + port_text + "'");
  }
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument(name + " '" + listen + "': " + ec.message());
  return boost::asio::ip::tcp::endpoint(address, static_cast<std::uint16_t>(port));
}

std::chrono::milliseconds WatchdogTick(std::chrono::milliseconds request_timeout,
                                       std::chrono::milliseconds idle_timeout) {
  std::chrono::milliseconds shortest{0};
  for (auto t : {request_timeout, idle_timeout}) {
    if (t.count() > 0 && (shortest.count() == 0 || t < shortest)) shortest = t;
  }
  if (shortest.count() == 0) return shortest;
  return std::clamp(shortest / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

std::chrono::milliseconds ConnectionTimeouts::Tick() const {
  const auto tick = WatchdogTick(request(), idle());
  return tick.count() == 0 ? std::chrono::milliseconds(1000) : tick;
}

}  // namespace kvdepot::daemon
