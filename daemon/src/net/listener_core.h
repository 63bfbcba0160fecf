// ListenerCore: what every kvdepotd listener (native, lm://, resp://) shares — the I/O threads,
// the list of live connections, and Stop's drain. A listener owns one, binds its acceptors on
// control(), hands each accepted socket NextExecutor(), registers the connection, and calls
// Stop() with a function that closes its acceptors.
//
// Threads: one io_context per I/O thread, and each connection is bound to one of them, so that a
// connection's handlers always run on the same thread (no cross-thread wake-ups, no strand).
// control() is the first context: acceptors and drain timers run there.
//
// Lifetime: a connection holds a RegistrationGuard<ListenerCore> as its first data member; its
// destructor calls Unregister as its last access to the core. Stop() returns only once every
// connection is gone — also those whose last reference was held off the I/O threads (a store
// callback on the SSD tier's thread) — so the core, and the listener around it, may be destroyed
// right after. Destroy the listener's acceptors and timers (objects of these contexts) before the
// core.
//
// Thread-safety: Run, Stop and the destructor from the controlling thread; Register, Unregister,
// open() and total() from any thread; NextExecutor from control()'s thread (accept handlers) or
// before Run.
#pragma once

#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvdepot/base/status.h"

namespace kvdepot::daemon {

// What Stop() asks of a live connection. Both post to the connection's own thread.
class DrainableConnection {
 public:
  virtual ~DrainableConnection() = default;
  // Finish the requests already read (answer them), then close.
  virtual void BeginShutdown() = 0;
  // Close now (the drain timeout passed).
  virtual void ForceClose() = 0;
};

class ListenerCore {
 public:
  explicit ListenerCore(std::uint32_t io_threads);  // 0 counts as 1
  // Stops (when running) and destroys the contexts: handlers still queued release the connections
  // they hold, whose guards unregister here.
  ~ListenerCore();
  ListenerCore(const ListenerCore&) = delete;
  ListenerCore& operator=(const ListenerCore&) = delete;

  boost::asio::io_context& control() { return *contexts_[0]; }
  // The context for the next accepted connection (round robin).
  boost::asio::io_context::executor_type NextExecutor() {
    return contexts_[next_context_++ % contexts_.size()]->get_executor();
  }

  // A TCP acceptor on control(), bound (SO_REUSEADDR) and listening on `endpoint`. Unavailable
  // naming `what` ("lm://127.0.0.1:7700") when the address cannot be used.
  Result<std::unique_ptr<boost::asio::ip::tcp::acceptor>> ListenTcp(
      const boost::asio::ip::tcp::endpoint& endpoint, const std::string& what);

  // Accepts TCP connections on `acceptor` until it is closed: each socket (TCP_NODELAY, bound to
  // NextExecutor()) goes to `start`, which registers and starts its connection. An accept error
  // other than the acceptor's closing (e.g. EMFILE) keeps accepting.
  using TcpSocket = boost::asio::basic_stream_socket<boost::asio::ip::tcp,
                                                     boost::asio::io_context::executor_type>;
  void AcceptTcp(boost::asio::ip::tcp::acceptor& acceptor, std::function<void(TcpSocket)> start);

  // Starts the I/O threads. Once.
  void Run();
  bool running() const { return !threads_.empty(); }

  // Stops accepting (`close_acceptors` runs on control()), asks every live connection to finish
  // what it has read, closes those still open after `drain_timeout`, and returns once every
  // connection is gone and the I/O threads have exited. Idempotent; a no-op before Run.
  void Stop(std::chrono::milliseconds drain_timeout, std::function<void()> close_acceptors);

  // Posts a no-op to every I/O thread and runs `done` (on an I/O thread) once all of them ran it.
  // `done` never runs when a loop is stuck or the core is stopped.
  void Probe(std::function<void()> done);

  using Registration = std::list<std::weak_ptr<DrainableConnection>>::iterator;
  // Tracks a live connection (for Stop); its RegistrationGuard calls Unregister with the result.
  // Once Stop has begun, also force-closes it (ForceClose) at once: a connection accepted as the
  // listener stops is closed, not drained.
  Registration Register(const std::shared_ptr<DrainableConnection>& connection);
  // The decrement of open() is the last access to *this.
  void Unregister(Registration it);

  std::uint64_t open() const { return open_.load(); }
  std::uint64_t total() const { return total_.load(); }

 private:
  std::vector<std::shared_ptr<DrainableConnection>> Live();

  std::vector<std::unique_ptr<boost::asio::io_context>> contexts_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guards_;
  std::size_t next_context_ = 0;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::list<std::weak_ptr<DrainableConnection>> connections_;  // live ones; guarded by mu_
  bool stopping_ = false;  // Stop has begun (set once, while running); guarded by mu_
  std::atomic<std::uint64_t> open_{0}, total_{0};
};

}  // namespace kvdepot::daemon
