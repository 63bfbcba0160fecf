// DeviceTier over kvdepot::cuda::GpuTier (built only with CUDA: KVDEPOT_WITH_CUDA). Promotions
// (second host hit), fetches back to host memory and evictions to host run on one worker thread,
// never on an I/O thread.
#pragma once

#include <memory>

#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/store.h"

namespace kvdepot::daemon {

struct GpuDeviceTierOptions {
  int device = 0;
  std::uint64_t capacity = 0;
};

// kUnavailable (with the reason) when there is no usable GPU; kResourceExhausted when the pool
// cannot be allocated. `host` must outlive the tier (evicted entries go back to it).
Result<std::unique_ptr<DeviceTier>> CreateGpuDeviceTier(const GpuDeviceTierOptions& options,
                                                        HostTier& host);
// "NVIDIA H200 (device 0, ...)" or the reason there is none.
std::string DescribeGpu(int device);

}  // namespace kvdepot::daemon
