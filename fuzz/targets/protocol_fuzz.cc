// protocol: the native protocol's frame header and body decoders (kvdepot/protocol/protocol.h).
// Byte 0 picks the decoder, byte 1 the limits; the rest is the input. Bodies that decode must
// encode back to the same bytes (the encodings are canonical).
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_targets.h"
#include "kvdepot/protocol/protocol.h"

namespace kvdepot::fuzz {
namespace {

bool SameBytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

}  // namespace

int FuzzProtocol(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::uint8_t which = data[0];
  protocol::Limits limits;
  if (data[1] & 1) {  // small limits, so that "over the limit" paths are reachable
    limits.max_key_bytes = 8;
    limits.max_value_bytes = 64;
    limits.max_batch = 4;
    limits.max_body_bytes = 256;
  }
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data + 2), size - 2);
  switch (which % 15) {
    case 0:
    case 1: {
      auto h = protocol::DecodeFrameHeader(in, limits, /*expect_response=*/which % 15 == 1);
      if (h.ok()) {
        std::byte out[protocol::kFrameHeaderBytes];
        protocol::EncodeFrameHeader(*h, out);
        if (!SameBytes(out, in.first(protocol::kFrameHeaderBytes))) __builtin_trap();
        (void)protocol::MaxRequestBody(h->op(), limits, h->flags);
      }
      break;
    }
    case 2: {
      auto keys = protocol::DecodeKeyList(in, limits);
      if (keys.ok()) {
        std::vector<std::string> owned(keys->begin(), keys->end());
        const auto body = protocol::EncodeKeyList(owned);
        if (!body.ok() || !SameBytes(*body, in)) __builtin_trap();
      }
      // The same bytes as a placement section and the body after it: a section that decodes
      // re-encodes to its own bytes.
      auto placed = protocol::SplitPlacementSection(in, limits);
      if (placed.ok()) {
        const auto section = protocol::EncodePlacementSection(placed->placement_keys);
        if (!section.ok() || !SameBytes(*section, in.first(in.size() - placed->rest.size()))) {
          __builtin_trap();
        }
      }
      break;
    }
    case 3: {
      auto items = protocol::DecodePutBody(in, limits);
      if (items.ok()) {
        const auto body = protocol::EncodePutBody(*items);
        if (!body.ok() || !SameBytes(*body, in)) __builtin_trap();
      }
      break;
    }
    case 4: (void)protocol::DecodeStatusList(in); break;
    case 5: (void)protocol::DecodeGetItemPrefix(in); break;
    case 6: (void)protocol::DecodeLookupResult(in); break;
    case 7: {
      auto q = protocol::DecodeScanRequest(in, limits);
      if (q.ok() && !protocol::EncodeScanRequest(*q).ok()) __builtin_trap();
      break;
    }
    case 8: {
      auto r = protocol::DecodeScanResult(in);
      if (r.ok()) (void)protocol::EncodeScanResult(*r);
      break;
    }
    // The same-host zero-copy and authentication messages: a decoded value re-encodes and
    // decodes again to the same value.
    case 9: {
      auto t = protocol::DecodeAuthRequest(in);
      if (t.ok() && *protocol::DecodeAuthRequest(protocol::EncodeAuthRequest(*t)) != *t) {
        __builtin_trap();
      }
      break;
    }
    case 10: {
      auto m = protocol::DecodeMapInfo(in);
      if (m.ok()) {
        const auto again = protocol::DecodeMapInfo(protocol::EncodeMapInfo(*m));
        if (!again.ok() || again->host_arena_bytes != m->host_arena_bytes ||
            again->gpu_pool_bytes != m->gpu_pool_bytes || again->ipc_handle != m->ipc_handle) {
          __builtin_trap();
        }
      }
      break;
    }
    case 11: {
      auto q = protocol::DecodeLeaseGetRequest(in, limits);
      if (q.ok()) {
        const std::vector<std::string> keys(q->keys.begin(), q->keys.end());
        const auto body = protocol::EncodeLeaseGetRequest(q->tier, keys);
        if (!body.ok()) __builtin_trap();
        const auto again = protocol::DecodeLeaseGetRequest(*body, limits);
        if (!again.ok() || again->tier != q->tier || again->keys.size() != keys.size()) {
          __builtin_trap();
        }
      }
      break;
    }
    case 12: {
      auto l = protocol::DecodeLeases(in);
      if (l.ok()) {
        const auto again = protocol::DecodeLeases(protocol::EncodeLeases(*l));
        if (!again.ok() || again->size() != l->size()) __builtin_trap();
      }
      break;
    }
    case 13: {
      auto ids = protocol::DecodeLeaseIds(in, limits);
      if (ids.ok()) {
        const auto again = protocol::DecodeLeaseIds(protocol::EncodeLeaseIds(*ids), limits);
        if (!again.ok() || *again != *ids) __builtin_trap();
      }
      break;
    }
    case 14: {
      auto q = protocol::DecodeGetAsRequest(in, limits);
      if (q.ok()) {
        const std::vector<std::string> keys(q->keys.begin(), q->keys.end());
        const auto body = protocol::EncodeGetAsRequest(q->codec, keys);
        if (!body.ok()) __builtin_trap();
        const auto again = protocol::DecodeGetAsRequest(*body, limits);
        if (!again.ok() || again->codec != q->codec || again->keys.size() != keys.size()) {
          __builtin_trap();
        }
      }
      break;
    }
  }
  return 0;
}

}  // namespace kvdepot::fuzz
