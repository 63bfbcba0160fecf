#include "kvdepot/daemon/transcoder.h"

#include <algorithm>

namespace kvdepot::daemon {

Transcoder::Transcoder(std::uint32_t threads, TranscoderHooks hooks) : hooks_(std::move(hooks)) {
  for (std::uint32_t i = 0; i < std::max<std::uint32_t>(threads, 1); ++i) {
    threads_.emplace_back([this] { Run(); });
  }
}

Transcoder::~Transcoder() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void Transcoder::Submit(ValueRef value, CodecId target, Done done) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back({std::move(value), target, std::move(done)});
  }
  cv_.notify_one();
}

void Transcoder::Run() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and every queued job is done
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Work(job);
  }
}

void Transcoder::Work(Job& job) {
  const std::span<const std::byte> bytes = job.value->bytes();
  TranscodeTimings timings;
  std::string_view device = "cpu";
  Result<std::vector<std::byte>> out = Unavailable("no transcoder ran");
  if (hooks_.device_transcode) {
    out = hooks_.device_transcode(bytes, job.target, &timings);
    device = hooks_.device_name;
    // A device that fails (as opposed to bad input) falls back to the CPU reference.
    if (!out.ok() && (out.status().code() == StatusCode::kDeviceError ||
                      out.status().code() == StatusCode::kUnavailable ||
                      out.status().code() == StatusCode::kResourceExhausted)) {
      device = "cpu";
      out = TranscodeChunk(bytes, job.target, {}, &timings);
    }
  } else {
    out = TranscodeChunk(bytes, job.target, {}, &timings);
  }
  if (out.ok() && hooks_.observe) hooks_.observe(timings, job.target, device);
  job.value.reset();
  job.done(std::move(out));
}

}  // namespace kvdepot::daemon
