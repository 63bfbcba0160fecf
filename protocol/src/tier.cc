#include "kvdepot/protocol/tier.h"

namespace kvdepot::protocol {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kNone: return "none";
    case Tier::kGpu: return "gpu";
    case Tier::kHost: return "host";
    case Tier::kSsd: return "ssd";
  }
  return "unknown";
}

Result<Tier> ParseTierName(std::string_view name) {
  if (name == "gpu") return Tier::kGpu;
  if (name == "host") return Tier::kHost;
  if (name == "ssd") return Tier::kSsd;
  if (name == "any" || name == "none") return Tier::kNone;
  return InvalidArgument("unknown tier '" + std::string(name) + "' (expected gpu, host, ssd)");
}

}  // namespace kvdepot::protocol
