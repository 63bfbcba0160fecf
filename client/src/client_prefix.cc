// Client's prompt-level calls (client.h, "Prompt-level calls"): a prompt's chunk keys and their
// group anchors computed once, in MakePrefixChain, for both LookupPrefix and PutPrefix, so that
// what one stores the other finds (docs/cluster.md, "Prefix locality in requests").
#include <algorithm>
#include <string>
#include <utility>

#include "kvdepot/client/client.h"
#include "kvdepot/client/cluster_routes.h"
#include "kvdepot/protocol/placement.h"

namespace kvdepot::client {
namespace {

// The bytes `item` adds to a PUT body (u16 key length, key, u64 value length, value).
std::uint64_t PutItemBytes(const protocol::PutItemView& item) {
  return 2 + item.key.size() + 8 + item.value.size();
}

// The end of the PUT batch that starts at items[first]: at most limits.max_batch items whose body
// fits in limits.max_body_bytes (at least one item: a value too large alone is the server's to
// refuse).
std::size_t PutBatchEnd(std::span<const protocol::PutItemView> items, std::size_t first,
                        const protocol::Limits& limits) {
  std::uint64_t body = 4;  // u32 count
  std::size_t end = first;
  while (end < items.size() && end - first < limits.max_batch) {
    const std::uint64_t more = PutItemBytes(items[end]);
    if (end > first && body + more > limits.max_body_bytes) break;
    body += more;
    ++end;
  }
  return end;
}

}  // namespace

Result<PrefixChain> MakePrefixChain(const Namespace& ns, std::span<const std::uint32_t> tokens,
                                    std::uint32_t group_chunks) {
  PrefixChain out;
  KVD_ASSIGN_OR_RETURN(out.keys, ChunkKeysForTokens(ns, tokens, /*include_partial_last=*/false));
  out.wire.reserve(out.keys.size());
  for (const ChunkKey& k : out.keys) {
    out.wire.emplace_back(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size());
  }
  // The whole chain's anchors, from chunk 0: a batch past the first keeps its chunks' anchors.
  if (group_chunks > 1) out.placement = protocol::ChainPlacementKeys(out.wire, group_chunks);
  return out;
}

std::uint32_t Client::PrefixGroupChunks(std::uint32_t group_chunks) {
  if (group_chunks > 0) return group_chunks;
  const std::shared_ptr<const cluster::Topology> view = RouteView();
  return view != nullptr ? view->options().group_chunks : 0;
}

Result<PrefixLookup> Client::LookupPrefix(const Namespace& ns,
                                          std::span<const std::uint32_t> tokens,
                                          std::uint32_t group_chunks) {
  KVD_ASSIGN_OR_RETURN(PrefixChain chain,
                       MakePrefixChain(ns, tokens, PrefixGroupChunks(group_chunks)));
  PrefixLookup out;
  out.keys = std::move(chain.keys);
  const std::span<const std::string> wire(chain.wire);
  const std::span<const std::string> placement(chain.placement);
  for (std::size_t first = 0; first < wire.size(); first += options_.limits.max_batch) {
    const std::size_t n = std::min<std::size_t>(options_.limits.max_batch, wire.size() - first);
    const auto placed = placement.empty() ? placement : placement.subspan(first, n);
    KVD_ASSIGN_OR_RETURN(protocol::LookupResult r, Lookup(wire.subspan(first, n), placed));
    if (out.prefix_length == first) out.prefix_length += r.prefix_length;
    out.tiers.insert(out.tiers.end(), r.tiers.begin(), r.tiers.end());
  }
  return out;
}

Result<std::vector<StatusCode>> Client::PutPrefix(
    const Namespace& ns, std::span<const std::uint32_t> tokens,
    std::span<const std::span<const std::byte>> chunk_values, std::uint32_t group_chunks) {
  // Checked before the view is asked for: an argument error costs no round trip.
  KVD_RETURN_IF_ERROR(ns.Validate());
  const std::size_t chunks = tokens.size() / ns.chunk_tokens;
  if (chunk_values.size() != chunks) {
    return InvalidArgument("put_prefix: " + std::to_string(chunk_values.size()) +
                           " chunk values for " + std::to_string(tokens.size()) +
                           " tokens; expected " + std::to_string(chunks) +
                           ", one per full chunk of the namespace's chunk_tokens = " +
                           std::to_string(ns.chunk_tokens) +
                           " tokens (a partial last chunk is not stored: drop its tokens or "
                           "its value)");
  }
  KVD_ASSIGN_OR_RETURN(const PrefixChain chain,
                       MakePrefixChain(ns, tokens, PrefixGroupChunks(group_chunks)));
  std::vector<protocol::PutItemView> items;
  items.reserve(chunks);
  for (std::size_t i = 0; i < chunks; ++i) {
    items.push_back({chain.wire[i], chunk_values[i],
                     chain.placement.empty() ? std::string_view() : chain.placement[i]});
  }
  std::vector<StatusCode> out;
  out.reserve(chunks);
  const std::span<const protocol::PutItemView> all(items);
  for (std::size_t first = 0; first < all.size();) {
    const std::size_t end = PutBatchEnd(all, first, options_.limits);
    KVD_ASSIGN_OR_RETURN(const std::vector<StatusCode> codes, Put(all.subspan(first, end - first)));
    out.insert(out.end(), codes.begin(), codes.end());
    first = end;
  }
  return out;
}

}  // namespace kvdepot::client
