#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include "kvdepot/daemon/server.h"

#include "kvdepot/daemon/ssd_tier.h"

#include "kvdepot/byte_order.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvdepot::daemon {
namespace asio = boost::asio;
using protocol::FrameHeader;
using protocol::Op;

namespace {

constexpr std::size_t kDiscardChunk = 64 * 1024;

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

  std::size_t size() const { return head_len + body.size() + (value ? value->bytes().size() : 0); }
};

Result<std::pair<std::string, std::uint16_t>> SplitHostPort(const std::string& listen) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("listen address '" + listen + "' is not HOST:PORT");
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port_text = listen.substr(colon + 1);
  char* end = nullptr;
  const unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port > 65535) {
    return InvalidArgument("listen address '" + listen + "': bad port '" + port_text + "'");
  }
  return std::make_pair(host, static_cast<std::uint16_t>(port));
}

}  // namespace

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  virtual void BeginShutdown() = 0;  // finish what was read, then close
  virtual void ForceClose() = 0;
};

class Server::Impl {
 public:
  Impl(const ServerOptions& options, Store& store, RequestObserver* observer)
      : options_(options), store_(store), observer_(observer) {
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
    s.bytes_in = bytes_in_.load();
    s.bytes_out = bytes_out_.load();
    s.request_timeouts = request_timeouts_.load();
    s.idle_timeouts = idle_timeouts_.load();
    return s;
  }

  // Called by connections.
  const ServerOptions& options() const { return options_; }
  Store& store() { return store_; }
  RequestObserver* observer() const { return observer_; }
  std::string StatsJson() const;
  void Probe(std::function<void()> done);
  using Registration = std::list<std::weak_ptr<ConnectionBase>>::iterator;
  // Tracks a live connection (for shutdown); its destructor calls Unregister with the result.
  Registration Register(const std::shared_ptr<ConnectionBase>& c) {
    std::lock_guard lock(mu_);
    ++open_;
    ++total_;
    return connections_.insert(connections_.end(), c);
  }
  void Unregister(Registration it) {
    std::lock_guard lock(mu_);
    connections_.erase(it);
    --open_;
  }
  std::atomic<std::uint64_t> requests_{0}, protocol_errors_{0}, bytes_in_{0}, bytes_out_{0},
      request_timeouts_{0}, idle_timeouts_{0};

 private:
  template <typename Acceptor>
  void Accept(Acceptor& acceptor);

  ServerOptions options_;
  Store& store_;
  RequestObserver* const observer_;
  asio::io_context& io() { return *contexts_[0]; }  // acceptors and timers
  asio::io_context::executor_type NextExecutor() {
    return contexts_[next_context_++ % contexts_.size()]->get_executor();
  }

  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
  std::size_t next_context_ = 0;  // used by accept handlers, which all run on contexts_[0]
  std::unique_ptr<asio::ip::tcp::acceptor> tcp_;
  std::unique_ptr<asio::local::stream_protocol::acceptor> unix_;
  std::uint16_t tcp_port_ = 0;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::list<std::weak_ptr<ConnectionBase>> connections_;  // live ones; guarded by mu_
  std::atomic<std::uint64_t> open_{0}, total_{0};
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  bool stopped_ = false;
};

namespace {

template <typename Socket>
class Connection : public ConnectionBase,
                   public std::enable_shared_from_this<Connection<Socket>> {
 public:
  Connection(Socket socket, Server::Impl& server)
      : socket_(std::move(socket)),
        server_(server),
        limits_(server.options().limits),
        small_(limits_.max_key_bytes + 8u),
        watchdog_(socket_.get_executor()) {}
  ~Connection() override { server_.Unregister(registration_); }
  void set_registration(Server::Impl::Registration r) { registration_ = r; }

  void Start() {
    asio::dispatch(socket_.get_executor(), [self = this->shared_from_this()] {
      self->last_progress_ = std::chrono::steady_clock::now();
      self->ArmWatchdog();
      self->ReadHeader();
    });
  }

  // Graceful stop: requests already received (fully or partly, including pipelined ones waiting
  // in the socket buffer) are read and answered; then the connection closes.
  void BeginShutdown() override {
    asio::post(socket_.get_executor(), [self = this->shared_from_this()] {
      self->draining_ = true;
      boost::system::error_code ec;
      if (self->awaiting_header_ && self->socket_.available(ec) == 0) self->socket_.cancel(ec);
      self->MaybeClose();
    });
  }

  void ForceClose() override {
    asio::post(socket_.get_executor(), [self = this->shared_from_this()] { self->Close(); });
  }

 private:
  // ---- reading ------------------------------------------------------------------------------
  void ReadHeader() {
    if (draining_ && !stop_reading_) {
      boost::system::error_code ec;
      if (socket_.available(ec) == 0 || ec) stop_reading_ = true;  // nothing more was sent
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
      self->request_deadline_ = std::chrono::steady_clock::now() +
                                self->server_.options().request_timeout;
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
  void RequestRead() { request_deadline_ = std::chrono::steady_clock::time_point::max(); }

  void OnHeader() {
    auto h = protocol::DecodeFrameHeader(header_, limits_, /*expect_response=*/false);
    if (!h.ok()) {
      ProtocolError(0, h.status());
      return;
    }
    ++server_.requests_;
    if (server_.observer() != nullptr) {
      pending_.push_back({h->op(), std::chrono::steady_clock::now(), StatusCode::kOk});
    }
    if (h->op() == Op::kPut) {
      StartPut(*h);
      return;
    }
    if (h->body_length > protocol::MaxRequestBody(h->op(), limits_)) {
      ProtocolError(h->request_id,
                    Corruption(std::string(protocol::OpName(h->op())) + " body of " +
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
    ReadSmall(4, [this] {
      put_.count = LoadLE<std::uint32_t>(small_.data());
      if (put_.count == 0 || put_.count > limits_.max_batch) {
        return ProtocolError(put_.header.request_id,
                             OutOfRange("put: count " + std::to_string(put_.count) +
                                        " is out of range [1, " +
                                        std::to_string(limits_.max_batch) + "]"));
      }
      put_.results->codes.reserve(put_.count);
      PutNextItem();
    });
  }

  void PutNextItem() {
    if (put_.index == put_.count) {
      if (put_.remaining != 0) {
        return ProtocolError(put_.header.request_id,
                             Corruption("put: " + std::to_string(put_.remaining) +
                                        " trailing body bytes"));
      }
      RequestRead();
      put_.results->all_read = true;
      put_.results->slot = ReserveSlot();
      MaybeFinishPut(put_.header, *put_.results);
      return ReadHeader();
    }
    ReadSmall(2, [this] {
      const auto key_len = LoadLE<std::uint16_t>(small_.data());
      if (key_len == 0 || key_len > limits_.max_key_bytes) {
        return ProtocolError(put_.header.request_id,
                             OutOfRange("put: key " + std::to_string(put_.index) + " length " +
                                        std::to_string(key_len) + " is out of range [1, " +
                                        std::to_string(limits_.max_key_bytes) + "]"));
      }
      ReadSmall(key_len + 8u, [this, key_len] {
        put_.key.assign(reinterpret_cast<const char*>(small_.data()), key_len);
        put_.value_length = LoadLE<std::uint64_t>(small_.data() + key_len);
        if (put_.value_length > put_.remaining) {
          return ProtocolError(put_.header.request_id,
                               Corruption("put: value " + std::to_string(put_.index) +
                                          " runs past the frame body"));
        }
        put_.remaining -= put_.value_length;
        if (put_.value_length > limits_.max_value_bytes) {
          put_.results->codes.push_back(StatusCode::kOutOfRange);
          return Discard(put_.value_length);
        }
        auto value = server_.store().Allocate(put_.key, put_.value_length);
        if (!value.ok()) {
          put_.results->codes.push_back(value.status().code());
          return Discard(put_.value_length);
        }
        put_.value = std::move(*value);
        asio::async_read(socket_, asio::buffer(put_.value->mutable_bytes().data(),
                                               put_.value_length),
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

  // Hands the item just read to the store; its status arrives through the callback.
  void StoreItem() {
    const std::size_t item = put_.results->codes.size();
    put_.results->codes.push_back(StatusCode::kOk);
    ++put_.results->pending;
    ++store_ops_;
    server_.store().Put(put_.key, std::move(put_.value),
                        [self = this->shared_from_this(), results = put_.results,
                         header = put_.header, item](Status status) {
                          self->OnOwnThread([self, results, header, item, status] {
                            self->StoreDone();
                            results->codes[item] = status.code();
                            --results->pending;
                            self->MaybeFinishPut(header, *results);
                          });
                        });
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

  // Reads and drops the `n` bytes left of a refused value (already taken off put_.remaining),
  // then continues with the next item.
  void Discard(std::uint64_t n) {
    if (n == 0) {
      ++put_.index;
      return PutNextItem();
    }
    discard_.resize(kDiscardChunk);
    const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(n, kDiscardChunk));
    asio::async_read(socket_, asio::buffer(discard_.data(), step),
                     [self = this->shared_from_this(), left = n - step](auto ec, std::size_t r) {
                       self->Received(r);
                       if (ec) return self->Close();
                       self->Discard(left);
                     });
  }

  // Reads `n` (<= small_.size()) body bytes of the current PUT into small_, then runs `next`.
  template <typename Next>
  void ReadSmall(std::size_t n, Next next) {
    if (n > put_.remaining) {
      return ProtocolError(put_.header.request_id,
                           Corruption("put: frame body ends inside item " +
                                      std::to_string(put_.index)));
    }
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
        const std::string json = server_.StatsJson();
        const auto* p = reinterpret_cast<const std::byte*>(json.data());
        return SendBody(h, StatusCode::kOk, std::vector<std::byte>(p, p + json.size()));
      }
      case Op::kScan: return HandleScan(h);
      case Op::kPut: break;  // handled while reading
    }
  }

  void HandleGet(const FrameHeader& h) {
    auto keys = protocol::DecodeKeyList(body_, limits_);
    if (!keys.ok()) return RequestError(h, keys.status());
    for (std::uint32_t i = 0; i < keys->size(); ++i) {
      get_backlog_.push_back({h, std::string((*keys)[i]), i, i + 1 == keys->size(),
                              ReserveSlot()});
    }
    PumpGets();
  }

  // Starts queued GET lookups while fewer than kMaxOutstandingGets are unanswered and the queued
  // output is under max_output_bytes: a GET of many SSD-resident keys reads them a few at a time
  // instead of allocating buffers for all of them at once. Host hits answer inline.
  void PumpGets() {
    if (pumping_) return;  // an inline answer inside the loop below; the loop continues
    pumping_ = true;
    while (!get_backlog_.empty() && outstanding_gets_ < kMaxOutstandingGets &&
           queued_bytes_ < server_.options().max_output_bytes && !closed_) {
      PendingGet g = std::move(get_backlog_.front());
      get_backlog_.pop_front();
      ++outstanding_gets_;
      ++store_ops_;
      server_.store().Get(g.key, [self = this->shared_from_this(), h = g.header, i = g.index,
                                  last = g.last, slot = g.slot](Result<Found> found) {
        self->OnOwnThread([self, h, i, last, slot, found = std::move(found)]() mutable {
          --self->outstanding_gets_;
          self->StoreDone();
          self->FillSlot(slot, GetItemFrame(h, i, last, std::move(found)));
          self->PumpGets();
        });
      });
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
    protocol::LookupResult result;
    bool prefix = true;
    for (std::string_view key : *keys) {
      const protocol::Tier tier = server_.store().Locate(key);
      result.tiers.push_back(tier);
      const bool present = tier != protocol::Tier::kNone;
      prefix = prefix && present;
      if (prefix) ++result.prefix_length;
    }
    if (RequestObserver* o = server_.observer()) {
      o->OnLookup(result.prefix_length, static_cast<std::uint32_t>(keys->size()));
    }
    SendBody(h, StatusCode::kOk, protocol::EncodeLookupResult(result));
  }

  void HandleDelete(const FrameHeader& h) {
    auto keys = protocol::DecodeKeyList(body_, limits_);
    if (!keys.ok()) return RequestError(h, keys.status());
    std::vector<StatusCode> codes;
    for (std::string_view key : *keys) {
      codes.push_back(server_.store().Erase(key) ? StatusCode::kOk : StatusCode::kNotFound);
    }
    SendBody(h, StatusCode::kOk, protocol::EncodeStatusList(codes));
  }

  void HandleScan(const FrameHeader& h) {
    auto q = protocol::DecodeScanRequest(body_, limits_);
    if (!q.ok()) return RequestError(h, q.status());
    const protocol::ScanResult result =
        server_.store().Scan(q->prefix, q->cursor, q->limit, q->tier);
    SendBody(h, StatusCode::kOk, protocol::EncodeScanResult(result));
  }

  // A well-formed request the server refuses (over a limit, bad field): an error response; the
  // connection stays open. A malformed body (kCorruption) closes it like a malformed header.
  void RequestError(const FrameHeader& h, const Status& status) {
    if (status.code() == StatusCode::kCorruption) return ProtocolError(h.request_id, status);
    SendBody(h, status.code(), protocol::EncodeErrorBody(status.message()));
  }

  void ProtocolError(std::uint64_t request_id, const Status& status) {
    ++server_.protocol_errors_;
    FrameHeader h;
    h.type = static_cast<std::uint8_t>(Op::kPing);  // any valid op; request id 0 = connection
    h.request_id = request_id;
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
    // Gather up to 64 queued frames into one write.
    buffers_.clear();
    in_flight_ = 0;
    for (auto it = queue_.begin(); it != queue_.end() && it->ready && in_flight_ < 64;
         ++it, ++in_flight_) {
      buffers_.emplace_back(it->head.data(), it->head_len);
      if (!it->body.empty()) buffers_.emplace_back(it->body.data(), it->body.size());
      if (it->value && !it->value->bytes().empty()) {
        buffers_.emplace_back(it->value->bytes().data(), it->value->bytes().size());
      }
    }
    asio::async_write(socket_, buffers_,
                      [self = this->shared_from_this()](auto ec, std::size_t n) {
                        self->server_.bytes_out_ += n;
                        if (ec) return self->Close();
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

  // The watchdog ticks at a quarter of the shortest timeout (10 ms to 1 s) while the connection
  // is open; a timeout therefore fires up to a tick late.
  void ArmWatchdog() {
    const ServerOptions& o = server_.options();
    std::chrono::milliseconds shortest{0};
    for (auto t : {o.request_timeout, o.idle_timeout}) {
      if (t.count() > 0 && (shortest.count() == 0 || t < shortest)) shortest = t;
    }
    if (shortest.count() == 0 || closed_) return;
    watchdog_.expires_after(std::clamp(shortest / 4, std::chrono::milliseconds(10),
                                       std::chrono::milliseconds(1000)));
    watchdog_.async_wait([self = this->shared_from_this()](boost::system::error_code ec) {
      if (!ec && !self->closed_) self->CheckTimeouts();
    });
  }

  // Closes a connection whose request has been arriving for longer than request_timeout, or that
  // moved no byte either way for idle_timeout while no store operation was pending (an idle
  // client, or one that stopped reading its responses).
  void CheckTimeouts() {
    const ServerOptions& o = server_.options();
    const auto now = std::chrono::steady_clock::now();
    if (o.request_timeout.count() > 0 && now >= request_deadline_) {
      ++server_.request_timeouts_;
      return Close();
    }
    if (o.idle_timeout.count() > 0 && store_ops_ == 0 && now - last_progress_ >= o.idle_timeout) {
      ++server_.idle_timeouts_;
      return Close();
    }
    ArmWatchdog();
  }

  void MaybeClose() {
    if (stop_reading_ && !writing_ && queue_.empty() && !awaiting_header_) Close();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    queue_.clear();
    watchdog_.cancel();
    boost::system::error_code ec;
    socket_.shutdown(Socket::shutdown_both, ec);
    socket_.close(ec);
  }

  Socket socket_;
  Server::Impl& server_;
  Server::Impl::Registration registration_{};
  const protocol::Limits limits_;
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
  std::size_t in_flight_ = 0;
  std::uint64_t queued_bytes_ = 0;
  std::uint64_t last_slot_ = 0;
  // GET keys whose lookup has not started (their placeholders are queued already).
  struct PendingGet {
    FrameHeader header;
    std::string key;
    std::uint32_t index;
    bool last;
    std::uint64_t slot;
  };
  static constexpr std::uint32_t kMaxOutstandingGets = 16;
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
  std::chrono::steady_clock::time_point request_deadline_ =
      std::chrono::steady_clock::time_point::max();  // of the request being read
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
    }
    auto conn = std::make_shared<Connection<SocketType>>(std::move(socket), *this);
    conn->set_registration(Register(conn));
    conn->Start();
    Accept(acceptor);
  });
}

Status Server::Impl::Start() {
  boost::system::error_code ec;
  if (!options_.listen.empty()) {
    KVD_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(options_.listen));
    const auto address = asio::ip::make_address(host_port.first, ec);
    if (ec) return InvalidArgument("listen address '" + options_.listen + "': " + ec.message());
    const asio::ip::tcp::endpoint endpoint(address, host_port.second);
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
    struct stat st {};
    if (::lstat(options_.unix_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      ::unlink(options_.unix_path.c_str());  // a stale socket from a previous run
    }
    unix_ = std::make_unique<asio::local::stream_protocol::acceptor>(io());
    const asio::local::stream_protocol::endpoint endpoint(options_.unix_path);
    if (unix_->open(endpoint.protocol(), ec); !ec) unix_->bind(endpoint, ec);
    if (!ec) unix_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Unavailable("cannot listen on unix:" + options_.unix_path + ": " + ec.message());
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
  std::thread watcher([this, timer] {
    while (open_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    asio::post(io(), [timer] { timer->cancel(); });
  });
  for (auto& t : threads_) t.join();
  watcher.join();
  threads_.clear();
  if (!options_.unix_path.empty()) ::unlink(options_.unix_path.c_str());
}

std::string Server::Impl::StatsJson() const {
  const HostTierStats h = store_.host().stats();
  const ServerStats s = stats();
  const auto uptime = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now() - started_)
                          .count();
  std::string out = "{";
  auto field = [&out](const char* name, std::uint64_t v) {
    out += "\"" + std::string(name) + "\":" + std::to_string(v) + ",";
  };
  field("uptime_s", static_cast<std::uint64_t>(uptime));
  field("connections_open", s.connections_open);
  field("connections_total", s.connections_total);
  field("requests", s.requests);
  field("protocol_errors", s.protocol_errors);
  field("bytes_in", s.bytes_in);
  field("bytes_out", s.bytes_out);
  field("request_timeouts", s.request_timeouts);
  field("idle_timeouts", s.idle_timeouts);
  out += "\"tiers\":{\"host\":{";
  field("bytes", h.bytes);
  field("capacity", h.capacity);
  field("chunks", h.chunks);
  field("hits", h.hits);
  field("misses", h.misses);
  field("evictions", h.evictions);
  field("inserts", h.inserts);
  field("rejected", h.rejected);
  out += "\"policy\":\"" + std::string(EvictionPolicyName(store_.host().policy())) + "\"}";
  if (const SsdTier* ssd = store_.ssd(); ssd != nullptr) {
    const SsdTierStats d = ssd->stats();
    out += ",\"ssd\":{";
    field("bytes", d.bytes);
    field("live_bytes", d.live_bytes);
    field("capacity", d.capacity);
    field("chunks", d.chunks);
    field("segments", d.segments);
    field("hits", d.hits);
    field("misses", d.misses);
    field("evictions", d.evictions);
    field("demotions", d.demotions);
    field("demotions_dropped", d.demotions_dropped);
    field("promotions", d.promotions);
    field("reads", d.reads);
    field("writes", d.writes);
    field("read_errors", d.read_errors);
    field("write_errors", d.write_errors);
    field("checksum_failures", d.checksum_failures);
    field("write_buffer_bytes", d.write_buffer_bytes);
    field("recovered_chunks", d.recovered_chunks);
    out += "\"durability\":\"" + std::string(SsdDurabilityName(ssd->options().durability)) +
           "\",\"io_path\":\"" + d.io_path + "\"}";
  }
  out += "},";
  out += "\"namespaces\":[";
  static constexpr char kHex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < h.namespaces.size(); ++i) {
    std::string id;
    for (unsigned char c : h.namespaces[i].id) {
      id += kHex[c >> 4];
      id += kHex[c & 15];
    }
    out += std::string(i ? "," : "") + "{\"id\":\"" + id + "\",";
    field("bytes", h.namespaces[i].bytes);
    out += "\"quota\":" + std::to_string(h.namespaces[i].quota) + "}";
  }
  out += "]}";
  return out;
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

Server::Server(const ServerOptions& options, Store& store, RequestObserver* observer)
    : impl_(std::make_unique<Impl>(options, store, observer)) {}
Server::~Server() { Stop(); }
Status Server::Start() { return impl_->Start(); }
std::uint16_t Server::tcp_port() const { return impl_->tcp_port(); }
void Server::Stop() { impl_->Stop(); }
ServerStats Server::stats() const { return impl_->stats(); }
void Server::Probe(std::function<void()> done) { impl_->Probe(std::move(done)); }

}  // namespace kvdepot::daemon
