// Helpers shared by the GPU benchmarks: the common flags and start-up, cudaEvent intervals around
// one operation, the median of the timed repetitions, the D2D-copy ceiling, buffer-set counts that
// defeat L2, and JSON string escaping.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda::bench {

// The flags every GPU benchmark takes: --json FILE, --reps N (>= 50), --warmup N (>= 1),
// --device N.
struct CommonOptions {
  std::string json_path;
  int reps = 100;
  int warmup = 5;
  int device = 0;
};

// One pass over argv. `extra(flag, value)` takes a benchmark's own flags (value: the next
// argument, null when there is none; it returns false for a flag it does not know or a bad
// value); the common ones are handled here. False on any bad flag or value.
template <typename Extra>
bool ParseArgs(int argc, char** argv, CommonOptions& common, Extra extra) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (value != nullptr && flag == "--json") {
      common.json_path = value;
    } else if (value != nullptr && flag == "--reps") {
      common.reps = std::atoi(value);
    } else if (value != nullptr && flag == "--warmup") {
      common.warmup = std::atoi(value);
    } else if (value != nullptr && flag == "--device") {
      common.device = std::atoi(value);
    } else if (!extra(flag, value)) {
      return false;
    }
    ++i;  // every flag takes one value
  }
  return common.reps >= 50 && common.warmup >= 1 && common.device >= 0;
}

// "1,8,32" -> {1, 8, 32}, each in [lo, hi]; false when empty or out of range.
inline bool ParseUintList(const char* value, std::vector<std::uint32_t>& out, long lo, long hi) {
  out.clear();
  std::stringstream ss(value);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const long v = std::strtol(part.c_str(), nullptr, 10);
    if (v < lo || v > hi) return false;
    out.push_back(static_cast<std::uint32_t>(v));
  }
  return !out.empty();
}

// What every benchmark needs before measuring: a GPU (exit status 2 without one), the device
// selected and described, a stream, and the JSON file when asked for. Prints the reason of a
// failure prefixed with `name`; returns 0 or the exit status.
struct BenchStart {
  DeviceInfo info;
  Stream stream;
  std::FILE* json = nullptr;  // owned; null without --json
  ~BenchStart() {
    if (json != nullptr) std::fclose(json);
  }
};
// Closes the JSON file (a failure means it may be incomplete); returns `rc`, or 1 on failure.
inline int CloseJson(const char* name, const CommonOptions& o, BenchStart& b, int rc) {
  if (b.json == nullptr) return rc;
  const int closed = std::fclose(b.json);
  b.json = nullptr;
  if (closed == 0) return rc;
  std::fprintf(stderr, "%s: %s\n", name,
               StatusFromErrno(errno, "close " + o.json_path).ToString().c_str());
  return 1;
}

inline int StartBench(const char* name, const CommonOptions& o, BenchStart& out) {
  if (const Status gpu = GpuAvailable(); !gpu.ok()) {
    std::fprintf(stderr, "%s: no GPU: %s\n", name, gpu.message().c_str());
    return 2;
  }
  Status s = StatusFromCuda(cudaSetDevice(o.device), "cudaSetDevice");
  if (s.ok()) {
    Result<DeviceInfo> info = QueryDevice(o.device);
    Result<Stream> stream = Stream::Create();
    s = !info.ok() ? info.status() : stream.status();
    if (s.ok()) {
      out.info = std::move(*info);
      out.stream = std::move(*stream);
    }
  }
  if (s.ok() && !o.json_path.empty()) {
    out.json = std::fopen(o.json_path.c_str(), "w");
    if (out.json == nullptr) s = StatusFromErrno(errno, "open " + o.json_path);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, s.ToString().c_str());
    return 1;
  }
  std::printf("device: %s\n", out.info.ToString().c_str());
  return 0;
}

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

// Owns a captured CUDA graph and its executable instance.
class Graph {
 public:
  Graph() = default;
  ~Graph() {
    if (exec_ != nullptr) static_cast<void>(cudaGraphExecDestroy(exec_));
    if (graph_ != nullptr) static_cast<void>(cudaGraphDestroy(graph_));
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // Captures what `enqueue()` puts on `stream` (nothing may synchronise inside it) and
  // instantiates it.
  template <typename Enqueue>
  Status Capture(cudaStream_t stream, Enqueue enqueue) {
    KVD_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                             "cudaStreamBeginCapture");
    const Status enqueued = enqueue();
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph_);
    KVD_RETURN_IF_ERROR(enqueued);
    KVD_CUDA_RETURN_IF_ERROR(ended, "cudaStreamEndCapture");
    KVD_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
    return Status::Ok();
  }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Times replays of `graph` on `stream` (opt.warmup untimed, then opt.reps timed, each followed by
// `finish()`, which synchronises); returns the timed replays in µs.
template <typename Opts, typename Finish>
Result<std::vector<double>> TimeGraph(const Opts& opt, const Graph& graph, cudaStream_t stream,
                                      Finish finish) {
  return Time(
      opt, 1, stream,
      [&](int) -> Status {
        KVD_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph.exec(), stream), "cudaGraphLaunch");
        return Status::Ok();
      },
      finish);
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
