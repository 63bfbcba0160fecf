#include "kvdepot/client/gpu_fetch.h"

#include <cstring>
#include <utility>

#include "kvdepot/cuda/status.h"

namespace kvdepot::client {

namespace {

constexpr std::uint64_t kSlot = 4096;  // staging slots keep the containers 16-byte aligned

std::uint64_t SlotBytes(std::uint64_t n) {
  return (n + kSlot - 1) / kSlot * kSlot;
}

}  // namespace

Result<std::unique_ptr<GpuFetcher>> GpuFetcher::Open(Connection& connection,
                                                     std::uint32_t max_chunks,
                                                     std::uint32_t max_layers, int device) {
  KVD_ASSIGN_OR_RETURN(Connection::MapResult m, connection.Map());
  std::unique_ptr<GpuFetcher> f(new GpuFetcher());
  f->connection_ = &connection;
  f->info_ = m.info;
  f->max_chunks_ = max_chunks;
  if (m.host_fd >= 0) {
    KVD_ASSIGN_OR_RETURN(f->arena_, SharedArena::Adopt(std::move(m)));
  }
  const int use = device >= 0 ? device : f->info_.gpu_device;
  if (use < 0 && f->arena_ == nullptr) {
    return Unavailable("gpu fetch: the daemon shares neither a GPU pool nor a host arena");
  }
  KVD_CUDA_RETURN_IF_ERROR(cudaSetDevice(use < 0 ? 0 : use), "gpu fetch: cudaSetDevice");
  if (f->info_.gpu_pool_bytes > 0) {
    cuda::IpcHandle handle;
    static_assert(sizeof(handle) == sizeof(f->info_.ipc_handle));
    std::memcpy(handle.data(), f->info_.ipc_handle.data(), handle.size());
    KVD_ASSIGN_OR_RETURN(f->pool_, cuda::IpcMapping::Open(use, handle));
  }
  KVD_ASSIGN_OR_RETURN(f->decoder_, cuda::LeasedDecoder::Create(max_chunks, max_layers));
  return f;
}

GpuFetcher::~GpuFetcher() = default;

Result<HeldChunks> GpuFetcher::Lease(std::span<const std::string> keys, cudaStream_t stream) {
  if (keys.empty() || keys.size() > max_chunks_) {
    return InvalidArgument("gpu fetch: " + std::to_string(keys.size()) +
                           " keys, the fetcher takes 1 to " + std::to_string(max_chunks_));
  }
  KVD_ASSIGN_OR_RETURN(std::vector<protocol::Lease> leases, connection_->LeaseGet(keys));
  HeldChunks held;
  held.status.resize(keys.size(), StatusCode::kOk);
  std::uint64_t staged_bytes = 0;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    if (leases[i].status != StatusCode::kOk) {
      held.status[i] = leases[i].status;
      continue;
    }
    held.key_index.push_back(i);
    held.leases.push_back(leases[i]);
    if (leases[i].tier == protocol::Tier::kHost) staged_bytes += SlotBytes(leases[i].length);
  }
  // From here on the leases are released on any error.
  auto fail = [&](Status s) -> Status {
    (void)Release(held);
    return s;
  };
  if (staged_bytes > 0) {
    held.staging = std::make_shared<cuda::DeviceBuffer>();
    auto buffer = cuda::DeviceBuffer::Allocate(staged_bytes);
    if (!buffer.ok()) return fail(buffer.status());
    *held.staging = std::move(*buffer);
  }
  std::vector<cuda::DeviceContainer> containers;
  std::uint64_t staged_at = 0;
  for (const protocol::Lease& l : held.leases) {
    if (l.tier == protocol::Tier::kGpu) {
      if (pool_.base() == nullptr || l.offset > info_.gpu_pool_bytes ||
          l.length > info_.gpu_pool_bytes - l.offset) {
        return fail(OutOfRange("gpu fetch: GPU lease [" + std::to_string(l.offset) + ", +" +
                               std::to_string(l.length) + ") lies outside the pool of " +
                               std::to_string(info_.gpu_pool_bytes) + " bytes"));
      }
      containers.push_back({pool_.base() + l.offset, l.length});
      ++stats_.leased_gpu;
      continue;
    }
    if (arena_ == nullptr) return fail(Corruption("gpu fetch: a host lease without an arena"));
    auto bytes = arena_->View(l);
    if (!bytes.ok()) return fail(bytes.status());
    std::byte* dst = held.staging->as<std::byte>() + staged_at;
    const cudaError_t err =
        cudaMemcpyAsync(dst, bytes->data(), bytes->size(), cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) return fail(cuda::StatusFromCuda(err, "gpu fetch: staging copy"));
    containers.push_back({dst, l.length});
    staged_at += SlotBytes(l.length);
    stats_.staged_bytes += l.length;
    ++stats_.leased_host;
  }
  std::size_t failed = 0;
  auto chunks = cuda::InspectLeasedChunks(containers, stream, &failed);  // syncs the copies too
  if (!chunks.ok()) {
    const std::string key = failed < held.key_index.size() ? keys[held.key_index[failed]] : "?";
    return fail(Status(chunks.status().code(),
                       "gpu fetch: key '" + key + "': " + chunks.status().message()));
  }
  held.chunks = std::move(*chunks);
  return held;
}

Status GpuFetcher::Decode(const HeldChunks& held, const cuda::CacheGenDecodeTarget& target,
                          cudaStream_t stream) {
  if (held.chunks.empty()) return InvalidArgument("gpu fetch: no held chunks to decode");
  return decoder_.Decode(held.chunks, target, stream);
}

Status GpuFetcher::Release(HeldChunks& held) {
  std::vector<std::uint64_t> ids;
  for (const protocol::Lease& l : held.leases) ids.push_back(l.lease_id);
  held.leases.clear();
  held.chunks.clear();
  held.key_index.clear();
  if (ids.empty()) return Status::Ok();
  KVD_ASSIGN_OR_RETURN(const std::vector<StatusCode> codes, connection_->Release(ids));
  for (StatusCode c : codes) {
    if (c != StatusCode::kOk) return Corruption("gpu fetch: the daemon did not hold a lease");
  }
  return Status::Ok();
}

}  // namespace kvdepot::client
