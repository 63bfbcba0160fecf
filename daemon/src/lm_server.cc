#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include "kvdepot/daemon/lm_server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/daemon/log.h"
#include "kvdepot/protocol/lm_value.h"
#include "kvdepot/protocol/lm_wire.h"
#include "listen_address.h"
#include "log_limiter.h"
#include "net/listener_core.h"
#include "net/registration_guard.h"

namespace kvdepot::daemon {
namespace asio = boost::asio;

Result<LmWireMode> ParseLmWireMode(std::string_view name) {
  if (name == "auto") return LmWireMode::kAuto;
  if (name == "current") return LmWireMode::kCurrent;
  if (name == "legacy") return LmWireMode::kLegacy;
  return InvalidArgument("unknown lm:// wire layout '" + std::string(name) +
                         "' (expected auto, current or legacy)");
}

std::string_view LmWireModeName(LmWireMode mode) {
  switch (mode) {
    case LmWireMode::kAuto: return "auto";
    case LmWireMode::kCurrent: return "current";
    case LmWireMode::kLegacy: return "legacy";
  }
  return "auto";
}

namespace {

// LMCache's wire protocol: headers in kvdepot/protocol/lm_wire.h (docs/lmcache.md).
using lm::kReplyFail;
using lm::kReplySuccess;
constexpr std::size_t kDiscardChunk = 64 * 1024;

std::array<std::byte, lm::kReplyHeaderBytes> ServerHeader(std::int32_t code, std::int32_t length,
                                                          const lm::ValueHeader* meta = nullptr) {
  return lm::EncodeReplyHeader(code, length, meta);
}

// Counters shared with store callbacks, which may outlive the server (SSD-thread completions).
struct Counters {
  std::atomic<std::uint64_t> puts{0}, puts_dropped{0}, puts_oversized{0}, gets{0}, get_hits{0},
      exists{0}, exist_hits{0}, lists{0}, health{0}, protocol_errors{0}, bytes_in{0}, bytes_out{0},
      request_timeouts{0}, idle_timeouts{0}, legacy_connections{0}, wire_refused{0};
};

class LmConnection;

}  // namespace

class LmServer::Impl {
 public:
  Impl(const LmServerOptions& options, Store& store)
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
  LmServerStats stats() const;

  const LmServerOptions& options() const { return options_; }
  // The request and idle timeouts in force (options_ has the ones at start).
  const ConnectionTimeouts& timeouts() const { return timeouts_; }
  void SetTimeouts(std::chrono::milliseconds request, std::chrono::milliseconds idle) {
    timeouts_.Set(request, idle);
  }
  Store& store() { return store_; }
  const std::string& prefix() const { return prefix_; }
  Counters& counters() { return *counters_; }
  LogLimiter& wire_log_limiter() { return wire_log_limiter_; }
  const std::shared_ptr<Counters>& shared_counters() { return counters_; }

  ListenerCore& core() { return core_; }

 private:
  void Accept();

  LmServerOptions options_;
  ConnectionTimeouts timeouts_;
  Store& store_;
  std::string prefix_;
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
  LogLimiter wire_log_limiter_;
  ListenerCore core_;  // before the acceptor, which lives on its control context
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor_;
  std::uint16_t port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
};

namespace {

using Socket = asio::basic_stream_socket<asio::ip::tcp, asio::io_context::executor_type>;

// One client. Every handler runs on the connection's own io_context thread.
class LmConnection : public DrainableConnection, public std::enable_shared_from_this<LmConnection> {
 public:
  LmConnection(Socket socket, LmServer::Impl& server)
      : registration_(),
        socket_(std::move(socket)),
        server_(server),
        counters_(server.shared_counters()),
        watchdog_(socket_.get_executor()) {}
  void set_registration(ListenerCore::Registration r) { registration_.Set(&server_.core(), r); }

  void Start() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
      self->last_progress_ = std::chrono::steady_clock::now();
      self->ArmWatchdog();
      self->ReadHeader();
    });
  }

  // Idle connections close now; one inside a request closes when it is answered.
  void BeginShutdown() override {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->draining_ = true;
      if (self->idle_) self->Close();
    });
  }
  void ForceClose() override {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
  }

 private:
  // Reads the next request header. A connection's first read stops at lm::kWireProbeBytes, which
  // tells the layout (OnProbe); later ones read the layout's whole header. Never more: a legacy
  // PUT's payload follows its 182 bytes directly.
  void ReadHeader() {
    if (draining_ || closed_) return Close();
    idle_ = true;
    request_started_ = std::chrono::steady_clock::time_point::max();
    const std::size_t want = wire_ ? lm::RequestHeaderBytes(*wire_) : lm::kWireProbeBytes;
    // What is there of the header (usually all of it); the request's clock starts with its first
    // byte.
    socket_.async_read_some(
        asio::buffer(header_.data(), want),
        [self = shared_from_this(), want](boost::system::error_code ec, std::size_t n) {
          self->idle_ = false;
          self->Received(n);
          if (ec) return self->Close();  // EOF, reset, shutdown
          self->request_started_ = std::chrono::steady_clock::now();
          self->ReadHeaderRest(n, want);
        });
  }

  // Reads header bytes [have, want), then goes on with the probe or the whole header.
  void ReadHeaderRest(std::size_t have, std::size_t want) {
    auto next = [self = shared_from_this()] {
      if (self->wire_) return self->OnHeader();
      self->OnProbe();
    };
    if (have == want) return next();
    asio::async_read(
        socket_, asio::buffer(header_.data() + have, want - have),
        [self = shared_from_this(), next](boost::system::error_code ec, std::size_t m) {
          self->Received(m);
          if (ec) return self->Close();  // a partial header
          next();
        });
  }

  // The first kWireProbeBytes of the connection are in: fix its layout, then read the rest of
  // the header. A layout that lm.wire excludes is refused in its own layout.
  void OnProbe() {
    const std::span<const std::byte, lm::kWireProbeBytes> probe(header_.data(),
                                                                lm::kWireProbeBytes);
    if (lm::IsVersion0Request(probe)) {
      // LMCache's v0 protocol (pickled tensors) has no reply layout in common with v1: close
      // at once, so that the client fails fast instead of waiting for a reply.
      ++counters_->wire_refused;
      ++counters_->protocol_errors;
      if (server_.wire_log_limiter().Allow(std::chrono::seconds(10))) {
        Log(LogLevel::kWarn,
            "lm:// refused a client speaking LMCache's v0 remote protocol (lmcache/protocol.py, "
            "pickled tensors), which kvdepot does not serve; use LMCache v1 (lmcache.v1)",
            {{"peer", PeerAddress()}});
      }
      return Close();
    }
    const lm::Wire seen = lm::DetectWire(probe);
    wire_ = seen;
    if (seen == lm::Wire::kLegacy) ++counters_->legacy_connections;
    const LmWireMode mode = server_.options().wire;
    if ((mode == LmWireMode::kCurrent && seen == lm::Wire::kLegacy) ||
        (mode == LmWireMode::kLegacy && seen == lm::Wire::kCurrent)) {
      ++counters_->wire_refused;
      if (server_.wire_log_limiter().Allow(std::chrono::seconds(10))) {
        Log(LogLevel::kWarn,
            "lm:// refused a client speaking LMCache's " + std::string(lm::WireName(seen)) +
                " wire (" + std::to_string(lm::RequestHeaderBytes(seen)) +
                "-byte requests) because lm.wire is " + std::string(LmWireModeName(mode)) +
                "; set lm.wire: auto (--lm-wire auto) to serve both layouts",
            {{"peer", PeerAddress()}, {"lm_wire", std::string(LmWireModeName(mode))}});
      }
      return ProtocolError();
    }
    ReadHeaderRest(lm::kWireProbeBytes, lm::RequestHeaderBytes(seen));
  }

  std::string PeerAddress() const {
    boost::system::error_code ec;
    const auto peer = socket_.remote_endpoint(ec);
    return ec ? std::string("unknown") : peer.address().to_string();
  }

  void Received(std::size_t n) {
    counters_->bytes_in += n;
    if (n > 0) last_progress_ = std::chrono::steady_clock::now();
  }

  // ---- timeouts (see LmServerOptions) ---------------------------------------------------------
  // Ticks at a quarter of the shortest timeout (10 ms to 1 s; 1 s with both off) while the
  // connection is open, reading the listener's current timeouts (SIGHUP may change them).
  void ArmWatchdog() {
    if (closed_) return;
    watchdog_.expires_after(server_.timeouts().Tick());
    watchdog_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec && !self->closed_) self->CheckTimeouts();
    });
  }

  void CheckTimeouts() {
    using Expired = ConnectionTimeouts::Expired;
    switch (server_.timeouts().Check(std::chrono::steady_clock::now(), request_started_,
                                     last_progress_, in_store_)) {
      case Expired::kRequest: ++counters_->request_timeouts; return Close();
      case Expired::kIdle: ++counters_->idle_timeouts; return Close();
      case Expired::kNone: break;
    }
    ArmWatchdog();
  }

  void OnHeader() {
    auto decoded =
        lm::DecodeRequestHeader(std::span(header_.data(), lm::RequestHeaderBytes(*wire_)), *wire_);
    if (!decoded.ok()) {
      if (LoadLE<std::int32_t>(header_.data()) == lm::kCommandPut) ++counters_->puts;  // negative
      return ProtocolError();
    }
    lm::Request r = std::move(*decoded);
    if (r.command != lm::kCommandPut) {
      request_started_ = std::chrono::steady_clock::time_point::max();  // read whole
    }
    switch (r.command) {
      case lm::kCommandPut: return HandlePut(std::move(r));
      case lm::kCommandGet: return HandleGet(std::move(r));
      case lm::kCommandExist: return HandleExist(std::move(r));
      case lm::kCommandList: return HandleList();
      case lm::kCommandHealth: ++counters_->health; return Reply(ServerHeader(kReplySuccess, 0));
      default: return ProtocolError();
    }
  }

  // ---- PUT: no reply; the payload is always consumed, stored when possible -------------------
  void HandlePut(lm::Request r) {  // r.length >= 0
    ++counters_->puts;
    const auto length = static_cast<std::size_t>(r.length);
    if (length > server_.options().max_value_bytes) {
      // LMCache's client neither expects a reply to PUT nor reconnects after a broken pipe:
      // reading the payload keeps the stream in step and the engine's remote backend alive.
      ++counters_->puts_oversized;
      if (server_.wire_log_limiter().Allow(std::chrono::seconds(10))) {
        Log(LogLevel::kWarn,
            "lm:// dropped a PUT of " + std::to_string(length) + " bytes over lm.max_value_bytes " +
                std::to_string(server_.options().max_value_bytes) +
                "; raise lm.max_value_bytes (--lm-max-value-bytes) to store such chunks",
            {{"bytes", std::to_string(length)}});
      }
      return Discard(length, /*counted=*/false);
    }
    if (r.key.empty()) return Discard(length, /*counted=*/false);
    std::string key = server_.prefix() + r.key;
    auto value = server_.store().Allocate(key, lm::kValueHeaderBytes + length);
    if (!value.ok()) return Discard(length, /*counted=*/false);
    std::shared_ptr<Value> v = std::move(*value);
    lm::EncodeValueHeader(r.meta, v->mutable_bytes().data());
    asio::async_read(
        socket_, asio::buffer(v->mutable_bytes().data() + lm::kValueHeaderBytes, length),
        [self = shared_from_this(), key = std::move(key), v](boost::system::error_code ec,
                                                             std::size_t n) mutable {
          self->Received(n);
          if (ec) return self->Close();  // the value is dropped with its charge
          self->request_started_ = std::chrono::steady_clock::time_point::max();
          self->server_.store().Put(key, std::move(v), [c = self->counters_](Status s) {
            if (!s.ok()) ++c->puts_dropped;  // a durable write failed; memory copy still served
          });
          self->ReadHeader();
        });
  }

  // Reads and drops `n` payload bytes of a PUT that is not stored, then the next request.
  void Discard(std::size_t n, bool counted) {
    if (!counted) ++counters_->puts_dropped;
    if (n == 0) return ReadHeader();
    discard_.resize(kDiscardChunk);
    const std::size_t step = std::min(n, kDiscardChunk);
    asio::async_read(socket_, asio::buffer(discard_.data(), step),
                     [self = shared_from_this(), left = n - step](boost::system::error_code ec,
                                                                  std::size_t got) {
                       self->Received(got);
                       if (ec) return self->Close();
                       self->Discard(left, /*counted=*/true);
                     });
  }

  // ---- EXIST: in a cluster, asked of the key's owner when not held here ----------------------
  void HandleExist(lm::Request r) {
    ++counters_->exists;
    if (r.key.empty()) return Reply(ServerHeader(kReplyFail, 0));
    in_store_ = true;
    const std::string key = server_.prefix() + r.key;
    const std::string_view keys[] = {key};
    server_.store().LocateMany(keys, Route::kCluster,
                               [self = shared_from_this()](std::vector<protocol::Tier> tiers) {
                                 auto finish = [self, hit = tiers.at(0) != protocol::Tier::kNone] {
                                   self->in_store_ = false;
                                   self->last_progress_ = std::chrono::steady_clock::now();
                                   if (hit) ++self->counters_->exist_hits;
                                   self->Reply(ServerHeader(hit ? kReplySuccess : kReplyFail, 0));
                                 };
                                 if (self->socket_.get_executor().running_in_this_thread())
                                   return finish();
                                 asio::post(self->socket_.get_executor(), std::move(finish));
                               });
  }

  // ---- GET: header, then the payload straight from the stored value ---------------------------
  void HandleGet(lm::Request r) {
    ++counters_->gets;
    if (r.key.empty()) return Reply(ServerHeader(kReplyFail, 0));
    in_store_ = true;
    server_.store().Get(server_.prefix() + r.key, [self = shared_from_this()](Result<Found> found) {
      auto finish = [self, found = std::move(found)]() mutable { self->OnFound(std::move(found)); };
      if (self->socket_.get_executor().running_in_this_thread()) return finish();
      asio::post(self->socket_.get_executor(), std::move(finish));
    });
  }

  void OnFound(Result<Found> found) {
    in_store_ = false;
    last_progress_ = std::chrono::steady_clock::now();
    if (!found.ok()) return Reply(ServerHeader(kReplyFail, 0));
    const auto bytes = found->value->bytes();
    auto meta = lm::DecodeValueHeader(bytes);
    const std::size_t payload = bytes.size() - std::min(bytes.size(), lm::kValueHeaderBytes);
    if (!meta.ok() || payload > static_cast<std::size_t>(INT32_MAX)) {
      return Reply(ServerHeader(kReplyFail, 0));  // not an LMCache value: a miss for LMCache
    }
    ++counters_->get_hits;
    reply_head_ = ServerHeader(kReplySuccess, static_cast<std::int32_t>(payload), &*meta);
    value_ = std::move(found->value);
    const std::array<asio::const_buffer, 2> buffers = {
        ReplyHead(), asio::buffer(bytes.data() + lm::kValueHeaderBytes, payload)};
    Write(buffers, /*then_close=*/false);
  }

  // ---- LIST (kvdepot's definition; LMCache's server leaves it unimplemented) ------------------
  // Reply: code 200, length = byte count, then the keys of the namespace (prefix removed) joined
  // by '\n', in byte order, at most max_list_keys of them.
  void HandleList() {
    ++counters_->lists;
    body_.clear();
    std::string cursor;
    std::uint32_t listed = 0;
    const std::uint32_t max_keys = server_.options().max_list_keys;
    while (listed < max_keys) {
      const auto page = server_.store().Scan(server_.prefix(), cursor,
                                             std::min<std::uint32_t>(max_keys - listed, 4096),
                                             protocol::Tier::kNone);
      for (const auto& e : page.entries) {
        if (!body_.empty()) body_.push_back('\n');
        body_.append(e.key, server_.prefix().size());
        ++listed;
      }
      if (page.next_cursor.empty() || page.entries.empty()) break;
      cursor = page.next_cursor;
    }
    reply_head_ = ServerHeader(kReplySuccess, static_cast<std::int32_t>(body_.size()));
    const std::array<asio::const_buffer, 2> buffers = {ReplyHead(), asio::buffer(body_)};
    Write(buffers, /*then_close=*/false);
  }

  // ---- writing --------------------------------------------------------------------------------
  // reply_head_ as the connection's layout sends it (a legacy reply lacks the last field).
  asio::const_buffer ReplyHead() const {
    return asio::buffer(reply_head_.data(),
                        lm::ReplyHeaderBytes(wire_.value_or(lm::Wire::kCurrent)));
  }

  void Reply(const std::array<std::byte, lm::kReplyHeaderBytes>& head) {
    reply_head_ = head;
    const std::array<asio::const_buffer, 1> buffers = {ReplyHead()};
    Write(buffers, /*then_close=*/false);
  }

  // Unknown command, a negative length or an excluded layout: the stream cannot be
  // resynchronised. One 400 header, then the connection closes.
  void ProtocolError() {
    ++counters_->protocol_errors;
    reply_head_ = ServerHeader(kReplyFail, 0);
    const std::array<asio::const_buffer, 1> buffers = {ReplyHead()};
    Write(buffers, /*then_close=*/true);
  }

  template <typename Buffers>
  void Write(const Buffers& buffers, bool then_close) {
    asio::async_write(
        socket_, buffers,
        [self = shared_from_this(), then_close](boost::system::error_code ec, std::size_t n) {
          self->counters_->bytes_out += n;
          self->value_.reset();
          if (ec || then_close) return self->Close();
          self->last_progress_ = std::chrono::steady_clock::now();
          self->ReadHeader();
        });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    watchdog_.cancel();
    boost::system::error_code ec;
    socket_.shutdown(Socket::shutdown_both, ec);
    socket_.close(ec);
  }

  RegistrationGuard<ListenerCore> registration_;  // first: unregisters after the rest is gone
  Socket socket_;
  LmServer::Impl& server_;
  std::shared_ptr<Counters> counters_;
  std::array<std::byte, lm::kRequestHeaderBytes> header_{};
  std::array<std::byte, lm::kReplyHeaderBytes> reply_head_{};
  std::optional<lm::Wire> wire_;  // the layout, fixed by the first request (OnProbe)
  ValueRef value_;                // the value being sent
  std::string body_;              // a LIST reply being sent
  std::vector<std::byte> discard_;
  bool idle_ = false;  // waiting for a request header
  bool draining_ = false;
  bool closed_ = false;
  bool in_store_ = false;  // a GET waits for the store
  asio::steady_timer watchdog_;
  std::chrono::steady_clock::time_point last_progress_{};
  // The first byte of the request being read (max: none).
  std::chrono::steady_clock::time_point request_started_ =
      std::chrono::steady_clock::time_point::max();
};

}  // namespace

Status LmServer::Impl::Start() {
  if (started_) return Status::Ok();
  KVD_ASSIGN_OR_RETURN(prefix_, lm::NamespaceId(options_.namespace_name));
  KVD_ASSIGN_OR_RETURN(const auto endpoint,
                       ParseListenAddress("lm listen address", options_.listen));
  KVD_ASSIGN_OR_RETURN(acceptor_, core_.ListenTcp(endpoint, "lm://" + options_.listen));
  port_ = acceptor_->local_endpoint().port();
  Accept();
  core_.Run();
  started_ = true;
  return Status::Ok();
}

void LmServer::Impl::Accept() {
  core_.AcceptTcp(*acceptor_, [this](Socket socket) {
    auto conn = std::make_shared<LmConnection>(std::move(socket), *this);
    conn->set_registration(core_.Register(conn));
    conn->Start();
  });
}

void LmServer::Impl::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  core_.Stop(options_.drain_timeout, [this] {
    boost::system::error_code ec;
    acceptor_->close(ec);
  });
}

LmServerStats LmServer::Impl::stats() const {
  const Counters& c = *counters_;
  LmServerStats s;
  s.connections_open = core_.open();
  s.connections_total = core_.total();
  s.puts = c.puts.load();
  s.puts_dropped = c.puts_dropped.load();
  s.puts_oversized = c.puts_oversized.load();
  s.legacy_connections = c.legacy_connections.load();
  s.wire_refused = c.wire_refused.load();
  s.gets = c.gets.load();
  s.get_hits = c.get_hits.load();
  s.exists = c.exists.load();
  s.exist_hits = c.exist_hits.load();
  s.lists = c.lists.load();
  s.health = c.health.load();
  s.protocol_errors = c.protocol_errors.load();
  s.bytes_in = c.bytes_in.load();
  s.bytes_out = c.bytes_out.load();
  s.request_timeouts = c.request_timeouts.load();
  s.idle_timeouts = c.idle_timeouts.load();
  return s;
}

LmServer::LmServer(const LmServerOptions& options, Store& store)
    : impl_(std::make_unique<Impl>(options, store)) {}
LmServer::~LmServer() {
  Stop();
}
Status LmServer::Start() {
  return impl_->Start();
}
std::uint16_t LmServer::port() const {
  return impl_->port();
}
void LmServer::Stop() {
  impl_->Stop();
}
LmServerStats LmServer::stats() const {
  return impl_->stats();
}
void LmServer::SetTimeouts(std::chrono::milliseconds request_timeout,
                           std::chrono::milliseconds idle_timeout) {
  impl_->SetTimeouts(request_timeout, idle_timeout);
}

}  // namespace kvdepot::daemon
