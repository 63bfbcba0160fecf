// Leased decode (cuda/leased.h): containers in device memory, inspected once, decoded in batches
// of mixed codecs into contiguous and paged targets; every result against the CPU reference.
// The IPC path between two processes is in gpu_tier_test.cc; here the containers sit in this
// process's device memory, which is what an imported lease looks like to the decoder.
#include "kvdepot/cuda/leased.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gpu_test_util.h"
#include "kvdepot/base/byte_order.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/synth.h"

namespace kvdepot::cuda {
namespace {

constexpr std::uint64_t kSlot = 4096;  // GPU-tier ranges are 4 KiB aligned

// Containers copied into one device buffer at 4 KiB-aligned offsets, like a GPU-tier pool.
struct Pool {
  DeviceBuffer buffer;
  std::vector<DeviceContainer> containers;
};

Pool Upload(const std::vector<std::vector<std::byte>>& containers) {
  std::vector<std::uint64_t> at;
  std::uint64_t size = 0;
  for (const auto& c : containers) {
    at.push_back(size);
    size += (c.size() + kSlot - 1) / kSlot * kSlot;
  }
  Pool p;
  p.buffer = std::move(DeviceBuffer::Allocate(size).value());
  for (std::size_t i = 0; i < containers.size(); ++i) {
    std::byte* d = p.buffer.as<std::byte>() + at[i];
    EXPECT_EQ(cudaMemcpy(d, containers[i].data(), containers[i].size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    p.containers.push_back({d, containers[i].size()});
  }
  return p;
}

// Containers uploaded and inspected: what a client holds after leasing them.
struct Held {
  Pool pool;
  std::vector<LeasedChunk> chunks;
};

Held UploadAndInspect(const std::vector<std::vector<std::byte>>& containers) {
  Held h{Upload(containers), {}};
  auto chunks = InspectLeasedChunks(h.pool.containers, nullptr);
  EXPECT_TRUE(chunks.ok()) << chunks.status().ToString();
  if (chunks.ok()) h.chunks = std::move(*chunks);
  return h;
}

std::vector<std::byte> Encode(const KvShape& shape, DType dtype, CodecId codec,
                              std::uint64_t seed) {
  const KvTensor t = *SynthesizeKv(SynthOptions{shape, seed, dtype});
  EncodeOptions o;
  o.codec = codec;
  return *EncodeChunk(t.view(), o);
}

std::vector<std::byte> Download(const void* d, std::uint64_t bytes) {
  std::vector<std::byte> h(bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// A paged target with padded rows and pages, shuffled disjoint pages per chunk.
struct Paged {
  KvShape shape;
  std::uint32_t page_size = 16, num_pages = 0;
  std::uint64_t row_stride = 0, page_stride = 0, esize = 2;
  std::vector<std::vector<std::int32_t>> tables;
  std::vector<DeviceBuffer> d_tables, caches;
  std::vector<const std::int32_t*> table_ptrs;
  std::vector<void*> k, v;
  CacheGenDecodeTarget target;

  Paged(const KvShape& s, std::uint32_t chunks, DType dtype, std::uint32_t row_pad)
      : shape(s), esize(DTypeSize(dtype)) {
    const std::uint32_t per_chunk = (s.tokens + page_size - 1) / page_size;
    num_pages = per_chunk * chunks + 3;
    row_stride = std::uint64_t{s.kv_heads} * s.head_dim + row_pad;
    page_stride = page_size * row_stride + row_pad;
    std::vector<std::int32_t> pages(num_pages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(11));
    for (std::uint32_t i = 0; i < chunks; ++i) {
      tables.emplace_back(pages.begin() + i * per_chunk, pages.begin() + (i + 1) * per_chunk);
      d_tables.push_back(std::move(DeviceBuffer::Allocate(per_chunk * 4).value()));
      EXPECT_EQ(cudaMemcpy(d_tables.back().data(), tables[i].data(), per_chunk * 4,
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      table_ptrs.push_back(d_tables.back().as<const std::int32_t>());
    }
    for (std::uint32_t l = 0; l < s.layers * 2; ++l) {
      caches.push_back(std::move(DeviceBuffer::Allocate(cache_bytes()).value()));
      EXPECT_EQ(cudaMemset(caches.back().data(), 0x5a, cache_bytes()), cudaSuccess);
      (l < s.layers ? k : v).push_back(caches.back().data());
    }
    target.dtype = dtype;
    target.k_cache = k;
    target.v_cache = v;
    target.block_tables = table_ptrs;
    target.page_size = page_size;
    target.num_pages = num_pages;
    target.page_stride = page_stride;
    target.row_stride = row_stride;
  }
  std::uint64_t cache_bytes() const { return num_pages * page_stride * esize; }

  // Mismatching elements of chunk i against `ref` ([layers][2][tokens][channels] of the target
  // dtype).
  std::uint64_t Mismatches(std::uint32_t i, const std::vector<std::byte>& ref) const {
    const std::uint64_t channels = std::uint64_t{shape.kv_heads} * shape.head_dim;
    std::uint64_t bad = 0;
    for (std::uint32_t l = 0; l < shape.layers; ++l) {
      for (std::uint32_t kv = 0; kv < 2; ++kv) {
        const auto cache = Download(kv == 0 ? k[l] : v[l], cache_bytes());
        for (std::uint32_t t = 0; t < shape.tokens; ++t) {
          const std::uint64_t row =
              tables[i][t / page_size] * page_stride + (t % page_size) * row_stride;
          const std::uint64_t src = ((std::uint64_t{l} * 2 + kv) * shape.tokens + t) * channels;
          bad += std::memcmp(cache.data() + row * esize, ref.data() + src * esize,
                             channels * esize) != 0;
        }
      }
    }
    return bad;
  }
};

// The three codecs in one batch, awkward shape (tokens not a multiple of the HACK partition or
// the page size; two heads), fp16 and bf16.
TEST(LeasedDecode, MixedBatchContiguousEqualsTheCpuDecode) {
  KVD_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const KvShape shape{3, 200, 2, 64};
    std::vector<std::vector<std::byte>> containers = {
        Encode(shape, dtype, CodecId::kCacheGen, 1), Encode(shape, dtype, CodecId::kRaw, 2),
        Encode(shape, dtype, CodecId::kHackInt2, 3), Encode(shape, dtype, CodecId::kCacheGen, 4)};
    const Held held = UploadAndInspect(containers);
    ASSERT_EQ(held.chunks.size(), 4u);
    EXPECT_EQ(held.chunks[2].codec, CodecId::kHackInt2);
    const std::uint64_t bytes = shape.elements() * DTypeSize(dtype);
    DeviceBuffer out = std::move(DeviceBuffer::Allocate(bytes * 4).value());
    std::vector<void*> outs;
    for (int i = 0; i < 4; ++i) outs.push_back(out.as<std::byte>() + i * bytes);
    auto decoder = LeasedDecoder::Create(8, 4);
    ASSERT_TRUE(decoder.ok());
    CacheGenDecodeTarget target;
    target.dtype = dtype;
    target.contiguous = outs;
    for (int round = 0; round < 2; ++round) {  // inspected once, decoded twice
      ASSERT_EQ(cudaMemset(out.data(), 0xee, bytes * 4), cudaSuccess);
      const Status s = decoder->Decode(held.chunks, target, nullptr);
      ASSERT_TRUE(s.ok()) << s.ToString();
      const auto got = Download(out.data(), bytes * 4);
      for (int i = 0; i < 4; ++i) {
        const KvTensor ref = *DecodeChunk(containers[i]);
        EXPECT_EQ(std::memcmp(got.data() + i * bytes, ref.data.data(), bytes), 0)
            << "chunk " << i << " " << DTypeName(dtype) << " round " << round;
      }
    }
  }
}

TEST(LeasedDecode, PagedTargetEqualsTheCpuDecodeRearranged) {
  KVD_REQUIRE_GPU();
  for (std::uint32_t pad : {0u, 3u}) {  // 16-byte rows, then 2-byte words
    const KvShape shape{2, 100, 2, 64};
    const DType dtype = DType::kFloat16;
    std::vector<std::vector<std::byte>> containers = {
        Encode(shape, dtype, CodecId::kHackInt2, 5), Encode(shape, dtype, CodecId::kRaw, 6),
        Encode(shape, dtype, CodecId::kCacheGen, 7), Encode(shape, dtype, CodecId::kHackInt2, 8),
        Encode(shape, dtype, CodecId::kRaw, 9)};
    const Held held = UploadAndInspect(containers);
    ASSERT_EQ(held.chunks.size(), 5u);
    Paged paged(shape, 5, dtype, pad);
    auto decoder = LeasedDecoder::Create(5, 2);
    ASSERT_TRUE(decoder.ok());
    const Status s = decoder->Decode(held.chunks, paged.target, nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (std::uint32_t i = 0; i < 5; ++i) {
      const KvTensor ref = *DecodeChunk(containers[i]);
      EXPECT_EQ(paged.Mismatches(i, ref.data), 0u) << "chunk " << i << " pad " << pad;
    }
    // Pages no chunk owns keep their bytes.
    const auto cache = Download(paged.k[0], paged.cache_bytes());
    std::vector<bool> owned(paged.num_pages, false);
    for (const auto& t : paged.tables) {
      for (std::int32_t p : t) owned[p] = true;
    }
    for (std::uint32_t p = 0; p < paged.num_pages; ++p) {
      if (owned[p]) continue;
      const std::byte* page = cache.data() + p * paged.page_stride * 2;
      EXPECT_TRUE(std::all_of(page, page + paged.page_stride * 2,
                              [](std::byte b) { return b == std::byte{0x5a}; }))
          << "page " << p;
    }
  }
}

TEST(LeasedDecode, HackToAnotherDTypeEqualsTheCpuDequantize) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 256, 2, 128};
  std::vector<std::vector<std::byte>> containers = {
      Encode(shape, DType::kBFloat16, CodecId::kHackInt2, 12)};
  const Held held = UploadAndInspect(containers);
  ASSERT_EQ(held.chunks.size(), containers.size());
  const std::uint64_t bytes = shape.elements() * 4;
  DeviceBuffer out = std::move(DeviceBuffer::Allocate(bytes).value());
  void* const outs[] = {out.data()};
  CacheGenDecodeTarget target;
  target.dtype = DType::kFloat32;
  target.contiguous = outs;
  auto decoder = LeasedDecoder::Create(1, 2);
  ASSERT_TRUE(decoder->Decode(held.chunks, target, nullptr).ok());
  const KvTensor ref = DequantizeHack(*UnpackHack(*ParseContainer(containers[0])), DType::kFloat32);
  EXPECT_EQ(Download(out.data(), bytes), ref.data);
}

TEST(LeasedDecode, BadMetadataIsCorruptionNamingTheContainer) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 64, 2, 64};
  auto good = Encode(shape, DType::kFloat16, CodecId::kHackInt2, 20);
  auto bad_scales = good;
  {
    const ContainerView view = *ParseContainer(good);
    const HackStructure st = *InspectHack(view);
    // An fp16 NaN scale in partition 0 (the checksums are not what catches it here).
    bad_scales[st.scales.offset] = std::byte{0xff};
    bad_scales[st.scales.offset + 1] = std::byte{0x7f};
  }
  auto bad_header = Encode(shape, DType::kFloat16, CodecId::kCacheGen, 21);
  bad_header[0] = std::byte{'X'};  // magic
  auto truncated = Encode(shape, DType::kFloat16, CodecId::kCacheGen, 22);
  truncated.resize(truncated.size() / 2);
  const std::vector<std::vector<std::byte>> cases[] = {
      {good, bad_scales}, {bad_header}, {good, good, truncated}};
  const std::size_t index[] = {1, 0, 2};
  for (int c = 0; c < 3; ++c) {
    Pool pool = Upload(cases[c]);
    auto chunks = InspectLeasedChunks(pool.containers, nullptr);
    ASSERT_FALSE(chunks.ok()) << "case " << c;
    EXPECT_EQ(chunks.status().code(), StatusCode::kCorruption) << chunks.status().ToString();
    EXPECT_NE(chunks.status().message().find("leased container " + std::to_string(index[c])),
              std::string::npos)
        << chunks.status().ToString();
  }
  const DeviceContainer null{nullptr, 100};
  EXPECT_EQ(InspectLeasedChunks(std::span(&null, 1), nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

// The scales are checked on the device (they never reach the host): every entry the CPU's
// InspectHack rejects is rejected with the same message, every entry it accepts is accepted —
// over the boundary cases of the rule (-0, subnormals, infinities, NaNs, min + 3 * scale at
// 65520) and random bit patterns, one candidate per chunk at a chunk-dependent partition; and in a
// batch with several bad chunks the first is named.
TEST(LeasedDecode, DeviceScalesCheckAgreesWithTheCpu) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 64, 2, 64};
  const auto good = Encode(shape, DType::kFloat16, CodecId::kHackInt2, 30);
  const HackStructure st = *InspectHack(*ParseContainer(good));
  const std::uint64_t entries = st.scales.length / 4;
  auto entry = [](std::uint16_t scale, std::uint16_t min) {
    return std::uint32_t{scale} | std::uint32_t{min} << 16;
  };
  std::vector<std::uint32_t> candidates = {
      entry(0x0000, 0x0000), entry(0x8000, 0x0000),                         // 0 and -0 scale
      entry(0x0001, 0x8001),                                                // subnormals
      entry(0x7c00, 0x0000), entry(0x0000, 0x7c00), entry(0x0000, 0xfc00),  // infinities
      entry(0x7e00, 0x0000), entry(0x0000, 0x7e01),                         // NaNs
      entry(0x7400, 0x73fe),  // 16384 and 16352: min + 3 * scale = 65504, valid
      entry(0x7400, 0x73ff),  // 16384 and 16368: 65520, invalid
      entry(0x7bff, 0xfbff),  // 65504 and -65504: 131008, invalid
      entry(0x6fff, 0x7bff),  // the host's fast path boundary (scale < 8192, |min| < 8192)
      entry(0x7000, 0x0000), entry(0x3c00, 0xf000), entry(0x3c00, 0x7000)};
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) candidates.push_back(static_cast<std::uint32_t>(rng()));
  std::vector<std::vector<std::byte>> batch;
  std::vector<bool> cpu_ok;
  std::vector<std::string> cpu_message;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    auto bytes = good;
    const std::uint64_t at = st.scales.offset + (c * 7919 % entries) * 4;
    StoreLE<std::uint32_t>(bytes.data() + at, candidates[c]);
    const auto cpu = InspectHack(*ParseContainer(bytes, ParseOptions{false}));
    cpu_ok.push_back(cpu.ok());
    cpu_message.push_back(cpu.ok() ? "" : cpu.status().message());
    batch.push_back(std::move(bytes));
  }
  const Pool pool = Upload(batch);
  int rejected = 0;
  for (std::size_t c = 0; c < batch.size(); ++c) {
    const auto gpu = InspectLeasedChunks(std::span(&pool.containers[c], 1), nullptr);
    ASSERT_EQ(gpu.ok(), cpu_ok[c]) << "candidate " << c << " = " << candidates[c];
    if (gpu.ok()) continue;
    ++rejected;
    EXPECT_EQ(gpu.status().code(), StatusCode::kCorruption);
    EXPECT_EQ(gpu.status().message(), "leased container 0: " + cpu_message[c]);
  }
  EXPECT_GT(rejected, 8);  // the rule is exercised both ways
  EXPECT_LT(rejected, static_cast<int>(batch.size()));

  // Several bad chunks in one batch (and chunks of other codecs): the first is named.
  std::vector<std::size_t> bad;
  for (std::size_t c = 0; c < batch.size() && bad.size() < 3; ++c) {
    if (!cpu_ok[c]) bad.push_back(c);
  }
  ASSERT_EQ(bad.size(), 3u);
  const std::vector<std::vector<std::byte>> mixed = {
      good,          Encode(shape, DType::kFloat16, CodecId::kCacheGen, 31), batch[bad[1]], good,
      batch[bad[0]], Encode(shape, DType::kFloat16, CodecId::kRaw, 32),      batch[bad[2]]};
  const Pool mixed_pool = Upload(mixed);
  std::size_t failed = 99;
  const auto gpu = InspectLeasedChunks(mixed_pool.containers, nullptr, &failed);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(failed, 2u);
  EXPECT_EQ(gpu.status().message(), "leased container 2: " + cpu_message[bad[1]]);
}

TEST(LeasedDecode, OutOfRangePagesAndMisuseAreReported) {
  KVD_REQUIRE_GPU();
  const KvShape shape{1, 32, 1, 64};
  std::vector<std::vector<std::byte>> containers = {
      Encode(shape, DType::kFloat16, CodecId::kRaw, 30)};
  const Held held = UploadAndInspect(containers);
  ASSERT_EQ(held.chunks.size(), containers.size());
  Paged paged(shape, 1, DType::kFloat16, 0);
  const std::int32_t bad[] = {0, static_cast<std::int32_t>(paged.num_pages)};
  ASSERT_EQ(cudaMemcpy(paged.d_tables[0].data(), bad, sizeof(bad), cudaMemcpyHostToDevice),
            cudaSuccess);
  auto decoder = LeasedDecoder::Create(1, 1);
  Status s = decoder->Decode(held.chunks, paged.target, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("num_pages"), std::string::npos) << s.ToString();

  // The decoder is usable again; misuse is refused with kInvalidArgument.
  DeviceBuffer out = std::move(DeviceBuffer::Allocate(shape.elements() * 4).value());
  void* const outs[] = {out.data()};
  CacheGenDecodeTarget target;
  target.contiguous = outs;
  target.dtype = DType::kBFloat16;  // raw chunks are copied, not converted
  EXPECT_EQ(decoder->Decode(held.chunks, target, nullptr).code(), StatusCode::kInvalidArgument);
  target.dtype = DType::kFloat16;
  ASSERT_TRUE(decoder->Enqueue(held.chunks, target, nullptr).ok());
  EXPECT_EQ(decoder->Enqueue(held.chunks, target, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(decoder->Finish(nullptr).ok());
  const std::vector<LeasedChunk> two = {held.chunks[0], held.chunks[0]};
  void* const two_outs[] = {out.data(), out.data()};
  target.contiguous = two_outs;
  EXPECT_EQ(decoder->Decode(two, target, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(LeasedDecode, HackSequencePointsAtTheContainersSections) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 300, 2, 128};  // 4 blocks and a 44-token tail
  std::vector<std::vector<std::byte>> containers = {
      Encode(shape, DType::kFloat16, CodecId::kHackInt2, 50),
      Encode(shape, DType::kFloat16, CodecId::kCacheGen, 51)};
  const Held held = UploadAndInspect(containers);
  ASSERT_EQ(held.chunks.size(), containers.size());
  auto seq = LeasedHackSequence(held.chunks[0]);
  ASSERT_TRUE(seq.ok());
  const ContainerView view = *ParseContainer(containers[0]);
  const auto* base = reinterpret_cast<const std::uint8_t*>(held.pool.containers[0].data);
  EXPECT_EQ(seq->codes, base + view.Find(SectionKind::kCodes)->offset);
  EXPECT_EQ(seq->scales, base + view.Find(SectionKind::kScales)->offset);
  EXPECT_EQ(seq->sums, base + view.Find(SectionKind::kSums)->offset);
  EXPECT_EQ(seq->tail, base + view.Find(SectionKind::kTail)->offset);
  EXPECT_EQ(seq->tokens, 300u);
  EXPECT_EQ(LeasedHackSequence(held.chunks[1]).status().code(), StatusCode::kInvalidArgument);
}

TEST(LeasedDecode, DecodeLeasedChunkHandlesEveryCodec) {
  KVD_REQUIRE_GPU();
  const KvShape shape{2, 130, 4, 64};
  for (CodecId codec : {CodecId::kRaw, CodecId::kCacheGen, CodecId::kHackInt2}) {
    std::vector<std::vector<std::byte>> containers = {Encode(shape, DType::kFloat16, codec, 40)};
    Pool pool = Upload(containers);
    const std::uint64_t bytes = shape.elements() * 2;
    DeviceBuffer out = std::move(DeviceBuffer::Allocate(bytes).value());
    const Status s = DecodeLeasedChunk(pool.containers[0].data, pool.containers[0].bytes,
                                       out.data(), bytes, nullptr);
    ASSERT_TRUE(s.ok()) << CodecName(codec) << ": " << s.ToString();
    EXPECT_EQ(Download(out.data(), bytes), DecodeChunk(containers[0])->data) << CodecName(codec);
    EXPECT_EQ(DecodeLeasedChunk(pool.containers[0].data, pool.containers[0].bytes, out.data(),
                                bytes - 2, nullptr)
                  .code(),
              StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvdepot::cuda
