// vLLM's KV-event payload (vllm/distributed/kv_events.py, pinned in docs/events.md) as msgpack:
// a KVEventBatch in msgspec's array_like layout, each event tagged with its class name first.
//
//   batch          = [ts (float64), [event, ...], data_parallel_rank (int)]
//   BlockStored    = ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//                     lora_id, medium, lora_name]
//   BlockRemoved   = ["BlockRemoved", block_hashes, medium]
//   AllBlocksCleared = ["AllBlocksCleared"]
//
// A block hash is vLLM's ExternalBlockHash: bytes (msgpack bin; kvdepot's 32-byte SHA-256 chain
// value) or an integer (LMCache's chunk hash). Fields kvdepot does not know are nil
// (parent_block_hash, lora_id, lora_name) or empty (token_ids); the trailing fields vLLM declares
// with defaults (extra_keys, group_idx, kv_cache_spec_*) are omitted, as msgspec's omit_defaults
// omits them. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvdepot/daemon/kv_events.h"

namespace kvdepot::daemon::events {

struct BlockHash {
  std::string bytes;            // non-empty: the hash as bytes (msgpack bin)
  std::uint64_t integer = 0;    // otherwise: the hash as an integer
  bool integer_signed = false;  // ... encoded as a negative int64 (LMCache's negative hashes)
  bool operator==(const BlockHash&) const = default;
};

enum class EventKind : std::uint8_t { kStored, kRemoved, kCleared };

struct WireEvent {
  EventKind kind = EventKind::kStored;
  EventMedium medium = EventMedium::kCpu;
  std::vector<BlockHash> hashes;  // one for kStored (no parent chain known), any for kRemoved
};

// The msgpack payload of one batch.
std::string EncodeEventBatch(double ts, const std::vector<WireEvent>& events,
                             std::uint32_t block_size, std::int64_t data_parallel_rank);

}  // namespace kvdepot::daemon::events
