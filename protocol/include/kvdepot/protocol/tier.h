// The storage tiers' names and numbers: one vocabulary for the wire (LOOKUP, GET, SCAN answers),
// the client and the daemon's tiers, without the rest of the wire protocol.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"

namespace kvdepot::protocol {

// As they appear on the wire. 0 means "absent / any".
enum class Tier : std::uint8_t { kNone = 0, kGpu = 1, kHost = 2, kSsd = 3 };
// "none", "gpu", "host", "ssd".
std::string_view TierName(Tier tier);
// "gpu", "host", "ssd", or "any"/"none" for kNone; kInvalidArgument otherwise.
Result<Tier> ParseTierName(std::string_view name);

// One key listed by a scan of the tiers (SCAN), and a page of them.
struct ScanEntry {
  std::string key;
  std::uint64_t value_bytes = 0;
  Tier tier = Tier::kNone;
  std::uint64_t idle_ms = 0;
};
struct ScanResult {
  std::vector<ScanEntry> entries;
  std::string next_cursor;  // empty: the scan is complete
};

}  // namespace kvdepot::protocol
