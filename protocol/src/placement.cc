#include "kvdepot/protocol/placement.h"

#include <algorithm>

namespace kvdepot::protocol {

std::size_t GroupAnchorIndex(std::size_t index, std::uint32_t group_chunks) {
  const std::size_t g = std::max<std::uint32_t>(group_chunks, 1);
  return index - index % g;
}

std::vector<std::string> ChainPlacementKeys(std::span<const std::string> chain,
                                            std::uint32_t group_chunks) {
  std::vector<std::string> out;
  out.reserve(chain.size());
  for (std::size_t i = 0; i < chain.size(); ++i) {
    out.push_back(chain[GroupAnchorIndex(i, group_chunks)]);
  }
  return out;
}

}  // namespace kvdepot::protocol
