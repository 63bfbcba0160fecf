// One resp:// client connection: the transport (read loop, parser feeding, large SET bodies read
// straight into stored buffers, the ordered reply queue, timeouts, closing) in
// resp_connection.cc, and the command handlers, by family, in handlers_keys.cc (GET, SET, MGET,
// MSET, DEL, EXISTS, STRLEN), handlers_scan.cc (SCAN, DBSIZE, TYPE) and handlers_server.cc (the
// dispatch, PING, ECHO, QUIT, SELECT, AUTH, HELLO, INFO, COMMAND, CONFIG, CLIENT).
//
// Requests are executed one at a time in the order read and their replies queued in that order;
// a handler either appends its whole reply before returning or starts a store batch
// (GetValues / PutValues) whose continuation appends it (or starts the next batch, as SET ... GET
// does), and the request loop waits for the batches before it executes the next request.
//
// Thread-safety: every member function runs on the connection's own io_context thread, except
// Start, BeginShutdown and ForceClose (any thread: they post to it).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/daemon/auth.h"
#include "kvdepot/daemon/store.h"
#include "net/registration_guard.h"
#include "resp/resp_codec.h"
#include "resp/resp_server_impl.h"

namespace kvdepot::daemon::resp {

using Args = std::vector<std::string>;

class RespConnection : public DrainableConnection,
                       public std::enable_shared_from_this<RespConnection> {
 public:
  RespConnection(Socket socket, RespServer::Impl& server);
  void set_registration(ListenerCore::Registration r) { registration_.Set(&server_.core(), r); }

  void Start();
  // Idle connections close now; one with requests read closes once they are answered.
  void BeginShutdown() override;
  void ForceClose() override;

 private:
  // ---- transport (resp_connection.cc) ----------------------------------------------------------
  void Pump();
  void StartRead();
  void Received(std::size_t n);
  void BeginLargeBulk();
  void ContinueLargeBulk();
  void FinishLargeBulk();
  std::string LargeBulkRefusal(const Args& args, std::size_t index, std::uint64_t size);

  // A reply is text and stored values; pieces are written with one gather write per batch.
  struct Piece {
    std::string text;
    ValueRef value;  // when set, the piece is the value's bytes
  };
  std::string& Out();  // the text piece replies are appended to
  void ReplyValue(ValueRef value);
  void ReplyError(std::string_view text);
  void ReplyOk();
  void ReplyNull();
  std::size_t QueuedBytes() const;
  void Flush();
  void ProtocolError(const std::string& message);

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
                std::function<void(std::vector<std::optional<R>>&)> then);
  void GetValues(std::vector<std::string> keys,
                 std::function<void(std::vector<std::optional<Result<Found>>>&)> then);
  void PutValues(std::vector<std::pair<std::string, ValueRef>> items,
                 std::function<void(std::vector<std::optional<Status>>&)> then);
  // Store::LocateMany over `keys` (in a cluster: one parallel round to their owners); `then`
  // gets the tiers in key order.
  void LocateValues(std::vector<std::string> keys,
                    std::function<void(const std::vector<protocol::Tier>&)> then);
  // Store::Delete of every key (in a cluster: erased here and at the key's owners); `then` gets
  // how many of the keys were found anywhere.
  void DeleteValues(std::vector<std::string> keys, std::function<void(std::int64_t found)> then);

  std::string Peer() const;
  void ArmWatchdog();
  void CheckTimeouts();
  void Close();

  // ---- keys, values and scopes (handlers_keys.cc) ----------------------------------------------
  std::string KeyWriteError(std::string_view key) const;
  std::string KeyScopeError(std::string_view key) const;
  std::string KeysScopeError(const Args& args, std::size_t first, std::size_t step) const;
  std::string OversizedValue(std::uint64_t size);
  static std::string OomError(const Status& s);
  Result<ValueRef> TakeValue(std::string_view key, const Args& args, std::size_t index);
  void ReplyFound(Result<Found>& found);
  void Get(const Args& args);
  void Mget(const Args& args);
  void Set(const Args& args);
  void Mset(const Args& args);
  void Exists(const Args& args);
  void Del(const Args& args);
  void Strlen(const Args& args);

  // ---- the keyspace (handlers_scan.cc) ---------------------------------------------------------
  void Type(const Args& args);
  std::vector<std::string> ScanKeys(const std::string& resume_after, std::uint32_t limit,
                                    std::string& next) const;
  std::uint64_t CountKeys() const;
  void Scan(const Args& args);

  // ---- dispatch, connection and server commands (handlers_server.cc) --------------------------
  void Execute();
  static std::string UnknownCommand(const Args& args);
  void Ping(const Args& args);
  bool Authenticate(std::string_view token);
  void Auth(const Args& args);
  void Hello(const Args& args);
  void Info(const Args& args);
  void Command(const Args& args);
  void Config(const Args& args);
  void Client(const Args& args);

  RegistrationGuard<ListenerCore> registration_;  // first: unregisters after the rest is gone
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
  RequestParser parser_;
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

}  // namespace kvdepot::daemon::resp
