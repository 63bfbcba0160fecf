// The dequantize-on-load decode (HackDecodeMath::kDequantFp16, cuda/src/hack_decode_fp16.cu)
// within its tolerance of attention over the dequantized KV (kvdepot::DecodeAttention over
// DequantizeHack): ragged batches, extreme magnitudes, split KV, paged == contiguous, no worse
// than the homomorphic path against exact attention; back-to-back calls of both maths (each waits
// for the previous one under programmatic dependent launch).
#include "kvdepot/cuda/hack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "hack_attention_test_util.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/hack_attention.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {
namespace {

// A ragged decode batch through the fp16 path against DecodeAttention over each sequence's
// DequantizeHack(chunk, fp32) (float64): relative L2 and worst (query, head) within
// kHackDequantDecode*Tolerance; the lse is finite. Sinks on every other sequence.
// kv_max > 0: each sequence's synthesized KV is scaled (before quantization) so that its largest
// magnitude is kv_max, and the queries by the inverse of the first sequence's factor (the scores
// keep their size).
void CheckDecodeFp16(std::uint32_t dim, std::uint32_t group, DType dtype,
                     const std::vector<std::uint32_t>& lengths, std::uint32_t sinks,
                     std::uint64_t seed, float kv_max = 0.0f) {
  const std::uint32_t kv_heads = 2, q_heads = kv_heads * group, layers = 2, layer = 1;
  std::vector<GpuSeq> seqs;
  std::vector<HackAttentionSeq> descs;
  std::vector<KvTensor> deq;
  std::uint32_t max_tokens = 0;
  float q_factor = 1.0f;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    KvTensor t = Synth({layers, lengths[i], kv_heads, dim}, dtype, seed + i);
    if (kv_max > 0.0f) {
      auto value = [&](std::uint64_t e) {
        const auto bits = LoadLE<std::uint16_t>(t.data.data() + e * 2);
        return dtype == DType::kBFloat16 ? Bf16BitsToFloat(bits) : HalfBitsToFloat(bits);
      };
      float largest = 0.0f;
      for (std::uint64_t e = 0; e < t.shape.elements(); ++e) {
        largest = std::max(largest, std::fabs(value(e)));
      }
      for (std::uint64_t e = 0; e < t.shape.elements(); ++e) {
        StoreFloat(t, e, value(e) * (kv_max / largest));
      }
      if (i == 0) q_factor = largest / kv_max;
    }
    HackOptions o;
    o.sinks = i % 2 == 0 ? sinks : 0;
    seqs.push_back(MakeSeq(t, o));
    descs.push_back(seqs.back().desc);
    deq.push_back(DequantizeHack(seqs.back().chunk, DType::kFloat32));
    max_tokens = std::max(max_tokens, lengths[i]);
  }
  std::vector<KvTensorView> views;
  for (const KvTensor& t : deq) views.push_back(t.view());
  std::vector<float> q = RandomQueries(lengths.size() * q_heads * dim, seed * 31);
  for (float& x : q) x *= q_factor;
  AttentionOptions ao;
  ao.q_heads = q_heads;
  Result<AttentionResult> ref = DecodeAttentionBatch(views, layer, q, ao);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const KvTensor shape_only = KvTensor::Zeros(dtype, {layers, 1, kv_heads, dim});
  const GpuResult got = RunDecode(KvFor(shape_only, dtype, layer), descs, max_tokens, q, q_heads,
                                  HackDecodeMath::kDequantFp16);
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  std::string label = "fp16 decode d" + std::to_string(dim) + " g" + std::to_string(group) + " " +
                      std::string(DTypeName(dtype)) + " sinks " + std::to_string(sinks) +
                      " kv max " + std::to_string(kv_max) + " T";
  for (std::uint32_t l : lengths) {
    label += ' ';  // not `" " + std::to_string(l)`: GCC 12 -O3 -Wrestrict false positive
    label += std::to_string(l);
  }
  ExpectRowsClose(ref->out, got.out, dim, label, kHackDequantDecodeRelL2Tolerance,
                  kHackDequantDecodeHeadTolerance);
  for (float v : got.lse) EXPECT_TRUE(std::isfinite(v)) << label;
}

TEST(HackGpu, DequantFp16DecodeMatchesAttentionOverTheDequantizedKv) {
  KVD_REQUIRE_GPU();
  const std::vector<std::uint32_t> lengths = {1, 17, 255, 1000, 64, 65};
  std::uint64_t seed = 15000;
  for (std::uint32_t dim : {64u, 128u}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (std::uint32_t group : {8u, 3u, 1u}) {
        CheckDecodeFp16(dim, group, dtype, lengths, 0, seed += 10);
        CheckDecodeFp16(dim, group, dtype, lengths, 4, seed += 10);
      }
    }
    CheckDecodeFp16(dim, 4, DType::kFloat16, {130, 64, 7, 300}, 70, seed += 10);  // many sinks
  }
}

// The kernel folds K's scales into the query (q * scale in fp16) and keeps V's codes exact: no
// range limit on q beyond finiteness, and tiny scales (fp16 subnormal products) lose nothing
// that matters. KV up to 60000 (scales near fp16's top), and KV within +-0.01 / +-0.0001 under
// queries thousands of times larger (K scales ~1e-3 / 1e-5: q * scale products in fp16's
// subnormal range); the scores keep their size, so the reference tolerances stay meaningful.
TEST(HackGpu, DequantFp16DecodeTakesExtremeMagnitudes) {
  KVD_REQUIRE_GPU();
  const std::vector<std::uint32_t> lengths = {1000, 65, 300};
  for (std::uint32_t dim : {64u, 128u}) {
    CheckDecodeFp16(dim, 8, DType::kFloat16, lengths, 4, 16100 + dim, 60000.0f);
    CheckDecodeFp16(dim, 4, DType::kBFloat16, lengths, 4, 16200 + dim, 60000.0f);
    CheckDecodeFp16(dim, 8, DType::kFloat16, lengths, 4, 16300 + dim, 0.01f);
    CheckDecodeFp16(dim, 3, DType::kBFloat16, lengths, 0, 16400 + dim, 0.0001f);
  }
}

TEST(HackGpu, DequantFp16LongDecodeUsesSplitKv) {
  KVD_REQUIRE_GPU();
  CheckDecodeFp16(128, 8, DType::kFloat16, {20000}, 0, 177);
  CheckDecodeFp16(128, 8, DType::kBFloat16, {20000, 3000}, 4, 178);
  CheckDecodeFp16(64, 3, DType::kFloat16, {12345}, 0, 179);
  // Splits of more than 128 blocks (split sequences) or 256 (whole ones) get 12 warps
  // (EnqueueHackDecodeAttention); the ones above, at most 8 and the kernel that prefetches before
  // its dependency wait. 8 sequences (16 pairs: 8 splits) sized for the longest: 782 blocks, 98 per
  // split, a split sequence on 8 warps (as 128K tokens at batch 1 run).
  CheckDecodeFp16(128, 8, DType::kBFloat16, {50000, 1, 17, 65, 255, 1000, 64, 130}, 4, 180);
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  // A split sequence of more than 128 blocks per split: the 12-warp kernel that prefetches too.
  // sms / 16 + 1 sequences (more than sms / 8 pairs: at most 7 splits), sized for the longest's
  // 938 units: 134 or more per split (a chunk holds at most kMaxTokens = 65536 tokens).
  std::vector<std::uint32_t> split12(static_cast<std::size_t>(sms) / 16 + 1, 130);
  split12[0] = 60000;
  split12[1] = 17;
  CheckDecodeFp16(128, 8, DType::kBFloat16, split12, 4, 182);
  // Whole sequences (more pairs than SMs: one split each), the grid sized for the longest's 97
  // units (6,200 tokens with 4 sinks: 96 blocks and 52 unquantized tokens): 8 warps, as batch 16
  // at 6K runs it; then for 313 units (20,000 tokens): the 12-warp kernel that does not prefetch,
  // as batch 16 at 32K runs it.
  std::vector<std::uint32_t> whole(static_cast<std::size_t>(sms) / 2 + 1, 65);
  whole[0] = 6200;
  CheckDecodeFp16(128, 8, DType::kBFloat16, whole, 4, 181);
  whole[0] = 20000;
  CheckDecodeFp16(128, 8, DType::kBFloat16, whole, 4, 183);
}

// Decode calls enqueued back to back on one stream, as an engine's layer loop or a CUDA graph
// enqueues them (programmatic dependent launch: a call is launched while the previous one
// finishes, and must wait for it before touching memory). Each call's query is the previous
// call's output and all share one workspace, so a call that read its query, or the workspace's
// split partials and arrival counters, before the previous call completed would miss its
// reference: the CPU reference of that math (`math`) over the query the call was given.
void CheckChainedDecodes(std::uint32_t tokens, HackDecodeMath math, std::uint64_t seed) {
  constexpr std::uint32_t kCalls = 4;
  const std::uint32_t dim = 128, group = 8, kv_heads = 2, q_heads = kv_heads * group;
  const std::uint32_t layers = 2, layer = 1;
  const bool fp16 = math == HackDecodeMath::kDequantFp16;
  const KvTensor t = Synth({layers, tokens, kv_heads, dim}, DType::kFloat16, seed);
  const GpuSeq seq = MakeSeq(t, HackOptions{});
  const KvTensor deq = DequantizeHack(seq.chunk, DType::kFloat32);
  const std::vector<float> q0 = RandomQueries(std::size_t{q_heads} * dim, seed * 31);
  Result<Stream> stream = Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  DeviceBuffer d_seqs = Dev(&seq.desc, 1);
  std::vector<DeviceBuffer> bufs;  // bufs[i]: call i's query, call i - 1's output
  bufs.push_back(Dev(q0.data(), q0.size()));
  for (std::uint32_t i = 0; i < kCalls; ++i) bufs.push_back(DevAlloc(q0.size() * sizeof(float)));
  const KvTensor shape_only = KvTensor::Zeros(DType::kFloat16, {layers, 1, kv_heads, dim});
  for (std::uint32_t i = 0; i < kCalls; ++i) {
    HackDecodeArgs a;
    a.seqs = d_seqs.as<HackAttentionSeq>();
    a.num_seqs = 1;
    a.max_tokens = tokens;
    a.q_heads = q_heads;
    a.q = bufs[i].as<float>();
    a.out = bufs[i + 1].as<float>();
    a.math = math;
    const Status st = EnqueueHackDecodeAttention(KvFor(shape_only, DType::kFloat16, layer), a, *ws,
                                                 stream->get());
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const Status done = FinishHackAttention(*ws, stream->get());
  ASSERT_TRUE(done.ok()) << done.ToString();
  std::vector<std::vector<float>> host(kCalls + 1, std::vector<float>(q0.size()));
  for (std::uint32_t i = 0; i <= kCalls; ++i) {
    ASSERT_EQ(cudaMemcpy(host[i].data(), bufs[i].data(), q0.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  AttentionOptions ao;
  ao.q_heads = q_heads;
  for (std::uint32_t i = 0; i < kCalls; ++i) {
    const std::string label = std::string(fp16 ? "fp16" : "homomorphic") + " decode T " +
                              std::to_string(tokens) + ", call " + std::to_string(i + 1) + " of " +
                              std::to_string(kCalls) + " back to back";
    if (fp16) {
      Result<AttentionResult> ref = DecodeAttention(deq.view(), layer, host[i], ao);
      ASSERT_TRUE(ref.ok()) << ref.status().ToString();
      ExpectCloseFp16(ref->out, host[i + 1], dim, label);
    } else {
      Result<AttentionResult> ref =
          HackDecodeAttention(HackSequence(&seq.chunk, 1), layer, host[i], ao);
      ASSERT_TRUE(ref.ok()) << ref.status().ToString();
      ExpectClose(ref->out, host[i + 1], dim, label);
    }
  }
}

TEST(HackGpu, BackToBackDecodeCallsWaitForThePreviousCall) {
  KVD_REQUIRE_GPU();
  // 4K tokens: twin warps, 16 splits; 20 000: single warps, 16 splits (2 KV heads).
  for (std::uint32_t tokens : {4096u, 20000u}) {
    CheckChainedDecodes(tokens, HackDecodeMath::kHomomorphicInt8, 90 + tokens);
    CheckChainedDecodes(tokens, HackDecodeMath::kDequantFp16, 91 + tokens);
  }
}

// Paged KV (pages at shuffled pool positions) gives the same bits as the contiguous chunks, and a
// bad table entry is reported.
TEST(HackGpu, DequantFp16DecodePagedEqualsContiguous) {
  KVD_REQUIRE_GPU();
  for (std::uint32_t dim : {64u, 128u}) {
    const std::uint32_t layers = 2, kv_heads = 2, group = 8, q_heads = kv_heads * group;
    const std::uint32_t page_blocks = 4;
    const std::vector<std::uint32_t> lengths = {1000, 600, 40, 5000};
    std::vector<KvTensor> tensors;
    std::vector<GpuSeq> contiguous;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      tensors.push_back(Synth({layers, lengths[i], kv_heads, dim}, DType::kFloat16, 900 + i));
      contiguous.push_back(MakeSeq(tensors.back(), {}));
    }
    const PagePool pool = MakePagePool(tensors, page_blocks, 3, dim + 1);
    HackKvCache kv = KvFor(tensors[0], DType::kFloat16, 1);
    std::vector<HackAttentionSeq> contig_descs, paged_descs;
    for (const GpuSeq& s : contiguous) {
      contig_descs.push_back(s.desc);
      HackAttentionSeq p = s.desc;
      p.codes = p.scales = p.sums = nullptr;
      paged_descs.push_back(p);
    }
    const std::vector<float> q = RandomQueries(lengths.size() * q_heads * dim, 199 + dim);
    const GpuResult want =
        RunDecode(kv, contig_descs, 5000, q, q_heads, HackDecodeMath::kDequantFp16);
    ASSERT_TRUE(want.status.ok()) << want.status.ToString();
    pool.Attach(kv);
    const GpuResult got =
        RunDecode(kv, paged_descs, 5000, q, q_heads, HackDecodeMath::kDequantFp16);
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    EXPECT_EQ(std::memcmp(got.out.data(), want.out.data(), got.out.size() * 4), 0)
        << "paged fp16 decode differs from contiguous (d " << dim << ")";
    std::vector<std::int32_t> table = pool.table;
    table[pool.max_pages + 1] = static_cast<std::int32_t>(pool.num_pages);
    DeviceBuffer d_bad = Dev(table.data(), table.size());
    kv.block_tables = d_bad.as<std::int32_t>();
    const GpuResult bad =
        RunDecode(kv, paged_descs, 5000, q, q_heads, HackDecodeMath::kDequantFp16);
    EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument) << bad.status.ToString();
    EXPECT_NE(bad.status.message().find("sequence 1"), std::string::npos) << bad.status.ToString();
  }
}

// Exact attention over the original KV: the fp16 path's error is at most the homomorphic path's
// (no INT8 Q' or P on top of the same 2-bit KV), on synthetic KV at d 128, GQA 8.
TEST(HackGpu, DequantFp16DecodeIsNoWorseThanHomomorphicAgainstExactAttention) {
  KVD_REQUIRE_GPU();
  for (std::uint32_t dim : {64u, 128u}) {
    const std::uint32_t layers = 1, kv_heads = 2, group = 8, q_heads = kv_heads * group;
    const std::vector<std::uint32_t> lengths = {1000, 4000, 255};
    std::vector<KvTensor> tensors;
    std::vector<HackAttentionSeq> descs;
    std::vector<GpuSeq> seqs;
    std::vector<KvTensorView> views;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      tensors.push_back(Synth({layers, lengths[i], kv_heads, dim}, DType::kFloat16, 4242 + i));
    }
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      seqs.push_back(MakeSeq(tensors[i], {}));
      descs.push_back(seqs.back().desc);
      views.push_back(tensors[i].view());
    }
    const std::vector<float> q = RandomQueries(lengths.size() * q_heads * dim, 4243 + dim);
    AttentionOptions ao;
    ao.q_heads = q_heads;
    Result<AttentionResult> exact = DecodeAttentionBatch(views, 0, q, ao);
    ASSERT_TRUE(exact.ok()) << exact.status().ToString();
    const HackKvCache kv = KvFor(tensors[0], DType::kFloat16, 0);
    const GpuResult int8 = RunDecode(kv, descs, 4000, q, q_heads);
    const GpuResult fp16 = RunDecode(kv, descs, 4000, q, q_heads, HackDecodeMath::kDequantFp16);
    ASSERT_TRUE(int8.status.ok() && fp16.status.ok());
    auto rel = [&](const std::vector<float>& got) {
      double n = 0, d = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double e = got[i] - exact->out[i];
        n += e * e;
        d += exact->out[i] * exact->out[i];
      }
      return std::sqrt(n / d);
    };
    const double e8 = rel(int8.out), e16 = rel(fp16.out);
    std::printf("[ info ] d%u vs exact attention: homomorphic %.4g, fp16 %.4g (ratio %.3f)\n", dim,
                e8, e16, e16 / e8);
    EXPECT_LE(e16, 1.05 * e8) << "d" << dim;
  }
}

}  // namespace
}  // namespace kvdepot::cuda
