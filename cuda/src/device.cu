// Device queries, availability probe and RAII owners (see kvdepot/cuda/device.h).
// A .cu file only because GpuAvailable() probes a (trivial) kernel image.
#include "kvdepot/cuda/device.h"

#include <cstdio>
#include <string>
#include <utility>

#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {

namespace {

// Never launched: GpuAvailable() asks the runtime for its attributes, which fails with
// cudaErrorNoKernelImageForDevice (or similar) when this build has no SASS/PTX the device can run.
__global__ void ProbeKernel() {}

std::string FormatBytes(std::uint64_t bytes) {
  char buf[32];
  if (bytes >= (std::uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  } else if (bytes >= (std::uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  } else {
    std::snprintf(buf, sizeof(buf), "%llu KiB", static_cast<unsigned long long>(bytes >> 10));
  }
  return buf;
}

}  // namespace

std::string DeviceInfo::ToString() const {
  return name + " (device " + std::to_string(ordinal) + ", sm_" + std::to_string(cc_major) +
         std::to_string(cc_minor) + ", " + std::to_string(sm_count) + " SMs, " +
         FormatBytes(total_memory_bytes) + ", L2 " + FormatBytes(l2_bytes) + ", smem/block " +
         FormatBytes(max_shared_memory_per_block_optin) + ")";
}

Result<DeviceInfo> QueryDevice(int ordinal) {
  if (ordinal < 0) {
    return InvalidArgument("QueryDevice: negative device ordinal " + std::to_string(ordinal));
  }
  cudaDeviceProp prop{};
  const std::string context = "cudaGetDeviceProperties(" + std::to_string(ordinal) + ")";
  KVD_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal), context);
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.total_memory_bytes = prop.totalGlobalMem;
  info.l2_bytes = static_cast<std::uint64_t>(prop.l2CacheSize);
  info.max_shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  return Result<DeviceInfo>(std::move(info));
}

Status GpuAvailable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Whatever the runtime says (no device, no/old driver, driver/library mismatch), there is no
    // usable GPU: report it as kUnavailable with the runtime's words.
    return Unavailable(StatusFromCuda(err, "no CUDA device").message());
  }
  if (count <= 0) return Unavailable("no CUDA device: cudaGetDeviceCount returned 0 devices");
  cudaFuncAttributes attr{};
  const cudaError_t probe = cudaFuncGetAttributes(&attr, ProbeKernel);
  if (probe != cudaSuccess) {
    std::string what = "CUDA device present but kvdepot's kernels cannot run on it";
    if (Result<DeviceInfo> info = QueryDevice(0); info.ok()) what += " (" + info->ToString() + ")";
    return Unavailable(StatusFromCuda(probe, what).message());
  }
  return Status::Ok();
}

// ---- CudaMemory --------------------------------------------------------------------------------

namespace {

cudaError_t AllocateMemory(MemoryKind kind, void** ptr, std::size_t bytes) {
  return kind == MemoryKind::kDevice ? cudaMalloc(ptr, bytes) : cudaMallocHost(ptr, bytes);
}

void FreeMemory(MemoryKind kind, void* ptr) {
  if (ptr == nullptr) return;
  static_cast<void>(kind == MemoryKind::kDevice ? cudaFree(ptr) : cudaFreeHost(ptr));
}

}  // namespace

template <MemoryKind Kind>
CudaMemory<Kind>::~CudaMemory() {
  FreeMemory(Kind, data_);
}

template <MemoryKind Kind>
CudaMemory<Kind>::CudaMemory(CudaMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

template <MemoryKind Kind>
CudaMemory<Kind>& CudaMemory<Kind>::operator=(CudaMemory&& other) noexcept {
  if (this != &other) {
    FreeMemory(Kind, data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

template <MemoryKind Kind>
Result<CudaMemory<Kind>> CudaMemory<Kind>::Allocate(std::size_t bytes) {
  CudaMemory buffer;
  if (bytes == 0) return Result<CudaMemory>(std::move(buffer));
  const char* what = Kind == MemoryKind::kDevice ? "cudaMalloc(" : "cudaMallocHost(";
  KVD_CUDA_RETURN_IF_ERROR(AllocateMemory(Kind, &buffer.data_, bytes),
                           what + std::to_string(bytes) + " bytes)");
  buffer.size_ = bytes;
  return Result<CudaMemory>(std::move(buffer));
}

template class CudaMemory<MemoryKind::kDevice>;
template class CudaMemory<MemoryKind::kPinnedHost>;

// ---- Stream ------------------------------------------------------------------------------------

Stream::~Stream() {
  if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) static_cast<void>(cudaStreamDestroy(stream_));
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

Result<Stream> Stream::Create() {
  Stream stream;
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream.stream_, cudaStreamNonBlocking),
                           "cudaStreamCreateWithFlags");
  return Result<Stream>(std::move(stream));
}

Status Stream::Synchronize() const {
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return Status::Ok();
}

}  // namespace kvdepot::cuda
