// kvdepot wire protocol v1 (docs/protocol.md specifies every byte): framed, little-endian,
// pipelined requests with request ids; responses may complete out of order.
//
//   frame = header (24 bytes) ‖ body (body_length bytes)
//
// This header holds the frame header codec and the body encoders/decoders shared by the daemon
// and the client. Decoders are total: they check every count and length against the limits and
// against the bytes present before using them, and return kCorruption (malformed frame: the
// connection is closed) or kInvalidArgument / kOutOfRange (a well-formed request over a limit:
// answered with an error) naming the field.
//
// Thread-safety: free functions on values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/protocol/tier.h"

namespace kvdepot::protocol {

inline constexpr std::uint8_t kMagic[4] = {'K', 'V', 'D', 'P'};
inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::size_t kFrameHeaderBytes = 24;

enum class Op : std::uint8_t {
  kPing = 1,
  kPut = 2,
  kGet = 3,
  kLookup = 4,
  kDelete = 5,
  kStats = 6,
  kScan = 7,
  kAuth = 8,  // presents a token; the first request on a connection when the server has auth on
  // Same-host zero-copy and transcoding (docs/gpu-tier.md).
  kMap = 9,        // shared host arena (fd over SCM_RIGHTS, Unix socket only) + GPU IPC handle
  kLeaseGet = 10,  // (offset, length, lease id) of values in shared memory instead of the bytes
  kRelease = 11,   // ends leases
  kGetAs = 12,     // GET transcoded into another codec
  // KV events (docs/events.md): names the engine instance and model of a namespace's chunks.
  kEventOrigin = 13,
  // Cluster (docs/cluster.md): this node's view of the cluster as a JSON document.
  kClusterInfo = 14,
};
inline constexpr std::uint8_t kMaxOp = 14;
// AUTH tokens: 1 ..= kMaxTokenBytes bytes.
inline constexpr std::size_t kMaxTokenBytes = 1024;
inline constexpr std::uint8_t kResponseBit = 0x80;
// Response flag: more response frames follow for the same request (a GET streams one frame per
// key; every frame but the last carries this flag).
inline constexpr std::uint16_t kFlagMore = 1;
// Request flag: the request comes from another node of the cluster, which forwarded it (docs/
// cluster.md). The receiver answers from its own tiers and never forwards it again (one hop).
inline constexpr std::uint16_t kFlagFromPeer = 2;
// Request flag (PUT, GET, GET_AS, LOOKUP, DELETE only; on another op the header is malformed):
// the body starts with a placement section (below) giving each item an explicit placement key,
// which a cluster member uses instead of the item's own key to find its owners (docs/cluster.md:
// a prefix chain's chunks are placed by their group's anchor). A single daemon ignores it.
inline constexpr std::uint16_t kFlagPlacement = 4;

// "ping", "put", ...
std::string_view OpName(Op op);

struct Limits {
  std::uint32_t max_key_bytes = 256;
  std::uint64_t max_value_bytes = 64ull << 20;
  std::uint32_t max_batch = 4096;
  std::uint64_t max_body_bytes = 256ull << 20;  // also bounds a whole multi-item PUT
};

struct FrameHeader {
  std::uint8_t version = kVersion;
  std::uint8_t type = 0;  // an Op, with kResponseBit set on responses
  std::uint16_t flags = 0;
  std::uint64_t request_id = 0;
  std::uint32_t body_length = 0;
  std::uint16_t status = 0;  // responses: a StatusCode; requests: 0

  Op op() const { return static_cast<Op>(type & ~kResponseBit); }
  bool is_response() const { return (type & kResponseBit) != 0; }
};

// The largest request body a well-formed request of `op` can have under `limits` (PUT:
// max_body_bytes; GET/LOOKUP/DELETE: a full key list; SCAN: its fixed fields plus a prefix and a
// cursor; PING/STATS: 0), plus a full placement section when `flags` has kFlagPlacement. Servers
// check it before buffering a body.
std::uint64_t MaxRequestBody(Op op, const Limits& limits, std::uint16_t flags = 0);

void EncodeFrameHeader(const FrameHeader& h, std::byte* out);  // writes kFrameHeaderBytes
// Validates magic, version, type (a known op; `expect_response` says which direction), flags
// (kFlagPlacement only on an op that AcceptsPlacement), reserved bits and body_length <=
// limits.max_body_bytes. Errors are kCorruption.
Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte> bytes, const Limits& limits,
                                      bool expect_response);

// ---- bodies -----------------------------------------------------------------------------------

// Placement section (kFlagPlacement): at the very start of the body, before the op's own fields,
// so that a PUT is routed before its values arrive:
//   u32 section_bytes (the bytes that follow, <= MaxPlacementSectionBytes),
//   then per item of the request, in item order: u16 n (0 ..= max_key_bytes) + n bytes.
// n = 0 places the item by its own key. The entries must fill the section exactly and their
// number must equal the request's item count (CheckPlacementCount). Every error is kOutOfRange (a
// key over max_key_bytes, a section over its bound) or kInvalidArgument (an entry cut off, a
// section running past the body, a count mismatch), naming the entry: the frame's extent is known
// from body_length, so the server refuses the request and keeps the connection.
inline constexpr std::size_t kPlacementSectionLengthBytes = 4;
// PUT, GET, GET_AS, LOOKUP, DELETE: the requests whose items a cluster member routes.
bool AcceptsPlacement(Op op);
// The largest section_bytes under `limits`: max_batch entries of max_key_bytes.
std::uint64_t MaxPlacementSectionBytes(const Limits& limits);
// The whole section (u32 section_bytes, then the entries). The only writer of its layout.
Result<std::vector<std::byte>> EncodePlacementSection(std::span<const std::string_view> keys);
// Checks a section's u32 section_bytes against its bound and against the `body_left` bytes of
// the body after the u32 (kOutOfRange, kInvalidArgument), before any of it is read.
Status CheckPlacementSectionLength(std::uint32_t section_bytes, std::uint64_t body_left,
                                   const Limits& limits);
// The entries after the u32 (section_bytes of them) as views into `entries`. The only reader of
// the layout; the daemon's streaming PUT reader calls it on the section it buffered.
Result<std::vector<std::string_view>> DecodePlacementEntries(std::span<const std::byte> entries,
                                                             const Limits& limits);
// A buffered request body with kFlagPlacement: its placement keys, and the op's own body after
// the section.
struct PlacedBody {
  std::vector<std::string_view> placement_keys;  // views into the body
  std::span<const std::byte> rest;
};
Result<PlacedBody> SplitPlacementSection(std::span<const std::byte> body, const Limits& limits);
// kInvalidArgument naming `op` when a section's `entries` do not match the request's `items`.
Status CheckPlacementCount(Op op, std::size_t entries, std::size_t items);

// Request encoders take the caller's keys and check what the wire can carry: OutOfRange when a
// key (or a scan prefix or cursor) is over 65,535 bytes (its u16 length) or the body would be over
// 4 GiB - 1 (the frame's u32 body_length). The daemon's own limits (limits.max_key_bytes, ...) are
// its to enforce. Response encoders write what the daemon has already checked.

// GET / LOOKUP / DELETE request: u32 count, then count x (u16 key length, key bytes).
Result<std::vector<std::byte>> EncodeKeyList(std::span<const std::string> keys);
// The keys as views into `body`. Checks count <= max_batch, 1 <= key length <= max_key_bytes,
// and that the body holds exactly the listed keys.
Result<std::vector<std::string_view>> DecodeKeyList(std::span<const std::byte> body,
                                                    const Limits& limits);

// PUT request: u32 count, then count x (u16 key length, key, u64 value length, value bytes).
// The field widths, for the daemon's streaming reader (which receives values straight into their
// final buffers instead of calling DecodePutBody).
inline constexpr std::size_t kPutCountBytes = 4;
inline constexpr std::size_t kPutKeyLengthBytes = 2;
inline constexpr std::size_t kPutValueLengthBytes = 8;
struct PutItemView {
  std::string_view key;
  std::span<const std::byte> value;
  // Client side: an explicit placement key (empty: placed by `key`); a request whose items have
  // any is sent with kFlagPlacement and a placement section. Not part of EncodePutBody's layout.
  std::string_view placement_key = {};
};
Result<std::vector<std::byte>> EncodePutBody(std::span<const PutItemView> items);
// The head of a one-item PUT body (u32 count 1, u16 key length, key, u64 value length), for
// senders that write the `value_length` value bytes from their own buffers right after it. The
// only writer of the PUT item layout besides EncodePutBody.
Result<std::vector<std::byte>> EncodeSinglePutHead(std::string_view key,
                                                   std::uint64_t value_length);
Result<std::vector<PutItemView>> DecodePutBody(std::span<const std::byte> body,
                                               const Limits& limits);

// PUT / DELETE response: u32 count, then count x u16 status code (StatusCode) per item.
std::vector<std::byte> EncodeStatusList(std::span<const StatusCode> codes);
Result<std::vector<StatusCode>> DecodeStatusList(std::span<const std::byte> body);

// GET response frame body (one per key, in request order): u32 index, u8 tier, 3 reserved zero
// bytes, then the value (present only when the frame's status is ok).
inline constexpr std::size_t kGetItemPrefixBytes = 8;
void EncodeGetItemPrefix(std::uint32_t index, Tier tier, std::byte* out);
struct GetItemPrefix {
  std::uint32_t index = 0;
  Tier tier = Tier::kNone;
};
Result<GetItemPrefix> DecodeGetItemPrefix(std::span<const std::byte> body);

// LOOKUP response: u32 prefix length (leading keys present), u32 count, count x u8 tier.
struct LookupResult {
  std::uint32_t prefix_length = 0;
  std::vector<Tier> tiers;  // per key; kNone when absent
};
std::vector<std::byte> EncodeLookupResult(const LookupResult& result);
Result<LookupResult> DecodeLookupResult(std::span<const std::byte> body);

// SCAN request: u32 limit, u8 tier filter (kNone = any), u8 reserved, u16 prefix length, prefix
// (keys starting with it), u16 cursor length, cursor (list keys after it; empty = from the start).
struct ScanRequest {
  std::uint32_t limit = 100;
  Tier tier = Tier::kNone;
  std::string prefix;
  std::string cursor;
};
Result<std::vector<std::byte>> EncodeScanRequest(const ScanRequest& request);
Result<ScanRequest> DecodeScanRequest(std::span<const std::byte> body, const Limits& limits);

// SCAN response: u32 count, count x (u16 key length, key, u64 value bytes, u8 tier,
// u64 idle milliseconds), u16 next-cursor length, next cursor (empty: listing complete).
std::vector<std::byte> EncodeScanResult(const ScanResult& result);
Result<ScanResult> DecodeScanResult(std::span<const std::byte> body);

// AUTH request body: `u16 n` + the token (1 ..= kMaxTokenBytes bytes). Decoding errors are
// kCorruption (a malformed body) or kOutOfRange (a token of 0 or more than kMaxTokenBytes bytes).
// EVENT_ORIGIN: the chunks of a namespace belong to this engine instance and model (KV events
// carry them in their topic, docs/events.md). Each name is at most kMaxOriginNameBytes bytes of
// printable ASCII or UTF-8 without '@' (the topic's separator) and control characters; the
// model may not be empty.
inline constexpr std::size_t kMaxOriginNameBytes = 256;
struct EventOrigin {
  std::string namespace_id;  // 16 bytes
  std::string instance;
  std::string model;
};
Result<std::vector<std::byte>> EncodeEventOriginRequest(const EventOrigin& origin);
Result<EventOrigin> DecodeEventOriginRequest(std::span<const std::byte> body);

std::vector<std::byte> EncodeAuthRequest(std::string_view token);
Result<std::string> DecodeAuthRequest(std::span<const std::byte> body);

// ---- same-host zero-copy and transcoding (docs/gpu-tier.md) -----------------------------------

// MAP response (request body empty): what this connection may map. The host arena's file
// descriptor travels as SCM_RIGHTS ancillary data on the first byte of the response frame (Unix
// socket only) when host_arena_bytes > 0.
//   u64 host_arena_bytes (0: no shared host arena), u64 gpu_pool_bytes (0: no GPU tier),
//   i32 gpu_device, u32 reserved 0, 64 bytes cudaIpcMemHandle_t (zeros without a GPU tier).
inline constexpr std::size_t kIpcHandleBytes = 64;
inline constexpr std::size_t kMapResponseBytes = 8 + 8 + 4 + 4 + kIpcHandleBytes;
struct MapInfo {
  std::uint64_t host_arena_bytes = 0;
  std::uint64_t gpu_pool_bytes = 0;
  std::int32_t gpu_device = -1;
  std::array<std::byte, kIpcHandleBytes> ipc_handle{};
};
std::vector<std::byte> EncodeMapInfo(const MapInfo& info);
Result<MapInfo> DecodeMapInfo(std::span<const std::byte> body);

// LEASE_GET request: u8 tier (kNone: the highest shared tier holding the key; kGpu or kHost:
// only that tier), 3 reserved zero bytes, then a key list.
struct LeaseGetRequest {
  Tier tier = Tier::kNone;
  std::vector<std::string> keys;
};
Result<std::vector<std::byte>> EncodeLeaseGetRequest(Tier tier, std::span<const std::string> keys);
struct LeaseGetView {
  Tier tier = Tier::kNone;
  std::vector<std::string_view> keys;  // views into the body
};
Result<LeaseGetView> DecodeLeaseGetRequest(std::span<const std::byte> body, const Limits& limits);

// LEASE_GET response: u32 count, then per key (32 bytes): u16 status, u8 tier (kHost: offset in
// the host arena, kGpu: offset in the GPU pool), u8 0, u32 0, u64 lease_id, u64 offset,
// u64 length. A non-ok entry has zeros after its status.
struct Lease {
  StatusCode status = StatusCode::kOk;
  Tier tier = Tier::kNone;
  std::uint64_t lease_id = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};
inline constexpr std::size_t kLeaseEntryBytes = 32;
std::vector<std::byte> EncodeLeases(std::span<const Lease> leases);
Result<std::vector<Lease>> DecodeLeases(std::span<const std::byte> body);

// RELEASE request: u32 count (1 ..= max_batch), count x u64 lease id. Response: a status list
// (ok, or not_found for an id this connection does not hold).
std::vector<std::byte> EncodeLeaseIds(std::span<const std::uint64_t> ids);
Result<std::vector<std::uint64_t>> DecodeLeaseIds(std::span<const std::byte> body,
                                                  const Limits& limits);

// GET_AS request: u8 codec (a CodecId), 3 reserved zero bytes, then a key list. The response is
// that of GET (one frame per key), each value a container of the requested codec.
Result<std::vector<std::byte>> EncodeGetAsRequest(std::uint8_t codec,
                                                  std::span<const std::string> keys);
struct GetAsView {
  std::uint8_t codec = 0;
  std::vector<std::string_view> keys;
};
Result<GetAsView> DecodeGetAsRequest(std::span<const std::byte> body, const Limits& limits);

// Error response body (any op, status != ok): the message, UTF-8, at most 1 KiB.
std::vector<std::byte> EncodeErrorBody(std::string_view message);

}  // namespace kvdepot::protocol
