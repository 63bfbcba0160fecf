// Internal helpers shared by kvdepot_cuda's kernel launchers (not installed, not public API).
// Included from .cu files only (uses the C++ templates of cuda_runtime.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace kvdepot::cuda::internal {

// Number of blocks for a grid-stride `kernel` over `work_items` (one item per thread per
// iteration): as many blocks as can be resident at once on the current device (SM count x the
// kernel's occupancy at `threads_per_block` and `dynamic_smem` bytes), fewer when there is less
// work, at least 1. Sizing by real occupancy avoids a second, partly empty wave of blocks.
template <typename Kernel>
cudaError_t GridStrideBlocks(Kernel kernel, std::uint64_t work_items, int threads_per_block,
                             std::size_t dynamic_smem, unsigned* blocks) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  int sm_count = 0;
  err = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads_per_block,
                                                      dynamic_smem);
  if (err != cudaSuccess) return err;
  const std::uint64_t resident = static_cast<std::uint64_t>(std::max(sm_count, 1)) *
                                 static_cast<std::uint64_t>(std::max(per_sm, 1));
  const auto threads = static_cast<std::uint64_t>(threads_per_block);
  const std::uint64_t needed = (work_items + threads - 1) / threads;
  *blocks = static_cast<unsigned>(std::max<std::uint64_t>(1, std::min(resident, needed)));
  return cudaSuccess;
}

}  // namespace kvdepot::cuda::internal
