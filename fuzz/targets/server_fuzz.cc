// server: bytes from one client connection to a real in-process kvdepot Server (native protocol,
// Unix socket, a 32 KiB host tier in a shared arena, emptied after every input), with the largest
// key limit the configuration allows and a small output limit (so that backpressure pauses are
// reached). Every complete response frame must be a valid response header; the server must close
// the connection once the client has half-closed.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "fuzz_targets.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"
#include "kvdepot/protocol/protocol.h"
#include "socket_driver.h"

namespace kvdepot::fuzz {
namespace {

struct Daemon {
  std::string path;
  protocol::Limits limits;
  daemon::HostTier host{FuzzTierOptions()};
  daemon::Store store{host, nullptr};
  std::unique_ptr<daemon::Server> server;

  Daemon() {
    path = (std::filesystem::temp_directory_path() /
            ("kvdepot-fuzz-" + std::to_string(::getpid()) + ".sock"))
               .string();
    limits.max_key_bytes = 1024;  // the most limits.max_key_bytes accepts
    limits.max_value_bytes = 1u << 20;
    limits.max_batch = 64;
    limits.max_body_bytes = 4u << 20;
    daemon::ServerOptions o;
    o.listen.clear();
    o.unix_path = path;
    o.io_threads = 1;
    o.limits = limits;
    o.max_output_bytes = 64u << 10;
    o.max_lease_bytes = 1u << 20;  // so that the lease bound is reached
    // No request or idle timeout: whether one fires depends on how long a run takes on a busy
    // machine, not on the input (server_faults_test covers them deterministically).
    o.request_timeout = o.idle_timeout = std::chrono::milliseconds(0);
    // A shared arena, so that MAP, LEASE_GET and RELEASE run their real paths (the descriptor MAP
    // passes is dropped by the fuzz client's plain reads).
    if (!host.EnableSharedArena().ok()) __builtin_trap();
    server = std::make_unique<daemon::Server>(o, store);
    if (!server->Start().ok()) __builtin_trap();
  }
};

int Connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) __builtin_trap();
  return fd;
}

}  // namespace

int FuzzServer(const std::uint8_t* data, std::size_t size) {
  static Daemon* const d = new Daemon();  // lives until exit (the server's threads use it)
  const int fd = Connect(d->path);
  std::vector<std::byte> out;
  const bool closed = Exchange(fd, std::span(reinterpret_cast<const std::byte*>(data), size),
                               std::chrono::seconds(10), out);
  ::close(fd);
  EmptyTier(d->host);
  if (!closed) __builtin_trap();  // the server must close a half-closed connection
  protocol::Limits any;
  any.max_body_bytes = 0xffffffffu;
  std::size_t at = 0;
  while (out.size() - at >= protocol::kFrameHeaderBytes) {
    auto h = protocol::DecodeFrameHeader(std::span(out).subspan(at, protocol::kFrameHeaderBytes),
                                         any, /*expect_response=*/true);
    if (!h.ok()) __builtin_trap();  // the server wrote a malformed frame
    at += protocol::kFrameHeaderBytes + h->body_length;
    if (at > out.size()) break;  // cut by a close after a read error
  }
  return 0;
}

}  // namespace kvdepot::fuzz
