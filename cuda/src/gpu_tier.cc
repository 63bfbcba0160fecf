#include "kvdepot/cuda/gpu_tier.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kvdepot/codec/container.h"
#include "kvdepot/cuda/cachegen.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/hack.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {
// ---- DevicePool ---------------------------------------------------------------------------------

Result<std::unique_ptr<DevicePool>> DevicePool::Create(int device, std::uint64_t bytes) {
  KVD_RETURN_IF_ERROR(GpuAvailable());
  const std::uint64_t size = (bytes + kGranularity - 1) / kGranularity * kGranularity;
  std::unique_ptr<DevicePool> p(new DevicePool());
  KVD_ASSIGN_OR_RETURN(p->alloc_, RangeAllocator::Create(size, kGranularity));
  KVD_CUDA_RETURN_IF_ERROR(cudaSetDevice(device),
                           "gpu pool: cudaSetDevice(" + std::to_string(device) + ")");
  void* base = nullptr;
  KVD_CUDA_RETURN_IF_ERROR(cudaMalloc(&base, size),
                           "gpu pool: cudaMalloc of " + std::to_string(size) + " bytes");
  p->base_ = static_cast<std::byte*>(base);
  p->size_ = size;
  p->device_ = device;
  cudaIpcMemHandle_t h;
  KVD_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&h, base), "gpu pool: cudaIpcGetMemHandle");
  std::memcpy(p->handle_.data(), &h, sizeof(h));
  return p;
}

DevicePool::~DevicePool() {
  if (base_ != nullptr) {
    cudaSetDevice(device_);
    cudaFree(base_);
  }
}

// ---- IpcMapping ---------------------------------------------------------------------------------

Result<IpcMapping> IpcMapping::Open(int device, const IpcHandle& handle) {
  KVD_CUDA_RETURN_IF_ERROR(cudaSetDevice(device),
                           "ipc: cudaSetDevice(" + std::to_string(device) + ")");
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* p = nullptr;
  KVD_CUDA_RETURN_IF_ERROR(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
                           "ipc: cudaIpcOpenMemHandle");
  IpcMapping m;
  m.base_ = static_cast<std::byte*>(p);
  return m;
}

IpcMapping::~IpcMapping() {
  if (base_ != nullptr) cudaIpcCloseMemHandle(base_);
}

IpcMapping::IpcMapping(IpcMapping&& other) noexcept : base_(other.base_) {
  other.base_ = nullptr;
}

IpcMapping& IpcMapping::operator=(IpcMapping&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) cudaIpcCloseMemHandle(base_);
    base_ = other.base_;
    other.base_ = nullptr;
  }
  return *this;
}

// ---- GpuTier ------------------------------------------------------------------------------------

Result<std::unique_ptr<GpuTier>> GpuTier::Create(const GpuTierOptions& options) {
  std::unique_ptr<GpuTier> t(new GpuTier());
  t->options_ = options;
  KVD_ASSIGN_OR_RETURN(t->pool_, DevicePool::Create(options.device, options.capacity));
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&t->stream_, cudaStreamNonBlocking),
                           "gpu tier: cudaStreamCreate");
  return t;
}

GpuTier::~GpuTier() {
  {
    std::lock_guard lock(mu_);
    index_.clear();  // blocks still leased keep the pool's allocator alive only until here
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

bool GpuTier::RecordHostHit(std::string_view key) {
  std::lock_guard lock(mu_);
  if (index_.count(std::string(key)) != 0) return false;
  if (host_hits_.size() > 1'000'000) host_hits_.clear();  // bounded memory; counts restart
  return ++host_hits_[std::string(key)] == options_.promote_after_hits;
}

Status GpuTier::Insert(std::string_view key, std::span<const std::byte> bytes,
                       const EvictFn& on_evict) {
  RangeAllocator& alloc = pool_->allocator();
  if (bytes.empty() || alloc.RoundUp(bytes.size()) > alloc.capacity()) {
    std::lock_guard lock(mu_);
    ++rejected_;
    return OutOfRange("gpu tier: a value of " + std::to_string(bytes.size()) +
                      " bytes can never fit the pool of " + std::to_string(alloc.capacity()));
  }
  std::optional<std::uint64_t> offset;
  while (!(offset = alloc.Allocate(bytes.size()))) {
    std::string victim_key;
    GpuBlockRef victim;
    {
      std::lock_guard lock(mu_);
      if (lru_.empty()) {
        ++rejected_;
        return ResourceExhausted("gpu tier: no room for " + std::to_string(bytes.size()) +
                                 " bytes: the rest of the pool is leased");
      }
      victim_key = lru_.back();
      auto it = index_.find(victim_key);
      victim = std::move(it->second.block);
      index_.erase(it);
      lru_.pop_back();
      ++evictions_;
    }
    if (on_evict) on_evict(victim_key, std::move(victim));  // frees the range unless leased
  }
  auto block = std::make_shared<const GpuBlock>(pool_.get(), *offset, bytes.size());
  {
    std::lock_guard copy(copy_mu_);
    KVD_CUDA_RETURN_IF_ERROR(cudaSetDevice(pool_->device()), "gpu tier: cudaSetDevice");
    KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pool_->base() + *offset, bytes.data(), bytes.size(),
                                             cudaMemcpyHostToDevice, stream_),
                             "gpu tier: upload");
    KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "gpu tier: upload");
  }
  GpuBlockRef old;  // released after the lock
  std::lock_guard lock(mu_);
  auto it = index_.find(std::string(key));
  if (it != index_.end()) {
    old = std::move(it->second.block);
    lru_.erase(it->second.pos);
    index_.erase(it);
  }
  lru_.emplace_front(key);
  index_.emplace(std::string(key), Entry{std::move(block), lru_.begin()});
  host_hits_.erase(std::string(key));
  ++promotions_;
  return Status::Ok();
}

GpuBlockRef GpuTier::Get(std::string_view key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(std::string(key));
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second.pos);
  return it->second.block;
}

bool GpuTier::Contains(std::string_view key) const {
  std::lock_guard lock(mu_);
  return index_.count(std::string(key)) != 0;
}

bool GpuTier::Erase(std::string_view key) {
  GpuBlockRef old;
  std::lock_guard lock(mu_);
  auto it = index_.find(std::string(key));
  if (it == index_.end()) return false;
  old = std::move(it->second.block);
  lru_.erase(it->second.pos);
  index_.erase(it);
  return true;
}

Status GpuTier::CopyToHost(const GpuBlock& block, std::span<std::byte> out) {
  if (out.size() != block.length()) return InvalidArgument("gpu tier: CopyToHost size mismatch");
  std::lock_guard copy(copy_mu_);
  KVD_CUDA_RETURN_IF_ERROR(cudaSetDevice(pool_->device()), "gpu tier: cudaSetDevice");
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(out.data(), block.data(), out.size(), cudaMemcpyDeviceToHost, stream_),
      "gpu tier: download");
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "gpu tier: download");
  return Status::Ok();
}

GpuTierStats GpuTier::stats() const {
  GpuTierStats s;
  const RangeAllocatorStats a = pool_->allocator().stats();
  s.bytes = a.used;
  s.capacity = a.capacity;
  std::lock_guard lock(mu_);
  s.chunks = index_.size();
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  s.promotions = promotions_;
  s.rejected = rejected_;
  return s;
}

// ---- transcoding --------------------------------------------------------------------------------

Result<std::vector<std::byte>> TranscodeGpu(std::span<const std::byte> container, CodecId target,
                                            const EncodeOptions& options,
                                            TranscodeTimings* timings) {
  const auto decode = [](const ContainerView& view,
                         std::span<const std::byte> bytes) -> Result<KvTensor> {
    switch (view.header.codec) {
      case CodecId::kCacheGen: return DecodeCacheGenGpu(bytes);
      case CodecId::kHackInt2: return DecodeHackGpu(bytes, view.header.dtype);
      case CodecId::kRaw: return DecodeChunk(view);  // a copy: no kernel needed
    }
    return InvalidArgument("TranscodeGpu: unknown codec");
  };
  const auto encode = [&options,
                       target](const KvTensorView& tensor) -> Result<std::vector<std::byte>> {
    switch (target) {
      case CodecId::kCacheGen: return EncodeCacheGenGpu(tensor, options.cachegen);
      case CodecId::kHackInt2: return EncodeHackGpu(tensor, options.hack);
      case CodecId::kRaw: {
        EncodeOptions o = options;
        o.codec = CodecId::kRaw;
        return EncodeChunk(tensor, o);
      }
    }
    return InvalidArgument("TranscodeGpu: unknown target codec");
  };
  return TranscodeWith(container, target, decode, encode, timings);
}

}  // namespace kvdepot::cuda
