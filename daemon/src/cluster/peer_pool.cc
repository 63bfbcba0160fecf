#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include "cluster/peer_pool.h"

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "kvdepot/base/tls_peer_name.h"
#include "kvdepot/daemon/log.h"
#include "log_limiter.h"

namespace kvdepot::daemon::cluster_peer {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

struct Pending {
  PeerRequest request;
  PeerCallback done;
  bool retried = false;  // already resent once after its pooled connection turned out closed
};

struct Peer;

// One connection to a peer, carrying one call at a time. Lives on the pool's thread.
struct PeerConn : std::enable_shared_from_this<PeerConn> {
  PeerConn(asio::io_context& io, Peer& p) : socket(io), resolver(io), timer(io), peer(p) {}
  tcp::socket socket;
  std::optional<asio::ssl::stream<tcp::socket&>> tls;  // set when the pool speaks TLS
  tcp::resolver resolver;
  asio::steady_timer timer;
  Peer& peer;
  std::uint64_t next_request_id = 0;
  std::uint64_t call_seq = 0;  // which call the timer belongs to
  bool closed = false;
  std::uint64_t calls_done = 0;  // calls this connection answered
  bool timed_out = false;        // the current call's deadline passed
  bool reply_seen = false;       // the current call's reply header arrived
  Pending current;
  protocol::FrameHeader sent;
  std::array<std::byte, protocol::kFrameHeaderBytes> header_out{};
  std::array<std::byte, protocol::kFrameHeaderBytes> header_in{};
  std::array<std::byte, protocol::kGetItemPrefixBytes> prefix{};
  std::vector<std::byte> auth_body;
  std::vector<std::byte> body_in;
  std::shared_ptr<Value> value_in;
  protocol::FrameHeader received;

  // asio::async_write / async_read on the connection's stream: the TLS session when there is
  // one, else the socket.
  template <typename Buffers, typename Handler>
  void Write(const Buffers& buffers, Handler handler) {
    if (tls) return asio::async_write(*tls, buffers, std::move(handler));
    asio::async_write(socket, buffers, std::move(handler));
  }
  template <typename Buffers, typename Handler>
  void Read(const Buffers& buffers, Handler handler) {
    if (tls) return asio::async_read(*tls, buffers, std::move(handler));
    asio::async_read(socket, buffers, std::move(handler));
  }

  void Close() {
    if (closed) return;
    closed = true;
    boost::system::error_code ec;
    resolver.cancel();
    timer.cancel();
    socket.close(ec);
  }
};

struct Peer {
  std::string address;
  std::vector<std::shared_ptr<PeerConn>> idle;
  std::uint32_t open = 0;  // connections open or being opened
  std::deque<Pending> queue;
  std::chrono::steady_clock::time_point down_until{};
  std::chrono::milliseconds backoff{0};
  LogLimiter connect_log;  // "cannot connect" lines for this peer
};

}  // namespace

class PeerPool::Impl {
 public:
  explicit Impl(PeerPoolOptions options)
      : options_(std::move(options)), guard_(asio::make_work_guard(io_)) {
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() { Shutdown(); }

  void Shutdown() {
    if (shut_down_.exchange(true)) return;
    asio::post(io_, [this] {
      stopped_ = true;
      for (auto& [address, peer] : peers_) FailQueue(*peer, Stopped());
      for (const auto& c : conns_) c->Close();
    });
    guard_.reset();
    thread_.join();
    joined_ = true;
  }

  static Status Stopped() {
    return Unavailable("cluster peer pool stopped (the daemon is shutting down)");
  }

  void Call(const std::string& address, PeerRequest request, PeerCallback done) {
    // Once the thread has ended nothing would run a posted call: answered here. (A call made
    // while Shutdown drains is posted and answered by Enqueue.)
    if (joined_) return done(Stopped());
    asio::post(io_, [this, address, p = Pending{std::move(request), std::move(done)}]() mutable {
      Enqueue(address, std::move(p));
    });
  }

 private:
  void Enqueue(const std::string& address, Pending p) {
    if (stopped_) return p.done(Stopped());
    auto& slot = peers_[address];
    if (!slot) {
      slot = std::make_unique<Peer>();
      slot->address = address;
    }
    Peer& peer = *slot;
    if (std::chrono::steady_clock::now() < peer.down_until) {
      return p.done(Unavailable("cluster peer " + address +
                                " is unreachable (its last connection attempt failed); retried "
                                "after a backoff"));
    }
    if (peer.queue.size() >= options_.max_queued_per_peer) {
      return p.done(ResourceExhausted("cluster peer " + address + " has " +
                                      std::to_string(peer.queue.size()) +
                                      " requests queued already"));
    }
    peer.queue.push_back(std::move(p));
    Pump(peer);
  }

  void Pump(Peer& peer) {
    while (!peer.queue.empty() && !stopped_) {
      if (!peer.idle.empty()) {
        auto conn = std::move(peer.idle.back());
        peer.idle.pop_back();
        Pending p = std::move(peer.queue.front());
        peer.queue.pop_front();
        Run(conn, std::move(p));
        continue;
      }
      if (peer.open < std::max<std::uint32_t>(options_.connections_per_peer, 1)) Open(peer);
      return;
    }
  }

  void FailQueue(Peer& peer, const Status& status) {
    std::deque<Pending> queue = std::move(peer.queue);
    peer.queue.clear();
    for (Pending& p : queue) p.done(status);
  }

  void ArmTimer(const std::shared_ptr<PeerConn>& c) {
    const std::uint64_t seq = ++c->call_seq;
    c->timer.expires_after(options_.timeout);
    c->timer.async_wait([c, seq](const boost::system::error_code& ec) {
      if (ec || c->call_seq != seq) return;
      c->timed_out = true;
      c->Close();  // the pending operation fails: "Operation canceled"
    });
  }

  // Connects (and authenticates); the connection then serves the queue.
  void Open(Peer& peer) {
    ++peer.open;
    auto c = std::make_shared<PeerConn>(io_, peer);
    conns_.insert(c);
    const std::size_t colon = peer.address.rfind(':');
    if (colon == std::string::npos) {
      return ConnectFailed(c, InvalidArgument("cluster peer address '" + peer.address +
                                              "' is not host:port (cluster.advertise)"));
    }
    std::string host = peer.address.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    ArmTimer(c);
    c->resolver.async_resolve(
        host, peer.address.substr(colon + 1),
        [this, c](const boost::system::error_code& ec, tcp::resolver::results_type results) {
          if (ec || c->closed) return ConnectFailed(c, Unavailable(ec.message()));
          asio::async_connect(c->socket, results,
                              [this, c](const boost::system::error_code& ec2, const auto&) {
                                if (ec2 || c->closed)
                                  return ConnectFailed(c, Unavailable(ec2.message()));
                                c->socket.set_option(tcp::no_delay(true));
                                if (options_.tls) return Handshake(c);
                                Established(c);
                              });
        });
  }

  // TLS: the client handshake, the peer's certificate checked against the host of its address.
  void Handshake(const std::shared_ptr<PeerConn>& c) {
    const std::string host = TlsHostOf(c->peer.address);
    c->tls.emplace(c->socket, *options_.tls);
    if (!ExpectTlsPeerName(c->tls->native_handle(), host)) {
      return ConnectFailed(c, InvalidArgument("TLS: cannot check a certificate against the name '" +
                                              host + "' (cluster.advertise)"));
    }
    c->tls->async_handshake(asio::ssl::stream_base::client,
                            [this, c, host](const boost::system::error_code& ec) {
                              if (ec || c->closed)
                                return ConnectFailed(c, HandshakeFailed(c, host, ec));
                              Established(c);
                            });
  }

  // Why a TLS handshake with a peer failed: a certificate that did not verify, or the TLS error.
  Status HandshakeFailed(const std::shared_ptr<PeerConn>& c, const std::string& host,
                         const boost::system::error_code& ec) const {
    const long verify = SSL_get_verify_result(c->tls->native_handle());
    if (verify != X509_V_OK) {
      return Unavailable("TLS: the peer's certificate did not verify: " +
                         std::string(X509_verify_cert_error_string(verify)) + " (checked against " +
                         options_.tls_trust + ", for the name " + host +
                         "; the CA must have signed the peer's tls.cert_file, which must name "
                         "the host of its cluster.advertise)");
    }
    return Unavailable("TLS handshake failed: " + ec.message());
  }

  // Connected (and TLS established): AUTH first when there is a token.
  void Established(const std::shared_ptr<PeerConn>& c) {
    if (options_.token.empty()) return Connected(c);
    Authenticate(c);
  }

  void Authenticate(const std::shared_ptr<PeerConn>& c) {
    c->auth_body = protocol::EncodeAuthRequest(options_.token);
    protocol::FrameHeader h;
    h.type = static_cast<std::uint8_t>(protocol::Op::kAuth);
    h.flags = protocol::kFlagFromPeer;
    h.request_id = ++c->next_request_id;
    h.body_length = static_cast<std::uint32_t>(c->auth_body.size());
    protocol::EncodeFrameHeader(h, c->header_out.data());
    std::array<asio::const_buffer, 2> out{asio::buffer(c->header_out), asio::buffer(c->auth_body)};
    c->Write(out, [this, c](const boost::system::error_code& ec, std::size_t) {
      if (ec || c->closed) return ConnectFailed(c, Unavailable(ec.message()));
      c->Read(asio::buffer(c->header_in), [this, c](const boost::system::error_code& ec2,
                                                    std::size_t) {
        if (ec2 || c->closed) return ConnectFailed(c, Unavailable(ec2.message()));
        auto reply = protocol::DecodeFrameHeader(c->header_in, options_.limits, true);
        if (!reply.ok() || reply->status != 0 || reply->body_length != 0) {
          return ConnectFailed(c, Unauthenticated("the peer refused this node's AUTH token (the "
                                                  "members of a cluster share the auth token)"));
        }
        Connected(c);
      });
    });
  }

  void Connected(const std::shared_ptr<PeerConn>& c) {
    ++c->call_seq;
    c->timer.cancel();
    c->peer.backoff = std::chrono::milliseconds(0);
    Idle(c);
  }

  void ConnectFailed(const std::shared_ptr<PeerConn>& c, Status why) {
    Peer& peer = c->peer;
    if (c->timed_out) {
      why = Unavailable(
          "not connected (TCP, TLS handshake when on, AUTH) within the peer "
          "timeout of " +
          std::to_string(options_.timeout.count()) + " ms");
    }
    if (!stopped_ && peer.connect_log.Allow(std::chrono::seconds(10))) {
      Log(LogLevel::kWarn,
          "cluster peer unreachable: requests forwarded to it fail (GET and LOOKUP answer a "
          "miss) until a connection succeeds",
          {{"peer", peer.address}, {"reason", std::string(why.message())}});
    }
    Drop(c);
    const auto min = options_.backoff_min;
    peer.backoff = std::min(options_.backoff_max, std::max(min, peer.backoff * 2));
    peer.down_until = std::chrono::steady_clock::now() + peer.backoff;
    FailQueue(peer, Unavailable("cluster peer " + peer.address +
                                ": connect failed: " + std::string(why.message())));
  }

  void Drop(const std::shared_ptr<PeerConn>& c) {
    c->Close();
    if (conns_.erase(c) != 0) --c->peer.open;
  }

  void Idle(const std::shared_ptr<PeerConn>& c) {
    if (stopped_ || c->closed) return Drop(c);
    c->peer.idle.push_back(c);
    Pump(c->peer);
  }

  void Run(const std::shared_ptr<PeerConn>& c, Pending p) {
    c->current = std::move(p);
    c->reply_seen = false;
    const PeerRequest& r = c->current.request;
    const std::uint64_t length = r.body.size() + (r.value ? r.value->bytes().size() : 0);
    if (length > options_.limits.max_body_bytes) {
      Pending done = std::move(c->current);
      Idle(c);
      return done.done(OutOfRange("forwarded request body of " + std::to_string(length) +
                                  " bytes is over limits.max_body_bytes"));
    }
    protocol::FrameHeader& h = c->sent;
    h = protocol::FrameHeader{};
    h.type = static_cast<std::uint8_t>(r.op);
    h.flags = protocol::kFlagFromPeer;
    h.request_id = ++c->next_request_id;
    h.body_length = static_cast<std::uint32_t>(length);
    protocol::EncodeFrameHeader(h, c->header_out.data());
    std::array<asio::const_buffer, 3> out{
        asio::buffer(c->header_out), asio::buffer(r.body),
        r.value ? asio::buffer(r.value->bytes().data(), r.value->bytes().size())
                : asio::const_buffer()};
    ArmTimer(c);
    c->Write(out, [this, c](const boost::system::error_code& ec, std::size_t) {
      if (ec || c->closed) return CallFailed(c, "send failed: " + ec.message());
      c->Read(asio::buffer(c->header_in),
              [this, c](const boost::system::error_code& ec2, std::size_t) {
                if (ec2 || c->closed) return CallFailed(c, "no reply: " + ec2.message());
                OnReplyHeader(c);
              });
    });
  }

  void OnReplyHeader(const std::shared_ptr<PeerConn>& c) {
    c->reply_seen = true;
    auto h = protocol::DecodeFrameHeader(c->header_in, options_.limits, true);
    if (!h.ok()) return CallFailed(c, "malformed reply: " + std::string(h.status().message()));
    if (h->op() != c->sent.op() || h->request_id != c->sent.request_id ||
        (h->flags & protocol::kFlagMore) != 0) {
      return CallFailed(c, "reply does not match the request (op, id or a multi-frame reply)");
    }
    c->received = *h;
    const PeerRequest& r = c->current.request;
    const bool value_reply = r.allocate && h->status == 0;
    if (!value_reply) {
      c->body_in.resize(h->body_length);
      return c->Read(
          asio::buffer(c->body_in), [this, c](const boost::system::error_code& ec, std::size_t) {
            if (ec || c->closed) return CallFailed(c, ec.message());
            Finish(c, PeerResponse{static_cast<StatusCode>(c->received.status),
                                   std::move(c->body_in), nullptr, protocol::Tier::kNone});
          });
    }
    if (h->body_length < protocol::kGetItemPrefixBytes) {
      return CallFailed(c, "GET reply shorter than its item prefix");
    }
    c->Read(asio::buffer(c->prefix), [this, c](const boost::system::error_code& ec, std::size_t) {
      if (ec || c->closed) return CallFailed(c, ec.message());
      auto prefix = protocol::DecodeGetItemPrefix(c->prefix);
      if (!prefix.ok() || prefix->index != 0) return CallFailed(c, "bad GET item prefix");
      const std::size_t size = c->received.body_length - protocol::kGetItemPrefixBytes;
      auto value = c->current.request.allocate(size);
      if (!value.ok()) {
        // The reply's bytes are still on the wire: this connection cannot be reused.
        Pending p = std::move(c->current);
        Drop(c);
        Pump(c->peer);
        return p.done(value.status());
      }
      c->value_in = std::move(*value);
      const protocol::Tier tier = prefix->tier;
      c->Read(asio::buffer(c->value_in->mutable_bytes().data(), size),
              [this, c, tier](const boost::system::error_code& ec2, std::size_t) {
                if (ec2 || c->closed) return CallFailed(c, ec2.message());
                Finish(c, PeerResponse{StatusCode::kOk, {}, std::move(c->value_in), tier});
              });
    });
  }

  void Finish(const std::shared_ptr<PeerConn>& c, PeerResponse response) {
    ++c->call_seq;
    ++c->calls_done;
    c->timer.cancel();
    Pending p = std::move(c->current);
    c->current = Pending{};
    Idle(c);
    p.done(std::move(response));
  }

  // A call on a pooled connection that the peer had closed meanwhile (idle timeout, restart)
  // fails before any reply: it is resent once on a fresh connection. Every forwarded request is
  // safe to repeat (GET and LOOKUP read; PUT stores an immutable chunk again; DELETE again).
  void CallFailed(const std::shared_ptr<PeerConn>& c, const std::string& why) {
    Pending p = std::move(c->current);
    c->current = Pending{};
    Peer& peer = c->peer;
    const bool stale = c->calls_done > 0 && !c->timed_out && !c->reply_seen;
    Drop(c);
    if (stale && !p.retried && p.done && !stopped_) {
      p.retried = true;
      peer.queue.push_front(std::move(p));
      return Pump(peer);
    }
    Pump(peer);
    if (p.done) {
      p.done(Unavailable("cluster peer " + peer.address + ": " + why));
    }
  }

  PeerPoolOptions options_;
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  bool stopped_ = false;                // on the pool's thread
  std::atomic<bool> shut_down_{false};  // Shutdown was called
  std::atomic<bool> joined_{false};     // and the thread has ended
  std::map<std::string, std::unique_ptr<Peer>> peers_;
  std::set<std::shared_ptr<PeerConn>> conns_;
};

PeerPool::PeerPool(PeerPoolOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
PeerPool::~PeerPool() = default;

void PeerPool::Shutdown() {
  impl_->Shutdown();
}

void PeerPool::Call(const std::string& address, PeerRequest request, PeerCallback done) {
  impl_->Call(address, std::move(request), std::move(done));
}

}  // namespace kvdepot::daemon::cluster_peer
