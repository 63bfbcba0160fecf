// Which chunk a stored key names, for KV events (docs/events.md, "Block hashes").
//
//  - a 48-byte chunk key (docs/format.md §2: namespace id ‖ SHA-256 chain value): the block hash
//    is the 32-byte chain value, as bytes — the prefix hash of the chunk's 256 tokens (the
//    namespace's chunk size) and everything before them, like vLLM's bytes-form block hashes;
//  - a key under the LMCache namespace id: LMCache's CacheEngineKey string
//    "fmt@model@world_size@worker_id@HASH[@dtype[@tags...]]" (HASH in hex, as current LMCache
//    writes it, optionally negative): the block hash is that integer (its low 64 bits) and the
//    model name comes along;
//  - any other key (raw keys written over resp:// or the native protocol) names no chunk.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string_view>

#include "events/event_encoding.h"

namespace kvdepot::daemon::events {

inline constexpr std::size_t kNamespaceIdBytes = 16;
inline constexpr std::size_t kChunkKeyBytes = 48;

struct KeyIdentity {
  BlockHash hash;
  std::string_view namespace_id;  // the key's first 16 bytes
  std::string_view model;         // from an LMCache key; empty for chunk keys
};

// nullopt when `key` names no chunk. `lm_namespace_id` may be empty (no LMCache namespace). The
// identity's views point into `key`, which must outlive them.
std::optional<KeyIdentity> IdentifyKey(std::string_view key, std::string_view lm_namespace_id);

}  // namespace kvdepot::daemon::events
