// What the hack attention kernels (hack_attention.cu, hack_decode_fp16.cu, hack_prefill_fp16.cu)
// and their host side (hack_attention_api.cc) agree on beyond HackAttentionParams (kvdepot/cuda/
// hack.h): the block the kernels take, the tile and split bounds, the error word's kinds, and the
// layout of a HackAttentionWorkspace's device buffer. Internal (not installed); host and device
// code alike, no CUDA headers needed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvdepot::cuda::internal {

// Tokens per quantized block: the one HACK partition the GPU kernels take (the others are
// rejected as Unimplemented by hack_attention_api.cc's CheckKv).
inline constexpr std::uint32_t kP = 64;
// Query-head rows of a decode tile (a query token's group of query heads: 1..8) and of the
// homomorphic kernels' prefill tiles (8 / group query tokens).
inline constexpr std::uint32_t kRows = 8;
// Splits of one (tile, KV head) at most: the split merge's shared arrays are sized by it.
inline constexpr std::uint32_t kMaxSplits = 16;
// Warps of a homomorphic attention CTA at most (its launch bound and shared-memory opt-in).
inline constexpr std::uint32_t kHomomorphicMaxWarps = 16;

// The error word: ~0 when no error, else the smallest key reported in the call, (sequence << 8) |
// kind. FinishHackAttention turns a key into its message (hack_attention_api.cc, ErrorMessage).
enum AttnError : std::uint32_t {
  kErrTokens = 1,   // tokens outside [1, max_tokens]
  kErrSinks = 2,    // sinks > tokens
  kErrSection = 3,  // a quantized block but a null or misaligned codes / scales / sums pointer
  kErrTail = 4,     // unquantized tokens but a null or misaligned tail pointer
  kErrPage = 5,     // block table entry outside [0, num_pages)
  kErrArch = 6,     // fp16 prefill, head_dim 128: a compute-capability-9.0 device, no sm_90a SASS
};

// A workspace's device buffer: the error word at kErrorOffset, the split arrival counters (one
// unsigned per (tile, KV head) pair, at most the workspace's max_counters) at kCountersOffset, and
// the split partials after them, 256-byte aligned.
inline constexpr std::size_t kErrorOffset = 0;
inline constexpr std::size_t kCountersOffset = 256;
constexpr std::size_t PartialsOffset(std::uint32_t max_counters) {
  return (kCountersOffset + max_counters * sizeof(unsigned int) + 255) & ~std::size_t{255};
}

}  // namespace kvdepot::cuda::internal
