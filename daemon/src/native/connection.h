// The native protocol's connection (docs/protocol.md): Connection<Socket> reads a connection's
// requests, dispatches them to their handlers and writes the answers in request order. Split by
// what each part does, one file each, so a reader finds a request's path by its operation:
//   connection.cc            reading frames, dispatch, the response slot queue, writing, timeouts
//   handlers_get_put.cc      PUT (items read straight into their final buffers), GET, GET_AS
//   handlers_lookup_scan.cc  LOOKUP, DELETE, SCAN
//   handlers_lease_map.cc    same-host zero-copy: MAP, LEASE_GET, RELEASE
//   handlers_admin.cc        AUTH, EVENT_ORIGIN, STATS
// The listener (listener.cc) accepts sockets and owns the I/O threads (net/listener_core.h).
//
// `Socket` is a plain TCP or Unix stream socket, or a TLS stream over TCP (the three aliases
// below); each .cc instantiates the members it defines for all three.
//
// Thread-safety: a connection's handlers run on its io_context's one thread; store callbacks
// arriving from other threads come back to it through OnOwnThread.
#pragma once

#include <utility>  // before Boost.Asio: Boost 1.74 under C++20 needs std::exchange declared

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/base/hex.h"
#include "kvdepot/daemon/cluster_router.h"
#include "kvdepot/daemon/kv_events.h"
#include "kvdepot/daemon/log.h"
#include "kvdepot/daemon/shm_arena.h"
#include "kvdepot/daemon/ssd_tier.h"
#include "kvdepot/protocol/protocol.h"
#include "native/server_impl.h"
#include "net/listener_core.h"
#include "net/registration_guard.h"

namespace kvdepot::daemon::native {
namespace asio = boost::asio;
using protocol::FrameHeader;
using protocol::Op;

using TcpSocket = asio::basic_stream_socket<asio::ip::tcp, asio::io_context::executor_type>;
using UnixSocket =
    asio::basic_stream_socket<asio::local::stream_protocol, asio::io_context::executor_type>;
using TlsSocket = asio::ssl::stream<TcpSocket>;

inline constexpr std::size_t kDiscardChunk = 64 * 1024;

// Completion condition for transfers of multi-MiB values: asio's transfer_all hands the socket at
// most 64 KiB per read or write call; this lets one call move whatever the socket buffer takes
// (several MiB), so a value costs a few system calls and handler runs instead of one per 64 KiB.
inline std::size_t TransferAllInLargeSteps(const boost::system::error_code& ec, std::size_t) {
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

// The scope of a connection on a server without authentication.
inline const AuthScope kEverything{true, {}};

template <typename Stream>
constexpr bool kIsTls = false;
template <typename Inner>
constexpr bool kIsTls<asio::ssl::stream<Inner>> = true;

template <typename Socket>
class Connection : public DrainableConnection,
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
  void set_registration(ListenerCore::Registration r) { registration_.Set(&server_.core(), r); }

  void Start() {
    if constexpr (kIsTls<Socket>) {
      asio::dispatch(socket_.get_executor(), [self = this->shared_from_this()] {
        self->last_progress_ = std::chrono::steady_clock::now();
        self->ArmWatchdog();            // a stalled handshake is an idle connection too
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
  void ReadHeader();

  // EOF, reset or our own cancel while waiting for a header: stop reading, flush what is queued.
  void HeaderFailed();

  // Bytes arrived: the connection is making progress.
  void Received(std::size_t n);

  // The current request has been read to its end.
  void RequestRead() { request_started_ = std::chrono::steady_clock::time_point::max(); }

  void OnHeader();

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
    // kFlagPlacement: the section's entries, and the placement keys (views into it), per item.
    std::vector<std::byte> placement_section;
    std::vector<std::string_view> placement;
  };

  void StartPut(const FrameHeader& h);

  // kFlagPlacement: reads the placement section (its length checked before its bytes are read),
  // then the count.
  void ReadPutPlacement();
  void ReadPutCount();

  // Refuses the whole PUT with `status` (a limit or a bad placement section: never kCorruption);
  // the rest of its body is read and dropped and the connection stays open.
  void RefusePut(const Status& status);

  // The item was refused with `code`; its bytes (already taken off put_.remaining) are read and
  // dropped, then the next item follows.
  void SkipItem(StatusCode code, std::uint64_t bytes);

  void PutNextItem();

  // Lengths that claim more than the frame's body holds: the frame is malformed.
  void BodyEndsInsideItem();
  void ValuePastBody();

  // Hands the item just read to the store; its status arrives through the callback.
  void StoreItem();

  void MaybeFinishPut(const FrameHeader& header, const PutResults& results);

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
  void Dispatch(const FrameHeader& h);

  // ---- KV events (docs/events.md) -------------------------------------------------------------
  // Names the engine instance and model of a namespace's chunks in the events' topic. Answered ok
  // with events off too (nothing to name them in): a client need not know the daemon's setup.
  void HandleEventOrigin(const FrameHeader& h);

  // ---- authentication and authorisation ------------------------------------------------------
  void HandleAuth(const FrameHeader& h);

  // Answers `status` (unauthenticated) and closes the connection once it is written.
  void Refuse(const FrameHeader& h, const Status& status);

  // A request another cluster member forwarded is answered here, never forwarded again.
  static Route RouteOf(const FrameHeader& h) {
    return (h.flags & protocol::kFlagFromPeer) != 0 ? Route::kLocal : Route::kCluster;
  }

  // The buffered body's placement keys (kFlagPlacement) and the op's own body after them; without
  // the flag, no keys and the whole body. Errors are kInvalidArgument / kOutOfRange (answered, the
  // connection stays open).
  Result<protocol::PlacedBody> SplitBody(const FrameHeader& h) const {
    if ((h.flags & protocol::kFlagPlacement) == 0) return protocol::PlacedBody{{}, body_};
    return protocol::SplitPlacementSection(body_, limits_);
  }
  // With kFlagPlacement: one placement key per item, else the error naming the counts.
  static Status MatchPlacement(const FrameHeader& h, const protocol::PlacedBody& placed,
                               std::size_t items) {
    if ((h.flags & protocol::kFlagPlacement) == 0) return Status::Ok();
    return protocol::CheckPlacementCount(h.op(), placed.placement_keys.size(), items);
  }
  // Item `i`'s placement key (empty: by its key).
  static std::string_view PlacementOf(const std::vector<std::string_view>& placement,
                                      std::size_t i) {
    return i < placement.size() ? placement[i] : std::string_view();
  }

  // Every key is in an allowed namespace; else a permission error names the first that is not.
  Status CheckKeys(const std::vector<std::string_view>& keys) const;

  std::string PeerName();

  // ---- same-host zero-copy (docs/gpu-tier.md) -------------------------------------------------
  static constexpr bool kIsUnix = std::is_same_v<typename Socket::lowest_layer_type::protocol_type,
                                                 asio::local::stream_protocol>;

  void HandleMap(const FrameHeader& h);

  static protocol::MapInfo MergeGpu(protocol::MapInfo info, const DevicePool& gpu);

  // LEASE_GET. Keys in shared memory now (the GPU pool, the host arena) are resolved at once; a
  // key only on the SSD tier is read through the store like a GET item (queued in get_backlog_,
  // at most kMaxOutstandingGets reads at a time, never on this thread), into a host-tier
  // allocation that is leased when it landed in the arena. Leases are granted in key order
  // (GrantLeases), so max_lease_bytes takes the keys in the order asked whatever order the reads
  // finish in; the one response frame fills the slot reserved here, keeping response order.
  void HandleLeaseGet(const FrameHeader& h);

  // Fills `l` for a host value in the shared arena and moves it into `hold`; false (nothing
  // changed) for a value in private memory.
  static bool LeaseHostValue(ValueRef v, protocol::Lease& l, std::shared_ptr<const void>& hold);

  // A LEASE_GET key read from the SSD tier (through Store::Get, which verifies its checksum and
  // promotes per ssd.promotion): leased when the value is in the arena, whether or not it was
  // promoted; a miss (absent, or a copy that failed verification) is not_found; a read error
  // keeps its code (io_error, resource_exhausted without host memory for the buffer).
  void OnLeaseRead(const PendingGet& g, Result<Found> found);

  // Grants (or refuses over max_lease_bytes) the batch's resolved leases in key order, up to the
  // first key still being read; answers once every key is granted. A read finished but not yet
  // granted still counts as outstanding, so at most kMaxOutstandingGets values read for leases
  // wait in memory at a time.
  void GrantLeases(LeaseBatch& b);

  void HandleRelease(const FrameHeader& h);

  void HandleGetAs(const FrameHeader& h);

  // A GET_AS item found in the store: transcoded on the worker pool, then answered here.
  void Transcode(const PendingGet& g, Found found);

  static Outgoing TranscodedFrame(const FrameHeader& h, std::uint32_t index, bool last,
                                  protocol::Tier tier, Result<std::vector<std::byte>> out);

  void HandleGet(const FrameHeader& h);

  // Starts queued GET lookups while fewer than kMaxOutstandingGets are unanswered and the queued
  // output is under max_output_bytes: a GET of many SSD-resident keys reads them a few at a time
  // instead of allocating buffers for all of them at once. Host hits answer inline. GET_AS and
  // LEASE_GET items of SSD-resident keys queue here too.
  void PumpGets();

  static Outgoing GetItemFrame(const FrameHeader& h, std::uint32_t index, bool last,
                               Result<Found> found);

  void HandleLookup(const FrameHeader& h);

  void HandleDelete(const FrameHeader& h);

  void HandleScan(const FrameHeader& h);

  // SCAN for a namespace-restricted token: each allowed namespace matching the prefix is scanned
  // in byte order (so other namespaces' keys are never even read), keeping only 48-byte chunk
  // keys. A prefix that names a namespace the token may not use is a permission error.
  void HandleScopedScan(const FrameHeader& h, const protocol::ScanRequest& q);

  // A well-formed request the server refuses (over a limit, bad field): an error response; the
  // connection stays open. A malformed body (kCorruption) closes it like a malformed header.
  void RequestError(const FrameHeader& h, const Status& status);

  // A malformed frame: one `corruption` answer, then the connection closes. The answer carries
  // the request's operation and id when its header was valid (`request`), else PING's type and
  // id 0 (the connection as a whole).
  void ProtocolError(const FrameHeader* request, const Status& status);

  // ---- writing --------------------------------------------------------------------------------
  void SendBody(const FrameHeader& request, StatusCode status, std::vector<std::byte> body);

  static Outgoing BodyFrame(const FrameHeader& request, StatusCode status,
                            std::vector<std::byte> body);

  void Enqueue(Outgoing out);

  // Queues a placeholder for a frame that an asynchronous store operation will produce.
  std::uint64_t ReserveSlot();

  // Replaces placeholder `slot` with `out` (nothing when the connection closed meanwhile).
  void FillSlot(std::uint64_t slot, Outgoing out);

  void WriteSome();

  // Sends the front frame (small: a MAP response) with its descriptor as SCM_RIGHTS on the first
  // byte, without blocking: retried when the socket is writable; a partial send finishes with an
  // ordinary write (the descriptor went with the first byte).
  void SendWithFd();

  // ---- metrics ------------------------------------------------------------------------------
  // A written frame folds its status into the oldest unanswered request (responses go out in
  // request order, so it is that request's frame); the last frame (no kFlagMore) reports it.
  void ObserveWritten(const Outgoing& frame);

  // ---- timeouts -----------------------------------------------------------------------------
  // A store operation answered: progress (the idle clock does not run while one is pending).
  void StoreDone();

  // The watchdog ticks at a quarter of the shortest timeout (10 ms to 1 s; 1 s with both off)
  // while the connection is open, reading the server's current timeouts (SIGHUP may change
  // them) at every tick; a timeout therefore fires up to a tick late.
  void ArmWatchdog();

  // Closes a connection whose request has been arriving for longer than request_timeout, or that
  // moved no byte either way for idle_timeout while no store operation was pending (an idle
  // client, or one that stopped reading its responses).
  void CheckTimeouts();

  // The end of a write that failed or found the connection closed meanwhile (a handler queued
  // with success can run after Close): the frames it was writing are gone with the rest.
  void WriteEnded();

  void MaybeClose();

  // Closes the socket; the queued frames go now, or, while a write is in flight (it still points
  // into them), when its handler runs (WriteEnded).
  void Close();

  RegistrationGuard<ListenerCore> registration_;  // first: unregisters after the rest is gone
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
    std::string placement_key;          // GET, GET_AS: the item's placement key ("": its key)
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
  std::uint32_t store_ops_ = 0;  // store calls whose callback has not run
};

extern template class Connection<TcpSocket>;
extern template class Connection<UnixSocket>;
extern template class Connection<TlsSocket>;

}  // namespace kvdepot::daemon::native
