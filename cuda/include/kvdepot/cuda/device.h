// CUDA device queries and move-only RAII owners of device memory, pinned host memory and streams.
//
// Usable from plain C++ (g++) and from .cu files. Every fallible call returns a Status/Result
// (via StatusFromCuda); destructors never throw and ignore errors from the free calls (a device
// that is already in an error state cannot be helped at that point).
//
// Thread-safety: the functions are thread-safe as the CUDA runtime is. A buffer or stream object
// is a value: use one object from one thread at a time. Allocations belong to the device that is
// current (cudaSetDevice) on the calling thread when Allocate/Create runs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvdepot/base/status.h"

namespace kvdepot::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;  // "NVIDIA H200"
  int sm_count = 0;  // streaming multiprocessors
  int cc_major = 0;  // compute capability, e.g. 9.0
  int cc_minor = 0;
  std::uint64_t total_memory_bytes = 0;                 // global memory
  std::uint64_t l2_bytes = 0;                           // L2 cache size
  std::uint64_t max_shared_memory_per_block_optin = 0;  // with cudaFuncAttributeMaxDynamic...

  // "NVIDIA H200 (device 0, sm_90, 132 SMs, 139.8 GiB, L2 60.0 MiB, smem/block 227 KiB)"
  std::string ToString() const;
};

// Properties of device `ordinal`. kInvalidArgument for a negative ordinal; kUnavailable when there
// is no device or driver; kDeviceError (cudaErrorInvalidDevice) for an ordinal beyond the count.
Result<DeviceInfo> QueryDevice(int ordinal = 0);

// OK when at least one CUDA device is present and can run kvdepot's kernels (the kernel image for
// device 0's architecture is loadable). Otherwise kUnavailable with a one-line reason, e.g.
// "no CUDA device: cudaErrorNoDevice: no CUDA-capable device is detected" or
// "no CUDA device: cudaErrorInsufficientDriver: CUDA driver version is insufficient ...".
// GPU tests and benchmarks call this first and skip (or exit) with the reason.
Status GpuAvailable();

enum class MemoryKind {
  kDevice,      // device (global) memory from cudaMalloc; at least 256-byte aligned
  kPinnedHost,  // page-locked host memory from cudaMallocHost (fast, truly async H2D/D2H copies)
};

// Owns one CUDA allocation of `Kind`, freed on destruction. Move-only. An empty buffer (size 0)
// holds nullptr. The memory is uninitialised.
template <MemoryKind Kind>
class CudaMemory {
 public:
  CudaMemory() = default;
  ~CudaMemory();
  CudaMemory(CudaMemory&& other) noexcept;
  CudaMemory& operator=(CudaMemory&& other) noexcept;
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;

  // kResourceExhausted when the allocation fails. bytes == 0 gives an empty buffer.
  static Result<CudaMemory> Allocate(std::size_t bytes);

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

using DeviceBuffer = CudaMemory<MemoryKind::kDevice>;
using PinnedHostBuffer = CudaMemory<MemoryKind::kPinnedHost>;
extern template class CudaMemory<MemoryKind::kDevice>;
extern template class CudaMemory<MemoryKind::kPinnedHost>;

// A non-blocking stream (cudaStreamNonBlocking: no implicit sync with the legacy default stream).
class Stream {
 public:
  Stream() = default;  // holds no stream; get() returns nullptr (the legacy default stream)
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  static Result<Stream> Create();

  cudaStream_t get() const { return stream_; }
  // Waits for all work queued on the stream; returns the first asynchronous error, if any.
  Status Synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace kvdepot::cuda
