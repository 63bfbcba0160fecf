#include "events/event_encoding.h"

#include <msgpack.hpp>
#include <string_view>

namespace kvdepot::daemon::events {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackString(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<std::uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
}

void PackHashes(Packer& pk, const std::vector<BlockHash>& hashes) {
  pk.pack_array(static_cast<std::uint32_t>(hashes.size()));
  for (const BlockHash& h : hashes) {
    if (!h.bytes.empty()) {
      pk.pack_bin(static_cast<std::uint32_t>(h.bytes.size()));
      pk.pack_bin_body(h.bytes.data(), static_cast<std::uint32_t>(h.bytes.size()));
    } else if (h.integer_signed) {
      pk.pack_int64(static_cast<std::int64_t>(h.integer));
    } else {
      pk.pack_uint64(h.integer);
    }
  }
}

}  // namespace

std::string EncodeEventBatch(double ts, const std::vector<WireEvent>& events,
                             std::uint32_t block_size, std::int64_t data_parallel_rank) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(static_cast<std::uint32_t>(events.size()));
  for (const WireEvent& e : events) {
    switch (e.kind) {
      case EventKind::kStored:
        pk.pack_array(8);
        PackString(pk, "BlockStored");
        PackHashes(pk, e.hashes);
        pk.pack_nil();     // parent_block_hash: kvdepot does not know the chain's parent
        pk.pack_array(0);  // token_ids: the daemon never sees tokens
        pk.pack_uint32(block_size);
        pk.pack_nil();  // lora_id
        PackString(pk, EventMediumName(e.medium));
        pk.pack_nil();  // lora_name
        break;
      case EventKind::kRemoved:
        pk.pack_array(3);
        PackString(pk, "BlockRemoved");
        PackHashes(pk, e.hashes);
        PackString(pk, EventMediumName(e.medium));
        break;
      case EventKind::kCleared:
        pk.pack_array(1);
        PackString(pk, "AllBlocksCleared");
        break;
    }
  }
  pk.pack_int64(data_parallel_rank);
  return std::string(buffer.data(), buffer.size());
}

}  // namespace kvdepot::daemon::events
