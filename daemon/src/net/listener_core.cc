#include "net/listener_core.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace kvdepot::daemon {
namespace asio = boost::asio;

ListenerCore::ListenerCore(std::uint32_t io_threads) {
  for (std::uint32_t i = 0; i < std::max<std::uint32_t>(io_threads, 1); ++i) {
    contexts_.push_back(std::make_unique<asio::io_context>(1));
    guards_.emplace_back(asio::make_work_guard(*contexts_.back()));
  }
}

ListenerCore::~ListenerCore() {
  Stop(std::chrono::milliseconds(0), [] {});
  guards_.clear();
  contexts_.clear();
}

Result<std::unique_ptr<asio::ip::tcp::acceptor>> ListenerCore::ListenTcp(
    const asio::ip::tcp::endpoint& endpoint, const std::string& what) {
  auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(control());
  boost::system::error_code ec;
  if (acceptor->open(endpoint.protocol(), ec); !ec) {
    acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    acceptor->bind(endpoint, ec);
  }
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot listen on " + what + ": " + ec.message());
  return acceptor;
}

void ListenerCore::AcceptTcp(asio::ip::tcp::acceptor& acceptor,
                             std::function<void(TcpSocket)> start) {
  acceptor.async_accept(
      NextExecutor(), [this, &acceptor, start = std::move(start)](boost::system::error_code ec,
                                                                  TcpSocket socket) mutable {
        if (ec) {
          if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
          return AcceptTcp(acceptor, std::move(start));  // e.g. EMFILE: keep what we have
        }
        boost::system::error_code ignored;
        socket.set_option(asio::ip::tcp::no_delay(true), ignored);
        start(std::move(socket));
        AcceptTcp(acceptor, std::move(start));
      });
}

void ListenerCore::Run() {
  for (auto& ctx : contexts_) threads_.emplace_back([c = ctx.get()] { c->run(); });
}

std::vector<std::shared_ptr<DrainableConnection>> ListenerCore::Live() {
  std::vector<std::shared_ptr<DrainableConnection>> live;
  std::lock_guard lock(mu_);
  for (auto& weak : connections_) {
    if (auto c = weak.lock()) live.push_back(std::move(c));
  }
  return live;
}

ListenerCore::Registration ListenerCore::Register(
    const std::shared_ptr<DrainableConnection>& connection) {
  std::lock_guard lock(mu_);
  ++open_;
  ++total_;
  // Accepted as Stop began (its accept completed before the acceptors closed, after Stop took
  // the live list): nothing else would close it — Stop's drain timer may be cancelled already,
  // or its I/O thread gone — and its client may never hang up, so it is closed at once.
  if (stopping_) connection->ForceClose();
  return connections_.insert(connections_.end(), connection);
}

void ListenerCore::Unregister(Registration it) {
  {
    std::lock_guard lock(mu_);
    connections_.erase(it);
  }
  --open_;
}

void ListenerCore::Stop(std::chrono::milliseconds drain_timeout,
                        std::function<void()> close_acceptors) {
  if (threads_.empty()) return;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;  // from here on Register closes what it registers; Live() has the rest
  }
  asio::post(control(), std::move(close_acceptors));
  // Live() hands out references released outside the lock: a last reference runs Unregister.
  for (auto& c : Live()) c->BeginShutdown();
  auto timer = std::make_shared<asio::steady_timer>(control(), drain_timeout);
  timer->async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    for (auto& c : Live()) c->ForceClose();
  });
  // Without work guards each context returns once its connections are gone; the timer keeps
  // control() busy until every connection is gone (or every context returned), then it is
  // cancelled.
  for (auto& g : guards_) g.reset();
  std::atomic<bool> contexts_returned{false};
  std::thread watcher([this, timer, &contexts_returned] {
    while (open_.load() > 0 && !contexts_returned.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    asio::post(control(), [timer] { timer->cancel(); });
  });
  for (auto& t : threads_) t.join();
  contexts_returned = true;
  watcher.join();
  threads_.clear();
  // A connection whose last reference is held off the I/O threads (a store callback on the SSD
  // tier's thread) may still be going, and *this must outlive it. Such a callback posts its last
  // step to the connection's context, which may have returned from run() already: run what was
  // posted here (no I/O thread is left, so handlers still run one at a time).
  while (open_.load() > 0) {
    for (auto& ctx : contexts_) {
      ctx->restart();
      ctx->poll();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // The timer's cancelled wait is still queued on control(): run it so that nothing of this stop
  // is left for a later destructor.
  control().restart();
  control().poll();
}

void ListenerCore::Probe(std::function<void()> done) {
  struct Round {
    std::atomic<std::size_t> left;
    std::function<void()> done;
  };
  auto round = std::make_shared<Round>();
  round->left = contexts_.size();
  round->done = std::move(done);
  for (auto& ctx : contexts_) {
    asio::post(*ctx, [round] {
      if (--round->left == 0) round->done();
    });
  }
}

}  // namespace kvdepot::daemon
