// Kernel family "hack", codec half: the host side of kvdepot/cuda/hack.h's quantize and
// dequantize calls — validation (shape, options, dtypes, pointers and their alignment, checked
// before anything is enqueued), the error word's message (the first invalid element, named by its
// position), the section sizes, and EncodeHackGpu / DecodeHackGpu (a container in, a container
// or tensor out, through the device). The kernels and their launchers are in hack_quantize.cu.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/hack.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {

namespace {

using hack::Layout;

bool Aligned(const void* p, std::uintptr_t n) {
  return (reinterpret_cast<std::uintptr_t>(p) & (n - 1)) == 0;
}

bool SupportedDim(std::uint32_t d) {
  return d == 64 || d == 128 || d == 256;
}

std::string Position(const KvShape& s, std::uint64_t i) {
  const auto d = static_cast<std::uint32_t>(i % s.head_dim);
  i /= s.head_dim;
  const auto h = static_cast<std::uint32_t>(i % s.kv_heads);
  i /= s.kv_heads;
  const auto t = static_cast<std::uint32_t>(i % s.tokens);
  i /= s.tokens;
  std::string out = "[";
  for (const std::uint64_t v : {i / 2, i % 2, std::uint64_t{t}, std::uint64_t{h}}) {
    out += std::to_string(v);
    out += ", ";
  }
  out += std::to_string(d);
  out += ']';
  return out;
}

// params section of a chunk (docs/hack.md), as EncodeHack writes it.
void WriteParams(std::span<std::byte> out, const Layout& lay, const HackOptions& o) {
  hack::WriteParams(out.data(), lay.partition, lay.orientation,
                    static_cast<std::uint8_t>(o.rounding), lay.sinks, o.seed);
}

Status Download(std::span<std::byte> dst, const void* src, cudaStream_t stream, const char* what) {
  if (dst.empty()) return Status::Ok();
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst.data(), src, dst.size(), cudaMemcpyDeviceToHost, stream), what);
  return Status::Ok();
}

Status Upload(void* dst, std::span<const std::byte> src, cudaStream_t stream, const char* what) {
  if (src.empty()) return Status::Ok();
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src.data(), src.size(), cudaMemcpyHostToDevice, stream), what);
  return Status::Ok();
}

// One device allocation holding the four sections at 256-byte aligned offsets.
struct SectionBuffers {
  DeviceBuffer buffer;
  HackDeviceSections sections;
  HackSectionBytes bytes;
};

std::uint64_t Align256(std::uint64_t n) {
  return (n + 255) & ~std::uint64_t{255};
}

Result<SectionBuffers> AllocateSections(const Layout& lay, DType dtype) {
  SectionBuffers s;
  s.bytes = HackSectionBytesFor(lay, dtype);
  const std::uint64_t o1 = Align256(s.bytes.codes);
  const std::uint64_t o2 = o1 + Align256(s.bytes.scales);
  const std::uint64_t o3 = o2 + Align256(s.bytes.sums);
  const std::uint64_t total = o3 + Align256(s.bytes.tail);
  KVD_ASSIGN_OR_RETURN(s.buffer, DeviceBuffer::Allocate(std::max<std::uint64_t>(total, 256)));
  auto* base = s.buffer.as<std::uint8_t>();
  s.sections = {base, base + o1, base + o2, base + o3};
  return Result<SectionBuffers>(std::move(s));
}

}  // namespace

// ================================================================================================
// Quantize
// ================================================================================================

Status EnqueueQuantizeHackBatch(DType dtype, const KvShape& shape, const HackOptions& options,
                                std::span<const HackQuantizeChunk> chunks,
                                unsigned long long* d_error, cudaStream_t stream) {
  constexpr const char* kWhat = "hack-int2 GPU quantize";
  if (dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
    return InvalidArgument(std::string(kWhat) + ": input dtype must be fp16 or bf16");
  }
  KVD_RETURN_IF_ERROR(ValidateShape(shape, dtype).WithContext(kWhat));
  KVD_RETURN_IF_ERROR(ValidateHackOptions(options));
  if (!SupportedDim(shape.head_dim)) {
    return InvalidArgument(std::string(kWhat) + ": head_dim = " + std::to_string(shape.head_dim) +
                           " is not supported (64, 128 or 256)");
  }
  if (chunks.empty() || chunks.size() > kHackQuantizeMaxChunks) {
    return InvalidArgument(std::string(kWhat) + ": " + std::to_string(chunks.size()) +
                           " chunks in one call (1 to " + std::to_string(kHackQuantizeMaxChunks) +
                           ")");
  }
  if (d_error == nullptr || !Aligned(d_error, 8)) {
    return InvalidArgument(std::string(kWhat) +
                           ": the error word must be a non-null 8-byte "
                           "aligned device pointer");
  }
  const Layout lay = HackLayoutFor(shape, options);
  HackQuantizeParams params{};
  params.num_chunks = static_cast<std::uint32_t>(chunks.size());
  params.stochastic = options.rounding == HackRounding::kStochastic ? 1u : 0u;
  params.error = d_error;
  params.layout = lay;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const HackQuantizeChunk& c = chunks[i];
    const HackDeviceSections& out = c.out;
    const std::string which =
        chunks.size() > 1 ? std::string(kWhat) + ": chunk " + std::to_string(i) : kWhat;
    if (c.input == nullptr || out.codes == nullptr || out.scales == nullptr ||
        out.sums == nullptr || (lay.unquantized_tokens() > 0 && out.tail == nullptr)) {
      return InvalidArgument(which + ": null device pointer");
    }
    if (!Aligned(c.input, 16) || !Aligned(out.codes, 16) || !Aligned(out.scales, 4) ||
        !Aligned(out.sums, 2) || !Aligned(out.tail, 16)) {
      return InvalidArgument(which +
                             ": input, codes and tail must be 16-byte aligned, scales 4, sums 2");
    }
    params.chunks[i] = c;
    if (params.stochastic == 0) params.chunks[i].seed = 0;
  }
  KVD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_error, 0xff, sizeof(unsigned long long), stream),
                           std::string(kWhat) + ": reset error word");
  const cudaError_t err = dtype == DType::kFloat16
                              ? LaunchHackQuantize<DType::kFloat16>(params, stream)
                              : LaunchHackQuantize<DType::kBFloat16>(params, stream);
  KVD_CUDA_RETURN_IF_ERROR(err, kWhat);
  return Status::Ok();
}

Status EnqueueQuantizeHack(DType dtype, const KvShape& shape, const HackOptions& options,
                           const void* d_input, const HackDeviceSections& out,
                           unsigned long long* d_error, cudaStream_t stream) {
  const HackQuantizeChunk chunk{d_input, out, options.seed};
  return EnqueueQuantizeHackBatch(dtype, shape, options, std::span(&chunk, 1), d_error, stream);
}

namespace {

// Reads the error word after the stream's work: the first invalid element, named with its chunk
// when `name_chunk`.
Status FinishQuantize(const KvShape& shape, const unsigned long long* d_error, cudaStream_t stream,
                      bool name_chunk) {
  unsigned long long key = 0;
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&key, d_error, sizeof(key), cudaMemcpyDeviceToHost, stream),
      "hack-int2 GPU quantize: read error word");
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "hack-int2 GPU quantize");
  if (key == ~0ull) return Status::Ok();
  const std::uint64_t elements = shape.elements();
  const std::uint64_t chunk = key / 2 / elements;
  const std::string where = Position(shape, key / 2 % elements);
  const std::string prefix =
      name_chunk ? "chunk " + std::to_string(chunk) + ": hack-int2: " : std::string("hack-int2: ");
  if (key % 2 == 0) {
    return InvalidArgument(prefix + "non-finite value at " + where +
                           " (hack-int2 cannot represent NaN/Inf; use the raw codec)");
  }
  return InvalidArgument(
      prefix + "value at " + where +
      " is beyond the fp16 range of its scales (|x| <= 65504); use the raw codec");
}

}  // namespace

Status FinishQuantizeHack(const KvShape& shape, const unsigned long long* d_error,
                          cudaStream_t stream) {
  return FinishQuantize(shape, d_error, stream, /*name_chunk=*/false);
}

Status FinishQuantizeHackBatch(const KvShape& shape, const unsigned long long* d_error,
                               cudaStream_t stream) {
  return FinishQuantize(shape, d_error, stream, /*name_chunk=*/true);
}

Result<std::vector<std::byte>> EncodeHackGpu(const KvTensorView& tensor,
                                             const HackOptions& options) {
  KVD_RETURN_IF_ERROR(ValidateHackOptions(options));
  KVD_RETURN_IF_ERROR(tensor.Validate().WithContext("hack-int2 encode"));
  if (tensor.dtype == DType::kFloat32) {
    return Status(StatusCode::kUnimplemented,
                  "hack-int2 GPU quantize: fp32 input is not supported (fp16, bf16)");
  }
  const KvShape& shape = tensor.shape;
  HackOptions stored = options;
  stored.sinks = std::min(options.sinks, shape.tokens);
  if (stored.rounding == HackRounding::kNearest) stored.seed = 0;
  const Layout lay = HackLayoutFor(shape, stored);
  KVD_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_in, DeviceBuffer::Allocate(tensor.data.size()));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_err, DeviceBuffer::Allocate(sizeof(unsigned long long)));
  KVD_ASSIGN_OR_RETURN(SectionBuffers sec, AllocateSections(lay, tensor.dtype));
  KVD_RETURN_IF_ERROR(Upload(d_in.data(), tensor.data, stream.get(), "hack-int2 GPU: upload"));
  KVD_RETURN_IF_ERROR(EnqueueQuantizeHack(tensor.dtype, shape, stored, d_in.data(), sec.sections,
                                          d_err.as<unsigned long long>(), stream.get()));
  KVD_RETURN_IF_ERROR(FinishQuantizeHack(shape, d_err.as<unsigned long long>(), stream.get()));

  const ContainerWriter::SectionPlan plans[5] = {{SectionKind::kParams, hack::kParamsBytes},
                                                 {SectionKind::kScales, sec.bytes.scales},
                                                 {SectionKind::kSums, sec.bytes.sums},
                                                 {SectionKind::kCodes, sec.bytes.codes},
                                                 {SectionKind::kTail, sec.bytes.tail}};
  KVD_ASSIGN_OR_RETURN(ContainerWriter w,
                       ContainerWriter::Create(CodecId::kHackInt2, tensor.dtype, shape, plans));
  WriteParams(w.section(0), lay, stored);
  KVD_RETURN_IF_ERROR(Download(w.section(1), sec.sections.scales, stream.get(), "download scales"));
  KVD_RETURN_IF_ERROR(Download(w.section(2), sec.sections.sums, stream.get(), "download sums"));
  KVD_RETURN_IF_ERROR(Download(w.section(3), sec.sections.codes, stream.get(), "download codes"));
  KVD_RETURN_IF_ERROR(Download(w.section(4), sec.sections.tail, stream.get(), "download tail"));
  KVD_RETURN_IF_ERROR(stream.Synchronize().WithContext("hack-int2 GPU encode"));
  return std::move(w).Finish();
}

// ================================================================================================
// Dequantize
// ================================================================================================

Status EnqueueDequantizeHack(DType chunk_dtype, const KvShape& shape, const HackOptions& options,
                             const HackDeviceSectionsView& in, DType out_dtype, void* d_out,
                             cudaStream_t stream) {
  constexpr const char* kWhat = "hack-int2 GPU dequantize";
  if (!IsValidDType(static_cast<std::uint8_t>(chunk_dtype)) ||
      !IsValidDType(static_cast<std::uint8_t>(out_dtype))) {
    return InvalidArgument(std::string(kWhat) + ": invalid dtype");
  }
  KVD_RETURN_IF_ERROR(ValidateShape(shape, chunk_dtype).WithContext(kWhat));
  KVD_RETURN_IF_ERROR(ValidateHackOptions(options));
  if (!SupportedDim(shape.head_dim)) {
    return InvalidArgument(std::string(kWhat) + ": head_dim = " + std::to_string(shape.head_dim) +
                           " is not supported (64, 128 or 256)");
  }
  const Layout lay = HackLayoutFor(shape, options);
  if (d_out == nullptr || (lay.blocks() > 0 && (in.codes == nullptr || in.scales == nullptr)) ||
      (lay.unquantized_tokens() > 0 && in.tail == nullptr)) {
    return InvalidArgument(std::string(kWhat) + ": null device pointer");
  }
  if (!Aligned(d_out, 16) || !Aligned(in.codes, 16) || !Aligned(in.scales, 4) ||
      !Aligned(in.tail, DTypeSize(chunk_dtype))) {
    return InvalidArgument(
        std::string(kWhat) +
        ": out and codes must be 16-byte aligned, scales 4, tail its element size");
  }
  HackDequantizeParams params{};
  params.codes = in.codes;
  params.scales = in.scales;
  params.sums = in.sums;
  params.tail = in.tail;
  params.out = d_out;
  params.layout = lay;
  params.tail_dtype = static_cast<std::uint32_t>(chunk_dtype);
  cudaError_t err = cudaErrorInvalidValue;
  switch (out_dtype) {
    case DType::kFloat16: err = LaunchHackDequantize<DType::kFloat16>(params, stream); break;
    case DType::kBFloat16: err = LaunchHackDequantize<DType::kBFloat16>(params, stream); break;
    case DType::kFloat32: err = LaunchHackDequantize<DType::kFloat32>(params, stream); break;
  }
  KVD_CUDA_RETURN_IF_ERROR(err, kWhat);
  return Status::Ok();
}

Result<KvTensor> DecodeHackGpu(std::span<const std::byte> container, DType out_dtype) {
  KVD_ASSIGN_OR_RETURN(const ContainerView view, ParseContainer(container));
  KVD_ASSIGN_OR_RETURN(const HackChunk chunk, UnpackHack(view));  // every structural check
  const Layout& lay = chunk.layout;
  if (!IsValidDType(static_cast<std::uint8_t>(out_dtype))) {
    return InvalidArgument("hack-int2 GPU dequantize: invalid output dtype");
  }
  KVD_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  KVD_ASSIGN_OR_RETURN(SectionBuffers sec, AllocateSections(lay, chunk.dtype));
  const SectionView* codes = view.Find(SectionKind::kCodes);
  const SectionView* scales = view.Find(SectionKind::kScales);
  const SectionView* sums = view.Find(SectionKind::kSums);
  const SectionView* tail = view.Find(SectionKind::kTail);
  KVD_RETURN_IF_ERROR(Upload(sec.sections.codes, codes->bytes, stream.get(), "upload codes"));
  KVD_RETURN_IF_ERROR(Upload(sec.sections.scales, scales->bytes, stream.get(), "upload scales"));
  KVD_RETURN_IF_ERROR(Upload(sec.sections.sums, sums->bytes, stream.get(), "upload sums"));
  KVD_RETURN_IF_ERROR(Upload(sec.sections.tail, tail->bytes, stream.get(), "upload tail"));
  KvTensor out = KvTensor::Zeros(out_dtype, chunk.shape);
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_out, DeviceBuffer::Allocate(out.data.size()));
  const HackDeviceSectionsView in{sec.sections.codes, sec.sections.scales, sec.sections.sums,
                                  sec.sections.tail};
  KVD_RETURN_IF_ERROR(EnqueueDequantizeHack(chunk.dtype, chunk.shape, chunk.options, in, out_dtype,
                                            d_out.data(), stream.get()));
  KVD_RETURN_IF_ERROR(Download(out.data, d_out.data(), stream.get(), "download tensor"));
  KVD_RETURN_IF_ERROR(stream.Synchronize().WithContext("hack-int2 GPU decode"));
  return Result<KvTensor>(std::move(out));
}

}  // namespace kvdepot::cuda
