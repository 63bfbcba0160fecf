#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include "kvdepot/daemon/resp_server.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <charconv>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/ssd_tier.h"
#include "listen_address.h"
#include "registration_guard.h"
#include "resp/resp_codec.h"
#include "resp/resp_commands.h"

namespace kvdepot::daemon {
namespace asio = boost::asio;

namespace {

using resp::CommandId;
using resp::EqualsIgnoreCase;

// Holds any element the parser buffers whole: an inline request or length line (64 KiB) and a
// bulk string up to max_inline_bulk (16 KiB); larger bulks bypass it.
constexpr std::size_t kReadBufferBytes = 128 * 1024;
// Replies of pipelined requests are batched; past this many queued bytes the connection stops
// executing requests until they are written (a client that does not read cannot grow them).
constexpr std::size_t kMaxQueuedReplyBytes = 4 << 20;
// SCAN cursors remembered (server-wide; the oldest are forgotten first).
constexpr std::size_t kMaxScanCursors = 16384;
// SCAN's COUNT is clamped to this (the work of one call).
constexpr std::int64_t kMaxScanCount = 65536;
// Emulated Redis version (HELLO, INFO): the Redis 7.0 commands and reply layouts served here.
constexpr const char* kRedisVersion = "7.0.0";

// The scope of a connection on a server without authentication.
const AuthScope kEverything{true, {}};

// Counters shared with store callbacks, which may outlive the server (SSD-thread completions).
struct Counters {
  std::atomic<std::uint64_t> open{0}, total{0}, commands{0}, command_errors{0}, gets{0},
      get_hits{0}, sets{0}, values_oversized{0}, auth_failures{0}, protocol_errors{0},
      request_timeouts{0}, idle_timeouts{0}, bytes_in{0}, bytes_out{0}, next_client_id{1};
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

// At most one log line per interval (a client repeating a mistake must not flood the log).
class LogTurn {
 public:
  bool Take(std::chrono::steady_clock::duration interval) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    auto last = last_.load(std::memory_order_relaxed);
    if (last != 0 && now - last < interval.count()) return false;
    return last_.compare_exchange_strong(last, now, std::memory_order_relaxed);
  }

 private:
  std::atomic<std::chrono::steady_clock::rep> last_{0};
};

std::string HumanBytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "K", "M", "G", "T"};
  double v = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%s", v, kUnits[unit]);
  return buf;
}

// The parser's limits: Redis's defaults, with bulk strings up to the value limit when that is
// larger than Redis's 512 MiB.
resp::ParserLimits ParserLimitsFor(const RespServerOptions& options) {
  resp::ParserLimits limits;
  limits.max_bulk_bytes = std::max<std::uint64_t>(limits.max_bulk_bytes, options.max_value_bytes);
  return limits;
}

class RespConnection;

}  // namespace

class RespServer::Impl {
 public:
  Impl(const RespServerOptions& options, Store& store)
      : options_(options),
        timeouts_(options.request_timeout, options.idle_timeout),
        store_(store) {}
  ~Impl() { Stop(); }

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
  CursorTable& cursors() { return cursors_; }
  LogTurn& oversize_log() { return oversize_log_; }
  LogTurn& auth_log() { return auth_log_; }
  const std::shared_ptr<Counters>& shared_counters() { return counters_; }
  std::chrono::steady_clock::time_point started() const { return started_at_; }

  using Registration = std::list<std::weak_ptr<RespConnection>>::iterator;
  Registration Register(const std::shared_ptr<RespConnection>& c) {
    std::lock_guard lock(mu_);
    ++counters_->open;
    ++counters_->total;
    return connections_.insert(connections_.end(), c);
  }
  // Called by a connection's RegistrationGuard; the decrement is its last access to *this.
  void Unregister(Registration it) {
    {
      std::lock_guard lock(mu_);
      connections_.erase(it);
    }
    --counters_->open;
  }

 private:
  void Accept();
  std::vector<std::shared_ptr<RespConnection>> Live();

  RespServerOptions options_;
  ConnectionTimeouts timeouts_;
  Store& store_;
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
  CursorTable cursors_;
  LogTurn oversize_log_, auth_log_;
  std::chrono::steady_clock::time_point started_at_ = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
  std::size_t next_context_ = 0;  // used by the accept handler only (contexts_[0])
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor_;
  std::uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::list<std::weak_ptr<RespConnection>> connections_;  // guarded by mu_
  bool started_ = false;
  bool stopped_ = false;
};

namespace {

using Socket = asio::basic_stream_socket<asio::ip::tcp, asio::io_context::executor_type>;
using Args = std::vector<std::string>;

// One client. Every handler runs on the connection's own io_context thread.
class RespConnection : public std::enable_shared_from_this<RespConnection> {
 public:
  RespConnection(Socket socket, RespServer::Impl& server)
      : socket_(std::move(socket)),
        server_(server),
        counters_(server.shared_counters()),
        scope_(server.options().auth ? nullptr : &kEverything),
        id_(counters_->next_client_id++),
        in_(kReadBufferBytes),
        parser_(ParserLimitsFor(server.options())),
        watchdog_(socket_.get_executor()) {}
  void set_registration(RespServer::Impl::Registration r) { registration_.Set(&server_, r); }

  void Start() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
      self->last_progress_ = std::chrono::steady_clock::now();
      self->ArmWatchdog();
      self->Pump();
    });
  }

  // Idle connections close now; one with requests read closes once they are answered.
  void BeginShutdown() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->draining_ = true;
      self->Pump();
    });
  }
  void ForceClose() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
  }

 private:
  // ---- the request loop -----------------------------------------------------------------------
  // Executes the requests buffered, in order, until one waits for the store, the input runs dry
  // (then the batched replies are written and more is read) or the replies queued reach
  // kMaxQueuedReplyBytes (then reading resumes once they are written).
  void Pump() {
    while (!closed_ && !busy_ && !large_active_) {
      if (close_after_write_ || QueuedBytes() >= kMaxQueuedReplyBytes) return Flush();
      std::size_t used = 0;
      const auto event =
          parser_.Next(std::string_view(in_.data() + in_begin_, in_end_ - in_begin_), used);
      in_begin_ += used;
      switch (event) {
        case resp::RequestParser::Event::kCommand:
          request_started_ = std::chrono::steady_clock::time_point::max();
          Execute();
          break;
        case resp::RequestParser::Event::kLargeBulk: BeginLargeBulk(); break;
        case resp::RequestParser::Event::kError: return ProtocolError(parser_.error());
        case resp::RequestParser::Event::kNeedMore:
          if (draining_ && !parser_.InRequest() && in_begin_ == in_end_) {
            close_after_write_ = true;
            if (queued_.empty() && !writing_) return Close();
            return Flush();
          }
          Flush();
          return StartRead();
      }
    }
  }

  void StartRead() {
    if (reading_ || closed_) return;
    if (in_begin_ == in_end_) {
      in_begin_ = in_end_ = 0;
    } else if (in_begin_ > 0) {
      std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
      in_end_ -= in_begin_;
      in_begin_ = 0;
    }
    if (in_end_ == in_.size()) {  // cannot happen within the parser's limits; never hang on it
      return ProtocolError("Protocol error: request element over the read buffer");
    }
    if (parser_.InRequest() || in_end_ > 0) {
      if (request_started_ == std::chrono::steady_clock::time_point::max()) {
        request_started_ = std::chrono::steady_clock::now();
      }
    }
    reading_ = true;
    socket_.async_read_some(
        asio::buffer(in_.data() + in_end_, in_.size() - in_end_),
        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
          self->reading_ = false;
          self->Received(n);
          if (ec) return self->Close();  // EOF, reset, shutdown
          self->in_end_ += n;
          if (self->request_started_ == std::chrono::steady_clock::time_point::max()) {
            self->request_started_ = std::chrono::steady_clock::now();
          }
          self->Pump();
        });
  }

  void Received(std::size_t n) {
    counters_->bytes_in += n;
    if (n > 0) last_progress_ = std::chrono::steady_clock::now();
  }

  // ---- large bulk strings: SET values straight into the stored buffer, the rest dropped ------
  void BeginLargeBulk() {
    const Args& args = parser_.args();
    const std::size_t index = args.size() - 1;
    const std::uint64_t size = parser_.large_bulk_bytes();
    std::string refusal = LargeBulkRefusal(args, index, size);
    std::shared_ptr<Value> value;
    if (refusal.empty()) {
      auto allocated = server_.store().Allocate(args[index - 1], static_cast<std::size_t>(size));
      if (allocated.ok()) {
        value = std::move(*allocated);
      } else {
        refusal = OomError(allocated.status());
      }
    }
    if (!refusal.empty() && command_error_.empty()) command_error_ = std::move(refusal);
    const std::size_t take =
        static_cast<std::size_t>(std::min<std::uint64_t>(size, in_end_ - in_begin_));
    if (value) std::memcpy(value->mutable_bytes().data(), in_.data() + in_begin_, take);
    in_begin_ += take;
    large_value_ = std::move(value);
    large_index_ = index;
    large_filled_ = take;
    large_left_ = size - take;
    if (large_left_ == 0) return FinishLargeBulk();
    large_active_ = true;
    ContinueLargeBulk();
  }

  // Reads the rest of a large bulk: into the value, or (refused) through the read buffer, which
  // is empty now (everything buffered belonged to the bulk).
  void ContinueLargeBulk() {
    reading_ = true;
    auto done = [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
      self->reading_ = false;
      self->Received(n);
      if (ec) return self->Close();
      self->large_filled_ += n;
      self->large_left_ -= n;
      if (self->large_left_ > 0) return self->ContinueLargeBulk();
      self->FinishLargeBulk();
      self->Pump();
    };
    if (large_value_) {
      asio::async_read(socket_,
                       asio::buffer(large_value_->mutable_bytes().data() + large_filled_,
                                    static_cast<std::size_t>(large_left_)),
                       std::move(done));
      return;
    }
    in_begin_ = in_end_ = 0;
    socket_.async_read_some(
        asio::buffer(in_.data(),
                     static_cast<std::size_t>(std::min<std::uint64_t>(large_left_, in_.size()))),
        std::move(done));
  }

  void FinishLargeBulk() {
    large_active_ = false;
    if (large_value_) large_values_.emplace_back(large_index_, std::move(large_value_));
    parser_.LargeBulkDone();
  }

  // Why the large bulk at args[index] is not read into a value (empty: it is). Only SET's and
  // MSET's values may be large; the reply is sent when the request is complete.
  std::string LargeBulkRefusal(const Args& args, std::size_t index, std::uint64_t size) {
    const bool is_value = index >= 2 && ((EqualsIgnoreCase(args[0], "set") && index == 2) ||
                                         (EqualsIgnoreCase(args[0], "mset") && index % 2 == 0));
    if (!is_value) {
      return "ERR argument " + std::to_string(index + 1) + " of " + std::to_string(size) +
             " bytes: only SET and MSET values may exceed " +
             std::to_string(resp::ParserLimits{}.max_inline_bulk) + " bytes";
    }
    if (scope_ == nullptr) return "NOAUTH Authentication required.";
    if (size > server_.options().max_value_bytes) return OversizedValue(size);
    return KeyWriteError(args[index - 1]);
  }

  // ---- replies --------------------------------------------------------------------------------
  // A reply is text and stored values; pieces are written with one gather write per batch.
  struct Piece {
    std::string text;
    ValueRef value;  // when set, the piece is the value's bytes
  };

  std::string& Out() {
    if (queued_.empty() || queued_.back().value) queued_.emplace_back();
    return queued_.back().text;
  }
  void ReplyValue(ValueRef value) {
    resp::AppendBulkHeader(Out(), value->bytes().size());
    queued_.push_back(Piece{{}, std::move(value)});
    Out().append("\r\n");
  }
  void ReplyError(std::string_view text) {
    ++counters_->command_errors;
    resp::AppendError(Out(), text);
  }
  void ReplyOk() { Out().append("+OK\r\n"); }
  void ReplyNull() { resp::AppendNull(Out(), resp3_); }

  std::size_t QueuedBytes() const {
    std::size_t n = 0;
    for (const Piece& p : queued_) n += p.value ? p.value->bytes().size() : p.text.size();
    return n;
  }

  void Flush() {
    if (writing_ || queued_.empty() || closed_) return;
    writing_ = true;
    in_flight_.swap(queued_);
    queued_.clear();
    buffers_.clear();
    for (const Piece& p : in_flight_) {
      if (p.value) {
        buffers_.push_back(asio::buffer(p.value->bytes().data(), p.value->bytes().size()));
      } else {
        buffers_.push_back(asio::buffer(p.text));
      }
    }
    asio::async_write(socket_, buffers_,
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                        self->counters_->bytes_out += n;
                        self->writing_ = false;
                        self->in_flight_.clear();
                        if (ec) return self->Close();
                        self->last_progress_ = std::chrono::steady_clock::now();
                        if (self->close_after_write_ && self->queued_.empty()) {
                          return self->Close();
                        }
                        self->Flush();
                        self->Pump();
                      });
  }

  // The stream cannot be resynchronised: one error line, then the connection closes.
  void ProtocolError(const std::string& message) {
    ++counters_->protocol_errors;
    resp::AppendError(Out(), "ERR " + message);
    close_after_write_ = true;
    Flush();
  }

  // ---- waiting for the store ------------------------------------------------------------------
  // Runs `issue(i, done)` for i in [0, n); each store call reports through `done` (inline or on
  // another thread). `then` runs on the connection's thread once all have: inline when every
  // call completed inline (the request loop goes on), else from a posted handler, which resumes
  // the loop.
  template <typename R>
  struct Batch {
    explicit Batch(std::size_t n) : results(n), remaining(n) {}
    std::vector<std::optional<R>> results;
    std::size_t remaining;
    bool issuing = true;
    std::function<void(std::vector<std::optional<R>>&)> then;
  };

  template <typename R, typename Issue>
  void RunBatch(std::size_t n, Issue issue,
                std::function<void(std::vector<std::optional<R>>&)> then) {
    auto batch = std::make_shared<Batch<R>>(n);
    batch->then = std::move(then);
    busy_ = true;
    auto self = shared_from_this();
    for (std::size_t i = 0; i < n; ++i) {
      issue(i, [self, batch, i](R r) {
        auto deliver = [self, batch, i, r = std::move(r)]() mutable {
          batch->results[i].emplace(std::move(r));
          if (--batch->remaining == 0 && !batch->issuing) {
            self->busy_ = false;  // before `then`, which may start another batch
            batch->then(batch->results);
            self->last_progress_ = std::chrono::steady_clock::now();
            self->Pump();
          }
        };
        if (self->socket_.get_executor().running_in_this_thread()) return deliver();
        asio::post(self->socket_.get_executor(), std::move(deliver));
      });
    }
    batch->issuing = false;
    if (batch->remaining == 0) {
      busy_ = false;
      batch->then(batch->results);
    }
  }

  void GetValues(std::vector<std::string> keys,
                 std::function<void(std::vector<std::optional<Result<Found>>>&)> then) {
    counters_->gets += keys.size();
    auto shared_keys = std::make_shared<std::vector<std::string>>(std::move(keys));
    RunBatch<Result<Found>>(
        shared_keys->size(),
        [this, shared_keys](std::size_t i, auto done) {
          server_.store().Get((*shared_keys)[i], std::move(done));
        },
        [c = counters_, then = std::move(then)](std::vector<std::optional<Result<Found>>>& r) {
          for (const auto& found : r) {
            if (found->ok()) ++c->get_hits;
          }
          then(r);
        });
  }

  void PutValues(std::vector<std::pair<std::string, ValueRef>> items,
                 std::function<void(std::vector<std::optional<Status>>&)> then) {
    counters_->sets += items.size();
    auto shared = std::make_shared<std::vector<std::pair<std::string, ValueRef>>>(std::move(items));
    RunBatch<Status>(
        shared->size(),
        [this, shared](std::size_t i, auto done) {
          auto& [key, value] = (*shared)[i];
          server_.store().Put(key, std::move(value), std::move(done));
        },
        std::move(then));
  }

  // ---- keys and scopes ------------------------------------------------------------------------
  std::string KeyWriteError(std::string_view key) const {
    const std::uint32_t max = server_.options().max_key_bytes;
    if (key.empty() || key.size() > max) {
      return "ERR key of " + std::to_string(key.size()) + " bytes: kvdepot keys are 1 to " +
             std::to_string(max) + " bytes (limits.max_key_bytes)";
    }
    return KeyScopeError(key);
  }
  std::string KeyScopeError(std::string_view key) const {
    if (scope_->AllowsKey(key)) return {};
    return "NOPERM this token may not use the key (its namespace is outside the token's scope; "
           "docs/security.md)";
  }
  // The first scope error among `keys` (args[first], args[first + step], ...), or empty.
  std::string KeysScopeError(const Args& args, std::size_t first, std::size_t step) const {
    if (scope_->all) return {};
    for (std::size_t i = first; i < args.size(); i += step) {
      if (std::string e = KeyScopeError(args[i]); !e.empty()) return e;
    }
    return {};
  }

  std::string OversizedValue(std::uint64_t size) {
    ++counters_->values_oversized;
    const std::uint64_t max = server_.options().max_value_bytes;
    if (server_.oversize_log().Take(std::chrono::seconds(10))) {
      Log(LogLevel::kWarn, "resp:// refused a value over limits.max_value_bytes",
          {{"bytes", std::to_string(size)}, {"max_value_bytes", std::to_string(max)}});
    }
    return "ERR value of " + std::to_string(size) + " bytes is over limits.max_value_bytes (" +
           std::to_string(max) + "): not stored; raise limits.max_value_bytes " +
           "(--limits-max-value-bytes) to store larger values";
  }
  static std::string OomError(const Status& s) { return "OOM value not stored: " + s.message(); }

  // A value for `key` holding `bytes`: the large bulk read for args[index], else a copy of the
  // inline argument. An error reply text when it cannot be had.
  Result<ValueRef> TakeValue(std::string_view key, const Args& args, std::size_t index) {
    for (auto& [i, v] : large_values_) {
      if (i == index && v) return ValueRef(std::move(v));
    }
    const std::string& bytes = args[index];
    if (bytes.size() > server_.options().max_value_bytes) {
      return InvalidArgument(OversizedValue(bytes.size()));
    }
    auto value = server_.store().Allocate(key, bytes.size());
    if (!value.ok()) return InvalidArgument(OomError(value.status()));
    if (!bytes.empty()) std::memcpy((*value)->mutable_bytes().data(), bytes.data(), bytes.size());
    return ValueRef(std::move(*value));
  }

  // ---- commands -------------------------------------------------------------------------------
  void Execute() {
    ++counters_->commands;
    const Args& args = parser_.args();
    std::string refused = std::exchange(command_error_, {});
    if (!refused.empty()) {
      large_values_.clear();
      return ReplyError(refused);
    }
    const resp::CommandSpec* spec = resp::FindCommand(args[0]);
    if (spec == nullptr) {
      large_values_.clear();
      return ReplyError(UnknownCommand(args));
    }
    if (!resp::ArityAllows(*spec, args.size())) {
      large_values_.clear();
      return ReplyError("ERR wrong number of arguments for '" + std::string(spec->name) +
                        "' command");
    }
    if (scope_ == nullptr && spec->id != CommandId::kAuth && spec->id != CommandId::kHello &&
        spec->id != CommandId::kQuit) {
      ++counters_->auth_failures;
      large_values_.clear();
      return ReplyError("NOAUTH Authentication required.");
    }
    switch (spec->id) {
      case CommandId::kPing: return Ping(args);
      case CommandId::kEcho: return resp::AppendBulk(Out(), args[1]);
      case CommandId::kQuit:
        ReplyOk();
        close_after_write_ = true;
        return;
      case CommandId::kSelect:
        if (args[1] == "0") return ReplyOk();
        return ReplyError("ERR DB index is out of range (kvdepot has one database, 0)");
      case CommandId::kAuth: return Auth(args);
      case CommandId::kHello: return Hello(args);
      case CommandId::kGet: return Get(args);
      case CommandId::kMget: return Mget(args);
      case CommandId::kSet: return Set(args);
      case CommandId::kMset: return Mset(args);
      case CommandId::kExists: return Exists(args);
      case CommandId::kDel:
      case CommandId::kUnlink: return Del(args);
      case CommandId::kType: return Type(args);
      case CommandId::kStrlen: return Strlen(args);
      case CommandId::kScan: return Scan(args);
      case CommandId::kDbsize:
        return resp::AppendInteger(Out(), static_cast<std::int64_t>(CountKeys()));
      case CommandId::kInfo: return Info(args);
      case CommandId::kCommand: return Command(args);
      case CommandId::kConfig: return Config(args);
      case CommandId::kClient: return Client(args);
    }
  }

  // Redis's wording: "unknown command 'X', with args beginning with: 'a' 'b' ".
  static std::string UnknownCommand(const Args& args) {
    std::string list;
    for (std::size_t i = 1; i < args.size() && list.size() < 128; ++i) {
      list += "'" + args[i].substr(0, 128 - list.size()) + "' ";
    }
    return "ERR unknown command '" + args[0].substr(0, 128) +
           "', with args beginning with: " + list;
  }

  void Ping(const Args& args) {
    if (args.size() > 2) return ReplyError("ERR wrong number of arguments for 'ping' command");
    if (args.size() == 2) return resp::AppendBulk(Out(), args[1]);
    Out().append("+PONG\r\n");
  }

  // True when `token` is accepted (any token when authentication is off, as natively).
  bool Authenticate(std::string_view token) {
    const Authenticator* auth = server_.options().auth.get();
    if (auth == nullptr) return true;
    const AuthScope* scope = auth->Check(token);
    if (scope == nullptr) {
      ++counters_->auth_failures;
      if (server_.auth_log().Take(std::chrono::seconds(10))) {
        Log(LogLevel::kWarn, "resp:// authentication failed: token not accepted",
            {{"peer", Peer()}});
      }
      return false;
    }
    scope_ = scope;  // a later AUTH may switch to another token's scope
    return true;
  }

  // AUTH token | AUTH username token (the username is not checked: kvdepot's tokens have none).
  void Auth(const Args& args) {
    if (args.size() > 3) return ReplyError("ERR syntax error");
    if (!Authenticate(args.back())) {
      return ReplyError("WRONGPASS invalid username-password pair or user is disabled.");
    }
    ReplyOk();
  }

  // HELLO [protover [AUTH username token] [SETNAME name]]
  void Hello(const Args& args) {
    bool resp3 = resp3_;
    if (args.size() >= 2) {
      std::int64_t version = 0;
      if (!resp::ParseInt64(args[1], version)) {
        return ReplyError("ERR Protocol version is not an integer or out of range");
      }
      if (version != 2 && version != 3) return ReplyError("NOPROTO unsupported protocol version");
      resp3 = version == 3;
    }
    std::optional<std::string> token, name;
    for (std::size_t i = 2; i < args.size();) {
      if (EqualsIgnoreCase(args[i], "auth") && i + 2 < args.size()) {
        token = args[i + 2];
        i += 3;
      } else if (EqualsIgnoreCase(args[i], "setname") && i + 1 < args.size()) {
        name = args[i + 1];
        i += 2;
      } else {
        return ReplyError("ERR Syntax error in HELLO option '" + args[i] + "'");
      }
    }
    if (token && !Authenticate(*token)) {
      return ReplyError("WRONGPASS invalid username-password pair or user is disabled.");
    }
    if (scope_ == nullptr) {
      ++counters_->auth_failures;
      return ReplyError(
          "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
          "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
          "select the RESP protocol version at the same time");
    }
    if (name) {
      if (!ValidClientName(*name)) return ReplyError(kBadClientName);
      name_ = *name;
    }
    resp3_ = resp3;
    std::string& out = Out();
    resp::AppendMapHeader(out, 7, resp3_);
    resp::AppendBulk(out, "server");
    resp::AppendBulk(out, "redis");
    resp::AppendBulk(out, "version");
    resp::AppendBulk(out, kRedisVersion);
    resp::AppendBulk(out, "proto");
    resp::AppendInteger(out, resp3_ ? 3 : 2);
    resp::AppendBulk(out, "id");
    resp::AppendInteger(out, static_cast<std::int64_t>(id_));
    resp::AppendBulk(out, "mode");
    resp::AppendBulk(out, "standalone");
    resp::AppendBulk(out, "role");
    resp::AppendBulk(out, "master");
    resp::AppendBulk(out, "modules");
    resp::AppendArrayHeader(out, 0);
  }

  void Get(const Args& args) {
    if (std::string e = KeyScopeError(args[1]); !e.empty()) return ReplyError(e);
    GetValues({args[1]},
              [this](std::vector<std::optional<Result<Found>>>& r) { ReplyFound(*r[0]); });
  }

  // A GET's reply: the value, nil when absent, an error when the read failed.
  void ReplyFound(Result<Found>& found) {
    if (found.ok()) return ReplyValue(std::move(found->value));
    if (found.status().code() == StatusCode::kNotFound) return ReplyNull();
    ReplyError("ERR read failed: " + found.status().message());
  }

  void Mget(const Args& args) {
    if (std::string e = KeysScopeError(args, 1, 1); !e.empty()) return ReplyError(e);
    GetValues(Args(args.begin() + 1, args.end()),
              [this](std::vector<std::optional<Result<Found>>>& r) {
                resp::AppendArrayHeader(Out(), r.size());
                for (auto& found : r) {
                  if (found->ok()) {
                    ReplyValue(std::move((*found)->value));
                  } else {
                    ReplyNull();  // absent, or unreadable: MGET has no per-key error
                  }
                }
              });
  }

  // SET key value [NX | XX] [GET] (EX/PX/EXAT/PXAT/KEEPTTL refused: kvdepot has no expiry)
  void Set(const Args& args) {
    bool nx = false, xx = false, get = false;
    for (std::size_t i = 3; i < args.size(); ++i) {
      const std::string& opt = args[i];
      if (EqualsIgnoreCase(opt, "nx")) {
        nx = true;
      } else if (EqualsIgnoreCase(opt, "xx")) {
        xx = true;
      } else if (EqualsIgnoreCase(opt, "get")) {
        get = true;
      } else if (EqualsIgnoreCase(opt, "ex") || EqualsIgnoreCase(opt, "px") ||
                 EqualsIgnoreCase(opt, "exat") || EqualsIgnoreCase(opt, "pxat") ||
                 EqualsIgnoreCase(opt, "keepttl")) {
        large_values_.clear();
        return ReplyError("ERR SET " + resp::ToLower(opt) +
                          ": kvdepot has no key expiry, so EX, PX, EXAT, PXAT and KEEPTTL are "
                          "refused; drop the option (values stay until evicted or deleted)");
      } else {
        large_values_.clear();
        return ReplyError("ERR syntax error");
      }
    }
    if (nx && xx) {
      large_values_.clear();
      return ReplyError("ERR syntax error");
    }
    const std::string& key = args[1];
    if (std::string e = KeyWriteError(key); !e.empty()) {
      large_values_.clear();
      return ReplyError(e);
    }
    auto value = TakeValue(key, args, 2);
    large_values_.clear();
    if (!value.ok()) return ReplyError(value.status().message());
    auto store = [this, key, nx, xx, get, value = std::move(*value)](
                     bool exists, std::optional<Result<Found>> old) mutable {
      auto reply_old = [this, get, old = std::move(old)]() mutable {
        if (!get) return ReplyOk();
        ReplyFound(*old);
      };
      if ((nx && exists) || (xx && !exists)) {
        if (!get) return ReplyNull();
        return reply_old();
      }
      PutValues({{key, std::move(value)}}, [this, reply_old = std::move(reply_old)](
                                               std::vector<std::optional<Status>>& r) mutable {
        if (!r[0]->ok()) {
          return ReplyError("ERR durable write failed (the value is served from memory): " +
                            r[0]->message());
        }
        reply_old();
      });
    };
    if (!get) {
      const bool exists = (nx || xx) && server_.store().Locate(key) != protocol::Tier::kNone;
      return store(exists, std::nullopt);
    }
    GetValues({key},
              [store = std::move(store)](std::vector<std::optional<Result<Found>>>& r) mutable {
                const bool exists = r[0]->ok();
                store(exists, std::move(r[0]));
              });
  }

  void Mset(const Args& args) {
    if (args.size() % 2 == 0) {
      large_values_.clear();
      return ReplyError("ERR wrong number of arguments for 'mset' command");
    }
    std::vector<std::pair<std::string, ValueRef>> items;
    items.reserve(args.size() / 2);
    for (std::size_t i = 1; i < args.size(); i += 2) {
      if (std::string e = KeyWriteError(args[i]); !e.empty()) {
        large_values_.clear();
        return ReplyError(e);
      }
    }
    for (std::size_t i = 1; i < args.size(); i += 2) {
      auto value = TakeValue(args[i], args, i + 1);
      if (!value.ok()) {
        large_values_.clear();
        return ReplyError(value.status().message());  // nothing stored
      }
      items.emplace_back(args[i], std::move(*value));
    }
    large_values_.clear();
    PutValues(std::move(items), [this](std::vector<std::optional<Status>>& r) {
      for (const auto& s : r) {
        if (!s->ok()) {
          return ReplyError("ERR durable write failed (the value is served from memory): " +
                            s->message());
        }
      }
      ReplyOk();
    });
  }

  void Exists(const Args& args) {
    if (std::string e = KeysScopeError(args, 1, 1); !e.empty()) return ReplyError(e);
    std::int64_t n = 0;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (server_.store().Locate(args[i]) != protocol::Tier::kNone) ++n;
    }
    resp::AppendInteger(Out(), n);
  }

  void Del(const Args& args) {
    if (std::string e = KeysScopeError(args, 1, 1); !e.empty()) return ReplyError(e);
    std::int64_t n = 0;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (server_.store().Erase(args[i])) ++n;
    }
    resp::AppendInteger(Out(), n);
  }

  void Type(const Args& args) {
    if (std::string e = KeyScopeError(args[1]); !e.empty()) return ReplyError(e);
    const bool exists = server_.store().Locate(args[1]) != protocol::Tier::kNone;
    Out().append(exists ? "+string\r\n" : "+none\r\n");
  }

  void Strlen(const Args& args) {
    if (std::string e = KeyScopeError(args[1]); !e.empty()) return ReplyError(e);
    GetValues({args[1]}, [this](std::vector<std::optional<Result<Found>>>& r) {
      const auto& found = *r[0];
      resp::AppendInteger(Out(),
                          found.ok() ? static_cast<std::int64_t>(found->value->bytes().size()) : 0);
    });
  }

  // Keys after `resume_after` this connection's scope reaches, at most `limit`, in byte order; the
  // key to resume after next (empty: the scan is complete). A namespace-restricted token scans
  // only its namespaces' 48-byte chunk keys (other namespaces are never read).
  std::vector<std::string> ScanKeys(const std::string& resume_after, std::uint32_t limit,
                                    std::string& next) const {
    std::vector<std::string> keys;
    next.clear();
    const Store& store = server_.store();
    if (scope_->all) {
      auto page = store.Scan("", resume_after, limit, protocol::Tier::kNone);
      for (auto& e : page.entries) keys.push_back(std::move(e.key));
      next = page.next_cursor;
      return keys;
    }
    for (const std::string& ns : scope_->namespaces) {
      if (!resume_after.empty() && ns < resume_after.substr(0, kNamespaceIdBytes)) continue;
      std::string cursor = resume_after.rfind(ns, 0) == 0 ? resume_after : std::string();
      while (keys.size() < limit) {
        auto page = store.Scan(ns, cursor, limit - static_cast<std::uint32_t>(keys.size()),
                               protocol::Tier::kNone);
        if (page.entries.empty()) break;
        cursor = page.entries.back().key;
        for (auto& e : page.entries) {
          if (e.key.size() == 48) keys.push_back(std::move(e.key));
        }
        if (page.next_cursor.empty()) break;
      }
      if (keys.size() >= limit) {
        next = cursor;
        break;
      }
    }
    return keys;
  }

  // The keys this connection's scope reaches: the host tier's count when that is exact (no SSD
  // tier, every namespace), else a scan.
  std::uint64_t CountKeys() const {
    const Store& store = server_.store();
    if (scope_->all && store.ssd() == nullptr) return store.host().stats().chunks;
    std::uint64_t n = 0;
    std::string cursor, next;
    do {
      n += ScanKeys(cursor, 4096, next).size();
      cursor = next;
    } while (!cursor.empty());
    return n;
  }

  // SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
  void Scan(const Args& args) {
    std::uint64_t cursor_id = 0;
    {
      const auto [p, ec] =
          std::from_chars(args[1].data(), args[1].data() + args[1].size(), cursor_id);
      if (ec != std::errc() || p != args[1].data() + args[1].size()) {
        return ReplyError("ERR invalid cursor");
      }
    }
    std::optional<std::string> pattern;
    std::int64_t count = 10;
    bool strings = true;
    for (std::size_t i = 2; i < args.size(); i += 2) {
      if (i + 1 >= args.size()) return ReplyError("ERR syntax error");
      if (EqualsIgnoreCase(args[i], "match")) {
        pattern = args[i + 1];
      } else if (EqualsIgnoreCase(args[i], "count")) {
        if (!resp::ParseInt64(args[i + 1], count)) {
          return ReplyError("ERR value is not an integer or out of range");
        }
        if (count < 1) return ReplyError("ERR syntax error");
      } else if (EqualsIgnoreCase(args[i], "type")) {
        strings = EqualsIgnoreCase(args[i + 1], "string");
      } else {
        return ReplyError("ERR syntax error");
      }
    }
    std::string resume_after;
    if (cursor_id != 0) {
      auto found = server_.cursors().Find(cursor_id);
      if (!found) {
        return ReplyError("ERR invalid cursor: " + args[1] +
                          " is not one this server handed out, or was forgotten (kvdepot keeps "
                          "the last " +
                          std::to_string(kMaxScanCursors) +
                          " SCAN cursors); restart the scan from 0");
      }
      resume_after = std::move(*found);
    }
    std::string next;
    auto keys =
        ScanKeys(resume_after, static_cast<std::uint32_t>(std::min(count, kMaxScanCount)), next);
    std::erase_if(keys, [&](const std::string& k) {
      return !strings || (pattern && !resp::GlobMatch(*pattern, k));
    });
    const std::uint64_t next_id = next.empty() ? 0 : server_.cursors().Add(std::move(next));
    std::string& out = Out();
    resp::AppendArrayHeader(out, 2);
    resp::AppendBulk(out, std::to_string(next_id));
    resp::AppendArrayHeader(out, keys.size());
    for (const auto& k : keys) resp::AppendBulk(out, k);
  }

  // INFO [section ...]: server, clients, memory, stats, keyspace, kvdepot; all/default/everything.
  void Info(const Args& args) {
    auto wanted = [&](std::string_view section) {
      if (args.size() == 1) return true;
      for (std::size_t i = 1; i < args.size(); ++i) {
        if (EqualsIgnoreCase(args[i], section) || EqualsIgnoreCase(args[i], "all") ||
            EqualsIgnoreCase(args[i], "default") || EqualsIgnoreCase(args[i], "everything")) {
          return true;
        }
      }
      return false;
    };
    std::string text;
    auto field = [&text](std::string_view name, const std::string& value) {
      text.append(name).append(":").append(value).append("\r\n");
    };
    auto num = [](std::uint64_t v) { return std::to_string(v); };
    auto section = [&text](std::string_view title) {
      if (!text.empty()) text.append("\r\n");
      text.append("# ").append(title).append("\r\n");
    };
    const Counters& c = *counters_;
    const Store& store = server_.store();
    const HostTierStats host = store.host().stats();
    if (wanted("server")) {
      const auto uptime = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::steady_clock::now() - server_.started())
                              .count();
      section("Server");
      field("redis_version", kRedisVersion);
      field("kvdepot_version", server_.options().version);
      field("redis_mode", "standalone");
      field("os", "Linux");
      field("arch_bits", "64");
      field("process_id", num(static_cast<std::uint64_t>(::getpid())));
      field("tcp_port", num(server_.port()));
      field("uptime_in_seconds", num(static_cast<std::uint64_t>(uptime)));
      field("uptime_in_days", num(static_cast<std::uint64_t>(uptime / 86400)));
    }
    if (wanted("clients")) {
      section("Clients");
      field("connected_clients", num(c.open.load()));
    }
    if (wanted("memory")) {
      section("Memory");
      field("used_memory", num(host.bytes));
      field("used_memory_human", HumanBytes(host.bytes));
      field("maxmemory", num(host.capacity));
      field("maxmemory_human", HumanBytes(host.capacity));
    }
    if (wanted("stats")) {
      section("Stats");
      field("total_connections_received", num(c.total.load()));
      field("total_commands_processed", num(c.commands.load()));
      field("total_net_input_bytes", num(c.bytes_in.load()));
      field("total_net_output_bytes", num(c.bytes_out.load()));
      field("keyspace_hits", num(c.get_hits.load()));
      field("keyspace_misses", num(c.gets.load() - std::min(c.gets.load(), c.get_hits.load())));
      field("evicted_keys", num(host.evictions));
      field("protocol_errors", num(c.protocol_errors.load()));
    }
    if (wanted("keyspace")) {
      section("Keyspace");
      const std::uint64_t keys = CountKeys();
      if (keys > 0) field("db0", "keys=" + num(keys) + ",expires=0,avg_ttl=0");
    }
    if (wanted("kvdepot")) {
      section("Kvdepot");
      field("host_bytes", num(host.bytes));
      field("host_capacity", num(host.capacity));
      field("host_chunks", num(host.chunks));
      field("host_hits", num(host.hits));
      field("host_misses", num(host.misses));
      field("host_evictions", num(host.evictions));
      if (const DeviceTier* gpu = store.device(); gpu != nullptr) {
        const DeviceTierStats g = gpu->stats();
        field("gpu_bytes", num(g.bytes));
        field("gpu_capacity", num(g.capacity));
        field("gpu_chunks", num(g.chunks));
        field("gpu_hits", num(g.hits));
        field("gpu_misses", num(g.misses));
        field("gpu_evictions", num(g.evictions));
      }
      if (const SsdTier* ssd = store.ssd(); ssd != nullptr) {
        const SsdTierStats s = ssd->stats();
        field("ssd_bytes", num(s.bytes));
        field("ssd_live_bytes", num(s.live_bytes));
        field("ssd_capacity", num(s.capacity));
        field("ssd_chunks", num(s.chunks));
        field("ssd_hits", num(s.hits));
        field("ssd_misses", num(s.misses));
        field("ssd_evictions", num(s.evictions));
        field("ssd_io", s.io_path);
      }
    }
    resp::AppendBulk(Out(), text);
  }

  // COMMAND | COMMAND COUNT | COMMAND LIST | COMMAND INFO name... | COMMAND DOCS [name...]
  void Command(const Args& args) {
    const auto& all = resp::Commands();
    std::string& out = Out();
    if (args.size() == 1) {
      resp::AppendArrayHeader(out, all.size());
      for (const auto& spec : all) resp::AppendCommandInfo(out, spec, resp3_);
      return;
    }
    const std::string& sub = args[1];
    if (EqualsIgnoreCase(sub, "count") && args.size() == 2) {
      return resp::AppendInteger(out, static_cast<std::int64_t>(all.size()));
    }
    if (EqualsIgnoreCase(sub, "list") && args.size() == 2) {
      resp::AppendArrayHeader(out, all.size());
      for (const auto& spec : all) resp::AppendBulk(out, spec.name);
      return;
    }
    if (EqualsIgnoreCase(sub, "info")) {
      resp::AppendArrayHeader(out, args.size() - 2);
      for (std::size_t i = 2; i < args.size(); ++i) {
        if (const auto* spec = resp::FindCommand(args[i])) {
          resp::AppendCommandInfo(out, *spec, resp3_);
        } else {
          ReplyNull();
        }
      }
      return;
    }
    if (EqualsIgnoreCase(sub, "docs")) {
      std::vector<const resp::CommandSpec*> specs;
      if (args.size() == 2) {
        for (const auto& spec : all) specs.push_back(&spec);
      } else {
        for (std::size_t i = 2; i < args.size(); ++i) {
          if (const auto* spec = resp::FindCommand(args[i])) specs.push_back(spec);
        }
      }
      resp::AppendMapHeader(out, specs.size(), resp3_);
      for (const auto* spec : specs) {
        resp::AppendBulk(out, spec->name);
        resp::AppendCommandDocs(out, *spec, resp3_);
      }
      return;
    }
    ReplyError("ERR unknown subcommand or wrong number of arguments for '" + sub +
               "' (kvdepot's COMMAND has COUNT, LIST, INFO and DOCS)");
  }

  // CONFIG GET pattern...: a few read-only parameters (redis-benchmark reads save and
  // appendonly); kvdepotd is configured through its own file and flags, never CONFIG SET.
  void Config(const Args& args) {
    if (!EqualsIgnoreCase(args[1], "get")) {
      return ReplyError("ERR CONFIG " + resp::ToLower(args[1]) +
                        " is not supported: kvdepotd is configured through its config file and "
                        "flags (config/kvdepot.yaml, docs/resp.md); CONFIG GET reads a few values");
    }
    if (args.size() < 3)
      return ReplyError("ERR wrong number of arguments for 'config|get' command");
    const RespServerOptions& o = server_.options();
    const std::vector<std::pair<std::string, std::string>> params = {
        {"appendonly", "no"},
        {"databases", "1"},
        {"maxmemory", std::to_string(server_.store().host().stats().capacity)},
        {"proto-max-bulk-len", std::to_string(o.max_value_bytes)},
        {"save", ""},
        {"timeout", std::to_string(server_.timeouts().idle().count() / 1000)},
    };
    std::vector<const std::pair<std::string, std::string>*> matched;
    for (const auto& p : params) {
      for (std::size_t i = 2; i < args.size(); ++i) {
        if (resp::GlobMatch(args[i], p.first, /*nocase=*/true)) {
          matched.push_back(&p);
          break;
        }
      }
    }
    std::string& out = Out();
    resp::AppendMapHeader(out, matched.size(), resp3_);
    for (const auto* p : matched) {
      resp::AppendBulk(out, p->first);
      resp::AppendBulk(out, p->second);
    }
  }

  static constexpr const char* kBadClientName =
      "ERR Client names cannot contain spaces, newlines or special characters.";
  static bool ValidClientName(std::string_view name) {
    return std::all_of(name.begin(), name.end(), [](char ch) { return ch > ' ' && ch <= '~'; });
  }

  // CLIENT SETNAME name | GETNAME | ID | SETINFO LIB-NAME|LIB-VER value
  void Client(const Args& args) {
    const std::string& sub = args[1];
    if (EqualsIgnoreCase(sub, "setname") && args.size() == 3) {
      if (!ValidClientName(args[2])) return ReplyError(kBadClientName);
      name_ = args[2];
      return ReplyOk();
    }
    if (EqualsIgnoreCase(sub, "getname") && args.size() == 2) {
      if (name_.empty()) return ReplyNull();
      return resp::AppendBulk(Out(), name_);
    }
    if (EqualsIgnoreCase(sub, "id") && args.size() == 2) {
      return resp::AppendInteger(Out(), static_cast<std::int64_t>(id_));
    }
    if (EqualsIgnoreCase(sub, "setinfo") && args.size() == 4) {
      if (!EqualsIgnoreCase(args[2], "lib-name") && !EqualsIgnoreCase(args[2], "lib-ver")) {
        return ReplyError("ERR Unrecognized option '" + args[2] + "'");
      }
      if (!ValidClientName(args[3])) return ReplyError(kBadClientName);
      return ReplyOk();
    }
    ReplyError("ERR unknown subcommand or wrong number of arguments for '" + sub +
               "' (kvdepot's CLIENT has SETNAME, GETNAME, ID and SETINFO)");
  }

  std::string Peer() const {
    boost::system::error_code ec;
    const auto ep = socket_.remote_endpoint(ec);
    return ec ? std::string("unknown") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  // ---- timeouts and closing -------------------------------------------------------------------
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
                                     last_progress_, busy_)) {
      case Expired::kRequest: ++counters_->request_timeouts; return Close();
      case Expired::kIdle: ++counters_->idle_timeouts; return Close();
      case Expired::kNone: break;
    }
    ArmWatchdog();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    watchdog_.cancel();
    boost::system::error_code ec;
    socket_.shutdown(Socket::shutdown_both, ec);
    socket_.close(ec);
  }

  RegistrationGuard<RespServer::Impl> registration_;  // first: unregisters after the rest is gone
  Socket socket_;
  RespServer::Impl& server_;
  std::shared_ptr<Counters> counters_;
  const AuthScope* scope_;  // null until a successful AUTH (auth on); owned by the Authenticator
  std::uint64_t id_;
  std::string name_;    // CLIENT SETNAME
  bool resp3_ = false;  // HELLO 3

  // Input: bytes [in_begin_, in_end_) of in_ are read and not yet parsed.
  std::vector<char> in_;
  std::size_t in_begin_ = 0, in_end_ = 0;
  resp::RequestParser parser_;
  std::string command_error_;  // the reply to the request being read (a refused large bulk)
  // Values read for the request being read: (argument index, value).
  std::vector<std::pair<std::size_t, std::shared_ptr<Value>>> large_values_;
  std::shared_ptr<Value> large_value_;  // the large bulk being read (null: being dropped)
  std::size_t large_index_ = 0;
  std::uint64_t large_filled_ = 0, large_left_ = 0;
  bool large_active_ = false;

  // Output: queued_ collects replies; in_flight_ is being written (buffers_ points into it).
  std::vector<Piece> queued_, in_flight_;
  std::vector<asio::const_buffer> buffers_;

  bool reading_ = false;
  bool writing_ = false;
  bool busy_ = false;  // a request waits for the store
  bool draining_ = false;
  bool close_after_write_ = false;
  bool closed_ = false;
  asio::steady_timer watchdog_;
  std::chrono::steady_clock::time_point last_progress_{};
  // When the server started waiting for the rest of a request (max: none pending).
  std::chrono::steady_clock::time_point request_started_ =
      std::chrono::steady_clock::time_point::max();
};

}  // namespace

Status RespServer::Impl::Start() {
  if (started_) return Status::Ok();
  KVD_ASSIGN_OR_RETURN(const auto endpoint,
                       ParseListenAddress("resp listen address", options_.listen));
  for (std::uint32_t i = 0; i < std::max<std::uint32_t>(options_.io_threads, 1); ++i) {
    contexts_.push_back(std::make_unique<asio::io_context>(1));
    guards_.emplace_back(asio::make_work_guard(*contexts_.back()));
  }
  boost::system::error_code ec;
  acceptor_ = std::make_unique<asio::ip::tcp::acceptor>(*contexts_[0]);
  if (acceptor_->open(endpoint.protocol(), ec); !ec) {
    acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
    acceptor_->bind(endpoint, ec);
  }
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot listen on resp://" + options_.listen + ": " + ec.message());
  port_ = acceptor_->local_endpoint().port();
  Accept();
  for (auto& ctx : contexts_) threads_.emplace_back([c = ctx.get()] { c->run(); });
  started_ = true;
  return Status::Ok();
}

void RespServer::Impl::Accept() {
  auto& ctx = *contexts_[next_context_++ % contexts_.size()];
  acceptor_->async_accept(ctx.get_executor(), [this](boost::system::error_code ec, Socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_->is_open()) return;
      return Accept();  // e.g. EMFILE: keep serving the connections we have
    }
    boost::system::error_code ignored;
    socket.set_option(asio::ip::tcp::no_delay(true), ignored);
    auto conn = std::make_shared<RespConnection>(std::move(socket), *this);
    conn->set_registration(Register(conn));
    conn->Start();
    Accept();
  });
}

std::vector<std::shared_ptr<RespConnection>> RespServer::Impl::Live() {
  std::vector<std::shared_ptr<RespConnection>> live;
  std::lock_guard lock(mu_);
  for (auto& weak : connections_) {
    if (auto c = weak.lock()) live.push_back(std::move(c));
  }
  return live;
}

void RespServer::Impl::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  asio::post(*contexts_[0], [this] {
    boost::system::error_code ec;
    acceptor_->close(ec);
  });
  for (auto& c : Live()) c->BeginShutdown();  // released outside the lock (Unregister locks)
  auto timer = std::make_shared<asio::steady_timer>(*contexts_[0], options_.drain_timeout);
  timer->async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    for (auto& c : Live()) c->ForceClose();
  });
  for (auto& g : guards_) g.reset();
  std::thread watcher([this, timer] {
    while (counters_->open.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    asio::post(*contexts_[0], [timer] { timer->cancel(); });
  });
  for (auto& t : threads_) t.join();
  watcher.join();
  threads_.clear();
  // A connection whose last reference is held off the I/O threads (a store callback on the SSD
  // tier's thread) may still be going: *this must outlive it (RegistrationGuard).
  while (counters_->open.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  timer.reset();  // before its io_context goes
  acceptor_.reset();
  guards_.clear();
  contexts_.clear();
}

RespServerStats RespServer::Impl::stats() const {
  const Counters& c = *counters_;
  RespServerStats s;
  s.connections_open = c.open.load();
  s.connections_total = c.total.load();
  s.commands = c.commands.load();
  s.command_errors = c.command_errors.load();
  s.gets = c.gets.load();
  s.get_hits = c.get_hits.load();
  s.sets = c.sets.load();
  s.values_oversized = c.values_oversized.load();
  s.auth_failures = c.auth_failures.load();
  s.protocol_errors = c.protocol_errors.load();
  s.request_timeouts = c.request_timeouts.load();
  s.idle_timeouts = c.idle_timeouts.load();
  s.bytes_in = c.bytes_in.load();
  s.bytes_out = c.bytes_out.load();
  return s;
}

RespServer::RespServer(const RespServerOptions& options, Store& store)
    : impl_(std::make_unique<Impl>(options, store)) {}
RespServer::~RespServer() {
  Stop();
}
Status RespServer::Start() {
  return impl_->Start();
}
std::uint16_t RespServer::port() const {
  return impl_->port();
}
void RespServer::Stop() {
  impl_->Stop();
}
RespServerStats RespServer::stats() const {
  return impl_->stats();
}
void RespServer::SetTimeouts(std::chrono::milliseconds request_timeout,
                             std::chrono::milliseconds idle_timeout) {
  impl_->SetTimeouts(request_timeout, idle_timeout);
}

}  // namespace kvdepot::daemon
