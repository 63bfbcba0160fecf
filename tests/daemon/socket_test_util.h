// Raw-socket helpers shared by the daemon tests that talk to a server below the client library
// (timeouts, faults, metrics, reload).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "../common/wait.h"

namespace kvdepot::test_socket {

// A TCP connection to 127.0.0.1:`port` with a 5 s receive timeout, or -1 when connect fails.
inline int ConnectLoopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// True once the peer has closed (recv returns 0 or a reset), reading and dropping any data;
// false when the 5 s receive timeout passes first.
inline bool ClosedByPeer(int fd) {
  std::byte buf[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

using ::kvdepot::test::WaitFor;  // tests/common/wait.h

}  // namespace kvdepot::test_socket
