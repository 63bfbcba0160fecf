// Group placement of prefix chains (docs/cluster.md, "Placement"): a cluster keeps G consecutive
// chunks of a prompt's prefix chain on the same owners by placing every chunk of a group by the
// key of the group's first chunk, its anchor. Requests carry these placement keys in a placement
// section (protocol.h, kFlagPlacement).
//
// The placement key of chunk i depends only on the chain up to its group's start, so a PUT of
// chunk i alone and a GET or LOOKUP of the whole prompt compute the same owners.
//
// Thread-safety: free functions on values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvdepot::protocol {

// For chunk `index` of a prefix chain, the index of its group's first chunk (the anchor whose key
// places the whole group): index - index % group_chunks (group_chunks 0 counts as 1).
std::size_t GroupAnchorIndex(std::size_t index, std::uint32_t group_chunks);

// Per chunk of `chain` (the chain's keys from its first chunk, chunk 0, in prefix order): the key
// of its group's anchor, chain[GroupAnchorIndex(i, group_chunks)] — the placement keys of a
// request for those chunks, in the same order. A request for chunks [first, last) of a chain
// sends the sub-range of this result; the keys must start at chunk 0 for the anchors to be right.
std::vector<std::string> ChainPlacementKeys(std::span<const std::string> chain,
                                            std::uint32_t group_chunks);

}  // namespace kvdepot::protocol
