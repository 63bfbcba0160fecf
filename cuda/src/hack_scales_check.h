// The device half of InspectLeasedChunks' HACK checks (cuda/src/leased.cc): the scales sections
// are checked where they lie instead of being copied to the host (about 1 MiB per Llama-8B chunk).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvdepot::cuda::internal {

// One container's scales section in device memory: `entries` 4-byte entries (fp16 scale, fp16
// min, little-endian), 4-byte aligned.
struct HackScalesSpan {
  const std::uint32_t* entries = nullptr;
  std::uint64_t count = 0;
};

// Enqueues the check of every entry of `spans[0, n)` (a device array) with InspectHack's rule
// (codec/hack.h: scale non-negative with its sign bit clear, scale and min finite, min + 3 * scale
// < 65520 in float, each operation rounded): for each bad entry, atomically lowers `*first_bad`
// (device memory, which the caller initialises to ~0) to (span << 32) | entry, so it ends as the
// first bad entry of the first span that has one. `max_count` is the largest span's count.
cudaError_t LaunchCheckHackScales(const HackScalesSpan* spans, std::uint32_t n,
                                  std::uint64_t max_count, unsigned long long* first_bad,
                                  cudaStream_t stream);

}  // namespace kvdepot::cuda::internal
