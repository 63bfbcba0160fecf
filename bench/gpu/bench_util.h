// Timing helpers shared by the GPU benchmarks: cudaEvent intervals around one operation, the
// median of the timed repetitions, the D2D-copy ceiling, buffer-set counts that defeat L2, and
// JSON string escaping.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/status.h"
#include "kvdepot/status.h"

namespace kvdepot::cuda::bench {

class EventPair {
 public:
  EventPair() = default;
  ~EventPair() {
    if (start_ != nullptr) static_cast<void>(cudaEventDestroy(start_));
    if (stop_ != nullptr) static_cast<void>(cudaEventDestroy(stop_));
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  Status Init() {
    KVD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_), "cudaEventCreate");
    KVD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_), "cudaEventCreate");
    return Status::Ok();
  }
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Times `op(set)` (which enqueues on `stream`) and then `finish()` (which synchronises),
// opt.warmup + opt.reps times, rotating over `sets` input sets; returns the timed reps in µs.
// `Opts` is any struct with int `warmup` and `reps`.
template <typename Opts, typename Op, typename Finish>
Result<std::vector<double>> Time(const Opts& opt, int sets, cudaStream_t stream, Op op,
                                 Finish finish) {
  EventPair ev;
  KVD_RETURN_IF_ERROR(ev.Init());
  std::vector<double> us;
  for (int rep = 0; rep < opt.warmup + opt.reps; ++rep) {
    KVD_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.start(), stream), "cudaEventRecord");
    KVD_RETURN_IF_ERROR(op(rep % sets));
    KVD_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.stop(), stream), "cudaEventRecord");
    KVD_RETURN_IF_ERROR(finish());
    float ms = 0;
    KVD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, ev.start(), ev.stop()),
                             "cudaEventElapsedTime");
    if (rep >= opt.warmup) us.push_back(static_cast<double>(ms) * 1000.0);
  }
  return us;
}

// The ceiling: GB/s of a 256 MiB device-to-device copy, counting bytes read plus written.
template <typename Opts>
Result<double> MeasureD2d(cudaStream_t stream, const Opts& opt) {
  const std::size_t bytes = std::size_t{256} << 20;
  KVD_ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::Allocate(bytes));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(bytes));
  KVD_CUDA_RETURN_IF_ERROR(cudaMemset(a.data(), 1, bytes), "cudaMemset");
  KVD_ASSIGN_OR_RETURN(
      std::vector<double> us,
      Time(
          opt, 1, stream,
          [&](int) -> Status {
            KVD_CUDA_RETURN_IF_ERROR(
                cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream),
                "d2d");
            return Status::Ok();
          },
          [&]() -> Status {
            KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "sync");
            return Status::Ok();
          }));
  return 2.0 * static_cast<double>(bytes) / (Median(us) * 1e3);
}

// How many distinct input sets of `bytes_per_set` rotate through three times the L2 (at least 2).
inline int SetsFor(std::uint64_t bytes_per_set, std::uint64_t l2) {
  return static_cast<int>(std::max<std::uint64_t>(2, (3 * l2 + bytes_per_set - 1) / bytes_per_set));
}

inline std::string JsonEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

}  // namespace kvdepot::cuda::bench
