#include "gpu_device_tier.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/gpu_tier.h"

namespace kvdepot::daemon {
namespace {

class GpuDeviceTier final : public DeviceTier {
 public:
  GpuDeviceTier(std::unique_ptr<cuda::GpuTier> tier, HostTier& host)
      : tier_(std::move(tier)), host_(host), worker_([this] { Run(); }) {}

  ~GpuDeviceTier() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  bool Contains(std::string_view key) const override { return tier_->Contains(key); }

  void OnHostHit(std::string_view key, const ValueRef& value) override {
    if (!tier_->RecordHostHit(key)) return;
    Post([this, k = std::string(key), value] {
      (void)tier_->Insert(k, value->bytes(), [this](std::string_view evicted, cuda::GpuBlockRef b) {
        EvictToHost(evicted, std::move(b));
      });
    });
  }

  bool FetchToHost(std::string_view key, Allocator allocate,
                   std::function<void(Result<ValueRef>)> done) override {
    if (!tier_->Contains(key)) return false;
    Post(
        [this, k = std::string(key), allocate = std::move(allocate), done = std::move(done)] {
          cuda::GpuBlockRef block = tier_->Get(k);
          if (!block) return done(NotFound("key not found"));
          auto value = allocate(block->length());
          if (!value.ok()) return done(value.status());
          if (Status s = tier_->CopyToHost(*block, (*value)->mutable_bytes()); !s.ok())
            return done(s);
          done(ValueRef(std::move(*value)));
        },
        /*droppable=*/false);
    return true;
  }

  std::optional<DeviceLease> Lease(std::string_view key) override {
    cuda::GpuBlockRef block = tier_->Get(key);
    if (!block) return std::nullopt;
    DeviceLease l;
    l.offset = block->offset();
    l.length = block->length();
    l.hold = std::move(block);
    return l;
  }

  bool Erase(std::string_view key) override { return tier_->Erase(key); }

  DevicePool Pool() const override {
    DevicePool p;
    p.bytes = tier_->pool().size();
    p.device = tier_->pool().device();
    p.ipc_handle = tier_->pool().ipc_handle();  // same size: a compile error otherwise
    return p;
  }

  DeviceTierStats stats() const override {
    const cuda::GpuTierStats g = tier_->stats();
    DeviceTierStats s;
    s.bytes = g.bytes;
    s.capacity = g.capacity;
    s.chunks = g.chunks;
    s.hits = g.hits;
    s.misses = g.misses;
    s.evictions = g.evictions;
    s.promotions = g.promotions;
    s.rejected = g.rejected;
    s.device = tier_->pool().device();
    return s;
  }

 private:
  // An entry leaving the pool goes back to the host tier when the host no longer has it.
  void EvictToHost(std::string_view key, cuda::GpuBlockRef block) {
    if (host_.Contains(key)) return;
    auto value = host_.Allocate(key, block->length());
    if (!value.ok()) return;  // no host room: dropped (a cache; the SSD tier may still have it)
    if (!tier_->CopyToHost(*block, (*value)->mutable_bytes()).ok()) return;
    host_.InsertIfAbsent(key, std::move(*value));
  }

  // Promotions are best effort (dropped beyond 1024 queued); fetches always queue (each answers
  // a GET, and a connection has at most 16 GETs outstanding).
  void Post(std::function<void()> job, bool droppable = true) {
    {
      std::lock_guard lock(mu_);
      if (droppable && jobs_.size() >= 1024) return;
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

  void Run() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::unique_ptr<cuda::GpuTier> tier_;
  HostTier& host_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace

Result<std::unique_ptr<DeviceTier>> CreateGpuDeviceTier(const GpuDeviceTierOptions& options,
                                                        HostTier& host) {
  cuda::GpuTierOptions o;
  o.device = options.device;
  o.capacity = options.capacity;
  KVD_ASSIGN_OR_RETURN(auto tier, cuda::GpuTier::Create(o));
  return std::unique_ptr<DeviceTier>(new GpuDeviceTier(std::move(tier), host));
}

std::string DescribeGpu(int device) {
  auto info = cuda::QueryDevice(device);
  return info.ok() ? info->ToString() : info.status().message();
}

}  // namespace kvdepot::daemon
