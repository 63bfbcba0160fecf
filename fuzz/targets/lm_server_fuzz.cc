// lm_server: bytes from one client connection to a real in-process lm:// listener (LMCache's
// protocol, TCP loopback, a 32 KiB host tier emptied after every input). The listener must close
// the connection once the client has half-closed, whatever was sent.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "fuzz_targets.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/lm_server.h"
#include "kvdepot/daemon/store.h"
#include "socket_driver.h"

namespace kvdepot::fuzz {
namespace {

struct LmDaemon {
  daemon::HostTier host{FuzzTierOptions()};
  daemon::Store store{host, nullptr};
  std::unique_ptr<daemon::LmServer> server;

  LmDaemon() {
    daemon::LmServerOptions o;
    o.listen = "127.0.0.1:0";
    o.max_value_bytes = 1u << 20;
    o.max_list_keys = 64;
    // No request or idle timeout: whether one fires depends on how long a run takes on a busy
    // machine, not on the input (server_faults_test covers them deterministically).
    o.request_timeout = o.idle_timeout = std::chrono::milliseconds(0);
    server = std::make_unique<daemon::LmServer>(o, store);
    if (!server->Start().ok()) __builtin_trap();
  }
};

// A connection to the listener. Two failures are the harness's, not the listener's, and are
// retried with a fresh socket for up to 5 s: EADDRNOTAVAIL (every run leaves a TIME_WAIT entry on
// the client side — the client half-closes first, so the linger-0 close comes too late — and at
// hundreds of runs a second the ephemeral ports can run out for a moment) and EINTR (when the
// listener's backlog is full, as when the machine is busy, connect blocks until the SYN is
// retried, and libFuzzer's timer signal interrupts it). Any other failure is reported with its
// errno.
int Connect(std::uint16_t port) {
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
    std::fprintf(stderr, "lm_server fuzz: %s to 127.0.0.1:%u failed: %s\n",
                 fd < 0 ? "socket" : "connect", port, std::strerror(err));
    __builtin_trap();
  }
}

}  // namespace

int FuzzLmServer(const std::uint8_t* data, std::size_t size) {
  static LmDaemon* const d = new LmDaemon();  // lives until exit (the listener's threads use it)
  const int fd = Connect(d->server->port());
  std::vector<std::byte> out;
  const bool closed = Exchange(fd, std::span(reinterpret_cast<const std::byte*>(data), size),
                               std::chrono::seconds(10), out);
  // Close with RST (linger 0): thousands of runs must not fill the port range with TIME_WAIT.
  const linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
  EmptyTier(d->host);
  if (!closed) __builtin_trap();  // the listener must close a half-closed connection
  return 0;
}

}  // namespace kvdepot::fuzz
