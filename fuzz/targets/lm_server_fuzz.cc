// lm_server: bytes from one client connection to a real in-process lm:// listener (LMCache's
// protocol, TCP loopback, a 32 KiB host tier emptied after every input). The listener must close
// the connection once the client has half-closed, whatever was sent.
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

}  // namespace

int FuzzLmServer(const std::uint8_t* data, std::size_t size) {
  static LmDaemon* const d = new LmDaemon();  // lives until exit (the listener's threads use it)
  const int fd = ConnectLoopback(d->server->port(), "lm_server");
  std::vector<std::byte> out;
  const bool closed = Exchange(fd, std::span(reinterpret_cast<const std::byte*>(data), size),
                               std::chrono::seconds(10), out);
  CloseWithReset(fd);
  EmptyTier(d->host);
  if (!closed) __builtin_trap();  // the listener must close a half-closed connection
  return 0;
}

}  // namespace kvdepot::fuzz
