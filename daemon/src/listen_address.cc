#include "listen_address.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <system_error>

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
  std::uint32_t port = 0;
  const auto [end, ec_port] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec_port != std::errc() || end != port_text.data() + port_text.size() ||
      port > 65535) {
    return InvalidArgument(name + " '" + listen + "': bad port '" + port_text + "'");
  }
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(host, ec);
  if (ec) {
    return InvalidArgument(name + " '" + listen + "': host '" + host + "' is not an IP address");
  }
  return boost::asio::ip::tcp::endpoint(address, static_cast<std::uint16_t>(port));
}

std::string ListenFailureCause(const boost::asio::ip::tcp::endpoint& endpoint) {
  const int fd = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "cannot create a socket: " + std::system_category().message(errno);
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  int err = 0;
  if (::bind(fd, endpoint.data(), static_cast<socklen_t>(endpoint.size())) != 0 ||
      ::listen(fd, 1) != 0) {
    err = errno;
  }
  ::close(fd);
  switch (err) {
    case 0: return "";
    case EADDRINUSE: return "address already in use (another process listens there)";
    case EADDRNOTAVAIL: return "address not available (no interface of this host has it)";
    case EACCES: return "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)";
    default: return std::system_category().message(err);
  }
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
