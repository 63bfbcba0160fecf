// resp_server: bytes from one client connection to a real in-process resp:// listener (the Redis
// protocol, TCP loopback, a 32 KiB host tier emptied after every input, so that each input starts
// from an empty store). The listener must close the connection once the client has half-closed,
// whatever was sent (after the replies to every whole request read, or at once after a protocol
// error).
#include "fuzz_targets.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/resp_server.h"
#include "kvdepot/daemon/store.h"
#include "socket_driver.h"

namespace kvdepot::fuzz {
namespace {

struct RespDaemon {
  daemon::HostTier host{FuzzTierOptions()};
  daemon::Store store{host, nullptr};
  std::unique_ptr<daemon::RespServer> server;

  RespDaemon() {
    daemon::RespServerOptions o;
    o.listen = "127.0.0.1:0";
    o.io_threads = 1;
    o.max_value_bytes = 1u << 20;  // values over the 16 KiB inline bulk reach the large-bulk path
    // No request or idle timeout: whether one fires depends on how long a run takes on a busy
    // machine, not on the input (tests/resp covers them).
    o.request_timeout = o.idle_timeout = std::chrono::milliseconds(0);
    server = std::make_unique<daemon::RespServer>(o, store);
    if (!server->Start().ok()) __builtin_trap();
  }
};

}  // namespace

int FuzzRespServer(const std::uint8_t* data, std::size_t size) {
  // Lives until exit (the listener's threads use it).
  static RespDaemon* const d = new RespDaemon();
  const int fd = ConnectLoopback(d->server->port(), "resp_server");
  std::vector<std::byte> out;
  const bool closed = Exchange(fd, std::span(reinterpret_cast<const std::byte*>(data), size),
                               std::chrono::seconds(10), out);
  CloseWithReset(fd);
  EmptyTier(d->host);
  if (!closed) __builtin_trap();  // the listener must close a half-closed connection
  return 0;
}

}  // namespace kvdepot::fuzz
