// Server::Impl: the native protocol's listener (listener.cc) — binding TCP (optionally TLS) and the
// Unix socket, accepting, the server-wide counters and the STATS document — as its connections
// (native/connection.h) see it.
//
// Thread-safety: Start/Stop from the controlling thread; everything connections call from any
// I/O thread.
#pragma once

#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <sys/types.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvdepot/daemon/server.h"
#include "listen_address.h"
#include "net/listener_core.h"

namespace kvdepot::daemon {

class Server::Impl {
 public:
  Impl(const ServerOptions& options, Store& store, RequestObserver* observer,
       TranscoderHooks hooks);
  // Stops, then destroys what the I/O contexts' queued handlers may still use, before the core.
  ~Impl();

  Status Start();
  void Stop();
  std::uint16_t tcp_port() const { return tcp_port_; }
  ServerStats stats() const;

  // Called by connections.
  const ServerOptions& options() const { return options_; }
  // The request and idle timeouts in force (options_ has the ones at start).
  const ConnectionTimeouts& timeouts() const { return timeouts_; }
  void SetTimeouts(std::chrono::milliseconds request, std::chrono::milliseconds idle) {
    timeouts_.Set(request, idle);
  }
  Store& store() { return store_; }
  Transcoder& transcoder() { return *transcoder_; }
  RequestObserver* observer() const { return observer_; }
  ListenerCore& core() { return core_; }
  // `scope` limits the namespaces listed (null: all).
  std::string StatsJson(const AuthScope* scope) const;
  // Counts a refused connection and logs it, at most once a second (with how many were not
  // logged since), so that a client hammering wrong tokens cannot flood the log.
  void OnAuthFailure(const std::string& peer, std::string_view reason);
  void OnTlsFailure(const std::string& peer, const std::string& error);
  void Probe(std::function<void()> done) { core_.Probe(std::move(done)); }
  void AddStatsSection(std::string name, std::function<std::string()> object_json) {
    std::lock_guard lock(sections_mu_);
    sections_.emplace_back(std::move(name), std::move(object_json));
  }

  std::atomic<std::uint64_t> requests_{0}, protocol_errors_{0}, bytes_in_{0}, bytes_out_{0},
      request_timeouts_{0}, idle_timeouts_{0};
  std::atomic<std::uint64_t> auth_failures_{0}, tls_failures_{0};

 private:
  template <typename Acceptor>
  void Accept(Acceptor& acceptor);
  Status SetUpTls();
  // At most one refusal log line a second; false (and counted) when this one must be skipped.
  bool TakeRefusalLogTurn(std::uint64_t& not_logged);

  ServerOptions options_;
  ConnectionTimeouts timeouts_;
  Store& store_;
  RequestObserver* const observer_;
  // Declared before what lives on its contexts (acceptors, the transcoder's posted callbacks), so
  // that it is destroyed after them.
  ListenerCore core_;
  std::unique_ptr<Transcoder> transcoder_;
  std::shared_ptr<boost::asio::ssl::context> tls_;  // set when the TCP listener speaks TLS
  std::unique_ptr<boost::asio::ip::tcp::acceptor> tcp_;
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> unix_;
  std::uint16_t tcp_port_ = 0;
  ino_t unix_inode_ = 0;  // the socket file this server created (removed at Stop)
  std::mutex log_mu_;     // rate limit of the refusal log lines
  std::chrono::steady_clock::time_point last_refusal_log_{};
  std::uint64_t refusals_not_logged_ = 0;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  bool stopped_ = false;
  mutable std::mutex sections_mu_;  // guards sections_
  std::vector<std::pair<std::string, std::function<std::string()>>> sections_;
};

}  // namespace kvdepot::daemon
