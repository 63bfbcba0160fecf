#include "socket_driver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kvdepot::fuzz {

daemon::HostTierOptions FuzzTierOptions() {
  return daemon::HostTierOptions::With(kFuzzTierBytes, daemon::EvictionPolicy::kSieve, 4);
}

void EmptyTier(daemon::HostTier& tier) {
  (void)tier.SetCapacity(1);  // evicts everything not in use
  (void)tier.SetCapacity(kFuzzTierBytes);
}

int ConnectLoopback(std::uint16_t port, const char* target) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int attempt = 0;; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    const int err = errno;
    if (fd >= 0) ::close(fd);
    if (fd >= 0 && (err == EADDRNOTAVAIL || err == EINTR) && attempt < 500) {
      ::usleep(10000);
      continue;
    }
    std::fprintf(stderr, "%s fuzz: %s to 127.0.0.1:%u failed: %s\n", target,
                 fd < 0 ? "socket" : "connect", port, std::strerror(err));
    __builtin_trap();
  }
}

void CloseWithReset(int fd) {
  const linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
}

bool Exchange(int fd, std::span<const std::byte> input, std::chrono::milliseconds timeout,
              std::vector<std::byte>& output) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::size_t sent = 0;
  bool write_open = true;
  std::byte buf[64 * 1024];
  while (std::chrono::steady_clock::now() < deadline) {
    if (write_open && sent == input.size()) {
      ::shutdown(fd, SHUT_WR);
      write_open = false;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (write_open ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 100) < 0 && errno != EINTR) return false;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;  // closed
      if (n > 0) output.insert(output.end(), buf, buf + n);
    }
    if (write_open && (p.revents & POLLOUT)) {
      const ssize_t n = ::send(fd, input.data() + sent, input.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<std::size_t>(n);
      if (n < 0 && errno != EAGAIN && errno != EINTR) write_open = false;  // reset: read the rest
    }
  }
  return false;
}

}  // namespace kvdepot::fuzz
