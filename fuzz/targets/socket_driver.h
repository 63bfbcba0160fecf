// Drives an in-process server with fuzz input over a real socket: sends every byte, half-closes,
// reads until the server closes. Sending and receiving interleave (poll), so a server that stops
// reading until its responses are read (backpressure) cannot deadlock the driver.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

namespace kvdepot::fuzz {

// Returns false when the server neither read the input nor closed within `timeout`.
bool Exchange(int fd, std::span<const std::byte> input, std::chrono::milliseconds timeout,
              std::vector<std::byte>& output);

}  // namespace kvdepot::fuzz
