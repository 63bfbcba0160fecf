// Drives an in-process server with fuzz input over a real socket: sends every byte, half-closes,
// reads until the server closes. Sending and receiving interleave (poll), so a server that stops
// reading until its responses are read (backpressure) cannot deadlock the driver.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvdepot/daemon/host_tier.h"

namespace kvdepot::fuzz {

// The host tier the socket targets give their server: small enough that one input (at most
// 64 KiB with the campaigns' -max_len) can fill it and reach eviction.
inline constexpr std::uint64_t kFuzzTierBytes = 32u << 10;
daemon::HostTierOptions FuzzTierOptions();

// Empties `tier` after an input, so that every input starts from the same empty store (coverage
// then follows the input, not what earlier inputs left behind). Values a connection still holds
// (the server may not have released them yet) stay.
void EmptyTier(daemon::HostTier& tier);

// A TCP connection to 127.0.0.1:`port` (TCP_NODELAY). Two failures are the harness's, not the
// listener's, and are retried with a fresh socket for up to 5 s: EADDRNOTAVAIL (every run leaves a
// TIME_WAIT entry on the client side — the client half-closes first, so the linger-0 close comes
// too late — and at hundreds of runs a second the ephemeral ports can run out for a moment) and
// EINTR (when the listener's backlog is full, as when the machine is busy, connect blocks until
// the SYN is retried, and libFuzzer's timer signal interrupts it). Any other failure is reported
// with its errno (`target` names the fuzz target) and traps.
int ConnectLoopback(std::uint16_t port, const char* target);

// Closes with RST (linger 0): thousands of runs must not fill the port range with TIME_WAIT.
void CloseWithReset(int fd);

// Returns false when the server neither read the input nor closed within `timeout`.
bool Exchange(int fd, std::span<const std::byte> input, std::chrono::milliseconds timeout,
              std::vector<std::byte>& output);

}  // namespace kvdepot::fuzz
