// GPU HACK attention with HACK's INT8 math (the homomorphic kernel, cuda/src/hack_attention.cu)
// against the float64 homomorphic references (kvdepot::HackDecodeAttentionBatch /
// HackPrefillAttention with INT8 Q and P) within the tolerance stated in kvdepot/cuda/hack.h:
// ragged decode batches, split KV, the lse, paged == contiguous, causal and chunked prefill;
// NaN query heads and bad sequence descriptors (reported, the others' outputs untouched).
#include "kvdepot/cuda/hack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "hack_attention_test_util.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/hack_attention.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {
namespace {

void CheckDecodeBatch(std::uint32_t dim, std::uint32_t group, DType dtype,
                      const std::vector<std::uint32_t>& lengths, std::uint32_t sinks,
                      std::uint64_t seed) {
  const std::uint32_t kv_heads = 2, q_heads = kv_heads * group, layers = 2, layer = 1;
  std::vector<GpuSeq> seqs;
  std::vector<HackAttentionSeq> descs;
  std::vector<HackChunk> chunks;
  std::uint32_t max_tokens = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const KvTensor t = Synth({layers, lengths[i], kv_heads, dim}, dtype, seed + i);
    HackOptions o;
    o.sinks = i % 2 == 0 ? sinks : 0;
    seqs.push_back(MakeSeq(t, o));
    max_tokens = std::max(max_tokens, lengths[i]);
  }
  for (const GpuSeq& s : seqs) {
    descs.push_back(s.desc);
    chunks.push_back(s.chunk);
  }
  std::vector<HackSequence> batch;
  for (const HackChunk& c : chunks) batch.push_back(HackSequence(&c, 1));
  const std::vector<float> q = RandomQueries(lengths.size() * q_heads * dim, seed * 31);
  AttentionOptions ao;
  ao.q_heads = q_heads;
  Result<AttentionResult> ref = HackDecodeAttentionBatch(batch, layer, q, ao);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const KvTensor shape_only = KvTensor::Zeros(dtype, {layers, 1, kv_heads, dim});
  const GpuResult got = RunDecode(KvFor(shape_only, dtype, layer), descs, max_tokens, q, q_heads);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  std::string label = "decode d";
  for (const std::uint32_t v : {dim, group}) {
    label += std::to_string(v);
    label += " g";
  }
  label.resize(label.size() - 2);
  label += ' ';
  label += DTypeName(dtype);
  label += " sinks ";
  label += std::to_string(sinks);
  label += " T";
  for (std::uint32_t l : lengths) {
    label += ' ';
    label += std::to_string(l);
  }
  ExpectClose(ref->out, got.out, dim, label);
  for (float v : got.lse) EXPECT_TRUE(std::isfinite(v)) << label;
}

TEST(HackGpu, DecodeMatchesTheCpuReference) {
  KVD_REQUIRE_GPU();
  const std::vector<std::uint32_t> lengths = {1, 63, 64, 65, 1000};
  std::uint64_t seed = 1000;
  for (std::uint32_t dim : {64u, 128u}) {
    for (std::uint32_t group : {1u, 4u, 8u}) {
      CheckDecodeBatch(dim, group, DType::kFloat16, lengths, 0, seed += 10);
    }
    CheckDecodeBatch(dim, 8, DType::kBFloat16, lengths, 4, seed += 10);
    CheckDecodeBatch(dim, 4, DType::kFloat16, {130, 64, 7, 300}, 70, seed += 10);  // many sinks
  }
}

TEST(HackGpu, LongDecodeUsesSplitKv) {
  KVD_REQUIRE_GPU();
  CheckDecodeBatch(128, 8, DType::kFloat16, {20000}, 0, 77);
  CheckDecodeBatch(128, 8, DType::kBFloat16, {20000, 3000}, 4, 78);
  CheckDecodeBatch(64, 4, DType::kFloat16, {12345}, 0, 79);
  // About one block per warp (4K tokens, 2 KV heads, 16 splits): twin warps at head_dim 128.
  CheckDecodeBatch(128, 8, DType::kFloat16, {4096}, 0, 80);
  CheckDecodeBatch(128, 8, DType::kBFloat16, {4100}, 4, 81);
  // Exactly ceil(T / 64) units with the last one unquantized (sinks and tail: 4 + 60, 64 + 0,
  // 64 + 2 tokens): the grid's units per split, sized for that count, must reach it.
  CheckDecodeBatch(128, 8, DType::kFloat16, {4096}, 4, 82);
  CheckDecodeBatch(64, 4, DType::kBFloat16, {2048, 130}, 64, 83);
}

TEST(HackGpu, DecodeLseIsTheLogNormaliser) {
  KVD_REQUIRE_GPU();
  // One sequence of identical keys: every score equals q.k, so lse = ln(T) + scale * q.k exactly
  // in exact arithmetic; check it against the plain attention's normaliser computed here.
  const std::uint32_t dim = 64, T = 200;
  KvTensor t = KvTensor::Zeros(DType::kFloat16, {1, T, 1, dim});
  for (std::uint32_t tok = 0; tok < T; ++tok) {
    for (std::uint32_t d = 0; d < dim; ++d) {
      StoreFloat(t, std::uint64_t{tok} * dim + d, 0.0f);  // K = 0
      StoreFloat(t, (std::uint64_t{T} + tok) * dim + d, 0.5f);
    }
  }
  const GpuSeq s = MakeSeq(t, {});
  const std::vector<float> q = RandomQueries(dim, 5);
  const GpuResult got = RunDecode(KvFor(t, DType::kFloat16, 0), {s.desc}, T, q, 1);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_NEAR(got.lse[0], std::log(static_cast<double>(T)), 1e-4);
  for (float v : got.out) EXPECT_NEAR(v, 0.5f, 1e-5f);
}

TEST(HackGpu, PagedWithShuffledBlockTableEqualsContiguous) {
  KVD_REQUIRE_GPU();
  for (std::uint32_t dim : {64u, 128u}) {
    const std::uint32_t layers = 2, kv_heads = 2, group = 4, q_heads = kv_heads * group;
    const std::uint32_t page_blocks = 4, page_tokens = page_blocks * 64;
    const std::vector<std::uint32_t> lengths = {1000, 600, 40};
    std::vector<KvTensor> tensors;
    std::vector<GpuSeq> contiguous;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      tensors.push_back(Synth({layers, lengths[i], kv_heads, dim}, DType::kFloat16, 500 + i));
      contiguous.push_back(MakeSeq(tensors.back(), {}));
    }
    // The page pool: every page of every sequence, at shuffled positions, and 3 unused pages.
    const PagePool pool = MakePagePool(tensors, page_blocks, 3, dim);
    HackKvCache kv = KvFor(tensors[0], DType::kFloat16, 1);
    std::vector<HackAttentionSeq> contig_descs, paged_descs;
    for (const GpuSeq& s : contiguous) {
      contig_descs.push_back(s.desc);
      HackAttentionSeq p = s.desc;
      p.codes = p.scales = p.sums = nullptr;  // found through the block table
      paged_descs.push_back(p);
    }
    const std::vector<float> q = RandomQueries(lengths.size() * q_heads * dim, 99 + dim);
    const GpuResult want = RunDecode(kv, contig_descs, 1000, q, q_heads);
    ASSERT_TRUE(want.status.ok()) << want.status.ToString();
    pool.Attach(kv);
    const GpuResult got = RunDecode(kv, paged_descs, 1000, q, q_heads);
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    EXPECT_EQ(std::memcmp(got.out.data(), want.out.data(), got.out.size() * 4), 0)
        << "paged output differs from contiguous (d " << dim << ")";
    // And both agree with the CPU over the sequences cut into 256-token chunks.
    std::vector<std::vector<HackChunk>> chunked(lengths.size());
    std::vector<HackSequence> batch;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      for (std::uint32_t start = 0; start < lengths[i]; start += page_tokens) {
        const std::uint32_t n = std::min(page_tokens, lengths[i] - start);
        KvTensor part = KvTensor::Zeros(DType::kFloat16, {layers, n, kv_heads, dim});
        const std::size_t row = std::size_t{kv_heads} * dim * 2;
        for (std::uint32_t lk = 0; lk < layers * 2; ++lk) {
          std::memcpy(part.data.data() + lk * n * row,
                      tensors[i].data.data() + (std::size_t{lk} * lengths[i] + start) * row,
                      n * row);
        }
        chunked[i].push_back(*UnpackHack(*ParseContainer(*EncodeHack(part.view(), {}))));
      }
      batch.push_back(chunked[i]);
    }
    AttentionOptions ao;
    ao.q_heads = q_heads;
    Result<AttentionResult> ref = HackDecodeAttentionBatch(batch, 1, q, ao);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ExpectClose(ref->out, got.out, dim, "paged d" + std::to_string(dim));

    // A table entry outside the pool is reported.
    std::vector<std::int32_t> table = pool.table;
    table[pool.max_pages + 1] = static_cast<std::int32_t>(pool.num_pages);
    DeviceBuffer d_bad = Dev(table.data(), table.size());
    kv.block_tables = d_bad.as<std::int32_t>();
    const GpuResult bad = RunDecode(kv, paged_descs, 1000, q, q_heads);
    EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument) << bad.status.ToString();
    EXPECT_NE(bad.status.message().find("sequence 1"), std::string::npos) << bad.status.ToString();
  }
}

TEST(HackGpu, PrefillMatchesTheCpuReference) {
  KVD_REQUIRE_GPU();
  std::uint64_t seed = 2000;
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  for (std::uint32_t dim : {64u, 128u}) {
    for (std::uint32_t group : {1u, 4u, 8u}) {
      for (std::uint32_t sinks : {0u, 4u}) {
        const std::uint32_t T = 300, kv_heads = 2, q_heads = kv_heads * group;
        const KvTensor t = Synth({2, T, kv_heads, dim}, DType::kFloat16, seed++);
        HackOptions o;
        o.sinks = sinks;
        const GpuSeq s = MakeSeq(t, o);
        struct Range {
          std::uint32_t first, n;
        };
        for (const Range r : {Range{0, T}, Range{223, 77}, Range{64, 1}}) {
          const std::vector<float> q = RandomQueries(std::size_t{r.n} * q_heads * dim, seed * 13);
          AttentionOptions ao;
          ao.q_heads = q_heads;
          Result<AttentionResult> ref =
              HackPrefillAttention(HackSequence(&s.chunk, 1), 1, q, r.first, ao);
          ASSERT_TRUE(ref.ok()) << ref.status().ToString();
          const GpuResult got =
              RunPrefill(KvFor(t, DType::kFloat16, 1), s.desc, r.first, q, q_heads, *ws, false,
                         DType::kFloat32, HackPrefillMath::kHomomorphicInt8);
          ASSERT_TRUE(got.status.ok()) << got.status.ToString();
          for (float v : got.lse) ASSERT_TRUE(std::isfinite(v));
          ExpectClose(ref->out, got.out, dim,
                      "prefill d" + std::to_string(dim) + " g" + std::to_string(group) + " sinks " +
                          std::to_string(sinks) + " first " + std::to_string(r.first) + " n " +
                          std::to_string(r.n));
        }
        // Prefill past the sequence end is an argument error.
        HackPrefillArgs a;
        a.seq = s.desc;
        a.queries = 10;
        a.first_position = T - 5;
        a.q_heads = q_heads;
        a.q = reinterpret_cast<const float*>(s.desc.codes);
        a.out = reinterpret_cast<float*>(0x100);
        EXPECT_EQ(EnqueueHackPrefillAttention(KvFor(t, DType::kFloat16, 1), a, *ws, nullptr).code(),
                  StatusCode::kInvalidArgument);
        // So is an output that is not 16-byte aligned (the fp16 kernels store rows in bulk).
        a.first_position = 0;
        a.out = reinterpret_cast<float*>(0x104);
        const Status misaligned =
            EnqueueHackPrefillAttention(KvFor(t, DType::kFloat16, 1), a, *ws, nullptr);
        EXPECT_EQ(misaligned.code(), StatusCode::kInvalidArgument);
        EXPECT_NE(misaligned.message().find("16-byte aligned"), std::string::npos)
            << misaligned.ToString();
      }
    }
  }
}

// Chunked prefill after a prefix hit: T_new queries at positions T_prefix .. over a sequence of
// T_prefix + T_new tokens (the new tokens quantized with the prefix into whole blocks; the
// unfinished last block stays unquantized in the tail, in the chunk dtype), on awkward shapes:
// T_new in {1, 17, 255} x T_prefix in {0, 1, 64, 1000}, both head_dims, GQA group 8, fp16 and
// bf16 KV.
TEST(HackGpu, ChunkedPrefillOverACachedPrefixMatchesTheCpuReference) {
  KVD_REQUIRE_GPU();
  std::uint64_t seed = 9000;
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  for (std::uint32_t dim : {64u, 128u}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (std::uint32_t prefix : {0u, 1u, 64u, 1000u}) {
        for (std::uint32_t fresh : {1u, 17u, 255u}) {
          const std::uint32_t T = prefix + fresh, kv_heads = 1, group = 8;
          const std::uint32_t q_heads = kv_heads * group;
          const KvTensor t = Synth({1, T, kv_heads, dim}, dtype, seed++);
          const GpuSeq s = MakeSeq(t, {});
          const std::vector<float> q = RandomQueries(std::size_t{fresh} * q_heads * dim, seed * 7);
          AttentionOptions ao;
          ao.q_heads = q_heads;
          Result<AttentionResult> ref =
              HackPrefillAttention(HackSequence(&s.chunk, 1), 0, q, prefix, ao);
          ASSERT_TRUE(ref.ok()) << ref.status().ToString();
          // No lse buffer here (PrefillMatchesTheCpuReference checks the lse is written).
          const GpuResult got =
              RunPrefill(KvFor(t, dtype, 0), s.desc, prefix, q, q_heads, *ws, false,
                         DType::kFloat32, HackPrefillMath::kHomomorphicInt8, false);
          ASSERT_TRUE(got.status.ok()) << got.status.ToString();
          ExpectClose(ref->out, got.out, dim,
                      "chunked prefill d" + std::to_string(dim) + " " +
                          std::string(DTypeName(dtype)) + " prefix " + std::to_string(prefix) +
                          " new " + std::to_string(fresh));
        }
      }
    }
  }
}

TEST(HackGpu, NonFiniteQueryHeadsGiveNanOutputs) {
  KVD_REQUIRE_GPU();
  const std::uint32_t dim = 128, kv_heads = 2, group = 4, q_heads = kv_heads * group;
  const KvTensor t = Synth({1, 500, kv_heads, dim}, DType::kFloat16, 61);
  const GpuSeq s = MakeSeq(t, {});
  std::vector<float> q = RandomQueries(q_heads * dim, 62);
  q[1 * dim + 17] = std::numeric_limits<float>::quiet_NaN();
  q[6 * dim + 0] = -std::numeric_limits<float>::infinity();
  const GpuResult got = RunDecode(KvFor(t, DType::kFloat16, 0), {s.desc}, 500, q, q_heads);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  std::vector<float> clean = q;
  std::vector<bool> skip(q_heads, false);
  for (std::uint32_t h : {1u, 6u}) {
    skip[h] = true;
    std::fill(clean.begin() + h * dim, clean.begin() + (h + 1) * dim, 0.0f);
    for (std::uint32_t d = 0; d < dim; ++d) EXPECT_TRUE(std::isnan(got.out[h * dim + d]));
    EXPECT_TRUE(std::isnan(got.lse[h]));
  }
  AttentionOptions ao;
  ao.q_heads = q_heads;
  Result<AttentionResult> ref = HackDecodeAttention(HackSequence(&s.chunk, 1), 0, clean, ao);
  ASSERT_TRUE(ref.ok());
  ExpectClose(ref->out, got.out, dim, "nan heads", skip);
}

TEST(HackGpu, BadSequenceDescriptorsAreReported) {
  KVD_REQUIRE_GPU();
  const std::uint32_t dim = 64, kv_heads = 1;
  const KvTensor t = Synth({1, 300, kv_heads, dim}, DType::kFloat16, 71);
  const GpuSeq s = MakeSeq(t, {});
  const std::vector<float> q = RandomQueries(2 * dim, 72);
  const HackKvCache kv = KvFor(t, DType::kFloat16, 0);
  // tokens beyond max_tokens: reported (the first bad sequence is named), outputs NaN.
  GpuResult r = RunDecode(kv, {s.desc, s.desc}, 299, q, 1);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("sequence 0"), std::string::npos) << r.status.ToString();
  EXPECT_TRUE(std::isnan(r.out[0]));
  HackAttentionSeq no_tail = s.desc;
  no_tail.tail = nullptr;
  r = RunDecode(kv, {s.desc, no_tail}, 300, q, 1);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("sequence 1: tail"), std::string::npos) << r.status.ToString();
  EXPECT_FALSE(std::isnan(r.out[0]));
  EXPECT_TRUE(std::isnan(r.out[dim]));
  r = RunDecode(kv, {s.desc, s.desc}, 300, q, 1);
  EXPECT_TRUE(r.status.ok()) << r.status.ToString();
}

}  // namespace
}  // namespace kvdepot::cuda
