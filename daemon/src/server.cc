#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include "kvdepot/daemon/server.h"

#include "kvdepot/daemon/cluster_router.h"
#include "kvdepot/daemon/kv_events.h"
#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/ssd_tier.h"
#include "listen_address.h"
#include "registration_guard.h"
#include "unix_socket.h"

#include "kvdepot/base/byte_order.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "kvdepot/base/hex.h"
#include "kvdepot/daemon/shm_arena.h"

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace kvdepot::daemon {
namespace asio = boost::asio;
using protocol::FrameHeader;
using protocol::Op;

namespace {

constexpr std::size_t kDiscardChunk = 64 * 1024;

// Completion condition for transfers of multi-MiB values: asio's transfer_all hands the socket at
// most 64 KiB per read or write call; this lets one call move whatever the socket buffer takes
// (several MiB), so a value costs a few system calls and handler runs instead of one per 64 KiB.
std::size_t TransferAllInLargeSteps(const boost::system::error_code& ec, std::size_t) {
  return ec ? 0 : std::size_t{64} << 20;
}

// One response frame: header (+ a small inline prefix), then either an owned body or a stored
// value (sent straight from the tier's buffer, kept alive until written). A frame whose content
// comes from an asynchronous store operation is queued first as a placeholder (`ready` false,
// identified by `slot`) so that frames go out in the order their requests were read.
struct Outgoing {
  std::array<std::byte, protocol::kFrameHeaderBytes + protocol::kGetItemPrefixBytes> head{};
  std::size_t head_len = protocol::kFrameHeaderBytes;
  std::vector<std::byte> body;
  ValueRef value;
  bool ready = true;
  std::uint64_t slot = 0;
  int pass_fd = -1;  // a descriptor to attach (SCM_RIGHTS) to the frame's first byte (MAP)

  std::size_t size() const { return head_len + body.size() + (value ? value->bytes().size() : 0); }
};

}  // namespace

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  virtual void BeginShutdown() = 0;  // finish what was read, then close
  virtual void ForceClose() = 0;
};

class Server::Impl {
 public:
  Impl(const ServerOptions& options, Store& store, RequestObserver* observer, TranscoderHooks hooks)
      : options_(options),
        timeouts_(options.request_timeout, options.idle_timeout),
        store_(store),
        observer_(observer),
        transcoder_(std::make_unique<Transcoder>(options.transcode_threads, std::move(hooks))) {
    // One io_context per I/O thread, each connection bound to one of them: a connection's
    // handlers always run on the same thread (no cross-thread wake-ups, no strand needed).
    for (std::uint32_t i = 0; i < std::max<std::uint32_t>(options.io_threads, 1); ++i) {
      contexts_.push_back(std::make_unique<asio::io_context>(1));
      guards_.emplace_back(asio::make_work_guard(*contexts_.back()));
    }
  }

  // Handlers still queued hold connections, whose destructors unregister here: destroy the
  // contexts while the rest of the server is alive.
  ~Impl() {
    Stop();
    transcoder_.reset();  // finishes queued jobs; their callbacks post to the contexts below
    tcp_.reset();
    unix_.reset();
    guards_.clear();
    contexts_.clear();
  }

  Status Start();
  void Stop();
  std::uint16_t tcp_port() const { return tcp_port_; }
  ServerStats stats() const {
    ServerStats s;
    s.connections_open = open_.load();
    s.connections_total = total_.load();
    s.requests = requests_.load();
    s.protocol_errors = protocol_errors_.load();
    s.auth_failures = auth_failures_.load();
    s.tls_handshake_failures = tls_failures_.load();
    s.bytes_in = bytes_in_.load();
    s.bytes_out = bytes_out_.load();
    s.request_timeouts = request_timeouts_.load();
    s.idle_timeouts = idle_timeouts_.load();
    return s;
  }

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
  // `scope` limits the namespaces listed (null: all).
  std::string StatsJson(const AuthScope* scope) const;
  // Counts a refused connection and logs it, at most once a second (with how many were not
  // logged since), so that a client hammering wrong tokens cannot flood the log.
  void OnAuthFailure(const std::string& peer, std::string_view reason);
  void OnTlsFailure(const std::string& peer, const std::string& error);
  void Probe(std::function<void()> done);
  using Registration = std::list<std::weak_ptr<ConnectionBase>>::iterator;
  // Tracks a live connection (for shutdown); its destructor calls Unregister with the result.
  Registration Register(const std::shared_ptr<ConnectionBase>& c) {
    std::lock_guard lock(mu_);
    ++open_;
    ++total_;
    return connections_.insert(connections_.end(), c);
  }
  // Called by a connection's RegistrationGuard; the decrement is its last access to *this.
  void Unregister(Registration it) {
    {
      std::lock_guard lock(mu_);
      connections_.erase(it);
    }
    --open_;
  }
  std::atomic<std::uint64_t> requests_{0}, protocol_errors_{0}, bytes_in_{0}, bytes_out_{0},
      request_timeouts_{0}, idle_timeouts_{0};
  std::atomic<std::uint64_t> auth_failures_{0}, tls_failures_{0};

 private:
  template <typename Acceptor>
  void Accept(Acceptor& acceptor);

  ServerOptions options_;
  ConnectionTimeouts timeouts_;
  Store& store_;
  RequestObserver* const observer_;
  std::unique_ptr<Transcoder> transcoder_;
  asio::io_context& io() { return *contexts_[0]; }  // acceptors and timers
  asio::io_context::executor_type NextExecutor() {
    return contexts_[next_context_++ % contexts_.size()]->get_executor();
  }

  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
  std::size_t next_context_ = 0;  // used by accept handlers, which all run on contexts_[0]
  std::unique_ptr<asio::ssl::context> tls_;  // set when the TCP listener speaks TLS
  // At most one refusal log line a second; false (and counted) when this one must be skipped.
  bool TakeRefusalLogTurn(std::uint64_t& not_logged);
  std::mutex log_mu_;                         // rate limit of the refusal log lines
  std::chrono::steady_clock::time_point last_refusal_log_{};
  std::uint64_t refusals_not_logged_ = 0;
  std::unique_ptr<asio::ip::tcp::acceptor> tcp_;
  std::unique_ptr<asio::local::stream_protocol::acceptor> unix_;
  std::uint16_t tcp_port_ = 0;
  ino_t unix_inode_ = 0;  // the socket file this server created (removed at Stop)
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::list<std::weak_ptr<ConnectionBase>> connections_;  // live ones; guarded by mu_
  std::atomic<std::uint64_t> open_{0}, total_{0};
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  bool stopped_ = false;
};

namespace {

// The scope of a connection on a server without authentication.
const AuthScope kEverything{true, {}};

template <typename Stream>
constexpr bool kIsTls = false;
template <typename Inner>
constexpr bool kIsTls<asio::ssl::stream<Inner>> = true;

// `Socket` is a plain TCP or Unix stream socket, or an asio::ssl::stream over a TCP socket.
template <typename Socket>
class Connection : public ConnectionBase,
                   public std::enable_shared_from_this<Connection<Socket>> {
 public:
  Connection(Socket socket, Server::Impl& server)
      : registration_(),
        socket_(std::move(socket)),
        server_(server),
        limits_(server.options().limits),
        scope_(server.options().auth ? nullptr : &kEverything),
        small_(limits_.max_key_bytes + 8u),
        watchdog_(socket_.get_executor()) {}
  void set_registration(Server::Impl::Registration r) { registration_.Set(&server_, r); }

  void Start() {
    if constexpr (kIsTls<Socket>) {
      asio::dispatch(socket_.get_executor(), [self = this->shared_from_this()] {
        self->last_progress_ = std::chrono::steady_clock::now();
        self->ArmWatchdog();                // a stalled handshake is an idle connection too
        self->awaiting_header_ = true;  // a stop while handshaking closes at once
        self->socket_.async_handshake(asio::ssl::stream_base::server, [self](auto ec) {
          self->awaiting_header_ = false;
          if (ec) {
            self->server_.OnTlsFailure(self->PeerName(), ec.message());
            return self->Close();
          }
          self->last_progress_ = std::chrono::steady_clock::now();
          self->ReadHeader();
        });
      });
    } else {
      asio::dispatch(socket_.get_executor(), [self = this->shared_from_this()] {
        self->last_progress_ = std::chrono::steady_clock::now();
        self->ArmWatchdog();
        self->ReadHeader();
      });
    }
  }

  // Graceful stop: requests already received (fully or partly, including pipelined ones waiting
  // in the socket buffer) are read and answered; then the connection closes.
  void BeginShutdown() override {
    asio::post(socket_.get_executor(), [self = this->shared_from_this()] {
      self->draining_ = true;
      boost::system::error_code ec;
      if (self->awaiting_header_ && self->socket_.lowest_layer().available(ec) == 0) {
        self->socket_.lowest_layer().cancel(ec);
      }
      self->MaybeClose();
    });
  }

  void ForceClose() override {
    asio::post(socket_.get_executor(), [self = this->shared_from_this()] { self->Close(); });
  }

 private:
  struct PendingGet;  // below
  struct LeaseBatch;

  // ---- reading ------------------------------------------------------------------------------
  void ReadHeader() {
    if (draining_ && !stop_reading_) {
      boost::system::error_code ec;
      if (socket_.lowest_layer().available(ec) == 0 || ec) stop_reading_ = true;  // nothing more
    }
    if (stop_reading_ || closed_) {
      MaybeClose();
      return;
    }
    if (queued_bytes_ > server_.options().max_output_bytes) {
      read_paused_ = true;  // resumed by the writer once the client has read enough
      return;
    }
    awaiting_header_ = true;
    // What is there of the header (usually all of it); the request's clock starts with its first
    // byte, before that the connection is idle.
    socket_.async_read_some(asio::buffer(header_), [self = this->shared_from_this()](
                                                       auto ec, std::size_t n) {
      self->Received(n);
      if (ec) return self->HeaderFailed();
      self->request_started_ = std::chrono::steady_clock::now();
      if (n == self->header_.size()) {
        self->awaiting_header_ = false;
        return self->OnHeader();
      }
      asio::async_read(self->socket_,
                       asio::buffer(self->header_.data() + n, self->header_.size() - n),
                       [self](auto ec2, std::size_t m) {
                         self->Received(m);
                         if (ec2) return self->HeaderFailed();
                         self->awaiting_header_ = false;
                         self->OnHeader();
                       });
    });
  }

  // EOF, reset or our own cancel while waiting for a header: stop reading, flush what is queued.
  void HeaderFailed() {
    awaiting_header_ = false;
    stop_reading_ = true;
    MaybeClose();
  }

  // Bytes arrived: the connection is making progress.
  void Received(std::size_t n) {
    server_.bytes_in_ += n;
    if (n > 0) last_progress_ = std::chrono::steady_clock::now();
  }

  // The current request has been read to its end.
  void RequestRead() { request_started_ = std::chrono::steady_clock::time_point::max(); }

  void OnHeader() {
    auto h = protocol::DecodeFrameHeader(header_, limits_, /*expect_response=*/false);
    if (!h.ok()) {
      ProtocolError(nullptr, h.status());
      return;
    }
    ++server_.requests_;
    if (server_.observer() != nullptr) {
      pending_.push_back({h->op(), std::chrono::steady_clock::now(), StatusCode::kOk});
    }
    if (scope_ == nullptr && h->op() != Op::kAuth) {
      // Nothing but AUTH before authentication; the body, if any, is not read.
      server_.OnAuthFailure(PeerName(), "request before auth");
      return Refuse(*h, Unauthenticated(std::string(protocol::OpName(h->op())) +
                                        " before auth: this server requires an AUTH token first"));
    }
    if (h->op() == Op::kPut) {
      StartPut(*h);
      return;
    }
    if (h->body_length > protocol::MaxRequestBody(h->op(), limits_)) {
      ProtocolError(&*h, Corruption(std::string(protocol::OpName(h->op())) + " body of " +
                                    std::to_string(h->body_length) + " bytes exceeds the " +
                                    std::to_string(protocol::MaxRequestBody(h->op(), limits_)) +
                                    " that any valid request can have"));
      return;
    }
    body_.resize(h->body_length);
    asio::async_read(socket_, asio::buffer(body_),
                     [self = this->shared_from_this(), hdr = *h](auto ec, std::size_t n) {
                       self->Received(n);
                       if (ec) {
                         self->Close();
                         return;
                       }
                       self->RequestRead();
                       self->Dispatch(hdr);
                       self->ReadHeader();
                     });
  }

  // ---- PUT: items are read one by one straight into their final buffers ---------------------
  // The results of one PUT frame; shared with the store callbacks of its items, which may finish
  // (durable writes) after the next request has started.
  struct PutResults {
    std::vector<StatusCode> codes;
    std::uint32_t pending = 0;  // items handed to the store whose callback has not run
    bool all_read = false;      // the frame has been read to its end
    std::uint64_t slot = 0;     // the response's placeholder, once all_read
  };
  struct PutState {
    FrameHeader header;
    std::uint32_t count = 0;
    std::uint32_t index = 0;
    std::uint64_t remaining = 0;  // body bytes not yet read
    std::shared_ptr<PutResults> results;
    std::string key;
    std::uint64_t value_length = 0;
    std::shared_ptr<Value> value;
  };

  void StartPut(const FrameHeader& h) {
    put_ = PutState{};
    put_.results = std::make_shared<PutResults>();
    put_.header = h;
    put_.remaining = h.body_length;
    ReadSmall(protocol::kPutCountBytes, [this] {
      put_.count = LoadLE<std::uint32_t>(small_.data());
      if (put_.count == 0 || put_.count > limits_.max_batch) {
        // A well-formed request over a limit: answered as a whole, its body skipped, the
        // connection kept (docs/protocol.md).
        RequestError(
            put_.header,
            OutOfRange("put: count " + std::to_string(put_.count) + " is out of range [1, " +
                       std::to_string(limits_.max_batch) + "] (limits.max_batch)"));
        return Discard(std::exchange(put_.remaining, 0), [this] {
          RequestRead();
          ReadHeader();
        });
      }
      put_.results->codes.reserve(put_.count);
      PutNextItem();
    });
  }

  // The item was refused with `code`; its bytes (already taken off put_.remaining) are read and
  // dropped, then the next item follows.
  void SkipItem(StatusCode code, std::uint64_t bytes) {
    put_.results->codes.push_back(code);
    Discard(bytes, [this] {
      ++put_.index;
      PutNextItem();
    });
  }

  void PutNextItem() {
    if (put_.index == put_.count) {
      if (put_.remaining != 0) {
        return ProtocolError(&put_.header, Corruption("put: " + std::to_string(put_.remaining) +
                                                      " trailing body bytes"));
      }
      RequestRead();
      put_.results->all_read = true;
      put_.results->slot = ReserveSlot();
      MaybeFinishPut(put_.header, *put_.results);
      return ReadHeader();
    }
    ReadSmall(protocol::kPutKeyLengthBytes, [this] {
      const auto key_len = LoadLE<std::uint16_t>(small_.data());
      if (key_len == 0 || key_len > limits_.max_key_bytes) {
        // Over the key limit: this item is out_of_range, the others go on. Its key is skipped,
        // then its value length read and its value skipped.
        if (key_len > put_.remaining) return BodyEndsInsideItem();
        put_.remaining -= key_len;
        return Discard(key_len, [this] {
          ReadSmall(protocol::kPutValueLengthBytes, [this] {
            const auto value_length = LoadLE<std::uint64_t>(small_.data());
            if (value_length > put_.remaining) return ValuePastBody();
            put_.remaining -= value_length;
            SkipItem(StatusCode::kOutOfRange, value_length);
          });
        });
      }
      ReadSmall(key_len + protocol::kPutValueLengthBytes, [this, key_len] {
        put_.key.assign(reinterpret_cast<const char*>(small_.data()), key_len);
        put_.value_length = LoadLE<std::uint64_t>(small_.data() + key_len);
        if (put_.value_length > put_.remaining) return ValuePastBody();
        put_.remaining -= put_.value_length;
        if (!scope_->AllowsKey(put_.key)) {  // decided before the store is touched
          return SkipItem(StatusCode::kPermissionDenied, put_.value_length);
        }
        if (put_.value_length > limits_.max_value_bytes) {
          return SkipItem(StatusCode::kOutOfRange, put_.value_length);
        }
        auto value = server_.store().Allocate(put_.key, put_.value_length);
        if (!value.ok()) return SkipItem(value.status().code(), put_.value_length);
        put_.value = std::move(*value);
        asio::async_read(socket_, asio::buffer(put_.value->mutable_bytes().data(),
                                               put_.value_length),
                         TransferAllInLargeSteps,
                         [self = this->shared_from_this()](auto ec, std::size_t n) {
                           self->Received(n);
                           if (ec) return self->Close();
                           self->StoreItem();
                           ++self->put_.index;
                           self->PutNextItem();
                         });
      });
    });
  }

  // Lengths that claim more than the frame's body holds: the frame is malformed.
  void BodyEndsInsideItem() {
    ProtocolError(&put_.header,
                  Corruption("put: frame body ends inside item " + std::to_string(put_.index)));
  }
  void ValuePastBody() {
    ProtocolError(&put_.header, Corruption("put: value " + std::to_string(put_.index) +
                                           " runs past the frame body"));
  }

  // Hands the item just read to the store; its status arrives through the callback.
  void StoreItem() {
    const std::size_t item = put_.results->codes.size();
    put_.results->codes.push_back(StatusCode::kOk);
    ++put_.results->pending;
    ++store_ops_;
    server_.store().Put(
        put_.key, std::move(put_.value),
        [self = this->shared_from_this(), results = put_.results, header = put_.header,
         item](Status status) {
          self->OnOwnThread([self, results, header, item, status] {
            self->StoreDone();
            results->codes[item] = status.code();
            --results->pending;
            self->MaybeFinishPut(header, *results);
          });
        },
        RouteOf(put_.header));
  }

  void MaybeFinishPut(const FrameHeader& header, const PutResults& results) {
    if (!results.all_read || results.pending != 0) return;
    FillSlot(results.slot, BodyFrame(header, StatusCode::kOk,
                                     protocol::EncodeStatusList(results.codes)));
  }

  // Runs `fn` on this connection's thread: now when already there (an inline store callback),
  // else posted (a callback from an SSD thread).
  template <typename Fn>
  void OnOwnThread(Fn fn) {
    if (socket_.get_executor().running_in_this_thread()) return fn();
    asio::post(socket_.get_executor(), std::move(fn));
  }

  // Reads and drops `n` body bytes of the current PUT (already taken off put_.remaining), then
  // runs `next`.
  template <typename Next>
  void Discard(std::uint64_t n, Next next) {
    if (n == 0) return next();
    discard_.resize(kDiscardChunk);
    const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(n, kDiscardChunk));
    asio::async_read(
        socket_, asio::buffer(discard_.data(), step),
        [self = this->shared_from_this(), left = n - step, next](auto ec, std::size_t r) {
          self->Received(r);
          if (ec) return self->Close();
          self->Discard(left, next);
        });
  }

  // Reads `n` (<= small_.size()) body bytes of the current PUT into small_, then runs `next`.
  template <typename Next>
  void ReadSmall(std::size_t n, Next next) {
    if (n > put_.remaining) return BodyEndsInsideItem();
    put_.remaining -= n;
    asio::async_read(socket_, asio::buffer(small_.data(), n),
                     [self = this->shared_from_this(), next](auto ec, std::size_t r) {
                       self->Received(r);
                       if (ec) return self->Close();
                       next();
                     });
  }

  // ---- request dispatch (everything but PUT) --------------------------------------------------
  void Dispatch(const FrameHeader& h) {
    switch (h.op()) {
      case Op::kPing: return SendBody(h, StatusCode::kOk, {});
      case Op::kGet: return HandleGet(h);
      case Op::kLookup: return HandleLookup(h);
      case Op::kDelete: return HandleDelete(h);
      case Op::kStats: {
        const std::string json = server_.StatsJson(scope_->all ? nullptr : scope_);
        const auto* p = reinterpret_cast<const std::byte*>(json.data());
        return SendBody(h, StatusCode::kOk, std::vector<std::byte>(p, p + json.size()));
      }
      case Op::kScan: return HandleScan(h);
      case Op::kAuth: return HandleAuth(h);
      case Op::kMap: return HandleMap(h);
      case Op::kLeaseGet: return HandleLeaseGet(h);
      case Op::kRelease: return HandleRelease(h);
      case Op::kGetAs: return HandleGetAs(h);
      case Op::kEventOrigin: return HandleEventOrigin(h);
      case Op::kClusterInfo: {
        const ClusterRouter* router = server_.store().router();
        const std::string json = router != nullptr ? router->InfoJson() : NotClusteredInfoJson();
        const auto* p = reinterpret_cast<const std::byte*>(json.data());
        return SendBody(h, StatusCode::kOk, std::vector<std::byte>(p, p + json.size()));
      }
      case Op::kPut: break;  // handled while reading
    }
  }

  // ---- KV events (docs/events.md) -------------------------------------------------------------
  // Names the engine instance and model of a namespace's chunks in the events' topic. Answered ok
  // with events off too (nothing to name them in): a client need not know the daemon's setup.
  void HandleEventOrigin(const FrameHeader& h) {
    auto origin = protocol::DecodeEventOriginRequest(body_);
    if (!origin.ok()) return RequestError(h, origin.status());
    if (!scope_->all && !scope_->AllowsNamespace(origin->namespace_id)) {
      return RequestError(h, PermissionDenied("event_origin: the namespace is outside the "
                                              "token's namespaces"));
    }
    if (KvEventPublisher* events = server_.store().events(); events != nullptr) {
      events->SetOrigin(origin->namespace_id, origin->instance, origin->model);
    }
    SendBody(h, StatusCode::kOk, {});
  }

  // ---- authentication and authorisation ------------------------------------------------------
  void HandleAuth(const FrameHeader& h) {
    auto token = protocol::DecodeAuthRequest(body_);
    if (!token.ok()) {
      if (scope_ == nullptr) server_.OnAuthFailure(PeerName(), "malformed auth");
      if (scope_ == nullptr) return Refuse(h, Unauthenticated(token.status().message()));
      return RequestError(h, token.status());
    }
    const Authenticator* auth = server_.options().auth.get();
    if (auth == nullptr) return SendBody(h, StatusCode::kOk, {});  // auth off: any token is fine
    const AuthScope* scope = auth->Check(*token);
    if (scope == nullptr) {
      server_.OnAuthFailure(PeerName(), "wrong token");
      return Refuse(h, Unauthenticated("auth: token not accepted"));
    }
    scope_ = scope;  // a later AUTH may switch to another token's scope
    SendBody(h, StatusCode::kOk, {});
  }

  // Answers `status` (unauthenticated) and closes the connection once it is written.
  void Refuse(const FrameHeader& h, const Status& status) {
    SendBody(h, status.code(), protocol::EncodeErrorBody(status.message()));
    stop_reading_ = true;
    MaybeClose();
  }

  // A request another cluster member forwarded is answered here, never forwarded again.
  static Route RouteOf(const FrameHeader& h) {
    return (h.flags & protocol::kFlagFromPeer) != 0 ? Route::kLocal : Route::kCluster;
  }

  // Every key is in an allowed namespace; else a permission error names the first that is not.
  Status CheckKeys(const std::vector<std::string_view>& keys) const {
    if (scope_->all) return Status::Ok();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!scope_->AllowsKey(keys[i])) {
        return PermissionDenied("key " + std::to_string(i) +
                                " is outside the namespaces this token may use");
      }
    }
    return Status::Ok();
  }

  std::string PeerName() {
    boost::system::error_code ec;
    if constexpr (std::is_same_v<typename Socket::lowest_layer_type::protocol_type,
                                 asio::ip::tcp>) {
      const auto ep = socket_.lowest_layer().remote_endpoint(ec);
      if (!ec) return ep.address().to_string() + ":" + std::to_string(ep.port());
      return "tcp:?";
    } else {
      return "unix";
    }
  }

  // ---- same-host zero-copy (docs/gpu-tier.md) -------------------------------------------------
  static constexpr bool kIsUnix = std::is_same_v<typename Socket::lowest_layer_type::protocol_type,
                                                 asio::local::stream_protocol>;

  void HandleMap(const FrameHeader& h) {
    if (!kIsUnix) {
      return RequestError(h, Unavailable("map: shared memory is offered on the Unix socket only"));
    }
    if (!scope_->all) {
      // The arena and the GPU pool hold every namespace's values: only an unrestricted token
      // may map them (docs/security.md).
      return RequestError(h, PermissionDenied("map: the shared arena spans every namespace; "
                                              "this token is restricted to some"));
    }
    protocol::MapInfo info;
    const auto& arena = server_.store().host().arena();
    if (arena) info.host_arena_bytes = arena->size();
    if (DeviceTier* d = server_.store().device()) info = MergeGpu(info, d->MapInfo());
    if (info.host_arena_bytes == 0 && info.gpu_pool_bytes == 0) {
      return RequestError(h, Unavailable("map: this daemon has no shared host arena "
                                         "(host.shared_memory) and no GPU tier"));
    }
    Outgoing out = BodyFrame(h, StatusCode::kOk, protocol::EncodeMapInfo(info));
    if (arena) out.pass_fd = arena->fd();
    Enqueue(std::move(out));
  }

  static protocol::MapInfo MergeGpu(protocol::MapInfo info, const protocol::MapInfo& gpu) {
    info.gpu_pool_bytes = gpu.gpu_pool_bytes;
    info.gpu_device = gpu.gpu_device;
    info.ipc_handle = gpu.ipc_handle;
    return info;
  }

  // LEASE_GET. Keys in shared memory now (the GPU pool, the host arena) are resolved at once; a
  // key only on the SSD tier is read through the store like a GET item (queued in get_backlog_,
  // at most kMaxOutstandingGets reads at a time, never on this thread), into a host-tier
  // allocation that is leased when it landed in the arena. Leases are granted in key order
  // (GrantLeases), so max_lease_bytes takes the keys in the order asked whatever order the reads
  // finish in; the one response frame fills the slot reserved here, keeping response order.
  void HandleLeaseGet(const FrameHeader& h) {
    if (!kIsUnix) {
      return RequestError(h, Unavailable("lease_get: shared memory is offered on the Unix socket "
                                         "only"));
    }
    auto q = protocol::DecodeLeaseGetRequest(body_, limits_);
    if (!q.ok()) return RequestError(h, q.status());
    if (Status s = CheckKeys(q->keys); !s.ok()) return RequestError(h, s);
    auto batch = std::make_shared<LeaseBatch>();
    batch->header = h;
    batch->leases.resize(q->keys.size());
    batch->holds.resize(q->keys.size());
    batch->state.assign(q->keys.size(), LeaseBatch::kResolved);
    batch->slot = ReserveSlot();
    Store& store = server_.store();
    for (std::uint32_t i = 0; i < q->keys.size(); ++i) {
      const std::string_view key = q->keys[i];
      protocol::Lease& l = batch->leases[i];
      std::shared_ptr<const void> hold;
      DeviceTier* device = store.device();
      if (device != nullptr && q->tier != protocol::Tier::kHost) {
        if (auto d = device->Lease(key)) {
          l.tier = protocol::Tier::kGpu;
          l.offset = d->offset;
          l.length = d->length;
          hold = std::move(d->hold);
        }
      }
      if (!hold && q->tier != protocol::Tier::kGpu) {
        if (store.ssd() != nullptr && store.Locate(key) == protocol::Tier::kSsd) {
          // Only on the SSD tier: read it into host memory (GrantLeases answers it).
          batch->state[i] = LeaseBatch::kReading;
          get_backlog_.push_back({h, std::string(key), i, false, 0, -1, batch});
          continue;
        }
        if (ValueRef v = store.host().Get(key)) {
          if (!LeaseHostValue(std::move(v), l, hold)) {
            l.status = StatusCode::kUnavailable;  // in private memory: use GET
          }
        }
      }
      if (!hold && l.status == StatusCode::kOk) {
        // Absent from the shared tiers: unavailable when another tier has it (use GET).
        l.status = store.Locate(key) == protocol::Tier::kNone ? StatusCode::kNotFound
                                                              : StatusCode::kUnavailable;
      }
      batch->holds[i] = std::move(hold);
    }
    GrantLeases(*batch);
    PumpGets();
  }

  // Fills `l` for a host value in the shared arena and moves it into `hold`; false (nothing
  // changed) for a value in private memory.
  static bool LeaseHostValue(ValueRef v, protocol::Lease& l, std::shared_ptr<const void>& hold) {
    if (!v->arena_offset()) return false;
    l.tier = protocol::Tier::kHost;
    l.offset = *v->arena_offset();
    l.length = v->bytes().size();
    hold = std::move(v);
    return true;
  }

  // A LEASE_GET key read from the SSD tier (through Store::Get, which verifies its checksum and
  // promotes per ssd.promotion): leased when the value is in the arena, whether or not it was
  // promoted; a miss (absent, or a copy that failed verification) is not_found; a read error
  // keeps its code (io_error, resource_exhausted without host memory for the buffer).
  void OnLeaseRead(const PendingGet& g, Result<Found> found) {
    StoreDone();
    LeaseBatch& b = *g.lease;
    protocol::Lease& l = b.leases[g.index];
    if (!found.ok()) {
      l.status = found.status().code();
    } else if (!LeaseHostValue(std::move(found->value), l, b.holds[g.index])) {
      l.status = StatusCode::kUnavailable;  // the arena had no range for it: use GET
    }
    b.state[g.index] = LeaseBatch::kReadDone;
    GrantLeases(b);
    PumpGets();
  }

  // Grants (or refuses over max_lease_bytes) the batch's resolved leases in key order, up to the
  // first key still being read; answers once every key is granted. A read finished but not yet
  // granted still counts as outstanding, so at most kMaxOutstandingGets values read for leases
  // wait in memory at a time.
  void GrantLeases(LeaseBatch& b) {
    while (b.granted < b.leases.size() && b.state[b.granted] != LeaseBatch::kReading) {
      const std::size_t i = b.granted++;
      if (b.state[i] == LeaseBatch::kReadDone) --outstanding_gets_;
      std::shared_ptr<const void> hold = std::move(b.holds[i]);
      protocol::Lease& l = b.leases[i];
      if (!hold || closed_) continue;
      if (leased_bytes_ + l.length > server_.options().max_lease_bytes) {
        l = protocol::Lease{};
        l.status = StatusCode::kResourceExhausted;
        continue;  // `hold` goes: the value is freed unless something else holds it
      }
      l.lease_id = ++last_lease_id_;
      leased_bytes_ += l.length;
      leases_.emplace(l.lease_id, HeldLease{std::move(hold), l.length});
    }
    if (b.granted == b.leases.size()) {
      FillSlot(b.slot, BodyFrame(b.header, StatusCode::kOk, protocol::EncodeLeases(b.leases)));
    }
  }

  void HandleRelease(const FrameHeader& h) {
    auto ids = protocol::DecodeLeaseIds(body_, limits_);
    if (!ids.ok()) return RequestError(h, ids.status());
    std::vector<StatusCode> codes;
    codes.reserve(ids->size());
    for (std::uint64_t id : *ids) {
      auto it = leases_.find(id);
      if (it == leases_.end()) {
        codes.push_back(StatusCode::kNotFound);
        continue;
      }
      leased_bytes_ -= it->second.length;
      leases_.erase(it);  // the last reference may free the value's range
      codes.push_back(StatusCode::kOk);
    }
    SendBody(h, StatusCode::kOk, protocol::EncodeStatusList(codes));
  }

  void HandleGetAs(const FrameHeader& h) {
    auto q = protocol::DecodeGetAsRequest(body_, limits_);
    if (!q.ok()) return RequestError(h, q.status());
    if (Status s = CheckKeys(q->keys); !s.ok()) return RequestError(h, s);
    for (std::uint32_t i = 0; i < q->keys.size(); ++i) {
      get_backlog_.push_back({h, std::string(q->keys[i]), i, i + 1 == q->keys.size(), ReserveSlot(),
                              static_cast<int>(q->codec), nullptr});
    }
    PumpGets();
  }

  // A GET_AS item found in the store: transcoded on the worker pool, then answered here.
  void Transcode(const PendingGet& g, Found found) {
    const protocol::Tier tier = found.tier;
    server_.transcoder().Submit(
        std::move(found.value), static_cast<CodecId>(g.target_codec),
        [self = this->shared_from_this(), work = asio::make_work_guard(socket_.get_executor()),
         h = g.header, i = g.index, last = g.last, slot = g.slot,
         tier](Result<std::vector<std::byte>> out) {
          asio::post(work.get_executor(), [self, h, i, last, slot, tier,
                                           out = std::move(out)]() mutable {
            --self->outstanding_gets_;
            self->StoreDone();
            self->FillSlot(slot, TranscodedFrame(h, i, last, tier, std::move(out)));
            self->PumpGets();
          });
        });
  }

  static Outgoing TranscodedFrame(const FrameHeader& h, std::uint32_t index, bool last,
                                  protocol::Tier tier, Result<std::vector<std::byte>> out) {
    Outgoing frame;
    FrameHeader r;
    r.type = h.type | protocol::kResponseBit;
    r.request_id = h.request_id;
    r.flags = last ? 0 : protocol::kFlagMore;
    r.status = static_cast<std::uint16_t>(out.ok() ? StatusCode::kOk : out.status().code());
    if (out.ok()) frame.body = std::move(*out);
    r.body_length = static_cast<std::uint32_t>(protocol::kGetItemPrefixBytes + frame.body.size());
    protocol::EncodeFrameHeader(r, frame.head.data());
    protocol::EncodeGetItemPrefix(index, out.ok() ? tier : protocol::Tier::kNone,
                                  frame.head.data() + protocol::kFrameHeaderBytes);
    frame.head_len = protocol::kFrameHeaderBytes + protocol::kGetItemPrefixBytes;
    return frame;
  }

  void HandleGet(const FrameHeader& h) {
    auto keys = protocol::DecodeKeyList(body_, limits_);
    if (!keys.ok()) return RequestError(h, keys.status());
    if (Status s = CheckKeys(*keys); !s.ok()) return RequestError(h, s);
    for (std::uint32_t i = 0; i < keys->size(); ++i) {
      get_backlog_.push_back(
          {h, std::string((*keys)[i]), i, i + 1 == keys->size(), ReserveSlot(), -1, nullptr});
    }
    PumpGets();
  }

  // Starts queued GET lookups while fewer than kMaxOutstandingGets are unanswered and the queued
  // output is under max_output_bytes: a GET of many SSD-resident keys reads them a few at a time
  // instead of allocating buffers for all of them at once. Host hits answer inline. GET_AS and
  // LEASE_GET items of SSD-resident keys queue here too.
  void PumpGets() {
    if (pumping_) return;  // an inline answer inside the loop below; the loop continues
    pumping_ = true;
    while (!get_backlog_.empty() && outstanding_gets_ < kMaxOutstandingGets &&
           queued_bytes_ < server_.options().max_output_bytes && !closed_) {
      PendingGet g = std::move(get_backlog_.front());
      get_backlog_.pop_front();
      ++outstanding_gets_;
      ++store_ops_;
      const Route route = g.lease ? Route::kLocal : RouteOf(g.header);  // leases: this node's
      server_.store().Get(
          g.key,
          [self = this->shared_from_this(), g](Result<Found> found) {
            self->OnOwnThread([self, g, found = std::move(found)]() mutable {
              if (g.lease) return self->OnLeaseRead(g, std::move(found));
              // A transcode keeps the store operation open until its answer (Transcode).
              if (g.target_codec >= 0 && found.ok()) return self->Transcode(g, std::move(*found));
              --self->outstanding_gets_;
              self->StoreDone();
              self->FillSlot(g.slot, GetItemFrame(g.header, g.index, g.last, std::move(found)));
              self->PumpGets();
            });
          },
          route);
    }
    pumping_ = false;
  }

  static Outgoing GetItemFrame(const FrameHeader& h, std::uint32_t index, bool last,
                               Result<Found> found) {
    Outgoing out;
    FrameHeader r;
    r.type = h.type | protocol::kResponseBit;
    r.request_id = h.request_id;
    r.flags = last ? 0 : protocol::kFlagMore;
    r.status = static_cast<std::uint16_t>(found.ok() ? StatusCode::kOk : found.status().code());
    r.body_length = static_cast<std::uint32_t>(protocol::kGetItemPrefixBytes +
                                               (found.ok() ? found->value->bytes().size() : 0));
    protocol::EncodeFrameHeader(r, out.head.data());
    protocol::EncodeGetItemPrefix(index, found.ok() ? found->tier : protocol::Tier::kNone,
                                  out.head.data() + protocol::kFrameHeaderBytes);
    out.head_len = protocol::kFrameHeaderBytes + protocol::kGetItemPrefixBytes;
    if (found.ok()) out.value = std::move(found->value);
    return out;
  }

  void HandleLookup(const FrameHeader& h) {
    auto keys = protocol::DecodeKeyList(body_, limits_);
    if (!keys.ok()) return RequestError(h, keys.status());
    if (Status s = CheckKeys(*keys); !s.ok()) return RequestError(h, s);
    // In a cluster the keys held elsewhere are asked of their owners in one parallel round.
    const std::uint64_t slot = ReserveSlot();
    ++store_ops_;
    server_.store().LocateMany(
        *keys, RouteOf(h),
        [self = this->shared_from_this(), h, slot](std::vector<protocol::Tier> tiers) {
          self->OnOwnThread([self, h, slot, tiers = std::move(tiers)]() mutable {
            self->StoreDone();
            protocol::LookupResult result;
            while (result.prefix_length < tiers.size() &&
                   tiers[result.prefix_length] != protocol::Tier::kNone) {
              ++result.prefix_length;
            }
            result.tiers = std::move(tiers);
            if (RequestObserver* o = self->server_.observer()) {
              o->OnLookup(result.prefix_length, static_cast<std::uint32_t>(result.tiers.size()));
            }
            self->FillSlot(slot,
                           BodyFrame(h, StatusCode::kOk, protocol::EncodeLookupResult(result)));
          });
        });
  }

  void HandleDelete(const FrameHeader& h) {
    auto keys = protocol::DecodeKeyList(body_, limits_);
    if (!keys.ok()) return RequestError(h, keys.status());
    if (Status s = CheckKeys(*keys); !s.ok()) return RequestError(h, s);
    // In a cluster each key is erased at its owners too; the answer waits for all of them.
    struct Deletes {
      std::vector<StatusCode> codes;
      std::size_t pending = 0;
    };
    auto d = std::make_shared<Deletes>();
    d->codes.assign(keys->size(), StatusCode::kNotFound);
    d->pending = keys->size();
    const std::uint64_t slot = ReserveSlot();
    ++store_ops_;
    for (std::size_t i = 0; i < keys->size(); ++i) {
      server_.store().Delete(
          (*keys)[i], RouteOf(h), [self = this->shared_from_this(), h, slot, d, i](bool found) {
            self->OnOwnThread([self, h, slot, d, i, found] {
              if (found) d->codes[i] = StatusCode::kOk;
              if (--d->pending != 0) return;
              self->StoreDone();
              self->FillSlot(slot,
                             BodyFrame(h, StatusCode::kOk, protocol::EncodeStatusList(d->codes)));
            });
          });
    }
  }

  void HandleScan(const FrameHeader& h) {
    auto q = protocol::DecodeScanRequest(body_, limits_);
    if (!q.ok()) return RequestError(h, q.status());
    if (!scope_->all) return HandleScopedScan(h, *q);
    const protocol::ScanResult result =
        server_.store().Scan(q->prefix, q->cursor, q->limit, q->tier);
    SendBody(h, StatusCode::kOk, protocol::EncodeScanResult(result));
  }

  // SCAN for a namespace-restricted token: each allowed namespace matching the prefix is scanned
  // in byte order (so other namespaces' keys are never even read), keeping only 48-byte chunk
  // keys. A prefix that names a namespace the token may not use is a permission error.
  void HandleScopedScan(const FrameHeader& h, const protocol::ScanRequest& q) {
    if (q.prefix.size() >= kNamespaceIdBytes &&
        !scope_->AllowsNamespace(std::string_view(q.prefix).substr(0, kNamespaceIdBytes))) {
      return RequestError(h, PermissionDenied("scan: the prefix names a namespace this token "
                                              "may not use"));
    }
    protocol::ScanResult out;
    for (const std::string& ns : scope_->namespaces) {
      const std::string_view want(q.prefix);
      if (want.size() >= ns.size() ? want.substr(0, ns.size()) != ns
                                   : std::string_view(ns).substr(0, want.size()) != want) {
        continue;
      }
      if (!q.cursor.empty() && std::string_view(q.cursor).substr(0, ns.size()) > ns) continue;
      if (out.entries.size() == q.limit) {  // more namespaces follow: resume after the last key
        out.next_cursor = out.entries.back().key;
        break;
      }
      const std::string& prefix = want.size() > ns.size() ? q.prefix : ns;
      protocol::ScanResult part = server_.store().Scan(
          prefix, q.cursor, q.limit - static_cast<std::uint32_t>(out.entries.size()), q.tier);
      for (auto& e : part.entries) {
        if (e.key.size() == 48) out.entries.push_back(std::move(e));
      }
      if (!part.next_cursor.empty()) {
        out.next_cursor = std::move(part.next_cursor);
        break;
      }
    }
    SendBody(h, StatusCode::kOk, protocol::EncodeScanResult(out));
  }

  // A well-formed request the server refuses (over a limit, bad field): an error response; the
  // connection stays open. A malformed body (kCorruption) closes it like a malformed header.
  void RequestError(const FrameHeader& h, const Status& status) {
    if (status.code() == StatusCode::kCorruption) return ProtocolError(&h, status);
    SendBody(h, status.code(), protocol::EncodeErrorBody(status.message()));
  }

  // A malformed frame: one `corruption` answer, then the connection closes. The answer carries
  // the request's operation and id when its header was valid (`request`), else PING's type and
  // id 0 (the connection as a whole).
  void ProtocolError(const FrameHeader* request, const Status& status) {
    ++server_.protocol_errors_;
    FrameHeader h;
    h.type = request != nullptr ? request->type : static_cast<std::uint8_t>(Op::kPing);
    h.request_id = request != nullptr ? request->request_id : 0;
    SendBody(h, StatusCode::kCorruption, protocol::EncodeErrorBody(status.message()));
    stop_reading_ = true;
    MaybeClose();
  }

  // ---- writing --------------------------------------------------------------------------------
  void SendBody(const FrameHeader& request, StatusCode status, std::vector<std::byte> body) {
    Enqueue(BodyFrame(request, status, std::move(body)));
  }

  static Outgoing BodyFrame(const FrameHeader& request, StatusCode status,
                            std::vector<std::byte> body) {
    Outgoing out;
    FrameHeader r;
    r.type = request.type | protocol::kResponseBit;
    r.request_id = request.request_id;
    r.status = static_cast<std::uint16_t>(status);
    r.body_length = static_cast<std::uint32_t>(body.size());
    protocol::EncodeFrameHeader(r, out.head.data());
    out.body = std::move(body);
    return out;
  }

  void Enqueue(Outgoing out) {
    if (closed_) return;
    queued_bytes_ += out.size();
    queue_.push_back(std::move(out));
    if (!writing_) WriteSome();
  }

  // Queues a placeholder for a frame that an asynchronous store operation will produce.
  std::uint64_t ReserveSlot() {
    Outgoing placeholder;
    placeholder.ready = false;
    placeholder.slot = ++last_slot_;
    if (!closed_) queue_.push_back(std::move(placeholder));
    return last_slot_;
  }

  // Replaces placeholder `slot` with `out` (nothing when the connection closed meanwhile).
  void FillSlot(std::uint64_t slot, Outgoing out) {
    for (Outgoing& o : queue_) {
      if (o.ready || o.slot != slot) continue;
      o = std::move(out);
      queued_bytes_ += o.size();
      if (!writing_) WriteSome();
      return;
    }
  }

  void WriteSome() {
    if (queue_.empty() || !queue_.front().ready || closed_) {
      writing_ = false;
      MaybeClose();
      return;
    }
    writing_ = true;
    if (queue_.front().pass_fd >= 0) return SendWithFd();
    // Gather up to 64 queued frames into one write.
    buffers_.clear();
    in_flight_ = 0;
    for (auto it = queue_.begin();
         it != queue_.end() && it->ready && it->pass_fd < 0 && in_flight_ < 64;
         ++it, ++in_flight_) {
      buffers_.emplace_back(it->head.data(), it->head_len);
      if (!it->body.empty()) buffers_.emplace_back(it->body.data(), it->body.size());
      if (it->value && !it->value->bytes().empty()) {
        buffers_.emplace_back(it->value->bytes().data(), it->value->bytes().size());
      }
    }
    asio::async_write(socket_, buffers_, TransferAllInLargeSteps,
                      [self = this->shared_from_this()](auto ec, std::size_t n) {
                        self->server_.bytes_out_ += n;
                        if (ec || self->closed_) return self->WriteEnded();
                        self->last_progress_ = std::chrono::steady_clock::now();
                        for (std::size_t i = 0; i < self->in_flight_; ++i) {
                          if (!self->pending_.empty()) self->ObserveWritten(self->queue_.front());
                          self->queued_bytes_ -= self->queue_.front().size();
                          self->queue_.pop_front();
                        }
                        self->PumpGets();
                        if (self->read_paused_ &&
                            self->queued_bytes_ <= self->server_.options().max_output_bytes / 2) {
                          self->read_paused_ = false;
                          self->ReadHeader();
                        }
                        self->WriteSome();
                      });
  }

  // Sends the front frame (small: a MAP response) with its descriptor as SCM_RIGHTS on the first
  // byte, without blocking: retried when the socket is writable; a partial send finishes with an
  // ordinary write (the descriptor went with the first byte).
  void SendWithFd() {
    Outgoing& f = queue_.front();
    fd_frame_.assign(f.head.begin(), f.head.begin() + static_cast<std::ptrdiff_t>(f.head_len));
    fd_frame_.insert(fd_frame_.end(), f.body.begin(), f.body.end());
    iovec iov{fd_frame_.data(), fd_frame_.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &f.pass_fd, sizeof(int));
    auto& raw = socket_.lowest_layer();  // only Unix sockets pass descriptors
    const ssize_t n = ::sendmsg(raw.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      raw.async_wait(asio::socket_base::wait_write, [self = this->shared_from_this()](auto ec) {
        if (ec || self->closed_) return self->WriteEnded();
        self->SendWithFd();
      });
      return;
    }
    if (n < 0) return WriteEnded();
    server_.bytes_out_ += static_cast<std::uint64_t>(n);
    f.pass_fd = -1;
    auto finish = [self = this->shared_from_this()](auto ec, std::size_t written) {
      self->server_.bytes_out_ += written;
      if (ec || self->closed_) return self->WriteEnded();
      if (!self->pending_.empty()) self->ObserveWritten(self->queue_.front());
      self->queued_bytes_ -= self->queue_.front().size();
      self->queue_.pop_front();
      self->WriteSome();
    };
    const std::size_t sent = static_cast<std::size_t>(n);
    if (sent == fd_frame_.size()) return finish(boost::system::error_code{}, 0);
    asio::async_write(socket_, asio::buffer(fd_frame_.data() + sent, fd_frame_.size() - sent),
                      std::move(finish));
  }

  // ---- metrics ------------------------------------------------------------------------------
  // A written frame folds its status into the oldest unanswered request (responses go out in
  // request order, so it is that request's frame); the last frame (no kFlagMore) reports it.
  void ObserveWritten(const Outgoing& frame) {
    PendingRequest& r = pending_.front();
    const std::byte* head = frame.head.data();
    const auto flags = LoadLE<std::uint16_t>(head + 6);
    const auto status = static_cast<StatusCode>(LoadLE<std::uint16_t>(head + 20));
    if (r.status == StatusCode::kOk) r.status = status;
    const Op op = static_cast<Op>(static_cast<std::uint8_t>(head[5]) & ~protocol::kResponseBit);
    if (r.status == StatusCode::kOk && (op == Op::kPut || op == Op::kDelete) &&
        frame.body.size() >= 4) {
      for (std::size_t at = 4; at + 2 <= frame.body.size(); at += 2) {  // u32 count, u16 codes
        const auto code = static_cast<StatusCode>(LoadLE<std::uint16_t>(frame.body.data() + at));
        if (code != StatusCode::kOk) {
          r.status = code;
          break;
        }
      }
    }
    if ((flags & protocol::kFlagMore) != 0) return;
    server_.observer()->OnRequest(r.op, r.status, std::chrono::steady_clock::now() - r.start);
    pending_.pop_front();
  }

  // ---- timeouts -----------------------------------------------------------------------------
  // A store operation answered: progress (the idle clock does not run while one is pending).
  void StoreDone() {
    --store_ops_;
    last_progress_ = std::chrono::steady_clock::now();
  }

  // The watchdog ticks at a quarter of the shortest timeout (10 ms to 1 s; 1 s with both off)
  // while the connection is open, reading the server's current timeouts (SIGHUP may change
  // them) at every tick; a timeout therefore fires up to a tick late.
  void ArmWatchdog() {
    if (closed_) return;
    watchdog_.expires_after(server_.timeouts().Tick());
    watchdog_.async_wait([self = this->shared_from_this()](boost::system::error_code ec) {
      if (!ec && !self->closed_) self->CheckTimeouts();
    });
  }

  // Closes a connection whose request has been arriving for longer than request_timeout, or that
  // moved no byte either way for idle_timeout while no store operation was pending (an idle
  // client, or one that stopped reading its responses).
  void CheckTimeouts() {
    using Expired = ConnectionTimeouts::Expired;
    switch (server_.timeouts().Check(std::chrono::steady_clock::now(), request_started_,
                                     last_progress_, store_ops_ != 0)) {
      case Expired::kRequest: ++server_.request_timeouts_; return Close();
      case Expired::kIdle: ++server_.idle_timeouts_; return Close();
      case Expired::kNone: break;
    }
    ArmWatchdog();
  }

  // The end of a write that failed or found the connection closed meanwhile (a handler queued
  // with success can run after Close): the frames it was writing are gone with the rest.
  void WriteEnded() {
    writing_ = false;
    queue_.clear();
    Close();
  }

  void MaybeClose() {
    if (stop_reading_ && !writing_ && queue_.empty() && !awaiting_header_) Close();
  }

  // Closes the socket; the queued frames go now, or, while a write is in flight (it still points
  // into them), when its handler runs (WriteEnded).
  void Close() {
    if (closed_) return;
    closed_ = true;
    if (!writing_) queue_.clear();
    watchdog_.cancel();
    boost::system::error_code ec;
    socket_.lowest_layer().shutdown(asio::socket_base::shutdown_both, ec);
    socket_.lowest_layer().close(ec);
  }

  RegistrationGuard<Server::Impl> registration_;  // first: unregisters after the rest is gone
  Socket socket_;
  Server::Impl& server_;
  const protocol::Limits limits_;
  const AuthScope* scope_;  // null until a successful AUTH (auth on); owned by the Authenticator
  std::array<std::byte, protocol::kFrameHeaderBytes> header_{};
  std::vector<std::byte> body_;
  std::vector<std::byte> small_;  // a PUT item's key length, key and value length
  std::vector<std::byte> discard_;
  PutState put_;
  struct PendingRequest {  // a request read and not yet answered (only with an observer)
    Op op;
    std::chrono::steady_clock::time_point start;
    StatusCode status;
  };
  std::deque<PendingRequest> pending_;
  std::deque<Outgoing> queue_;
  std::vector<asio::const_buffer> buffers_;
  std::vector<std::byte> fd_frame_;  // the frame SendWithFd is sending
  std::size_t in_flight_ = 0;
  std::uint64_t queued_bytes_ = 0;
  std::uint64_t last_slot_ = 0;
  // A LEASE_GET being answered: its keys' leases, resolved at once or by an SSD read, granted
  // in key order (GrantLeases), then sent as one frame into `slot`.
  struct LeaseBatch {
    enum State : std::uint8_t { kResolved, kReading, kReadDone };
    FrameHeader header;
    std::vector<protocol::Lease> leases;
    std::vector<std::shared_ptr<const void>> holds;  // a resolved key's value until granted
    std::vector<State> state;
    std::size_t granted = 0;  // keys [0, granted) are final
    std::uint64_t slot = 0;
  };
  // GET keys whose lookup has not started (their placeholders are queued already).
  struct PendingGet {
    FrameHeader header;
    std::string key;
    std::uint32_t index;
    bool last;
    std::uint64_t slot;  // GET, GET_AS: the frame's placeholder (LEASE_GET: the batch's)
    int target_codec;    // GET_AS: the CodecId to transcode into; GET: -1
    std::shared_ptr<LeaseBatch> lease;  // LEASE_GET: the batch this key belongs to
  };
  static constexpr std::uint32_t kMaxOutstandingGets = 16;
  // Leases of this connection (LEASE_GET): each holds its value (host) or pool range (GPU) until
  // RELEASE or until the connection is destroyed.
  struct HeldLease {
    std::shared_ptr<const void> hold;
    std::uint64_t length;
  };
  std::unordered_map<std::uint64_t, HeldLease> leases_;
  std::uint64_t last_lease_id_ = 0;
  std::uint64_t leased_bytes_ = 0;
  std::deque<PendingGet> get_backlog_;
  std::uint32_t outstanding_gets_ = 0;
  bool pumping_ = false;
  bool writing_ = false;
  bool read_paused_ = false;
  bool stop_reading_ = false;
  bool draining_ = false;  // the server is stopping
  bool awaiting_header_ = false;
  bool closed_ = false;
  asio::steady_timer watchdog_;
  std::chrono::steady_clock::time_point last_progress_{};
  // The first byte of the request being read (max: none).
  std::chrono::steady_clock::time_point request_started_ =
      std::chrono::steady_clock::time_point::max();
  std::uint32_t store_ops_ = 0;                       // store calls whose callback has not run
};

}  // namespace

template <typename Acceptor>
void Server::Impl::Accept(Acceptor& acceptor) {
  using SocketType = typename Acceptor::protocol_type::socket::template rebind_executor<
      asio::io_context::executor_type>::other;
  acceptor.async_accept(NextExecutor(), [this, &acceptor](boost::system::error_code ec,
                                                          SocketType socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      Accept(acceptor);  // e.g. EMFILE: keep serving the connections we have
      return;
    }
    if constexpr (std::is_same_v<typename Acceptor::protocol_type, asio::ip::tcp>) {
      boost::system::error_code ignored;
      socket.set_option(asio::ip::tcp::no_delay(true), ignored);
      if (tls_) {
        using TlsStream = asio::ssl::stream<SocketType>;
        auto conn =
            std::make_shared<Connection<TlsStream>>(TlsStream(std::move(socket), *tls_), *this);
        conn->set_registration(Register(conn));
        conn->Start();
        Accept(acceptor);
        return;
      }
    }
    auto conn = std::make_shared<Connection<SocketType>>(std::move(socket), *this);
    conn->set_registration(Register(conn));
    conn->Start();
    Accept(acceptor);
  });
}

Status Server::Impl::Start() {
  boost::system::error_code ec;
  if (options_.tls.enabled()) {
    const TlsOptions& t = options_.tls;
    // Why a certificate or key did not load. asio's text for OpenSSL 3's system errors (a
    // missing or unreadable file) is only "asio.ssl error"; their reason is the errno.
    const auto why = [](const boost::system::error_code& error) {
#if defined(ERR_SYSTEM_ERROR)
      const auto e = static_cast<unsigned long>(static_cast<unsigned int>(error.value()));
      if (error.category() == asio::error::get_ssl_category() && ERR_SYSTEM_ERROR(e)) {
        return std::system_category().message(static_cast<int>(ERR_GET_REASON(e)));
      }
#endif
      return error.message();
    };
    tls_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    tls_->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                          asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                          asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                      ec);
    if (tls_->use_certificate_chain_file(t.cert_file, ec); ec) {
      return InvalidArgument("tls.cert_file " + t.cert_file + ": " + why(ec));
    }
    if (tls_->use_private_key_file(t.key_file, asio::ssl::context::pem, ec); ec) {
      return InvalidArgument("tls.key_file " + t.key_file + ": " + why(ec));
    }
    if (!t.client_ca_file.empty()) {
      if (tls_->load_verify_file(t.client_ca_file, ec); ec) {
        return InvalidArgument("tls.client_ca_file " + t.client_ca_file + ": " + why(ec));
      }
      tls_->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert, ec);
    }
  }
  if (!options_.listen.empty()) {
    KVD_ASSIGN_OR_RETURN(const asio::ip::tcp::endpoint endpoint,
                         ParseListenAddress("listen address", options_.listen));
    tcp_ = std::make_unique<asio::ip::tcp::acceptor>(io());
    if (tcp_->open(endpoint.protocol(), ec); !ec) {
      tcp_->set_option(asio::socket_base::reuse_address(true), ec);
      tcp_->bind(endpoint, ec);
    }
    if (!ec) tcp_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Unavailable("cannot listen on " + options_.listen + ": " + ec.message());
    tcp_port_ = tcp_->local_endpoint().port();
    Accept(*tcp_);
  }
  if (!options_.unix_path.empty()) {
    // A stale socket from a previous run is replaced; a live daemon's is never taken over.
    KVD_RETURN_IF_ERROR(ClaimUnixSocketPath(options_.unix_path));
    unix_ = std::make_unique<asio::local::stream_protocol::acceptor>(io());
    const asio::local::stream_protocol::endpoint endpoint(options_.unix_path);
    if (unix_->open(endpoint.protocol(), ec); !ec) unix_->bind(endpoint, ec);
    if (!ec) unix_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Unavailable("cannot listen on unix:" + options_.unix_path + ": " + ec.message());
    KVD_RETURN_IF_ERROR(SetUnixSocketAccess(options_.unix_path, options_.unix_mode,
                                            options_.unix_group, &unix_inode_));
    Accept(*unix_);
  }
  if (!tcp_ && !unix_) return InvalidArgument("no listener configured (listen and unix are empty)");
  for (auto& ctx : contexts_) {
    threads_.emplace_back([c = ctx.get()] { c->run(); });
  }
  return Status::Ok();
}

void Server::Impl::Stop() {
  if (stopped_) return;
  stopped_ = true;
  asio::post(io(), [this] {
    boost::system::error_code ec;
    if (tcp_) tcp_->close(ec);
    if (unix_) unix_->close(ec);
  });
  std::vector<std::shared_ptr<ConnectionBase>> live;
  {
    std::lock_guard lock(mu_);
    for (auto& weak : connections_) {
      if (auto c = weak.lock()) live.push_back(std::move(c));
    }
  }
  for (auto& c : live) c->BeginShutdown();
  live.clear();
  // Give connections drain_timeout to finish, then close whatever is left.
  auto timer = std::make_shared<asio::steady_timer>(io(), options_.drain_timeout);
  timer->async_wait([this, timer](auto ec) {
    if (ec) return;
    std::vector<std::shared_ptr<ConnectionBase>> left;  // released outside the lock: a last
    {                                                   // reference runs Unregister, which locks
      std::lock_guard lock(mu_);
      for (auto& weak : connections_) {
        if (auto c = weak.lock()) left.push_back(std::move(c));
      }
    }
    for (auto& c : left) c->ForceClose();
  });
  // Without work guards each context returns once its connections are gone; the timer keeps
  // contexts_[0] busy until every connection is gone, then it is cancelled.
  for (auto& g : guards_) g.reset();
  std::atomic<bool> contexts_returned{false};
  std::thread watcher([this, timer, &contexts_returned] {
    while (open_.load() > 0 && !contexts_returned.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    asio::post(io(), [timer] { timer->cancel(); });
  });
  for (auto& t : threads_) t.join();
  contexts_returned = true;
  watcher.join();
  threads_.clear();
  // A connection whose last reference is held off the I/O threads (a store callback on the SSD
  // tier's thread) may still be going: *this must outlive it (RegistrationGuard). Such a callback
  // posts its last step to the connection's context, which may have returned from run() already:
  // run what was posted here (no I/O thread is left, so handlers still run one at a time).
  while (open_.load() > 0) {
    for (auto& ctx : contexts_) {
      ctx->restart();
      ctx->poll();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (unix_inode_ != 0) RemoveOwnUnixSocket(options_.unix_path, unix_inode_);
}

bool Server::Impl::TakeRefusalLogTurn(std::uint64_t& not_logged) {
  std::lock_guard lock(log_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_refusal_log_ < std::chrono::seconds(1)) {
    ++refusals_not_logged_;
    return false;
  }
  last_refusal_log_ = now;
  not_logged = std::exchange(refusals_not_logged_, 0);
  return true;
}

void Server::Impl::OnAuthFailure(const std::string& peer, std::string_view reason) {
  ++auth_failures_;
  std::uint64_t not_logged = 0;
  if (!TakeRefusalLogTurn(not_logged)) return;
  Log(LogLevel::kWarn, "connection refused: authentication failed",
      {{"peer", peer}, {"reason", std::string(reason)},
       {"refusals_not_logged", std::to_string(not_logged)}});
}

void Server::Impl::OnTlsFailure(const std::string& peer, const std::string& error) {
  ++tls_failures_;
  std::uint64_t not_logged = 0;
  if (!TakeRefusalLogTurn(not_logged)) return;
  Log(LogLevel::kWarn, "connection refused: TLS handshake failed",
      {{"peer", peer}, {"error", error}, {"refusals_not_logged", std::to_string(not_logged)}});
}

std::string Server::Impl::StatsJson(const AuthScope* scope) const {
  using Json = nlohmann::ordered_json;  // members in the order docs/protocol.md lists them
  const HostTierStats h = store_.host().stats();
  const ServerStats s = stats();
  const auto uptime = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now() - started_)
                          .count();
  Json out = {{"uptime_s", static_cast<std::uint64_t>(uptime)},
              {"connections_open", s.connections_open},
              {"connections_total", s.connections_total},
              {"requests", s.requests},
              {"protocol_errors", s.protocol_errors},
              {"auth_failures", s.auth_failures},
              {"tls_handshake_failures", s.tls_handshake_failures},
              {"bytes_in", s.bytes_in},
              {"bytes_out", s.bytes_out},
              {"request_timeouts", s.request_timeouts},
              {"idle_timeouts", s.idle_timeouts}};
  // The limits a client meets (docs/protocol.md): the CLI quotes them when a PUT is refused.
  out["limits"] = {{"max_key_bytes", options_.limits.max_key_bytes},
                   {"max_value_bytes", options_.limits.max_value_bytes},
                   {"max_batch", options_.limits.max_batch},
                   {"max_body_bytes", options_.limits.max_body_bytes}};
  Json host = {{"bytes", h.bytes},     {"capacity", h.capacity}, {"chunks", h.chunks},
               {"hits", h.hits},       {"misses", h.misses},     {"evictions", h.evictions},
               {"inserts", h.inserts}, {"rejected", h.rejected}};
  if (h.arena_bytes != 0) {
    host["arena_bytes"] = h.arena_bytes;
    host["arena_used"] = h.arena_used;
    host["arena_fallbacks"] = h.arena_fallbacks;
  }
  host["policy"] = EvictionPolicyName(store_.host().policy());
  Json tiers = {{"host", std::move(host)}};
  if (const SsdTier* ssd = store_.ssd(); ssd != nullptr) {
    const SsdTierStats d = ssd->stats();
    tiers["ssd"] = {{"bytes", d.bytes},
                    {"live_bytes", d.live_bytes},
                    {"capacity", d.capacity},
                    {"chunks", d.chunks},
                    {"segments", d.segments},
                    {"hits", d.hits},
                    {"misses", d.misses},
                    {"evictions", d.evictions},
                    {"demotions", d.demotions},
                    {"demotions_dropped", d.demotions_dropped},
                    {"demotions_refused", d.demotions_refused},
                    {"promotions", d.promotions},
                    {"reads", d.reads},
                    {"writes", d.writes},
                    {"read_errors", d.read_errors},
                    {"write_errors", d.write_errors},
                    {"checksum_failures", d.checksum_failures},
                    {"write_buffer_bytes", d.write_buffer_bytes},
                    {"recovered_chunks", d.recovered_chunks},
                    {"durability", SsdDurabilityName(ssd->options().durability)},
                    {"io_path", d.io_path}};
  }
  if (const DeviceTier* gpu = store_.device(); gpu != nullptr) {
    const DeviceTierStats g = gpu->stats();
    tiers["gpu"] = {{"bytes", g.bytes},           {"capacity", g.capacity},
                    {"chunks", g.chunks},         {"hits", g.hits},
                    {"misses", g.misses},         {"evictions", g.evictions},
                    {"promotions", g.promotions}, {"rejected", g.rejected},
                    {"device", g.device}};
  }
  out["tiers"] = std::move(tiers);
  Json namespaces = Json::array();
  for (const auto& ns : h.namespaces) {
    if (scope != nullptr && !scope->AllowsNamespace(ns.id)) continue;
    namespaces.push_back({{"id", HexLower(ns.id)}, {"bytes", ns.bytes}, {"quota", ns.quota}});
  }
  out["namespaces"] = std::move(namespaces);
  return out.dump();
}

void Server::Impl::Probe(std::function<void()> done) {
  auto left = std::make_shared<std::atomic<std::size_t>>(contexts_.size());
  auto shared_done = std::make_shared<std::function<void()>>(std::move(done));
  for (auto& ctx : contexts_) {
    asio::post(*ctx, [left, shared_done] {
      if (left->fetch_sub(1) == 1) (*shared_done)();
    });
  }
}

Server::Server(const ServerOptions& options, Store& store, RequestObserver* observer,
               TranscoderHooks hooks)
    : impl_(std::make_unique<Impl>(options, store, observer, std::move(hooks))) {}
Server::~Server() { Stop(); }
Status Server::Start() { return impl_->Start(); }
std::uint16_t Server::tcp_port() const { return impl_->tcp_port(); }
void Server::Stop() { impl_->Stop(); }
ServerStats Server::stats() const { return impl_->stats(); }
void Server::Probe(std::function<void()> done) { impl_->Probe(std::move(done)); }
void Server::SetTimeouts(std::chrono::milliseconds request_timeout,
                         std::chrono::milliseconds idle_timeout) {
  impl_->SetTimeouts(request_timeout, idle_timeout);
}

}  // namespace kvdepot::daemon
