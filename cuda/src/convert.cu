// Kernel family "convert" (see kvdepot/cuda/convert.h): params -> kernel -> launcher ->
// dispatcher. Six instantiations, one per ordered pair of distinct dtypes.
#include "kvdepot/cuda/convert.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "kvdepot/codec/numeric.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/status.h"
#include "launch.h"

namespace kvdepot::cuda {

namespace {

constexpr int kThreads = 256;  // threads per block (grid: as many blocks as are resident)
constexpr int kVecElems = 8;   // elements per vector step: 16 B of fp16/bf16, 32 B of fp32
constexpr int kUnroll = 2;     // vector steps in flight per thread (more bytes in flight)

// Raw storage of one element: the kernel moves bits, never does float arithmetic.
template <DType D>
struct Storage {
  using type = std::uint16_t;  // fp16, bf16
};
template <>
struct Storage<DType::kFloat32> {
  using type = std::uint32_t;
};
template <DType D>
using StorageT = typename Storage<D>::type;

// One element, exactly as the CPU's ConvertDType does it: source bits -> float -> target bits.
template <DType From, DType To>
KVD_HOST_DEVICE StorageT<To> ConvertElement(StorageT<From> x) {
  float f;
  if constexpr (From == DType::kFloat16) {
    f = HalfBitsToFloat(x);
  } else if constexpr (From == DType::kBFloat16) {
    f = Bf16BitsToFloat(x);
  } else {
    f = BitsToFloat(x);
  }
  if constexpr (To == DType::kFloat16) {
    return FloatToHalfBits(f);
  } else if constexpr (To == DType::kBFloat16) {
    return FloatToBf16Bits(f);
  } else {
    return FloatBits(f);
  }
}

// How [0, count) splits into a scalar head (until src is 16-byte aligned), a vector body of
// vec_steps * kVecElems elements, and a scalar tail [body_end, count). When dst is not 16-byte
// aligned at the end of the head, there is no body: everything is scalar.
struct ConvertPlan {
  std::uint64_t head;
  std::uint64_t vec_steps;
  std::uint64_t body_end;
};

template <DType From, DType To>
KVD_HOST_DEVICE ConvertPlan MakePlan(const ConvertParams& p) {
  constexpr std::uint64_t kSrcSize = sizeof(StorageT<From>);
  constexpr std::uint64_t kDstSize = sizeof(StorageT<To>);
  const auto src_addr = reinterpret_cast<std::uintptr_t>(p.src);
  const auto dst_addr = reinterpret_cast<std::uintptr_t>(p.dst);
  std::uint64_t head = ((16u - (src_addr & 15u)) & 15u) / kSrcSize;
  if (head > p.count) head = p.count;
  const bool dst_aligned = ((dst_addr + head * kDstSize) & 15u) == 0;
  const std::uint64_t vec_steps = dst_aligned ? (p.count - head) / kVecElems : 0;
  return {head, vec_steps, head + vec_steps * kVecElems};
}

template <DType From, DType To>
__global__ void __launch_bounds__(kThreads) ConvertKernel(const ConvertParams p) {
  using Src = StorageT<From>;
  using Dst = StorageT<To>;
  constexpr int kSrcVecs = kVecElems * static_cast<int>(sizeof(Src)) / 16;  // uint4 per step
  constexpr int kDstVecs = kVecElems * static_cast<int>(sizeof(Dst)) / 16;
  static_assert(kSrcVecs >= 1 && kDstVecs >= 1);

  const Src* __restrict__ src = static_cast<const Src*>(p.src);
  Dst* __restrict__ dst = static_cast<Dst*>(p.dst);
  const ConvertPlan plan = MakePlan<From, To>(p);
  const std::uint64_t tid = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;

  // Vector body: kUnroll steps per thread per iteration, all loads issued before any store.
  const uint4* __restrict__ vsrc = reinterpret_cast<const uint4*>(src + plan.head);
  uint4* __restrict__ vdst = reinterpret_cast<uint4*>(dst + plan.head);
  for (std::uint64_t base = tid; base < plan.vec_steps; base += stride * kUnroll) {
    uint4 in[kUnroll][kSrcVecs];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::uint64_t step = base + u * stride;
      if (step < plan.vec_steps) {
#pragma unroll
        for (int v = 0; v < kSrcVecs; ++v) in[u][v] = vsrc[step * kSrcVecs + v];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::uint64_t step = base + u * stride;
      if (step < plan.vec_steps) {
        Src s[kVecElems];
        std::memcpy(s, in[u], sizeof(s));
        Dst d[kVecElems];
#pragma unroll
        for (int e = 0; e < kVecElems; ++e) d[e] = ConvertElement<From, To>(s[e]);
        uint4 out[kDstVecs];
        std::memcpy(out, d, sizeof(out));
#pragma unroll
        for (int v = 0; v < kDstVecs; ++v) vdst[step * kDstVecs + v] = out[v];
      }
    }
  }

  // Scalar head [0, head) and tail [body_end, count), as one index space.
  const std::uint64_t scalar_count = plan.head + (p.count - plan.body_end);
  for (std::uint64_t k = tid; k < scalar_count; k += stride) {
    const std::uint64_t i = k < plan.head ? k : plan.body_end + (k - plan.head);
    dst[i] = ConvertElement<From, To>(src[i]);
  }
}

constexpr int PairKey(DType from, DType to) {
  return static_cast<int>(from) * 4 + static_cast<int>(to);
}

std::string PairName(DType from, DType to) {
  return std::string(DTypeName(from)) + "->" + std::string(DTypeName(to));
}

}  // namespace

template <DType From, DType To>
cudaError_t LaunchConvert(const ConvertParams& params, cudaStream_t stream) {
  static_assert(From != To, "same-dtype conversion is a copy: use cudaMemcpyAsync");
  const ConvertPlan plan = MakePlan<From, To>(params);
  // Work items per grid-stride iteration: vector steps (kUnroll per thread) or scalar elements.
  const std::uint64_t scalar = plan.head + (params.count - plan.body_end);
  const std::uint64_t vector = (plan.vec_steps + kUnroll - 1) / kUnroll;
  unsigned blocks = 0;
  const cudaError_t err = internal::GridStrideBlocks(
      ConvertKernel<From, To>, vector > scalar ? vector : scalar, kThreads, 0, &blocks);
  if (err != cudaSuccess) return err;
  // cudaLaunchKernelEx returns this launch's own error; cudaGetLastError() after <<<>>> could
  // report a stale error left by an unrelated earlier call (e.g. a failed cudaMalloc).
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  return cudaLaunchKernelEx(&config, ConvertKernel<From, To>, params);
}

// The closed set of instantiations.
template cudaError_t LaunchConvert<DType::kFloat16, DType::kBFloat16>(const ConvertParams&,
                                                                      cudaStream_t);
template cudaError_t LaunchConvert<DType::kFloat16, DType::kFloat32>(const ConvertParams&,
                                                                     cudaStream_t);
template cudaError_t LaunchConvert<DType::kBFloat16, DType::kFloat16>(const ConvertParams&,
                                                                      cudaStream_t);
template cudaError_t LaunchConvert<DType::kBFloat16, DType::kFloat32>(const ConvertParams&,
                                                                      cudaStream_t);
template cudaError_t LaunchConvert<DType::kFloat32, DType::kFloat16>(const ConvertParams&,
                                                                     cudaStream_t);
template cudaError_t LaunchConvert<DType::kFloat32, DType::kBFloat16>(const ConvertParams&,
                                                                      cudaStream_t);

Status ConvertOnDevice(DType from, DType to, const void* d_src, void* d_dst, std::uint64_t count,
                       cudaStream_t stream) {
  if (!IsValidDType(static_cast<std::uint8_t>(from)) ||
      !IsValidDType(static_cast<std::uint8_t>(to))) {
    return InvalidArgument("ConvertOnDevice: invalid dtype (" +
                           std::to_string(static_cast<int>(from)) + " -> " +
                           std::to_string(static_cast<int>(to)) + ")");
  }
  const std::string what = "ConvertOnDevice(" + PairName(from, to) + ")";
  if (count == 0) return Status::Ok();
  if (d_src == nullptr || d_dst == nullptr) {
    return InvalidArgument(what + ": null pointer with count " + std::to_string(count));
  }
  const std::uint64_t src_size = DTypeSize(from);
  const std::uint64_t dst_size = DTypeSize(to);
  if (count > UINT64_MAX / 4) {
    return InvalidArgument(what + ": count " + std::to_string(count) + " overflows a byte size");
  }
  const auto src_addr = reinterpret_cast<std::uintptr_t>(d_src);
  const auto dst_addr = reinterpret_cast<std::uintptr_t>(d_dst);
  if (src_addr % src_size != 0 || dst_addr % dst_size != 0) {
    return InvalidArgument(what + ": src/dst must be aligned to their element sizes (" +
                           std::to_string(src_size) + "/" + std::to_string(dst_size) + " bytes)");
  }
  const std::uint64_t src_bytes = count * src_size;
  const std::uint64_t dst_bytes = count * dst_size;
  if (src_addr < dst_addr + dst_bytes && dst_addr < src_addr + src_bytes) {
    return InvalidArgument(what + ": source and destination ranges overlap");
  }
  if (from == to) {
    KVD_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d_dst, d_src, src_bytes, cudaMemcpyDeviceToDevice, stream), what);
    return Status::Ok();
  }
  const ConvertParams params{d_src, d_dst, count};
  cudaError_t err = cudaErrorInvalidValue;
  switch (PairKey(from, to)) {
    case PairKey(DType::kFloat16, DType::kBFloat16):
      err = LaunchConvert<DType::kFloat16, DType::kBFloat16>(params, stream);
      break;
    case PairKey(DType::kFloat16, DType::kFloat32):
      err = LaunchConvert<DType::kFloat16, DType::kFloat32>(params, stream);
      break;
    case PairKey(DType::kBFloat16, DType::kFloat16):
      err = LaunchConvert<DType::kBFloat16, DType::kFloat16>(params, stream);
      break;
    case PairKey(DType::kBFloat16, DType::kFloat32):
      err = LaunchConvert<DType::kBFloat16, DType::kFloat32>(params, stream);
      break;
    case PairKey(DType::kFloat32, DType::kFloat16):
      err = LaunchConvert<DType::kFloat32, DType::kFloat16>(params, stream);
      break;
    case PairKey(DType::kFloat32, DType::kBFloat16):
      err = LaunchConvert<DType::kFloat32, DType::kBFloat16>(params, stream);
      break;
    default: return InvalidArgument(what + ": unsupported dtype pair");
  }
  KVD_CUDA_RETURN_IF_ERROR(err, what);
  return Status::Ok();
}

Result<KvTensor> ConvertDTypeGpu(const KvTensorView& in, DType to) {
  KVD_RETURN_IF_ERROR(in.Validate());
  if (!IsValidDType(static_cast<std::uint8_t>(to))) {
    return InvalidArgument("ConvertDTypeGpu: invalid target dtype " +
                           std::to_string(static_cast<int>(to)));
  }
  KvTensor out = KvTensor::Zeros(to, in.shape);
  KVD_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_in, DeviceBuffer::Allocate(in.data.size()));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_out, DeviceBuffer::Allocate(out.data.size()));
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_in.data(), in.data.data(), in.data.size(),
                                           cudaMemcpyHostToDevice, stream.get()),
                           "ConvertDTypeGpu: upload");
  KVD_RETURN_IF_ERROR(
      ConvertOnDevice(in.dtype, to, d_in.data(), d_out.data(), in.shape.elements(), stream.get()));
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data.data(), d_out.data(), out.data.size(),
                                           cudaMemcpyDeviceToHost, stream.get()),
                           "ConvertDTypeGpu: download");
  KVD_RETURN_IF_ERROR(stream.Synchronize().WithContext("ConvertDTypeGpu"));
  return Result<KvTensor>(std::move(out));
}

}  // namespace kvdepot::cuda
