// The resp:// listener's state (kvdepot/daemon/resp_server.h), shared by the listener
// (resp_server.cc: accept, I/O threads, Stop and its drain, stats) and its connections
// (resp/resp_connection.h and the command handlers, resp/handlers_*.cc).
//
// Thread-safety: RespServer::Impl's Start/Stop from the controlling thread; the core's Register,
// SetTimeouts, the counters, the cursor table and the log turns from any thread.
#pragma once

#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvdepot/daemon/resp_server.h"
#include "listen_address.h"
#include "log_limiter.h"
#include "net/listener_core.h"

namespace kvdepot::daemon {
namespace asio = boost::asio;

namespace resp {

using Socket = asio::basic_stream_socket<asio::ip::tcp, asio::io_context::executor_type>;

// SCAN cursors remembered (server-wide; the oldest are forgotten first).
inline constexpr std::size_t kMaxScanCursors = 16384;

// Counters shared with store callbacks, which may outlive the server (SSD-thread completions).
struct Counters {
  std::atomic<std::uint64_t> commands{0}, command_errors{0}, gets{0}, get_hits{0}, sets{0},
      values_oversized{0}, auth_failures{0}, protocol_errors{0}, request_timeouts{0},
      idle_timeouts{0}, bytes_in{0}, bytes_out{0}, next_client_id{1};
};

// SCAN cursors: the numbers handed out to clients, each standing for the key a scan resumes
// after. Shared by every connection (a client's pool may continue a scan on another one).
class CursorTable {
 public:
  std::uint64_t Add(std::string resume_after) {
    std::lock_guard lock(mu_);
    std::uint64_t id = 0;
    while (id == 0 || keys_.count(id) != 0) id = rng_() >> 1;  // 63 bits: a positive int64
    keys_.emplace(id, std::move(resume_after));
    order_.push_back(id);
    if (order_.size() > kMaxScanCursors) {
      keys_.erase(order_.front());
      order_.pop_front();
    }
    return id;
  }
  std::optional<std::string> Find(std::uint64_t id) {
    std::lock_guard lock(mu_);
    const auto it = keys_.find(id);
    if (it == keys_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::uint64_t, std::string> keys_;
  std::deque<std::uint64_t> order_;
  std::mt19937_64 rng_{std::random_device{}()};
};

class RespConnection;

}  // namespace resp

class RespServer::Impl {
 public:
  Impl(const RespServerOptions& options, Store& store)
      : options_(options),
        timeouts_(options.request_timeout, options.idle_timeout),
        store_(store),
        core_(options.io_threads) {}
  ~Impl() {
    Stop();
    acceptor_.reset();  // an object of the core's contexts
  }

  Status Start();
  void Stop();
  std::uint16_t port() const { return port_; }
  RespServerStats stats() const;

  const RespServerOptions& options() const { return options_; }
  const ConnectionTimeouts& timeouts() const { return timeouts_; }
  void SetTimeouts(std::chrono::milliseconds request, std::chrono::milliseconds idle) {
    timeouts_.Set(request, idle);
  }
  Store& store() { return store_; }
  resp::CursorTable& cursors() { return cursors_; }
  LogLimiter& oversize_log() { return oversize_log_; }
  LogLimiter& auth_log() { return auth_log_; }
  const std::shared_ptr<resp::Counters>& shared_counters() { return counters_; }
  std::chrono::steady_clock::time_point started() const { return started_at_; }

  ListenerCore& core() { return core_; }
  const ListenerCore& core() const { return core_; }

 private:
  void Accept();

  RespServerOptions options_;
  ConnectionTimeouts timeouts_;
  Store& store_;
  std::shared_ptr<resp::Counters> counters_ = std::make_shared<resp::Counters>();
  resp::CursorTable cursors_;
  LogLimiter oversize_log_, auth_log_;
  std::chrono::steady_clock::time_point started_at_ = std::chrono::steady_clock::now();
  ListenerCore core_;  // before the acceptor, which lives on its control context
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor_;
  std::uint16_t port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace kvdepot::daemon
