// What the server reports about each request, for metrics (daemon/src/metrics.cc implements it).
// The server holds no metric of its own beyond ServerStats; an observer is optional.
//
// Thread-safety and cost: the server calls these on its I/O threads, concurrently, once per
// request. Implementations must be thread-safe, must not block and should cost well under a
// microsecond (atomic increments; no allocation, no map lookups under a shared lock).
#pragma once

#include <chrono>
#include <cstdint>

#include "kvdepot/base/status.h"
#include "kvdepot/protocol/protocol.h"

namespace kvdepot::daemon {

class RequestObserver {
 public:
  virtual ~RequestObserver() = default;

  // A request was answered: its last response frame was handed to the socket. `latency` runs from
  // the moment its frame header was read. `status` is the request's outcome: the first status
  // other than kOk among its response frames and their per-item status lists (a GET with a
  // missing key: kNotFound; a PUT with a refused item: that item's code), else kOk. Requests on
  // a connection that closes before their response is written are not reported.
  virtual void OnRequest(protocol::Op op, StatusCode status,
                         std::chrono::steady_clock::duration latency) = 0;

  // A LOOKUP of `keys` keys found the first `prefix_length` of them cached.
  virtual void OnLookup(std::uint32_t prefix_length, std::uint32_t keys) = 0;
};

}  // namespace kvdepot::daemon
