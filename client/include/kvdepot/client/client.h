// libkvdepot's C++ client: talks protocol v1 (docs/protocol.md) to kvdepotd over TCP or a Unix
// domain socket.
//
// Connection: one socket, blocking calls with a timeout, not thread-safe (use one per thread, or
// a Client). Any transport or protocol error closes the connection and is returned as
// kUnavailable / kCorruption; a GET never hands out partial bytes: a value is delivered only once
// its whole frame has arrived.
// Client: a thread-safe pool of Connections; a call that fails on a broken connection is retried
// once on a fresh one (every operation is idempotent). In a cluster it sends each key's requests
// straight to the key's owners (ClientOptions::cluster_routing, docs/cluster.md "Smart clients").
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/codec_id.h"
#include "kvdepot/protocol/chunk_key.h"
#include "kvdepot/protocol/placement.h"
#include "kvdepot/protocol/protocol.h"

namespace kvdepot::cluster {
class Topology;  // kvdepot/cluster/topology.h
}  // namespace kvdepot::cluster

namespace kvdepot::client {

class ClusterRoutes;  // cluster_routes.h

// How a Client routes in a cluster (docs/cluster.md, "Smart clients").
enum class ClusterRouting {
  // At first use, ask `address` for CLUSTER_INFO; in a cluster send each key's requests to its
  // owners (multi-key requests split by owner, in parallel), refreshed every cluster_refresh and
  // at once after a failure. A daemon not in a cluster (or too old to know CLUSTER_INFO): as kOff.
  kAuto,
  kOff,  // everything goes to `address` (a member forwards what it does not own)
};

struct ClientOptions {
  // "HOST:PORT" (IPv6 as "[::1]:7600") or "unix:/path/to/socket".
  std::string address = "127.0.0.1:7600";
  std::chrono::milliseconds timeout{30000};  // per send/receive
  protocol::Limits limits;                   // what this client accepts from the server
  std::size_t pool_size = 4;                 // Client only: connections kept open
  // Non-empty: sent in an AUTH request right after connecting (docs/security.md); a refused token
  // fails Connect with kUnauthenticated. A server without auth accepts any token.
  std::string token;
  // TLS (TCP addresses only). The server's certificate is verified against tls_ca_file (empty:
  // the system's CA store) and must name the host of `address` (or tls_server_name when set).
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;  // client certificate and key, for servers that require one
  std::string tls_key_file;
  std::string tls_server_name;
  // Client only: smart routing in a cluster, and how often the view is refreshed.
  ClusterRouting cluster_routing = ClusterRouting::kAuto;
  std::chrono::milliseconds cluster_refresh{5000};
};

// Reads a token file for ClientOptions::token: the first non-empty line that is not a comment,
// first word only (so a daemon token file line "TOKEN ns=..." works as is). Errors name the file.
Result<std::string> ReadTokenFile(const std::string& path);

// One GET result, delivered in request order.
struct GetItem {
  std::uint32_t index = 0;
  protocol::Tier tier = protocol::Tier::kNone;
  Status status;                     // ok, not_found, or the server's error
  std::span<const std::byte> value;  // valid during the callback only
};
using GetCallback = std::function<void(const GetItem&)>;

class Connection {
 public:
  static Result<std::unique_ptr<Connection>> Connect(const ClientOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool broken() const { return fd_ < 0; }
  bool tls() const { return tls_ != nullptr; }

  Status Ping();
  // EVENT_ORIGIN: the daemon's KV events name `instance` and `model` for the chunks of
  // namespace `origin.namespace_id` (docs/events.md).
  Status SetEventOrigin(const protocol::EventOrigin& origin);
  // Per-item statuses (ok, resource_exhausted, out_of_range, ...). Items with a placement_key
  // (protocol::PutItemView) send the request with a placement section (docs/protocol.md): a
  // cluster member places each item by it instead of its key.
  Result<std::vector<StatusCode>> Put(std::span<const protocol::PutItemView> items);
  // With a placement_key the PUT carries a placement section (protocol.md).
  Status Put(std::string_view key, std::span<const std::byte> value,
             std::string_view placement_key = {});
  // Placement keys (Get, GetAs, Lookup, Delete): empty, or one per key (an empty one: placed by
  // its key), sent as the request's placement section (docs/protocol.md, kFlagPlacement) so that a
  // cluster member finds each key's owners by its group's anchor (protocol/placement.h,
  // ChainPlacementKeys). kInvalidArgument, before anything is sent, when the counts differ.
  //
  // Streams one callback per key, in order, each as soon as its frame is complete.
  Status Get(std::span<const std::string> keys, const GetCallback& on_item,
             std::span<const std::string> placement_keys = {});
  // The value, or nullopt on a miss.
  Result<std::optional<std::vector<std::byte>>> Get(std::string_view key);
  // PUT of one value given in pieces (e.g. a metadata header and a payload), sent as they are,
  // without joining them first. Errors as Put().
  Status PutParts(std::string_view key, std::span<const std::span<const std::byte>> parts,
                  std::string_view placement_key = {});
  // GET of one key straight into caller memory, with no intermediate buffer: the value's first
  // head.size() bytes land in `head`, the rest in `out`. Returns the value's size (it may be
  // shorter than head.size()), or nullopt on a miss. A value longer than head.size() + out.size()
  // is read and dropped (the connection stays usable) and reported as kOutOfRange with its size
  // in the message. `head` and `out` are unspecified after an error.
  Result<std::optional<std::size_t>> GetInto(std::string_view key, std::span<std::byte> head,
                                             std::span<std::byte> out);
  // As above, but `out` is chosen once the value's size is known and `head` is filled: the
  // callback gets the value's size and returns where the remaining size - head.size() bytes go
  // (an empty span to drop them: the result is then nullopt, as for a miss). It is not called
  // on a miss or an error, nor when the value is shorter than head.size().
  using OutChooser = std::function<std::span<std::byte>(std::size_t value_size)>;
  Result<std::optional<std::size_t>> GetInto(std::string_view key, std::span<std::byte> head,
                                             const OutChooser& choose_out);
  Result<protocol::LookupResult> Lookup(std::span<const std::string> keys,
                                        std::span<const std::string> placement_keys = {});
  Result<std::vector<StatusCode>> Delete(std::span<const std::string> keys,
                                         std::span<const std::string> placement_keys = {});
  Result<std::string> Stats();  // JSON document
  // CLUSTER_INFO: the node's view of its cluster, a JSON document (docs/protocol.md).
  Result<std::string> ClusterInfo();
  Result<protocol::ScanResult> Scan(const protocol::ScanRequest& request);

  // Pipelining: send several requests, then read their responses. SendRequest returns the
  // request id; ReadResponse reads the next response frame (any request) into `body`.
  Result<std::uint64_t> SendRequest(protocol::Op op, std::span<const std::byte> body);
  // As SendRequest, the body preceded by a placement section (and kFlagPlacement) when
  // `placement_keys` (one per item of `body`) is not empty.
  Result<std::uint64_t> SendPlaced(protocol::Op op, std::span<const std::byte> body,
                                   std::span<const std::string_view> placement_keys);

  // ---- same-host zero-copy and transcoding (docs/gpu-tier.md) ---------------------------------
  // GET_AS: as Get, each value transcoded by the daemon into `codec` (a container).
  Status GetAs(std::span<const std::string> keys, CodecId codec, const GetCallback& on_item,
               std::span<const std::string> placement_keys = {});
  // MAP (Unix socket only): what the daemon shares, and the host arena's descriptor (received
  // over SCM_RIGHTS; owned by the caller, -1 when the daemon has no host arena). kUnavailable
  // over TCP or when the daemon shares nothing. SharedArena::Map wraps this.
  struct MapResult {
    protocol::MapInfo info;
    int host_fd = -1;
  };
  Result<MapResult> Map();
  // LEASE_GET: one lease per key (status ok: tier, offset and length in the shared arena or GPU
  // pool — a key on the daemon's SSD tier is read into the arena first; not_found;
  // unavailable: present but not in shared memory, use Get; resource_exhausted: over the
  // daemon's per-connection lease bound). The daemon keeps each leased value until Release or
  // until this connection closes.
  Result<std::vector<protocol::Lease>> LeaseGet(std::span<const std::string> keys,
                                                protocol::Tier tier = protocol::Tier::kNone);
  // RELEASE: per id ok, or not_found for an id this connection does not hold.
  Result<std::vector<StatusCode>> Release(std::span<const std::uint64_t> lease_ids);
  // Sends a PUT of one item without building the body in memory first.
  Result<std::uint64_t> SendPut(std::string_view key, std::span<const std::byte> value,
                                std::string_view placement_key = {});
  Result<protocol::FrameHeader> ReadResponse(std::vector<std::byte>& body);
  // Reads item `index` (of `keys`) of a GET-shaped response (GET, GET_AS) to request `id` into
  // `frame` and passes it to on_item: pipelined GETs read one item at a time. A refused request
  // (at index 0) is returned as its error.
  Status ReadGetItem(std::uint64_t id, protocol::Op op, std::uint32_t index, std::size_t keys,
                     std::vector<std::byte>& frame, const GetCallback& on_item);

 private:
  explicit Connection(int fd, const ClientOptions& options);
  struct Tls;  // the OpenSSL session (client.cc)
  Status StartTls();
  Status Authenticate();
  Status SendAll(std::span<const std::span<const std::byte>> parts);
  Status SendTls(const std::vector<iovec>& iov);
  Status RecvAll(std::byte* out, std::size_t n);
  Status Drain(std::uint64_t n);  // receives and drops n bytes
  // Sends a request and reads its single response; non-ok statuses become errors.
  Result<std::vector<std::byte>> Call(protocol::Op op, std::span<const std::byte> body,
                                      std::span<const std::string_view> placement_keys = {});
  Status Broken(Status status);
  // Sends a one-item PUT whose value is `parts` back to back (with a placement section when
  // `placement_key` is not empty); returns the request id. The one sender behind SendPut and
  // PutParts.
  Result<std::uint64_t> SendPutParts(std::string_view key,
                                     std::span<const std::span<const std::byte>> parts,
                                     std::string_view placement_key);
  // Reads the answer to the one-item PUT `id` of `key`: ok, or the server's refusal.
  Status ReadPutAnswer(std::uint64_t id, std::string_view key);
  // Reads the frames of a GET-shaped response (GET, GET_AS) to request `id`.
  Status ReadGetFrames(std::uint64_t id, protocol::Op op, std::size_t keys,
                       const GetCallback& on_item);

  int fd_;
  ClientOptions options_;
  std::unique_ptr<Tls> tls_;
  std::uint64_t next_id_ = 1;
};

// The daemon's host arena mapped read-only into this process (same host, Unix socket): values are
// read in place through leases, with no copy through the socket. Thread-safe (immutable); keep
// the lease (do not Release it) while reading its bytes.
class SharedArena {
 public:
  // MAP on `connection`, then mmap(PROT_READ, MAP_SHARED) of the descriptor, which is closed.
  static Result<std::unique_ptr<SharedArena>> Map(Connection& connection);
  // The same over the result of a MAP already made (takes and closes m.host_fd).
  static Result<std::unique_ptr<SharedArena>> Adopt(Connection::MapResult m);
  ~SharedArena();
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  // The bytes of a host-tier lease; kOutOfRange when it does not lie inside the arena,
  // kInvalidArgument for a lease that is not ok or not a host-tier lease.
  Result<std::span<const std::byte>> View(const protocol::Lease& lease) const;
  const protocol::MapInfo& info() const { return info_; }
  std::size_t size() const { return size_; }

 private:
  SharedArena() = default;
  const std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  protocol::MapInfo info_;
};

// LookupPrefix's answer: the chunk keys of a token sequence and how many leading ones are cached.
struct PrefixLookup {
  std::vector<ChunkKey> keys;
  std::uint32_t prefix_length = 0;
  std::vector<protocol::Tier> tiers;
};

// A prompt's chunk chain as the prefix calls (Client::LookupPrefix, Client::PutPrefix) send it:
// the keys of the full chunks of `tokens` (ChunkKeysForTokens without the partial last chunk,
// which is never stored), and per chunk the placement key it is sent with.
struct PrefixChain {
  std::vector<ChunkKey> keys;
  std::vector<std::string> wire;  // keys[i].bytes as the request's key
  // ChainPlacementKeys(wire, group_chunks): chunk i's group anchor's key. Empty when
  // group_chunks <= 1: every chunk is then placed by its own key, and no placement section is
  // sent.
  std::vector<std::string> placement;
};
// kInvalidArgument when `ns` is invalid.
Result<PrefixChain> MakePrefixChain(const Namespace& ns, std::span<const std::uint32_t> tokens,
                                    std::uint32_t group_chunks);

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Prompt-level calls. A prompt's chunks are its full chunks of ns.chunk_tokens tokens
  // (MakePrefixChain: a partial last chunk is neither stored nor looked up). In a cluster they
  // are placed in groups of G consecutive chunks, each chunk by its group anchor's key
  // (protocol/placement.h, docs/cluster.md "Prefix locality in requests"), so that every SDK
  // that places by the same G finds what another one stored.
  //
  // `group_chunks` (G): 0, the default, takes G from the cluster's view
  // (PrefixGroupChunks); a value > 0 overrides it (a G other than the cluster's only loses
  // locality: the chunks are still stored and found, placed by the anchors sent, as long as the
  // same G is used to store and to look up).

  // Chunk keys for `tokens` in namespace `ns`, then one LOOKUP round trip for all of them (split
  // by owner, sent at once; batches of limits.max_batch keys for longer prompts).
  Result<PrefixLookup> LookupPrefix(const Namespace& ns, std::span<const std::uint32_t> tokens,
                                    std::uint32_t group_chunks = 0);
  // Stores chunk i of `tokens` as chunk_values[i], under the key LookupPrefix computes for it and
  // placed by its group's anchor. Exactly one value per full chunk (tokens.size() /
  // ns.chunk_tokens of them), else kInvalidArgument before anything is sent. Sent as Put(items):
  // in a cluster split by owner and sent to all owners in parallel (in batches of at most
  // limits.max_batch items and limits.max_body_bytes). Per-chunk statuses, as Put(items).
  Result<std::vector<StatusCode>> PutPrefix(
      const Namespace& ns, std::span<const std::uint32_t> tokens,
      std::span<const std::span<const std::byte>> chunk_values, std::uint32_t group_chunks = 0);
  // The G the prefix calls use for `group_chunks`: itself when > 0; else the cluster.group_chunks
  // of the smart client's view (fetched first when due); else 0 (placed per key): with
  // ClusterRouting::kOff, or when the daemon is not in a cluster. A kOff client in a cluster
  // must therefore pass the cluster's G to find grouped chunks (CLUSTER_INFO's
  // placement.group_chunks).
  std::uint32_t PrefixGroupChunks(std::uint32_t group_chunks = 0);

  // Asynchronous forms: each runs on its own thread with a pooled connection; the future holds
  // the result. The callback of GetAsync runs on that thread.
  std::future<Status> PutAsync(std::string key, std::vector<std::byte> value);
  std::future<Status> GetAsync(std::vector<std::string> keys, GetCallback on_item);

  // Cluster routing (ClientOptions::cluster_routing): the key-based calls below go to the key's
  // owners. A `placement_key` (one per key in the multi-key calls; an empty span or empty string:
  // the key's own PlacementKey) places the key instead, e.g. a prefix group's anchor
  // (docs/cluster.md). Multi-key calls are split by owner and sent to all owners before any
  // answer is read; GET items still arrive in key order. Ping, SetEventOrigin, Stats, ClusterInfo
  // and Scan always go to `address`.
  Status Ping();
  Status SetEventOrigin(const protocol::EventOrigin& origin);
  Status Put(std::string_view key, std::span<const std::byte> value,
             std::string_view placement_key = {});
  // Per-item statuses, as Connection::Put; an item's placement_key places it (and is sent in the
  // request's placement section).
  Result<std::vector<StatusCode>> Put(std::span<const protocol::PutItemView> items);
  Result<std::optional<std::vector<std::byte>>> Get(std::string_view key,
                                                    std::string_view placement_key = {});
  // Placement keys: as Connection's (empty, or one per key).
  Status Get(std::span<const std::string> keys, const GetCallback& on_item,
             std::span<const std::string> placement_keys = {});
  // GET_AS on a pooled connection: as Connection::GetAs (not retried once items were delivered).
  Status GetAs(std::span<const std::string> keys, CodecId codec, const GetCallback& on_item,
               std::span<const std::string> placement_keys = {});
  Status PutParts(std::string_view key, std::span<const std::span<const std::byte>> parts,
                  std::string_view placement_key = {});
  Result<std::optional<std::size_t>> GetInto(std::string_view key, std::span<std::byte> head,
                                             std::span<std::byte> out,
                                             std::string_view placement_key = {});
  Result<std::optional<std::size_t>> GetInto(std::string_view key, std::span<std::byte> head,
                                             const Connection::OutChooser& choose_out,
                                             std::string_view placement_key = {});
  Result<protocol::LookupResult> Lookup(std::span<const std::string> keys,
                                        std::span<const std::string> placement_keys = {});
  Result<std::vector<StatusCode>> Delete(std::span<const std::string> keys,
                                         std::span<const std::string> placement_keys = {});
  Result<std::string> Stats();
  Result<std::string> ClusterInfo();
  Result<protocol::ScanResult> Scan(const protocol::ScanRequest& request);

  // The routing state (for connections of one's own that follow the same view); nullptr with
  // ClusterRouting::kOff.
  ClusterRoutes* cluster_routes() const { return routes_.get(); }

 private:
  // Runs fn on a pooled connection. With `retry`, a failure on a stale pooled connection is
  // retried once on a fresh one.
  template <typename Fn>
  auto WithConnection(Fn&& fn, bool retry = true) -> decltype(fn(std::declval<Connection&>()));
  // Runs fn at the key's routing targets in turn (ClusterRoutes::Targets) until one answers
  // without a transport failure or `unavailable`; without a cluster view, WithConnection. Once
  // `*delivered` (when given) is set, fn is not repeated.
  template <typename Fn>
  auto WithRoute(std::string_view key, std::string_view placement_key, Fn&& fn,
                 const bool* delivered = nullptr) -> decltype(fn(std::declval<Connection&>()));
  // The view to route by; nullptr: everything goes to `address`.
  std::shared_ptr<const cluster::Topology> RouteView();
  // GET / GET_AS split by owner (client_cluster.cc).
  Status RoutedGet(const cluster::Topology& view, protocol::Op op, CodecId codec,
                   std::span<const std::string> keys, std::span<const std::string> placement_keys,
                   const GetCallback& on_item);
  Result<protocol::LookupResult> RoutedLookup(const cluster::Topology& view,
                                              std::span<const std::string> keys,
                                              std::span<const std::string> placement_keys);
  Result<std::vector<StatusCode>> RoutedDelete(const cluster::Topology& view,
                                               std::span<const std::string> keys,
                                               std::span<const std::string> placement_keys);
  Result<std::vector<StatusCode>> RoutedPut(const cluster::Topology& view,
                                            std::span<const protocol::PutItemView> items);

  ClientOptions options_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::unique_ptr<ClusterRoutes> routes_;
};

}  // namespace kvdepot::client
