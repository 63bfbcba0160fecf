// Whole-file reads and crash-safe whole-file writes, with errors that name the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvdepot/base/status.h"

namespace kvdepot {

// Reads all of `path`. Fails with kOutOfRange (before reading) when the file is larger than
// `max_bytes`, kNotFound when it does not exist, kIOError otherwise. Messages start with the path.
Result<std::vector<std::byte>> ReadFile(const std::string& path, std::uint64_t max_bytes);

// Writes `bytes` to `path` atomically: a temporary file in the same directory is written, fsynced
// and renamed over `path`. On failure `path` is untouched and the temporary file is removed.
Status WriteFileAtomic(const std::string& path, std::span<const std::byte> bytes);

}  // namespace kvdepot
