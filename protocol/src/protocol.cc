#include "kvdepot/protocol/protocol.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "kvdepot/base/byte_order.h"

namespace kvdepot::protocol {
namespace {

Status Malformed(const std::string& what) {
  return Corruption("protocol: " + what);
}

// Bounds-checked little-endian reader over a body.
class Reader {
 public:
  Reader(std::span<const std::byte> bytes, const char* what) : bytes_(bytes), what_(what) {}

  template <typename T>
  Result<T> Read(const char* field) {
    if (bytes_.size() - pos_ < sizeof(T)) return Truncated(field);
    const T v = LoadLE<T>(bytes_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }
  Result<std::span<const std::byte>> Take(std::uint64_t n, const char* field) {
    if (bytes_.size() - pos_ < n) return Truncated(field);
    auto out = bytes_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }
  Status ExpectEnd() const {
    if (pos_ == bytes_.size()) return Status::Ok();
    return Malformed(std::string(what_) + ": " + std::to_string(bytes_.size() - pos_) +
                     " trailing bytes");
  }
  std::size_t remaining() const { return bytes_.size() - pos_; }

 private:
  Status Truncated(const char* field) const {
    return Malformed(std::string(what_) + ": truncated at field '" + field + "' (offset " +
                     std::to_string(pos_) + " of " + std::to_string(bytes_.size()) + ")");
  }
  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
  const char* what_;
};

// OutOfRange when a request body of `bytes` would not fit a frame's u32 body_length.
Status CheckFrameBody(std::uint64_t bytes) {
  constexpr std::uint64_t kMaxFrameBody = 0xffffffffu;
  if (bytes <= kMaxFrameBody) return Status::Ok();
  return OutOfRange("protocol: a request body of " + std::to_string(bytes) +
                    " bytes is over a frame's limit of " + std::to_string(kMaxFrameBody) +
                    " (u32 body_length)");
}

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    const std::size_t at = out_.size();
    out_.resize(at + sizeof(T));
    StoreLE<T>(out_.data() + at, v);
  }
  void PutBytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  // A u16 length and the bytes. A string over 65,535 bytes cannot be written: the first such
  // string makes Take fail (naming `field`) instead of writing a wrapped length.
  void PutShortString(std::string_view s, const char* field) {
    if (s.size() > kMaxShortString) {
      if (status_.ok()) {
        status_ =
            OutOfRange(std::string("protocol: ") + field + " of " + std::to_string(s.size()) +
                       " bytes is over the wire's limit of " + std::to_string(kMaxShortString));
      }
      return;
    }
    Put<std::uint16_t>(static_cast<std::uint16_t>(s.size()));
    PutBytes(s.data(), s.size());
  }
  // The bytes written, or the first error. `trailing_bytes` more will follow in the same frame
  // body (values sent from the caller's buffers): OutOfRange when the body would not fit a frame.
  Result<std::vector<std::byte>> Take(std::uint64_t trailing_bytes = 0) {
    KVD_RETURN_IF_ERROR(status_);
    KVD_RETURN_IF_ERROR(CheckFrameBody(out_.size() + trailing_bytes));
    return std::move(out_);
  }
  // For encoders whose strings were checked when they were decoded or stored.
  std::vector<std::byte> TakeChecked() { return std::move(out_); }

 private:
  static constexpr std::size_t kMaxShortString = 0xffff;
  std::vector<std::byte> out_;
  Status status_;
};

std::string_view AsString(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

Status CheckCount(std::uint32_t count, const Limits& limits, const char* what) {
  if (count == 0 || count > limits.max_batch) {
    return OutOfRange(std::string("protocol: ") + what + ": count " + std::to_string(count) +
                      " is out of range [1, " + std::to_string(limits.max_batch) + "]");
  }
  return Status::Ok();
}

Result<std::string_view> ReadKey(Reader& r, const Limits& limits, const char* what,
                                 std::uint32_t index) {
  KVD_ASSIGN_OR_RETURN(std::uint16_t len, r.Read<std::uint16_t>("key_length"));
  if (len == 0 || len > limits.max_key_bytes) {
    return OutOfRange(std::string("protocol: ") + what + ": key " + std::to_string(index) +
                      " length " + std::to_string(len) + " is out of range [1, " +
                      std::to_string(limits.max_key_bytes) + "]");
  }
  KVD_ASSIGN_OR_RETURN(auto bytes, r.Take(len, "key"));
  return AsString(bytes);
}

}  // namespace

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kPing: return "ping";
    case Op::kPut: return "put";
    case Op::kGet: return "get";
    case Op::kLookup: return "lookup";
    case Op::kDelete: return "delete";
    case Op::kStats: return "stats";
    case Op::kScan: return "scan";
    case Op::kAuth: return "auth";
    case Op::kMap: return "map";
    case Op::kLeaseGet: return "lease_get";
    case Op::kRelease: return "release";
    case Op::kGetAs: return "get_as";
    case Op::kEventOrigin: return "event_origin";
    case Op::kClusterInfo: return "cluster_info";
  }
  return "unknown";
}

std::uint64_t MaxRequestBody(Op op, const Limits& limits, std::uint16_t flags) {
  if ((flags & kFlagPlacement) != 0 && AcceptsPlacement(op)) {
    const std::uint64_t own = MaxRequestBody(op, limits, 0);
    return std::min(own + kPlacementSectionLengthBytes + MaxPlacementSectionBytes(limits),
                    limits.max_body_bytes);
  }
  const std::uint64_t key_list = 4 + std::uint64_t{limits.max_batch} * (2 + limits.max_key_bytes);
  switch (op) {
    case Op::kPing:
    case Op::kStats:
    case Op::kClusterInfo: return 0;
    case Op::kPut: return limits.max_body_bytes;
    case Op::kGet:
    case Op::kLookup:
    case Op::kDelete: return std::min(key_list, limits.max_body_bytes);
    case Op::kScan: return 4 + 1 + 1 + 2 * (2 + std::uint64_t{limits.max_key_bytes});
    case Op::kAuth: return 2 + kMaxTokenBytes;
    case Op::kMap: return 0;
    case Op::kLeaseGet:
    case Op::kGetAs: return std::min(4 + key_list, limits.max_body_bytes);
    case Op::kRelease:
      return std::min(4 + 8 * std::uint64_t{limits.max_batch}, limits.max_body_bytes);
    case Op::kEventOrigin: return 16 + 2 * (2 + kMaxOriginNameBytes);
  }
  return 0;
}

void EncodeFrameHeader(const FrameHeader& h, std::byte* out) {
  std::memcpy(out, kMagic, 4);
  out[4] = std::byte{h.version};
  out[5] = std::byte{h.type};
  StoreLE<std::uint16_t>(out + 6, h.flags);
  StoreLE<std::uint64_t>(out + 8, h.request_id);
  StoreLE<std::uint32_t>(out + 16, h.body_length);
  StoreLE<std::uint16_t>(out + 20, h.status);
  StoreLE<std::uint16_t>(out + 22, 0);
}

Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte> bytes, const Limits& limits,
                                      bool expect_response) {
  if (bytes.size() < kFrameHeaderBytes) {
    return Malformed("frame header truncated: " + std::to_string(bytes.size()) + " bytes");
  }
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) return Malformed("bad frame magic");
  FrameHeader h;
  h.version = std::to_integer<std::uint8_t>(bytes[4]);
  if (h.version != kVersion) {
    return Malformed("frame version " + std::to_string(h.version) + " is not supported (1)");
  }
  h.type = std::to_integer<std::uint8_t>(bytes[5]);
  const std::uint8_t op = h.type & ~kResponseBit;
  if (op < 1 || op > kMaxOp) return Malformed("unknown frame type " + std::to_string(h.type));
  if (h.is_response() != expect_response) {
    return Malformed(expect_response ? "expected a response frame" : "expected a request frame");
  }
  h.flags = LoadLE<std::uint16_t>(bytes.data() + 6);
  const std::uint16_t defined = expect_response ? kFlagMore : (kFlagFromPeer | kFlagPlacement);
  if ((h.flags & ~defined) != 0) {
    return Malformed("frame flags " + std::to_string(h.flags) + " are not defined");
  }
  if ((h.flags & kFlagPlacement) != 0 && !AcceptsPlacement(h.op())) {
    return Malformed("frame flag placement (4) is not defined for " + std::string(OpName(h.op())) +
                     ": only put, get, get_as, lookup and delete carry placement keys");
  }
  h.request_id = LoadLE<std::uint64_t>(bytes.data() + 8);
  h.body_length = LoadLE<std::uint32_t>(bytes.data() + 16);
  h.status = LoadLE<std::uint16_t>(bytes.data() + 20);
  if (!expect_response && h.status != 0) return Malformed("request frame with a status");
  if (LoadLE<std::uint16_t>(bytes.data() + 22) != 0) return Malformed("reserved header bytes set");
  if (h.body_length > limits.max_body_bytes) {
    return Malformed("frame body of " + std::to_string(h.body_length) +
                     " bytes exceeds the limit of " + std::to_string(limits.max_body_bytes));
  }
  return h;
}

bool AcceptsPlacement(Op op) {
  return op == Op::kPut || op == Op::kGet || op == Op::kGetAs || op == Op::kLookup ||
         op == Op::kDelete;
}

std::uint64_t MaxPlacementSectionBytes(const Limits& limits) {
  return std::uint64_t{limits.max_batch} * (2 + limits.max_key_bytes);
}

Result<std::vector<std::byte>> EncodePlacementSection(std::span<const std::string_view> keys) {
  std::uint64_t entries = 0;
  for (std::string_view k : keys) entries += 2 + k.size();
  KVD_RETURN_IF_ERROR(CheckFrameBody(kPlacementSectionLengthBytes + entries));
  Writer w;
  w.Put<std::uint32_t>(static_cast<std::uint32_t>(entries));
  for (std::string_view k : keys) w.PutShortString(k, "placement key");
  return w.Take();
}

Result<std::vector<std::string_view>> DecodePlacementEntries(std::span<const std::byte> entries,
                                                             const Limits& limits) {
  std::vector<std::string_view> keys;
  std::size_t pos = 0;
  while (pos < entries.size()) {
    const std::size_t index = keys.size();
    if (index == limits.max_batch) {
      return OutOfRange("protocol: placement section: more than " +
                        std::to_string(limits.max_batch) + " entries (limits.max_batch)");
    }
    if (entries.size() - pos < 2) {
      return InvalidArgument("protocol: placement section: entry " + std::to_string(index) +
                             " is cut off: its u16 length runs past the section's end");
    }
    const auto len = LoadLE<std::uint16_t>(entries.data() + pos);
    pos += 2;
    if (len > limits.max_key_bytes) {
      return OutOfRange("protocol: placement section: placement key " + std::to_string(index) +
                        " is " + std::to_string(len) + " bytes, over limits.max_key_bytes (" +
                        std::to_string(limits.max_key_bytes) + ")");
    }
    if (entries.size() - pos < len) {
      return InvalidArgument("protocol: placement section: placement key " + std::to_string(index) +
                             " (" + std::to_string(len) + " bytes) runs past the section's end");
    }
    keys.push_back(AsString(entries.subspan(pos, len)));
    pos += len;
  }
  return keys;
}

Status CheckPlacementSectionLength(std::uint32_t section_bytes, std::uint64_t body_left,
                                   const Limits& limits) {
  if (section_bytes > MaxPlacementSectionBytes(limits)) {
    return OutOfRange("protocol: placement section of " + std::to_string(section_bytes) +
                      " bytes is over the " + std::to_string(MaxPlacementSectionBytes(limits)) +
                      " that max_batch keys of max_key_bytes take");
  }
  if (section_bytes > body_left) {
    return InvalidArgument("protocol: placement section of " + std::to_string(section_bytes) +
                           " bytes runs past the body (" + std::to_string(body_left) +
                           " bytes follow its length)");
  }
  return Status::Ok();
}

Result<PlacedBody> SplitPlacementSection(std::span<const std::byte> body, const Limits& limits) {
  if (body.size() < kPlacementSectionLengthBytes) {
    return InvalidArgument("protocol: placement section: the body (" + std::to_string(body.size()) +
                           " bytes) is shorter than the section's u32 length");
  }
  const auto section = LoadLE<std::uint32_t>(body.data());
  KVD_RETURN_IF_ERROR(
      CheckPlacementSectionLength(section, body.size() - kPlacementSectionLengthBytes, limits));
  PlacedBody out;
  KVD_ASSIGN_OR_RETURN(
      out.placement_keys,
      DecodePlacementEntries(body.subspan(kPlacementSectionLengthBytes, section), limits));
  out.rest = body.subspan(kPlacementSectionLengthBytes + section);
  return out;
}

Status CheckPlacementCount(Op op, std::size_t entries, std::size_t items) {
  if (entries == items) return Status::Ok();
  return InvalidArgument(std::string(OpName(op)) + ": the placement section has " +
                         std::to_string(entries) + " entries for " + std::to_string(items) +
                         " items; send one per item, in item order (length 0: placed by the "
                         "item's own key)");
}

Result<std::vector<std::byte>> EncodeKeyList(std::span<const std::string> keys) {
  Writer w;
  w.Put<std::uint32_t>(static_cast<std::uint32_t>(keys.size()));
  for (const std::string& k : keys) w.PutShortString(k, "key");
  return w.Take();
}

Result<std::vector<std::string_view>> DecodeKeyList(std::span<const std::byte> body,
                                                    const Limits& limits) {
  Reader r(body, "key list");
  KVD_ASSIGN_OR_RETURN(std::uint32_t count, r.Read<std::uint32_t>("count"));
  KVD_RETURN_IF_ERROR(CheckCount(count, limits, "key list"));
  // Each key takes at least its 2-byte length (a 0-byte key is a limit error, found below).
  if (r.remaining() < std::uint64_t{count} * 2) {
    return Malformed("key list: count " + std::to_string(count) + " exceeds the body");
  }
  std::vector<std::string_view> keys;
  keys.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    KVD_ASSIGN_OR_RETURN(std::string_view key, ReadKey(r, limits, "key list", i));
    keys.push_back(key);
  }
  KVD_RETURN_IF_ERROR(r.ExpectEnd());
  return keys;
}

Result<std::vector<std::byte>> EncodePutBody(std::span<const PutItemView> items) {
  Writer w;
  w.Put<std::uint32_t>(static_cast<std::uint32_t>(items.size()));
  std::uint64_t body = 4;
  for (const PutItemView& item : items) body += 2 + item.key.size() + 8 + item.value.size();
  KVD_RETURN_IF_ERROR(CheckFrameBody(body));  // before copying any value
  for (const PutItemView& item : items) {
    w.PutShortString(item.key, "put key");
    w.Put<std::uint64_t>(item.value.size());
    w.PutBytes(item.value.data(), item.value.size());
  }
  return w.Take();
}

Result<std::vector<std::byte>> EncodeSinglePutHead(std::string_view key,
                                                   std::uint64_t value_length) {
  Writer w;
  w.Put<std::uint32_t>(1);
  w.PutShortString(key, "put key");
  w.Put<std::uint64_t>(value_length);
  return w.Take(value_length);
}

Result<std::vector<PutItemView>> DecodePutBody(std::span<const std::byte> body,
                                               const Limits& limits) {
  Reader r(body, "put");
  KVD_ASSIGN_OR_RETURN(std::uint32_t count, r.Read<std::uint32_t>("count"));
  KVD_RETURN_IF_ERROR(CheckCount(count, limits, "put"));
  // Each item takes at least its key length and value length (10 bytes).
  if (r.remaining() < std::uint64_t{count} * 10) {
    return Malformed("put: count " + std::to_string(count) + " exceeds the body");
  }
  std::vector<PutItemView> items;
  items.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    PutItemView item;
    KVD_ASSIGN_OR_RETURN(item.key, ReadKey(r, limits, "put", i));
    KVD_ASSIGN_OR_RETURN(std::uint64_t len, r.Read<std::uint64_t>("value_length"));
    if (len > limits.max_value_bytes) {
      return OutOfRange("protocol: put: value " + std::to_string(i) + " of " + std::to_string(len) +
                        " bytes exceeds the limit of " + std::to_string(limits.max_value_bytes));
    }
    KVD_ASSIGN_OR_RETURN(item.value, r.Take(len, "value"));
    items.push_back(item);
  }
  KVD_RETURN_IF_ERROR(r.ExpectEnd());
  return items;
}

std::vector<std::byte> EncodeStatusList(std::span<const StatusCode> codes) {
  Writer w;
  w.Put<std::uint32_t>(static_cast<std::uint32_t>(codes.size()));
  for (StatusCode c : codes) w.Put<std::uint16_t>(static_cast<std::uint16_t>(c));
  return w.TakeChecked();
}

Result<std::vector<StatusCode>> DecodeStatusList(std::span<const std::byte> body) {
  Reader r(body, "status list");
  KVD_ASSIGN_OR_RETURN(std::uint32_t count, r.Read<std::uint32_t>("count"));
  if (r.remaining() != std::uint64_t{count} * 2) return Malformed("status list: wrong length");
  std::vector<StatusCode> codes(count);
  for (auto& c : codes) {
    KVD_ASSIGN_OR_RETURN(std::uint16_t v, r.Read<std::uint16_t>("status"));
    c = static_cast<StatusCode>(v);
  }
  return codes;
}

void EncodeGetItemPrefix(std::uint32_t index, Tier tier, std::byte* out) {
  StoreLE<std::uint32_t>(out, index);
  out[4] = static_cast<std::byte>(tier);
  out[5] = out[6] = out[7] = std::byte{0};
}

Result<GetItemPrefix> DecodeGetItemPrefix(std::span<const std::byte> body) {
  if (body.size() < kGetItemPrefixBytes) return Malformed("get item: truncated prefix");
  GetItemPrefix p;
  p.index = LoadLE<std::uint32_t>(body.data());
  const auto tier = std::to_integer<std::uint8_t>(body[4]);
  if (tier > 3) return Malformed("get item: invalid tier " + std::to_string(tier));
  p.tier = static_cast<Tier>(tier);
  return p;
}

std::vector<std::byte> EncodeLookupResult(const LookupResult& result) {
  Writer w;
  w.Put<std::uint32_t>(result.prefix_length);
  w.Put<std::uint32_t>(static_cast<std::uint32_t>(result.tiers.size()));
  for (Tier t : result.tiers) w.Put<std::uint8_t>(static_cast<std::uint8_t>(t));
  return w.TakeChecked();
}

Result<LookupResult> DecodeLookupResult(std::span<const std::byte> body) {
  Reader r(body, "lookup result");
  LookupResult out;
  KVD_ASSIGN_OR_RETURN(out.prefix_length, r.Read<std::uint32_t>("prefix_length"));
  KVD_ASSIGN_OR_RETURN(std::uint32_t count, r.Read<std::uint32_t>("count"));
  if (r.remaining() != count || out.prefix_length > count) {
    return Malformed("lookup result: inconsistent lengths");
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    KVD_ASSIGN_OR_RETURN(std::uint8_t t, r.Read<std::uint8_t>("tier"));
    if (t > 3) return Malformed("lookup result: invalid tier");
    out.tiers.push_back(static_cast<Tier>(t));
  }
  return out;
}

Result<std::vector<std::byte>> EncodeScanRequest(const ScanRequest& q) {
  Writer w;
  w.Put<std::uint32_t>(q.limit);
  w.Put<std::uint8_t>(static_cast<std::uint8_t>(q.tier));
  w.Put<std::uint8_t>(0);
  w.PutShortString(q.prefix, "scan prefix");
  w.PutShortString(q.cursor, "scan cursor");
  return w.Take();
}

Result<ScanRequest> DecodeScanRequest(std::span<const std::byte> body, const Limits& limits) {
  Reader r(body, "scan");
  ScanRequest q;
  KVD_ASSIGN_OR_RETURN(q.limit, r.Read<std::uint32_t>("limit"));
  KVD_RETURN_IF_ERROR(CheckCount(q.limit, limits, "scan limit"));
  KVD_ASSIGN_OR_RETURN(std::uint8_t tier, r.Read<std::uint8_t>("tier"));
  if (tier > 3) return Malformed("scan: invalid tier " + std::to_string(tier));
  q.tier = static_cast<Tier>(tier);
  KVD_ASSIGN_OR_RETURN(std::uint8_t reserved, r.Read<std::uint8_t>("reserved"));
  if (reserved != 0) return Malformed("scan: reserved byte set");
  for (std::string* s : {&q.prefix, &q.cursor}) {
    KVD_ASSIGN_OR_RETURN(std::uint16_t len, r.Read<std::uint16_t>("length"));
    if (len > limits.max_key_bytes) return OutOfRange("protocol: scan: prefix or cursor too long");
    KVD_ASSIGN_OR_RETURN(auto bytes, r.Take(len, "prefix/cursor"));
    s->assign(AsString(bytes));
  }
  KVD_RETURN_IF_ERROR(r.ExpectEnd());
  return q;
}

std::vector<std::byte> EncodeScanResult(const ScanResult& result) {
  Writer w;
  w.Put<std::uint32_t>(static_cast<std::uint32_t>(result.entries.size()));
  for (const ScanEntry& e : result.entries) {
    w.PutShortString(e.key, "scan key");
    w.Put<std::uint64_t>(e.value_bytes);
    w.Put<std::uint8_t>(static_cast<std::uint8_t>(e.tier));
    w.Put<std::uint64_t>(e.idle_ms);
  }
  w.PutShortString(result.next_cursor, "scan cursor");
  return w.TakeChecked();
}

Result<ScanResult> DecodeScanResult(std::span<const std::byte> body) {
  Reader r(body, "scan result");
  ScanResult out;
  KVD_ASSIGN_OR_RETURN(std::uint32_t count, r.Read<std::uint32_t>("count"));
  if (r.remaining() < std::uint64_t{count} * 19)
    return Malformed("scan result: count exceeds the body");
  for (std::uint32_t i = 0; i < count; ++i) {
    ScanEntry e;
    KVD_ASSIGN_OR_RETURN(std::uint16_t len, r.Read<std::uint16_t>("key_length"));
    KVD_ASSIGN_OR_RETURN(auto key, r.Take(len, "key"));
    e.key.assign(AsString(key));
    KVD_ASSIGN_OR_RETURN(e.value_bytes, r.Read<std::uint64_t>("value_bytes"));
    KVD_ASSIGN_OR_RETURN(std::uint8_t tier, r.Read<std::uint8_t>("tier"));
    if (tier > 3) return Malformed("scan result: invalid tier");
    e.tier = static_cast<Tier>(tier);
    KVD_ASSIGN_OR_RETURN(e.idle_ms, r.Read<std::uint64_t>("idle_ms"));
    out.entries.push_back(std::move(e));
  }
  KVD_ASSIGN_OR_RETURN(std::uint16_t len, r.Read<std::uint16_t>("cursor_length"));
  KVD_ASSIGN_OR_RETURN(auto cursor, r.Take(len, "cursor"));
  out.next_cursor.assign(AsString(cursor));
  KVD_RETURN_IF_ERROR(r.ExpectEnd());
  return out;
}

std::vector<std::byte> EncodeAuthRequest(std::string_view token) {
  std::vector<std::byte> out(2 + token.size());
  StoreLE<std::uint16_t>(out.data(), static_cast<std::uint16_t>(token.size()));
  std::memcpy(out.data() + 2, token.data(), token.size());
  return out;
}

Result<std::string> DecodeAuthRequest(std::span<const std::byte> body) {
  Reader r(body, "auth");
  KVD_ASSIGN_OR_RETURN(std::uint16_t len, r.Read<std::uint16_t>("length"));
  if (len == 0 || len > kMaxTokenBytes) {
    return OutOfRange("protocol: auth: token length " + std::to_string(len) +
                      " is out of range [1, " + std::to_string(kMaxTokenBytes) + "]");
  }
  KVD_ASSIGN_OR_RETURN(auto bytes, r.Take(len, "token"));
  KVD_RETURN_IF_ERROR(r.ExpectEnd());
  return std::string(AsString(bytes));
}

Result<std::vector<std::byte>> EncodeEventOriginRequest(const EventOrigin& origin) {
  Writer w;
  std::array<std::byte, 16> namespace_id{};
  std::memcpy(namespace_id.data(), origin.namespace_id.data(),
              std::min<std::size_t>(namespace_id.size(), origin.namespace_id.size()));
  w.PutBytes(namespace_id.data(), namespace_id.size());
  w.PutShortString(origin.instance, "event_origin instance");
  w.PutShortString(origin.model, "event_origin model");
  return w.Take();
}

Result<EventOrigin> DecodeEventOriginRequest(std::span<const std::byte> body) {
  Reader r(body, "event_origin");
  EventOrigin out;
  KVD_ASSIGN_OR_RETURN(auto ns, r.Take(16, "namespace_id"));
  out.namespace_id.assign(AsString(ns));
  for (auto [name, field] :
       {std::pair{&out.instance, "instance"}, std::pair{&out.model, "model"}}) {
    KVD_ASSIGN_OR_RETURN(std::uint16_t len, r.Read<std::uint16_t>(field));
    if (len > kMaxOriginNameBytes) {
      return OutOfRange("protocol: event_origin: " + std::string(field) + " length " +
                        std::to_string(len) + " is over " + std::to_string(kMaxOriginNameBytes));
    }
    KVD_ASSIGN_OR_RETURN(auto bytes, r.Take(len, field));
    name->assign(AsString(bytes));
    for (const char c : *name) {
      if (c == '@' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        return InvalidArgument("protocol: event_origin: " + std::string(field) +
                               " holds '@' or a control character (it goes into the event "
                               "topic TOPIC@INSTANCE@MODEL)");
      }
    }
  }
  if (out.model.empty()) return InvalidArgument("protocol: event_origin: model is empty");
  KVD_RETURN_IF_ERROR(r.ExpectEnd());
  return out;
}

std::vector<std::byte> EncodeErrorBody(std::string_view message) {
  const std::size_t n = std::min<std::size_t>(message.size(), 1024);
  std::vector<std::byte> out(n);
  std::memcpy(out.data(), message.data(), n);
  return out;
}

// ---- same-host zero-copy and transcoding
// ---------------------------------------------------------

std::vector<std::byte> EncodeMapInfo(const MapInfo& info) {
  Writer w;
  w.Put<std::uint64_t>(info.host_arena_bytes);
  w.Put<std::uint64_t>(info.gpu_pool_bytes);
  w.Put<std::uint32_t>(static_cast<std::uint32_t>(info.gpu_device));
  w.Put<std::uint32_t>(0);
  w.PutBytes(info.ipc_handle.data(), info.ipc_handle.size());
  return w.TakeChecked();
}

Result<MapInfo> DecodeMapInfo(std::span<const std::byte> body) {
  Reader r(body, "map");
  MapInfo info;
  KVD_ASSIGN_OR_RETURN(info.host_arena_bytes, r.Read<std::uint64_t>("host_arena_bytes"));
  KVD_ASSIGN_OR_RETURN(info.gpu_pool_bytes, r.Read<std::uint64_t>("gpu_pool_bytes"));
  KVD_ASSIGN_OR_RETURN(std::uint32_t device, r.Read<std::uint32_t>("gpu_device"));
  info.gpu_device = static_cast<std::int32_t>(device);
  KVD_ASSIGN_OR_RETURN(std::uint32_t reserved, r.Read<std::uint32_t>("reserved"));
  if (reserved != 0) return Malformed("map: reserved field is " + std::to_string(reserved));
  KVD_ASSIGN_OR_RETURN(auto handle, r.Take(kIpcHandleBytes, "ipc_handle"));
  std::copy(handle.begin(), handle.end(), info.ipc_handle.begin());
  KVD_RETURN_IF_ERROR(r.ExpectEnd());
  return info;
}

namespace {

// u8 selector, 3 zero bytes, key list: the common prefix of LEASE_GET and GET_AS.
Result<std::vector<std::byte>> EncodeSelectorKeys(std::uint8_t selector,
                                                  std::span<const std::string> keys) {
  Writer w;
  w.Put<std::uint8_t>(selector);
  w.Put<std::uint8_t>(0);
  w.Put<std::uint16_t>(0);
  std::vector<std::byte> out = w.TakeChecked();
  KVD_ASSIGN_OR_RETURN(const std::vector<std::byte> list, EncodeKeyList(keys));
  out.insert(out.end(), list.begin(), list.end());
  return out;
}

Result<std::pair<std::uint8_t, std::vector<std::string_view>>> DecodeSelectorKeys(
    std::span<const std::byte> body, const Limits& limits, const char* what) {
  if (body.size() < 4)
    return Malformed(std::string(what) + ": body of " + std::to_string(body.size()) +
                     " bytes is truncated");
  if (body[1] != std::byte{0} || body[2] != std::byte{0} || body[3] != std::byte{0}) {
    return Malformed(std::string(what) + ": reserved bytes are not zero");
  }
  KVD_ASSIGN_OR_RETURN(auto keys, DecodeKeyList(body.subspan(4), limits));
  return std::make_pair(static_cast<std::uint8_t>(body[0]), std::move(keys));
}

}  // namespace

Result<std::vector<std::byte>> EncodeLeaseGetRequest(Tier tier, std::span<const std::string> keys) {
  return EncodeSelectorKeys(static_cast<std::uint8_t>(tier), keys);
}

Result<LeaseGetView> DecodeLeaseGetRequest(std::span<const std::byte> body, const Limits& limits) {
  KVD_ASSIGN_OR_RETURN(auto parts, DecodeSelectorKeys(body, limits, "lease_get"));
  if (parts.first > static_cast<std::uint8_t>(Tier::kHost)) {
    return InvalidArgument("protocol: lease_get: tier " + std::to_string(parts.first) +
                           " is not 0 (any), 1 (gpu) or 2 (host)");
  }
  return LeaseGetView{static_cast<Tier>(parts.first), std::move(parts.second)};
}

std::vector<std::byte> EncodeLeases(std::span<const Lease> leases) {
  Writer w;
  w.Put<std::uint32_t>(static_cast<std::uint32_t>(leases.size()));
  for (const Lease& l : leases) {
    const bool ok = l.status == StatusCode::kOk;
    w.Put<std::uint16_t>(static_cast<std::uint16_t>(l.status));
    w.Put<std::uint8_t>(ok ? static_cast<std::uint8_t>(l.tier) : 0);
    w.Put<std::uint8_t>(0);
    w.Put<std::uint32_t>(0);
    w.Put<std::uint64_t>(ok ? l.lease_id : 0);
    w.Put<std::uint64_t>(ok ? l.offset : 0);
    w.Put<std::uint64_t>(ok ? l.length : 0);
  }
  return w.TakeChecked();
}

Result<std::vector<Lease>> DecodeLeases(std::span<const std::byte> body) {
  Reader r(body, "leases");
  KVD_ASSIGN_OR_RETURN(std::uint32_t count, r.Read<std::uint32_t>("count"));
  if (r.remaining() != std::uint64_t{count} * kLeaseEntryBytes) {
    return Malformed("leases: " + std::to_string(r.remaining()) + " bytes for " +
                     std::to_string(count) + " entries of " + std::to_string(kLeaseEntryBytes));
  }
  std::vector<Lease> out(count);
  for (Lease& l : out) {
    KVD_ASSIGN_OR_RETURN(std::uint16_t status, r.Read<std::uint16_t>("status"));
    KVD_ASSIGN_OR_RETURN(std::uint8_t tier, r.Read<std::uint8_t>("tier"));
    KVD_ASSIGN_OR_RETURN(std::uint8_t pad8, r.Read<std::uint8_t>("reserved"));
    KVD_ASSIGN_OR_RETURN(std::uint32_t pad32, r.Read<std::uint32_t>("reserved"));
    if (pad8 != 0 || pad32 != 0) return Malformed("leases: reserved bytes are not zero");
    if (tier > static_cast<std::uint8_t>(Tier::kSsd)) {
      return Malformed("leases: tier " + std::to_string(tier) + " is out of range [0, 3]");
    }
    l.status = static_cast<StatusCode>(status);
    l.tier = static_cast<Tier>(tier);
    KVD_ASSIGN_OR_RETURN(l.lease_id, r.Read<std::uint64_t>("lease_id"));
    KVD_ASSIGN_OR_RETURN(l.offset, r.Read<std::uint64_t>("offset"));
    KVD_ASSIGN_OR_RETURN(l.length, r.Read<std::uint64_t>("length"));
    if (l.offset + l.length < l.offset) return Malformed("leases: offset + length overflows");
  }
  return out;
}

std::vector<std::byte> EncodeLeaseIds(std::span<const std::uint64_t> ids) {
  Writer w;
  w.Put<std::uint32_t>(static_cast<std::uint32_t>(ids.size()));
  for (std::uint64_t id : ids) w.Put<std::uint64_t>(id);
  return w.TakeChecked();
}

Result<std::vector<std::uint64_t>> DecodeLeaseIds(std::span<const std::byte> body,
                                                  const Limits& limits) {
  Reader r(body, "release");
  KVD_ASSIGN_OR_RETURN(std::uint32_t count, r.Read<std::uint32_t>("count"));
  KVD_RETURN_IF_ERROR(CheckCount(count, limits, "release"));
  if (r.remaining() != std::uint64_t{count} * 8) {
    return Malformed("release: " + std::to_string(r.remaining()) + " bytes for " +
                     std::to_string(count) + " lease ids");
  }
  std::vector<std::uint64_t> ids(count);
  for (auto& id : ids) {
    KVD_ASSIGN_OR_RETURN(id, r.Read<std::uint64_t>("lease_id"));
  }
  return ids;
}

Result<std::vector<std::byte>> EncodeGetAsRequest(std::uint8_t codec,
                                                  std::span<const std::string> keys) {
  return EncodeSelectorKeys(codec, keys);
}

Result<GetAsView> DecodeGetAsRequest(std::span<const std::byte> body, const Limits& limits) {
  KVD_ASSIGN_OR_RETURN(auto parts, DecodeSelectorKeys(body, limits, "get_as"));
  if (parts.first > 2) {
    return InvalidArgument("protocol: get_as: codec " + std::to_string(parts.first) +
                           " is not 0 (raw), 1 (cachegen) or 2 (hack-int2)");
  }
  return GetAsView{parts.first, std::move(parts.second)};
}

}  // namespace kvdepot::protocol
