// A resp:// connection's transport (resp_connection.h): the read loop feeding the parser, large
// SET bodies read straight into stored buffers, the ordered reply queue and its gather writes,
// store batches, timeouts and closing.
#include "resp/resp_connection.h"

#include <algorithm>
#include <cstring>

namespace kvdepot::daemon::resp {
namespace {

// Holds any element the parser buffers whole: an inline request or length line (64 KiB) and a
// bulk string up to max_inline_bulk (16 KiB); larger bulks bypass it.
constexpr std::size_t kReadBufferBytes = 128 * 1024;
// Replies of pipelined requests are batched; past this many queued bytes the connection stops
// executing requests until they are written (a client that does not read cannot grow them).
constexpr std::size_t kMaxQueuedReplyBytes = 4 << 20;

// The scope of a connection on a server without authentication.
const AuthScope kEverything{true, {}};

// The parser's limits: Redis's defaults, with bulk strings up to the value limit when that is
// larger than Redis's 512 MiB.
ParserLimits ParserLimitsFor(const RespServerOptions& options) {
  ParserLimits limits;
  limits.max_bulk_bytes = std::max<std::uint64_t>(limits.max_bulk_bytes, options.max_value_bytes);
  return limits;
}

}  // namespace

RespConnection::RespConnection(Socket socket, RespServer::Impl& server)
    : socket_(std::move(socket)),
      server_(server),
      counters_(server.shared_counters()),
      scope_(server.options().auth ? nullptr : &kEverything),
      id_(counters_->next_client_id++),
      in_(kReadBufferBytes),
      parser_(ParserLimitsFor(server.options())),
      watchdog_(socket_.get_executor()) {}

void RespConnection::Start() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->last_progress_ = std::chrono::steady_clock::now();
    self->ArmWatchdog();
    self->Pump();
  });
}

void RespConnection::BeginShutdown() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->draining_ = true;
    self->Pump();
  });
}
void RespConnection::ForceClose() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
}

// ---- the request loop -----------------------------------------------------------------------
// Executes the requests buffered, in order, until one waits for the store, the input runs dry
// (then the batched replies are written and more is read) or the replies queued reach
// kMaxQueuedReplyBytes (then reading resumes once they are written).
void RespConnection::Pump() {
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

void RespConnection::StartRead() {
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

void RespConnection::Received(std::size_t n) {
  counters_->bytes_in += n;
  if (n > 0) last_progress_ = std::chrono::steady_clock::now();
}

// ---- large bulk strings: SET values straight into the stored buffer, the rest dropped ------
void RespConnection::BeginLargeBulk() {
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
void RespConnection::ContinueLargeBulk() {
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
  socket_.async_read_some(asio::buffer(in_.data(), static_cast<std::size_t>(std::min<std::uint64_t>(
                                                       large_left_, in_.size()))),
                          std::move(done));
}

void RespConnection::FinishLargeBulk() {
  large_active_ = false;
  if (large_value_) large_values_.emplace_back(large_index_, std::move(large_value_));
  parser_.LargeBulkDone();
}

// Why the large bulk at args[index] is not read into a value (empty: it is). Only SET's and
// MSET's values may be large; the reply is sent when the request is complete.
std::string RespConnection::LargeBulkRefusal(const Args& args, std::size_t index,
                                             std::uint64_t size) {
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

std::string& RespConnection::Out() {
  if (queued_.empty() || queued_.back().value) queued_.emplace_back();
  return queued_.back().text;
}
void RespConnection::ReplyValue(ValueRef value) {
  resp::AppendBulkHeader(Out(), value->bytes().size());
  queued_.push_back(Piece{{}, std::move(value)});
  Out().append("\r\n");
}
void RespConnection::ReplyError(std::string_view text) {
  ++counters_->command_errors;
  resp::AppendError(Out(), text);
}
void RespConnection::ReplyOk() {
  Out().append("+OK\r\n");
}
void RespConnection::ReplyNull() {
  resp::AppendNull(Out(), resp3_);
}

std::size_t RespConnection::QueuedBytes() const {
  std::size_t n = 0;
  for (const Piece& p : queued_) n += p.value ? p.value->bytes().size() : p.text.size();
  return n;
}

void RespConnection::Flush() {
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
void RespConnection::ProtocolError(const std::string& message) {
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

template <typename R, typename Issue>
void RespConnection::RunBatch(std::size_t n, Issue issue,
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

void RespConnection::GetValues(
    std::vector<std::string> keys,
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

void RespConnection::PutValues(std::vector<std::pair<std::string, ValueRef>> items,
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

void RespConnection::LocateValues(std::vector<std::string> keys,
                                  std::function<void(const std::vector<protocol::Tier>&)> then) {
  auto shared_keys = std::make_shared<std::vector<std::string>>(std::move(keys));
  RunBatch<std::vector<protocol::Tier>>(
      1,
      [this, shared_keys](std::size_t, auto done) {
        const std::vector<std::string_view> views(shared_keys->begin(), shared_keys->end());
        server_.store().LocateMany(views, Route::kCluster, std::move(done));
      },
      [then = std::move(then)](std::vector<std::optional<std::vector<protocol::Tier>>>& r) {
        then(*r[0]);
      });
}

void RespConnection::DeleteValues(std::vector<std::string> keys,
                                  std::function<void(std::int64_t found)> then) {
  auto shared_keys = std::make_shared<std::vector<std::string>>(std::move(keys));
  RunBatch<bool>(
      shared_keys->size(),
      [this, shared_keys](std::size_t i, auto done) {
        server_.store().Delete((*shared_keys)[i], Route::kCluster, std::move(done));
      },
      [then = std::move(then)](std::vector<std::optional<bool>>& r) {
        then(std::count_if(r.begin(), r.end(), [](const std::optional<bool>& f) { return *f; }));
      });
}

std::string RespConnection::Peer() const {
  boost::system::error_code ec;
  const auto ep = socket_.remote_endpoint(ec);
  return ec ? std::string("unknown") : ep.address().to_string() + ":" + std::to_string(ep.port());
}

// ---- timeouts and closing -------------------------------------------------------------------
void RespConnection::ArmWatchdog() {
  if (closed_) return;
  watchdog_.expires_after(server_.timeouts().Tick());
  watchdog_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && !self->closed_) self->CheckTimeouts();
  });
}

void RespConnection::CheckTimeouts() {
  using Expired = ConnectionTimeouts::Expired;
  switch (server_.timeouts().Check(std::chrono::steady_clock::now(), request_started_,
                                   last_progress_, busy_)) {
    case Expired::kRequest: ++counters_->request_timeouts; return Close();
    case Expired::kIdle: ++counters_->idle_timeouts; return Close();
    case Expired::kNone: break;
  }
  ArmWatchdog();
}

void RespConnection::Close() {
  if (closed_) return;
  closed_ = true;
  watchdog_.cancel();
  boost::system::error_code ec;
  socket_.shutdown(Socket::shutdown_both, ec);
  socket_.close(ec);
}

}  // namespace kvdepot::daemon::resp
