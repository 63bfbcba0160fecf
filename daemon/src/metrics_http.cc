#include "kvdepot/daemon/metrics_http.h"

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/exposer.h>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "kvdepot/daemon/log.h"
#include "listen_address.h"

namespace kvdepot::daemon {

// CivetWeb's begin_request callback carries no user pointer of ours (the context's user data is
// the CivetServer), so endpoints are found by the port the request arrived on.
struct MetricsHttp::State {
  std::atomic<Health> health{Health::kStarting};
  std::mutex detail_mu;
  std::function<std::string()> detail;  // guarded by detail_mu
};

namespace {

std::mutex g_mu;
std::map<int, std::shared_ptr<MetricsHttp::State>> g_by_port;  // guarded by g_mu

int BeginRequest(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (info == nullptr || info->local_uri == nullptr ||
      std::strcmp(info->local_uri, "/healthz") != 0) {
    return 0;  // CivetWeb handles it (/metrics, or 404)
  }
  std::shared_ptr<MetricsHttp::State> state;
  {
    std::lock_guard lock(g_mu);
    if (auto it = g_by_port.find(info->server_port); it != g_by_port.end()) state = it->second;
  }
  const Health health = state ? state->health.load() : Health::kStarting;
  std::string body = health == Health::kServing    ? "ok\n"
                     : health == Health::kDraining ? "draining\n"
                                                   : "starting\n";
  if (state) {
    std::lock_guard lock(state->detail_mu);
    if (state->detail) {
      const std::string detail = state->detail();
      if (!detail.empty()) body += detail + "\n";
    }
  }
  const int code = health == Health::kServing ? 200 : 503;
  const std::string length = std::to_string(body.size());
  mg_response_header_start(conn, code);
  mg_response_header_add(conn, "Content-Type", "text/plain; charset=utf-8", -1);
  mg_response_header_add(conn, "Cache-Control", "no-store", -1);
  mg_response_header_add(conn, "Content-Length", length.c_str(), -1);
  mg_response_header_send(conn);
  if (std::strcmp(info->request_method, "HEAD") != 0) mg_write(conn, body.data(), body.size());
  return code;  // 1..999: handled here, with this status in CivetWeb's access log
}

// Opens and closes one TCP connection to host:port (best effort).
void Poke(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const bool connected = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
    if (connected) break;
  }
  freeaddrinfo(found);
}

// CivetWeb's own error lines go to the daemon's log at debug level instead of raw to stderr: at
// start a failed bind would otherwise be a second, unlabelled line next to kvdepotd's error line
// (Start reports every failure in its Status).
int LogCivetWebMessage(const mg_connection*, const char* message) {
  Log(LogLevel::kDebug, "civetweb", {{"message", message == nullptr ? "" : message}});
  return 1;  // handled: CivetWeb prints nothing itself
}

// Why CivetWeb could not serve on `listen`: the cause a probe bind finds (listen_address.h), or
// CivetWeb's `what` when the probe binds.
std::string BindFailure(const std::string& listen, const std::string& what) {
  auto endpoint = ParseListenAddress("metrics.listen", listen);
  if (!endpoint.ok()) return "cannot serve HTTP there (" + what + ")";
  std::string cause = ListenFailureCause(*endpoint);
  return cause.empty() ? "cannot serve HTTP there (" + what + ")" : cause;
}

}  // namespace

class MetricsHttp::Impl {
 public:
  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<State> state = std::make_shared<State>();
  std::vector<int> ports;
  std::string host;  // to connect to: the listen host, loopback for a wildcard

  // CivetWeb's listening thread polls with a 2 s timeout and checks for a stop only between
  // polls: a connection wakes it, so that stopping takes milliseconds instead of seconds.
  void StopExposer() {
    std::atomic<bool> stopped{false};
    std::thread poker([&] {
      while (!stopped.load()) {
        for (int port : ports) Poke(host, port);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    exposer.reset();  // joins CivetWeb's threads
    stopped = true;
    poker.join();
  }
};

Result<std::unique_ptr<MetricsHttp>> MetricsHttp::Start(const std::string& listen,
                                                        const Metrics& metrics) {
  std::unique_ptr<MetricsHttp> http(new MetricsHttp());
  http->impl_ = std::make_unique<Impl>();
  CivetCallbacks callbacks;
  callbacks.begin_request = &BeginRequest;
  callbacks.log_message = &LogCivetWebMessage;
  try {
    http->impl_->exposer = std::make_unique<prometheus::Exposer>(listen, 2, &callbacks);
    for (const auto& c : metrics.Collectables()) http->impl_->exposer->RegisterCollectable(c);
    http->impl_->ports = http->impl_->exposer->GetListeningPorts();
  } catch (const std::exception& e) {
    // CivetWeb reports a failed bind only as "null context when constructing CivetServer".
    return Unavailable(BindFailure(listen, e.what()));
  }
  if (http->impl_->ports.empty()) return Unavailable(BindFailure(listen, "no listening port"));
  http->port_ = static_cast<std::uint16_t>(http->impl_->ports.front());
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  http->impl_->host = host;
  std::lock_guard lock(g_mu);
  for (int port : http->impl_->ports) g_by_port[port] = http->impl_->state;
  return http;
}

MetricsHttp::~MetricsHttp() {
  if (!impl_) return;
  impl_->StopExposer();
  std::lock_guard lock(g_mu);
  for (int port : impl_->ports) {
    if (auto it = g_by_port.find(port); it != g_by_port.end() && it->second == impl_->state) {
      g_by_port.erase(it);
    }
  }
}

void MetricsHttp::SetHealth(Health health) {
  impl_->state->health.store(health);
}

void MetricsHttp::SetHealthDetail(std::function<std::string()> detail) {
  std::lock_guard lock(impl_->state->detail_mu);
  impl_->state->detail = std::move(detail);
}

}  // namespace kvdepot::daemon
