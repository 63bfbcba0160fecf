// Transcoder: a small pool of worker threads that re-encode stored chunks for GET_AS (never on an
// Asio I/O thread). Each job uses the device function when one is set (the CUDA kernels on the
// daemon's GPU) and the CPU references (kvdepot::TranscodeChunk) otherwise, or when the device
// function fails with a device error.
//
// Thread-safety: Submit may be called from any thread. The destructor finishes the queued jobs
// (their callbacks run) and joins the workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvdepot/codec/transcode.h"
#include "kvdepot/daemon/host_tier.h"

namespace kvdepot::daemon {

struct TranscoderHooks {
  // The GPU path: same contract (and bytes) as kvdepot::TranscodeChunk. Empty: CPU only.
  std::function<Result<std::vector<std::byte>>(std::span<const std::byte>, CodecId,
                                               TranscodeTimings*)>
      device_transcode;
  std::string device_name = "cpu";  // the metrics' device label of device_transcode
  // Called after each successful transcode with its timings, the target codec and the device
  // label that did it ("cpu" or device_name); feeds Metrics::ObserveCodec.
  std::function<void(const TranscodeTimings&, CodecId target, std::string_view device)> observe;
};

class Transcoder {
 public:
  using Done = std::function<void(Result<std::vector<std::byte>>)>;

  Transcoder(std::uint32_t threads, TranscoderHooks hooks);
  ~Transcoder();
  Transcoder(const Transcoder&) = delete;
  Transcoder& operator=(const Transcoder&) = delete;

  // Queues the re-encoding of `value` (a container) into `target`; `done` runs on a worker.
  void Submit(ValueRef value, CodecId target, Done done);

 private:
  struct Job {
    ValueRef value;
    CodecId target;
    Done done;
  };
  void Run();
  void Work(Job& job);

  TranscoderHooks hooks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvdepot::daemon
