// Bounded waits for the tests: a test waits for the condition it needs, never for a fixed time.
#pragma once

#include <chrono>
#include <thread>

namespace kvdepot::test {

// Polls `pred` every 2 ms until it holds (true) or `limit` passes (false).
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Waits until `read()` has kept one value for `quiet` (true), or `limit` passes (false): for
// "the server has stopped making progress" (a counter that stops rising once a socket is full).
template <typename Read>
bool WaitForSteady(Read read, std::chrono::milliseconds quiet,
                   std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  auto last = read();
  auto since = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto now_value = read();
    const auto now = std::chrono::steady_clock::now();
    if (now_value != last) {
      last = now_value;
      since = now;
    } else if (now - since >= quiet) {
      return true;
    }
  }
  return false;
}

}  // namespace kvdepot::test
