// GPU CacheGen encode/decode vs the CPU reference (kvdepot::EncodeCacheGen / DecodeCacheGen):
// byte-for-byte equality of containers and decoded tensors, error parity, batches, paged output.
#include "kvdepot/cuda/cachegen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kvdepot/base/byte_order.h"
#include "kvdepot/codec/cachegen.h"
#include "kvdepot/codec/cachegen_format.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/cuda/device.h"

namespace kvdepot::cuda {
namespace {

void ExpectSameBytes(const std::vector<std::byte>& cpu, const std::vector<std::byte>& gpu,
                     const std::string& label) {
  if (cpu == gpu) return;
  std::size_t first = 0;
  while (first < cpu.size() && first < gpu.size() && cpu[first] == gpu[first]) ++first;
  ADD_FAILURE() << label << ": GPU container (" << gpu.size() << " bytes) differs from the CPU's ("
                << cpu.size() << " bytes), first at byte " << first << " (" << SectionAt(cpu, first)
                << ")";
}

void ExpectSameTensor(const KvTensor& cpu, const KvTensor& gpu, const std::string& label) {
  ASSERT_EQ(gpu.dtype, cpu.dtype) << label;
  ASSERT_EQ(gpu.shape, cpu.shape) << label;
  if (gpu.data == cpu.data) return;
  const std::size_t es = DTypeSize(cpu.dtype);
  std::size_t diffs = 0, first = SIZE_MAX;
  for (std::size_t i = 0; i < cpu.data.size() / es; ++i) {
    if (std::memcmp(cpu.data.data() + i * es, gpu.data.data() + i * es, es) != 0) {
      ++diffs;
      first = std::min(first, i);
    }
  }
  ADD_FAILURE() << label << ": " << diffs << " decoded elements differ, first " << first;
}

// GPU encode == CPU encode (bytes or status code); GPU decode of the CPU container == CPU decode;
// the CPU decodes the GPU container.
void ExpectCodecParity(const KvTensor& t, const CacheGenOptions& options,
                       const std::string& label) {
  SCOPED_TRACE(label + " " + t.shape.ToString() + " " + std::string(DTypeName(t.dtype)));
  Result<std::vector<std::byte>> cpu = EncodeCacheGen(t.view(), options);
  Result<std::vector<std::byte>> gpu = EncodeCacheGenGpu(t.view(), options);
  ASSERT_EQ(cpu.ok(), gpu.ok()) << "cpu " << cpu.status().ToString() << " gpu "
                                << gpu.status().ToString();
  if (!cpu.ok()) {
    EXPECT_EQ(cpu.status().code(), gpu.status().code());
    EXPECT_EQ(cpu.status().message(), gpu.status().message());
    return;
  }
  ExpectSameBytes(*cpu, *gpu, label);
  Result<ContainerView> view = ParseContainer(*cpu);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  Result<KvTensor> cpu_dec = DecodeCacheGen(*view);
  ASSERT_TRUE(cpu_dec.ok()) << cpu_dec.status().ToString();
  Result<KvTensor> gpu_dec = DecodeCacheGenGpu(*cpu);
  ASSERT_TRUE(gpu_dec.ok()) << gpu_dec.status().ToString();
  ExpectSameTensor(*cpu_dec, *gpu_dec, label);
  Result<ContainerView> gview = ParseContainer(*gpu);
  ASSERT_TRUE(gview.ok()) << gview.status().ToString();
  EXPECT_TRUE(DecodeCacheGen(*gview).ok());
}

// ---- host-only parts (no device needed) ----

TEST(NoDeviceCacheGenGpu, ParseMatchesTheContainerAndSealReproducesChecksums) {
  const KvTensor t = Synth({3, 20, 2, 48}, DType::kFloat16, 5);
  std::vector<std::byte> c = *EncodeCacheGen(t.view());
  Result<CacheGenContainerInfo> info = ParseCacheGenContainer(c);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->shape, t.shape);
  EXPECT_EQ(info->scale_dtype, cachegen::kScaleFp16);
  EXPECT_EQ(info->total_bytes, c.size());
  EXPECT_LE(c.size(), CacheGenMaxContainerBytes(t.shape));
  EXPECT_EQ(info->codes_offset % 64, 0u);
  std::vector<std::byte> unsealed = c;
  std::memset(unsealed.data() + 56, 0, 8);
  for (std::size_t i = 0; i < 5; ++i) std::memset(unsealed.data() + 64 + i * 32 + 24, 0, 8);
  ASSERT_TRUE(SealCacheGenContainer(unsealed).ok());
  EXPECT_EQ(unsealed, c);
}

TEST(NoDeviceCacheGenGpu, ParseRejectsWhatTheCpuDecoderRejects) {
  const KvTensor t = Synth({2, 40, 2, 16}, DType::kFloat16, 7);
  const std::vector<std::byte> c = *EncodeCacheGen(t.view());
  std::mt19937 rng(3);
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<std::byte> bad = c;
    const std::size_t at = 224 + rng() % (bad.size() - 224);
    bad[at] ^= static_cast<std::byte>(1u + rng() % 255u);
    ASSERT_TRUE(SealCacheGenContainer(bad).ok());
    Result<ContainerView> view = ParseContainer(bad);
    const Status cpu = view.ok() ? DecodeCacheGen(*view).status() : view.status();
    const Status host = ParseCacheGenContainer(bad).status();
    // The host parse checks everything but the rANS streams: it may pass what the CPU rejects
    // (a corrupt stream), never the reverse, and its errors carry the CPU's code.
    if (!host.ok()) {
      EXPECT_EQ(host.code(), cpu.code()) << host.ToString() << " vs " << cpu.ToString();
    }
    if (cpu.ok()) {
      EXPECT_TRUE(host.ok()) << host.ToString();
    }
  }
  EXPECT_EQ(CacheGenMaxContainerBytes(KvShape{0, 1, 1, 1}), 0u);
}

// ---- device tests ----

struct ShapeCase {
  KvShape shape;
  DType dtype;
};

TEST(CacheGenGpu, SyntheticShapesMatchTheCpu) {
  KVD_REQUIRE_GPU();
  const ShapeCase cases[] = {
      {{1, 1, 1, 64}, DType::kFloat16},     {{1, 17, 3, 80}, DType::kFloat16},
      {{5, 255, 3, 64}, DType::kBFloat16},  {{5, 256, 8, 128}, DType::kFloat16},
      {{2, 256, 1, 80}, DType::kFloat32},   {{32, 17, 8, 128}, DType::kFloat16},
      {{1, 2, 1, 1}, DType::kFloat32},      {{3, 300, 2, 7}, DType::kFloat16},
      {{32, 256, 8, 128}, DType::kFloat16}, {{1, 256, 3, 128}, DType::kBFloat16},
      {{5, 1, 8, 80}, DType::kFloat32},     {{2, 600, 1, 64}, DType::kFloat16},
  };
  std::uint64_t seed = 11;
  for (const ShapeCase& c : cases) {
    ExpectCodecParity(Synth(c.shape, c.dtype, seed++), {}, "synth");
  }
}

TEST(CacheGenGpu, SpecialTensorsMatchTheCpu) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 33, 2, 64};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    KvTensor zeros = KvTensor::Zeros(dtype, shape);
    ExpectCodecParity(zeros, {}, "zeros");

    KvTensor constant = KvTensor::Zeros(dtype, shape);
    for (std::uint64_t i = 0; i < shape.elements(); ++i) StoreFloat(constant, i, 3.25f);
    ExpectCodecParity(constant, {}, "constant");

    // Signed zeros: the first occurrence of +0/-0 decides a channel's min/max, as on the CPU.
    KvTensor zeros_signed = KvTensor::Zeros(dtype, shape);
    std::mt19937 zr(9);
    for (std::uint64_t i = 0; i < shape.elements(); ++i) {
      StoreFloat(zeros_signed, i, zr() % 2 ? -0.0f : 0.0f);
    }
    ExpectCodecParity(zeros_signed, {}, "signed zeros");

    KvTensor noise = KvTensor::Zeros(dtype, shape);
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    for (std::uint64_t i = 0; i < shape.elements(); ++i) StoreFloat(noise, i, u(rng));
    ExpectCodecParity(noise, {}, "noise");

    KvTensor outliers = Synth(shape, dtype, 23);
    const std::uint32_t channels = shape.kv_heads * shape.head_dim;
    for (std::uint64_t i = 5; i < shape.elements(); i += channels) {
      StoreFloat(outliers, i, ElementAsFloat(outliers.view(), i) * 1000.0f);
    }
    ExpectCodecParity(outliers, {}, "outlier channel");

    // Decoded values in fp16's subnormal range and at its overflow edge: the decoder's
    // float -> fp16 / bf16 rounding must match numeric.h's there too.
    KvTensor tiny = KvTensor::Zeros(dtype, shape);
    std::uniform_real_distribution<float> small(-3.0e-5f, 3.0e-5f);
    for (std::uint64_t i = 0; i < shape.elements(); ++i) StoreFloat(tiny, i, small(rng));
    ExpectCodecParity(tiny, {}, "subnormal range");
    KvTensor edge = KvTensor::Zeros(dtype, shape);
    std::uniform_real_distribution<float> big(-65504.0f, 65504.0f);
    for (std::uint64_t i = 0; i < shape.elements(); ++i) StoreFloat(edge, i, big(rng));
    ExpectCodecParity(edge, {}, "fp16 range edge");
  }
  // fp32 input whose scales do not fit fp16 (lo below -65504) -> fp32 scales for the whole chunk.
  KvTensor wide = Synth(shape, DType::kFloat32, 29);
  StoreFloat(wide, 77, -1.0e6f);
  ExpectCodecParity(wide, {}, "fp32 scales");
  // Tiny steps that underflow fp16 are fine in fp16 (step rounds up), huge ranges overflow float.
  KvTensor huge = Synth(shape, DType::kFloat32, 31);
  StoreFloat(huge, 3, -3.0e38f);
  StoreFloat(huge, 3 + 128, 3.0e38f);
  ExpectCodecParity(huge, {}, "range overflows float");
}

TEST(CacheGenGpu, NonFiniteInputIsRefusedLikeTheCpu) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 17, 1, 64};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      KvTensor t = Synth(shape, dtype, 3);
      StoreFloat(t, 1000, bad);
      StoreFloat(t, 1700, bad);
      Result<std::vector<std::byte>> gpu = EncodeCacheGenGpu(t.view());
      ASSERT_FALSE(gpu.ok());
      EXPECT_EQ(gpu.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(gpu.status().message(), EncodeCacheGen(t.view()).status().message());
    }
  }
}

TEST(CacheGenGpu, BinsProfilesMatchTheCpu) {
  KVD_REQUIRE_GPU();
  const KvShape shape{4, 256, 2, 128};
  const KvTensor t = Synth(shape, DType::kFloat16, 41);
  CacheGenOptions o;
  o.k_bins = {2, 64, 7, 33};
  o.v_bins = {64, 2, 16, 3};
  ExpectCodecParity(t, o, "profile");
  CacheGenOptions bad;
  bad.k_bins = {2, 65, 7, 33};
  ExpectCodecParity(t, bad, "bad profile");
  // Uniform noise at 64 bins: group streams exceed the decoder's shared-memory staging, which
  // exercises its global-memory path.
  KvTensor noise = KvTensor::Zeros(DType::kFloat16, {2, 255, 2, 64});
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::uint64_t i = 0; i < noise.shape.elements(); ++i) StoreFloat(noise, i, u(rng));
  CacheGenOptions wide;
  wide.k_bins = {64, 64};
  wide.v_bins = {64, 64};
  ExpectCodecParity(noise, wide, "noise at 64 bins");
  const std::vector<std::byte> c = *EncodeCacheGen(noise.view(), wide);
  const SectionView* index = ParseContainer(c)->Find(SectionKind::kIndex);
  std::uint32_t prev = 0, longest = 0;
  for (std::size_t g = 0; g < index->length / 4; ++g) {
    const auto end = LoadLE<std::uint32_t>(index->bytes.data() + g * 4);
    longest = std::max(longest, end - prev);
    prev = end;
  }
  EXPECT_GT(longest, 8192u) << "the noise case should need the global-memory path";
}

// Encodes `chunks` on the device as one batch; returns sealed containers.
std::vector<std::vector<std::byte>> EncodeBatch(const std::vector<KvTensor>& chunks,
                                                const CacheGenOptions& options) {
  const KvShape shape = chunks[0].shape;
  const DType dtype = chunks[0].dtype;
  const std::uint64_t max_bytes = CacheGenMaxContainerBytes(shape);
  Result<CacheGenEncodeWorkspace> ws =
      CacheGenEncodeWorkspace::Create(shape, static_cast<std::uint32_t>(chunks.size()));
  EXPECT_TRUE(ws.ok()) << ws.status().ToString();
  Result<Stream> stream = Stream::Create();
  EXPECT_TRUE(stream.ok());
  std::vector<DeviceBuffer> ins, outs;
  std::vector<const void*> in_ptrs;
  std::vector<std::byte*> out_ptrs;
  for (const KvTensor& t : chunks) {
    ins.push_back(std::move(DeviceBuffer::Allocate(t.data.size()).value()));
    outs.push_back(std::move(DeviceBuffer::Allocate(max_bytes).value()));
    EXPECT_EQ(cudaMemcpy(ins.back().data(), t.data.data(), t.data.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    in_ptrs.push_back(ins.back().data());
    out_ptrs.push_back(outs.back().as<std::byte>());
  }
  Result<std::vector<std::uint64_t>> sizes =
      EncodeCacheGenDevice(dtype, shape, in_ptrs, out_ptrs, options, *ws, stream->get());
  EXPECT_TRUE(sizes.ok()) << sizes.status().ToString();
  std::vector<std::vector<std::byte>> result;
  if (!sizes.ok()) return result;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    std::vector<std::byte> c((*sizes)[i]);
    EXPECT_EQ(cudaMemcpy(c.data(), outs[i].data(), c.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(SealCacheGenContainer(c).ok());
    result.push_back(std::move(c));
  }
  return result;
}

// Uploads containers (each into its own buffer) and parses them on the host.
struct DeviceContainers {
  std::vector<DeviceBuffer> buffers;
  std::vector<CacheGenDecodeChunk> chunks;
};
DeviceContainers Upload(const std::vector<std::vector<std::byte>>& containers) {
  DeviceContainers d;
  for (const auto& c : containers) {
    Result<CacheGenContainerInfo> info = ParseCacheGenContainer(c);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    d.buffers.push_back(std::move(DeviceBuffer::Allocate(c.size()).value()));
    EXPECT_EQ(cudaMemcpy(d.buffers.back().data(), c.data(), c.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    d.chunks.push_back({d.buffers.back().as<const std::byte>(), *info});
  }
  return d;
}

TEST(CacheGenGpu, BatchesMatchTheCpu) {
  KVD_REQUIRE_GPU();
  const KvShape shape{3, 64, 2, 64};
  std::vector<KvTensor> chunks;
  for (std::uint64_t s = 0; s < 5; ++s) chunks.push_back(Synth(shape, DType::kFloat32, 100 + s));
  StoreFloat(chunks[2], 9, -2.0e5f);  // this chunk alone needs fp32 scales (lo < -65504)
  const std::vector<std::vector<std::byte>> gpu = EncodeBatch(chunks, {});
  ASSERT_EQ(gpu.size(), chunks.size());
  std::vector<std::vector<std::byte>> cpu;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    cpu.push_back(*EncodeCacheGen(chunks[i].view()));
    ExpectSameBytes(cpu[i], gpu[i], "batch chunk " + std::to_string(i));
  }
  EXPECT_EQ(ParseCacheGenContainer(cpu[2])->scale_dtype, cachegen::kScaleFp32);

  // Batched decode into contiguous outputs.
  DeviceContainers dc = Upload(cpu);
  Result<CacheGenDecodeWorkspace> ws = CacheGenDecodeWorkspace::Create(8, shape.layers);
  ASSERT_TRUE(ws.ok());
  const std::size_t bytes = shape.elements() * 4;
  std::vector<DeviceBuffer> outs;
  std::vector<void*> out_ptrs;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    outs.push_back(std::move(DeviceBuffer::Allocate(bytes).value()));
    out_ptrs.push_back(outs.back().data());
  }
  CacheGenDecodeTarget target;
  target.dtype = DType::kFloat32;
  target.contiguous = out_ptrs;
  ASSERT_TRUE(DecodeCacheGenDevice(dc.chunks, target, *ws, nullptr).ok());
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    KvTensor got = KvTensor::Zeros(DType::kFloat32, shape);
    ASSERT_EQ(cudaMemcpy(got.data.data(), outs[i].data(), bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
    ExpectSameTensor(*DecodeCacheGen(*ParseContainer(cpu[i])), got,
                     "batch decode " + std::to_string(i));
  }
  // Mixed shapes in one batch are refused.
  std::vector<std::vector<std::byte>> mixed = {
      cpu[0], *EncodeCacheGen(Synth({3, 65, 2, 64}, DType::kFloat32, 1).view())};
  DeviceContainers dm = Upload(mixed);
  EXPECT_EQ(DecodeCacheGenDevice(dm.chunks, target, *ws, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(CacheGenGpu, PagedOutputEqualsContiguousRearranged) {
  KVD_REQUIRE_GPU();
  const KvShape shape{3, 100, 2, 80};  // 100 tokens: the last page is partly filled
  const std::uint32_t channels = shape.kv_heads * shape.head_dim;
  const std::uint32_t page_size = 16, pages_per_chunk = (shape.tokens + page_size - 1) / page_size;
  const std::uint32_t chunks = 2, num_pages = 20;
  const std::uint64_t row_stride = channels + 16, page_stride = page_size * row_stride + 32;
  std::vector<std::vector<std::byte>> containers;
  for (std::uint32_t i = 0; i < chunks; ++i) {
    containers.push_back(*EncodeCacheGen(Synth(shape, DType::kBFloat16, 60 + i).view()));
  }
  DeviceContainers dc = Upload(containers);
  // Shuffled, disjoint pages for the two chunks.
  std::vector<std::int32_t> pages(num_pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(8));
  std::vector<std::vector<std::int32_t>> tables(chunks);
  std::vector<DeviceBuffer> d_tables;
  std::vector<const std::int32_t*> table_ptrs;
  for (std::uint32_t i = 0; i < chunks; ++i) {
    tables[i].assign(pages.begin() + i * pages_per_chunk,
                     pages.begin() + (i + 1) * pages_per_chunk);
    d_tables.push_back(std::move(DeviceBuffer::Allocate(pages_per_chunk * 4).value()));
    ASSERT_EQ(cudaMemcpy(d_tables.back().data(), tables[i].data(), pages_per_chunk * 4,
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    table_ptrs.push_back(d_tables.back().as<const std::int32_t>());
  }
  const std::size_t cache_bytes = num_pages * page_stride * 2;
  std::vector<DeviceBuffer> caches;
  std::vector<void*> k_ptrs, v_ptrs;
  for (std::uint32_t l = 0; l < shape.layers * 2; ++l) {
    caches.push_back(std::move(DeviceBuffer::Allocate(cache_bytes).value()));
    ASSERT_EQ(cudaMemset(caches.back().data(), 0x7b, cache_bytes), cudaSuccess);
    (l % 2 ? v_ptrs : k_ptrs).push_back(caches.back().data());
  }
  Result<CacheGenDecodeWorkspace> ws = CacheGenDecodeWorkspace::Create(chunks, shape.layers);
  ASSERT_TRUE(ws.ok());
  CacheGenDecodeTarget target;
  target.dtype = DType::kBFloat16;
  target.k_cache = k_ptrs;
  target.v_cache = v_ptrs;
  target.block_tables = table_ptrs;
  target.page_size = page_size;
  target.num_pages = num_pages;
  target.page_stride = page_stride;
  target.row_stride = row_stride;
  const Status st = DecodeCacheGenDevice(dc.chunks, target, *ws, nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<std::vector<std::uint16_t>> host(shape.layers * 2);
  for (std::uint32_t l = 0; l < shape.layers * 2; ++l) {
    host[l].resize(cache_bytes / 2);
    ASSERT_EQ(cudaMemcpy(host[l].data(), caches[l].data(), cache_bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  std::vector<bool> written(cache_bytes / 2, false);
  for (std::uint32_t i = 0; i < chunks; ++i) {
    const KvTensor ref = *DecodeCacheGen(*ParseContainer(containers[i]));
    std::uint64_t mismatches = 0;
    for (std::uint32_t lk = 0; lk < shape.layers * 2; ++lk) {
      for (std::uint32_t t = 0; t < shape.tokens; ++t) {
        const std::uint64_t row =
            tables[i][t / page_size] * page_stride + (t % page_size) * row_stride;
        for (std::uint32_t c = 0; c < channels; ++c) {
          const auto want = LoadLE<std::uint16_t>(
              ref.data.data() + ((std::uint64_t{lk} * shape.tokens + t) * channels + c) * 2);
          if (host[lk][row + c] != want) ++mismatches;
          if (i == 0 && lk == 0) written[row + c] = true;
        }
      }
    }
    EXPECT_EQ(mismatches, 0u) << "chunk " << i;
  }
  // Nothing outside chunk rows was touched (checked on layer 0 K, pages of chunk 0 only).
  std::uint64_t stray = 0;
  for (std::uint32_t p = 0; p < pages_per_chunk; ++p) {
    const std::uint64_t page = tables[0][p];
    for (std::uint64_t e = page * page_stride; e < (page + 1) * page_stride; ++e) {
      if (!written[e] && host[0][e] != 0x7b7b) ++stray;
    }
  }
  EXPECT_EQ(stray, 0u);
  // A block table entry outside [0, num_pages) is refused by the kernel, not written through.
  std::vector<std::int32_t> bad_table(pages_per_chunk, 0);
  bad_table[3] = static_cast<std::int32_t>(num_pages);
  ASSERT_EQ(
      cudaMemcpy(d_tables[1].data(), bad_table.data(), pages_per_chunk * 4, cudaMemcpyHostToDevice),
      cudaSuccess);
  EXPECT_EQ(DecodeCacheGenDevice(dc.chunks, target, *ws, nullptr).code(),
            StatusCode::kInvalidArgument);
}

// Batches above kCacheGenInlineChunks chunks (and paged targets above kCacheGenInlineLayers
// layers) pass their descriptors through device memory instead of the kernel parameters.
TEST(CacheGenGpu, LargeBatchesAndManyLayersMatchTheCpu) {
  KVD_REQUIRE_GPU();
  const KvShape shape{kCacheGenInlineLayers + 1, 20, 1, 32};
  const std::uint32_t chunks = kCacheGenInlineChunks + 3;
  std::vector<KvTensor> inputs;
  for (std::uint32_t i = 0; i < chunks; ++i) {
    inputs.push_back(Synth(shape, DType::kFloat16, 300 + i));
  }
  const std::vector<std::vector<std::byte>> gpu = EncodeBatch(inputs, {});
  ASSERT_EQ(gpu.size(), chunks);
  std::vector<std::vector<std::byte>> cpu;
  for (std::uint32_t i = 0; i < chunks; ++i) {
    cpu.push_back(*EncodeCacheGen(inputs[i].view()));
    ExpectSameBytes(cpu[i], gpu[i], "large batch chunk " + std::to_string(i));
  }
  DeviceContainers dc = Upload(cpu);
  Result<CacheGenDecodeWorkspace> ws = CacheGenDecodeWorkspace::Create(chunks, shape.layers);
  ASSERT_TRUE(ws.ok());
  // Contiguous.
  const std::size_t bytes = shape.elements() * 2;
  std::vector<DeviceBuffer> outs;
  std::vector<void*> out_ptrs;
  for (std::uint32_t i = 0; i < chunks; ++i) {
    outs.push_back(std::move(DeviceBuffer::Allocate(bytes).value()));
    out_ptrs.push_back(outs.back().data());
  }
  CacheGenDecodeTarget target;
  target.contiguous = out_ptrs;
  ASSERT_TRUE(DecodeCacheGenDevice(dc.chunks, target, *ws, nullptr).ok());
  std::vector<KvTensor> refs;
  for (std::uint32_t i = 0; i < chunks; ++i) {
    refs.push_back(*DecodeCacheGen(*ParseContainer(cpu[i])));
    KvTensor got = KvTensor::Zeros(DType::kFloat16, shape);
    ASSERT_EQ(cudaMemcpy(got.data.data(), outs[i].data(), bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
    ExpectSameTensor(refs[i], got, "large batch decode " + std::to_string(i));
  }
  // Paged, one token per page, identity block tables into per-layer caches.
  const std::uint32_t channels = shape.kv_heads * shape.head_dim;
  const std::uint32_t num_pages = chunks * shape.tokens;
  std::vector<std::int32_t> table(num_pages);
  std::iota(table.begin(), table.end(), 0);
  DeviceBuffer d_table = std::move(DeviceBuffer::Allocate(num_pages * 4).value());
  ASSERT_EQ(cudaMemcpy(d_table.data(), table.data(), num_pages * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  std::vector<const std::int32_t*> tables;
  for (std::uint32_t i = 0; i < chunks; ++i) {
    tables.push_back(d_table.as<const std::int32_t>() + i * shape.tokens);
  }
  const std::size_t cache_bytes = std::size_t{num_pages} * channels * 2;
  std::vector<DeviceBuffer> caches;
  std::vector<void*> k_ptrs, v_ptrs;
  for (std::uint32_t l = 0; l < shape.layers * 2; ++l) {
    caches.push_back(std::move(DeviceBuffer::Allocate(cache_bytes).value()));
    (l % 2 ? v_ptrs : k_ptrs).push_back(caches.back().data());
  }
  CacheGenDecodeTarget paged;
  paged.k_cache = k_ptrs;
  paged.v_cache = v_ptrs;
  paged.block_tables = tables;
  paged.page_size = 1;
  paged.num_pages = num_pages;
  paged.row_stride = channels;
  paged.page_stride = channels;
  ASSERT_TRUE(DecodeCacheGenDevice(dc.chunks, paged, *ws, nullptr).ok());
  std::uint64_t mismatches = 0;
  for (std::uint32_t lk = 0; lk < shape.layers * 2; ++lk) {
    std::vector<std::byte> cache(cache_bytes);
    ASSERT_EQ(cudaMemcpy(cache.data(), caches[lk].data(), cache_bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (std::uint32_t i = 0; i < chunks; ++i) {
      const std::size_t row_bytes = std::size_t{shape.tokens} * channels * 2;
      if (std::memcmp(cache.data() + i * row_bytes,
                      refs[i].data.data() + std::size_t{lk} * row_bytes, row_bytes) != 0) {
        ++mismatches;
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(CacheGenGpu, ResealedCorruptionGivesTheCpuStatus) {
  KVD_REQUIRE_GPU();
  const KvTensor t = Synth({2, 40, 2, 64}, DType::kFloat16, 71);
  const std::vector<std::byte> c = *EncodeCacheGen(t.view());
  const std::uint64_t codes_at = ParseContainer(c)->Find(SectionKind::kCodes)->offset;
  std::mt19937 rng(2);
  int corrupt = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::byte> bad = c;
    const std::size_t lo = trial % 4 ? codes_at : 224;
    const std::size_t at = lo + rng() % (bad.size() - lo);
    bad[at] ^= static_cast<std::byte>(1u + rng() % 255u);
    ASSERT_TRUE(SealCacheGenContainer(bad).ok());
    Result<ContainerView> view = ParseContainer(bad);
    Result<KvTensor> cpu = view.ok() ? DecodeCacheGen(*view) : Result<KvTensor>(view.status());
    Result<KvTensor> gpu = DecodeCacheGenGpu(bad);
    ASSERT_EQ(cpu.ok(), gpu.ok()) << "byte " << at << ": cpu " << cpu.status().ToString() << " gpu "
                                  << gpu.status().ToString();
    if (cpu.ok()) {
      ExpectSameTensor(*cpu, *gpu, "byte " + std::to_string(at));
    } else {
      EXPECT_EQ(cpu.status().code(), gpu.status().code()) << gpu.status().ToString();
      corrupt += cpu.status().code() == StatusCode::kCorruption;
    }
  }
  EXPECT_GT(corrupt, 100);
}

// Bypasses the host checks: a device-side index or table that is wrong must be reported, never
// read or written out of bounds.
TEST(CacheGenGpu, DeviceChecksCatchBadIndexAndTables) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 256, 2, 64};
  const std::vector<std::byte> c = *EncodeCacheGen(Synth(shape, DType::kFloat16, 81).view());
  const CacheGenContainerInfo info = *ParseCacheGenContainer(c);
  Result<CacheGenDecodeWorkspace> ws = CacheGenDecodeWorkspace::Create(1, shape.layers);
  ASSERT_TRUE(ws.ok());
  DeviceBuffer out = std::move(DeviceBuffer::Allocate(shape.elements() * 2).value());
  void* const outs[] = {out.data()};
  CacheGenDecodeTarget target;
  target.contiguous = outs;
  auto decode_patched = [&](std::uint64_t offset, std::uint32_t value, int width) {
    std::vector<std::byte> bad = c;
    if (width == 4)
      StoreLE<std::uint32_t>(bad.data() + offset, value);
    else
      StoreLE<std::uint16_t>(bad.data() + offset, static_cast<std::uint16_t>(value));
    DeviceContainers dc = Upload({c});
    EXPECT_EQ(cudaMemcpy(dc.buffers[0].data(), bad.data(), bad.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    return DecodeCacheGenDevice(dc.chunks, target, *ws, nullptr);
  };
  const std::uint32_t end0 = LoadLE<std::uint32_t>(c.data() + info.index_offset);
  // Group 0 cut short by 5 words (group 1 starts early): a truncated stream.
  Status s = decode_patched(info.index_offset, end0 - 5, 4);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("group 0"), std::string::npos) << s.ToString();
  // Index entries past the codes section and out of order.
  s = decode_patched(info.index_offset + 4, 0x7fffffffu, 4);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  s = decode_patched(info.index_offset, 0xffffffffu, 4);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  // A table that does not sum to 4096.
  s = decode_patched(info.tables_offset + 2, 4000, 2);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  // Intact: OK and equal to the CPU.
  s = decode_patched(info.tables_offset, LoadLE<std::uint16_t>(c.data() + info.tables_offset), 2);
  EXPECT_TRUE(s.ok()) << s.ToString();
  KvTensor got = KvTensor::Zeros(DType::kFloat16, shape);
  ASSERT_EQ(cudaMemcpy(got.data.data(), out.data(), got.data.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  ExpectSameTensor(*DecodeCacheGen(*ParseContainer(c)), got, "intact");
}

TEST(CacheGenGpu, ArgumentsAreValidated) {
  KVD_REQUIRE_GPU();
  const KvShape shape{1, 8, 1, 64};
  Result<CacheGenEncodeWorkspace> ews = CacheGenEncodeWorkspace::Create(shape, 2);
  ASSERT_TRUE(ews.ok());
  DeviceBuffer in = std::move(DeviceBuffer::Allocate(shape.elements() * 2).value());
  DeviceBuffer out = std::move(DeviceBuffer::Allocate(CacheGenMaxContainerBytes(shape)).value());
  const void* ins[] = {in.data(), in.data(), in.data()};
  std::byte* outs[] = {out.as<std::byte>(), out.as<std::byte>(), out.as<std::byte>()};
  EXPECT_EQ(EncodeCacheGenDevice(DType::kFloat16, shape, std::span(ins, 3), std::span(outs, 3), {},
                                 *ews, nullptr)
                .status()
                .code(),
            StatusCode::kInvalidArgument);  // more chunks than the workspace takes
  EXPECT_EQ(EncodeCacheGenDevice(DType::kFloat16, {1, 9, 1, 64}, std::span(ins, 1),
                                 std::span(outs, 1), {}, *ews, nullptr)
                .status()
                .code(),
            StatusCode::kInvalidArgument);  // shape differs from the workspace's
  const void* null_in[] = {nullptr};
  EXPECT_EQ(
      EncodeCacheGenDevice(DType::kFloat16, shape, null_in, std::span(outs, 1), {}, *ews, nullptr)
          .status()
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(FinishEncodeCacheGen(*ews, nullptr).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvdepot::cuda
