// The dequantize-on-load prefill (HackPrefillMath::kDequantFp16, cuda/src/hack_prefill_fp16.cu)
// within its tolerance of attention over the dequantized KV (kvdepot::PrefillAttention over
// DequantizeHack): chunked prefill shapes (T_new 1, 17, 255 over T_prefix 0, 1, 64, 1000, both
// head_dims, fp16 and bf16 KV, GQA 8 and 3, sinks), paged == contiguous, staged
// (HackPrefillArgs::staging) or not, fp16 and bf16 queries and outputs, the staging scratch's
// errors.
#include "kvdepot/cuda/hack.h"

#include <gtest/gtest.h>

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

// One shape of the fp16-prefill tests: a sequence of prefix + fresh tokens (2 layers, 2 KV heads)
// whose layer `layer` is attended, its container on the device, and `fresh` random queries.
struct Fp16PrefillCase {
  std::uint32_t dim, prefix, fresh, q_heads, layer;
  GpuSeq s;
  HackKvCache kv;
  std::vector<float> q;
  std::string label;
};

// Calls fn(c) for each chunked-prefill shape: T_new in {1, 17, 255} x T_prefix in {0, 1, 64, 1000},
// both head_dims, fp16 and bf16 KV, 2 KV heads with GQA groups 8 and 3 (3: CTAs of 42 tokens), 4
// sinks on every other sequence (an unquantized tile before the blocks); seeds from `seed` on.
// Stops at the first fatal failure.
template <typename Fn>
void ForEachFp16PrefillCase(std::uint64_t seed, Fn&& fn) {
  for (std::uint32_t dim : {64u, 128u}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (std::uint32_t prefix : {0u, 1u, 64u, 1000u}) {
        for (std::uint32_t fresh : {1u, 17u, 255u}) {
          const std::uint32_t T = prefix + fresh, kv_heads = 2, layers = 2, layer = 1;
          const std::uint32_t group = (seed % 2 == 0) ? 8 : 3, q_heads = kv_heads * group;
          const KvTensor t = Synth({layers, T, kv_heads, dim}, dtype, seed);
          HackOptions o;
          o.sinks = seed % 4 < 2 ? 4 : 0;
          ++seed;
          Fp16PrefillCase c{dim,
                            prefix,
                            fresh,
                            q_heads,
                            layer,
                            MakeSeq(t, o),
                            KvFor(t, dtype, layer),
                            RandomQueries(std::size_t{fresh} * q_heads * dim, seed * 7),
                            "d"};
          c.label += std::to_string(dim);  // by +=: GCC 12 -O3 -Wrestrict false positive
          c.label += ' ';
          c.label += DTypeName(dtype);
          c.label += " g" + std::to_string(group) + " sinks " + std::to_string(o.sinks) +
                     " prefix " + std::to_string(prefix) + " new " + std::to_string(fresh);
          fn(c);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// Runs case c through the fp16 path (staged or not) into *got and checks it against attention over
// the dequantized KV (PrefillAttention over DequantizeHack to fp32) within the fp16 path's
// tolerances; the lse is the log of the normaliser (finite). Fatal on a failed call.
void ExpectFp16PrefillMatchesDequantizedAttention(const Fp16PrefillCase& c,
                                                  HackAttentionWorkspace& ws, bool staged,
                                                  GpuResult* got) {
  AttentionOptions ao;
  ao.q_heads = c.q_heads;
  const KvTensor deq = DequantizeHack(c.s.chunk, DType::kFloat32);
  Result<AttentionResult> ref = PrefillAttention(deq.view(), c.layer, c.q, c.prefix, ao);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  *got = RunPrefill(c.kv, c.s.desc, c.prefix, c.q, c.q_heads, ws, staged);
  ASSERT_TRUE(got->status.ok()) << got->status.ToString();
  ExpectCloseFp16(ref->out, got->out, c.dim,
                  (staged ? "staged fp16 prefill " : "fp16 prefill ") + c.label);
  for (float v : got->lse) ASSERT_TRUE(std::isfinite(v)) << c.label;
}

// The fp16 path against attention over the dequantized KV on the chunked-prefill shapes
// (ForEachFp16PrefillCase).
TEST(HackGpu, DequantFp16PrefillMatchesAttentionOverTheDequantizedKv) {
  KVD_REQUIRE_GPU();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  ForEachFp16PrefillCase(12000, [&](const Fp16PrefillCase& c) {
    GpuResult got;
    ExpectFp16PrefillMatchesDequantizedAttention(c, *ws, false, &got);
  });
}

// Paged KV (pages at shuffled pool positions) gives the same bits as the contiguous chunk, unstaged
// and staged (HackPrefillArgs::staging; against the contiguous staged call), and a block-table
// entry outside the pool is reported.
TEST(HackGpu, DequantFp16PrefillPagedEqualsContiguous) {
  KVD_REQUIRE_GPU();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  for (std::uint32_t dim : {64u, 128u}) {
    const std::uint32_t layers = 2, layer = 1, kv_heads = 2, group = 4, q_heads = kv_heads * group;
    const std::uint32_t page_blocks = 4, T = 1000, fresh = 100;
    const KvTensor t = Synth({layers, T, kv_heads, dim}, DType::kFloat16, 700 + dim);
    const GpuSeq s = MakeSeq(t, {});
    const PagePool pool = MakePagePool(std::span(&t, 1), page_blocks, 2, dim);
    const std::vector<float> q = RandomQueries(std::size_t{fresh} * q_heads * dim, 31 + dim);
    HackKvCache kv = KvFor(t, DType::kFloat16, layer);
    const GpuResult want = RunPrefill(kv, s.desc, T - fresh, q, q_heads, *ws);
    ASSERT_TRUE(want.status.ok()) << want.status.ToString();
    const GpuResult want_staged = RunPrefill(kv, s.desc, T - fresh, q, q_heads, *ws, true);
    ASSERT_TRUE(want_staged.status.ok()) << want_staged.status.ToString();
    pool.Attach(kv);
    HackAttentionSeq paged = s.desc;
    paged.codes = paged.scales = paged.sums = nullptr;
    const GpuResult got = RunPrefill(kv, paged, T - fresh, q, q_heads, *ws);
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    EXPECT_EQ(std::memcmp(got.out.data(), want.out.data(), got.out.size() * 4), 0) << "d" << dim;
    const GpuResult staged = RunPrefill(kv, paged, T - fresh, q, q_heads, *ws, true);
    ASSERT_TRUE(staged.status.ok()) << staged.status.ToString();
    EXPECT_EQ(std::memcmp(staged.out.data(), want_staged.out.data(), staged.out.size() * 4), 0)
        << "staged d" << dim;

    // A table entry outside the pool is reported, staged (by the staging kernel) or not.
    std::vector<std::int32_t> bad_table = pool.table;
    bad_table[1] = static_cast<std::int32_t>(pool.num_pages);
    DeviceBuffer d_bad = Dev(bad_table.data(), bad_table.size());
    kv.block_tables = d_bad.as<std::int32_t>();
    for (const bool staging : {false, true}) {
      const GpuResult bad = RunPrefill(kv, paged, T - fresh, q, q_heads, *ws, staging);
      EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument)
          << "d" << dim << " staged " << staging << ": " << bad.status.ToString();
      EXPECT_NE(bad.status.message().find("block table entry is outside"), std::string::npos)
          << bad.status.ToString();
    }
  }
}

// Staged (the staging kernel, then the warp-specialised kernel copying its images, 128 keys per
// consumer iteration) is attention over the dequantized KV within the fp16 path's tolerances, on
// the chunked-prefill shapes (ForEachFp16PrefillCase); it is not bit for bit the unstaged call
// (its softmax maximum runs over 128 keys, not 64). Head_dim 64 ignores the scratch: the same bits
// as unstaged.
TEST(HackGpu, DequantFp16PrefillStagedMatchesAttentionOverTheDequantizedKv) {
  KVD_REQUIRE_GPU();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  ForEachFp16PrefillCase(12000, [&](const Fp16PrefillCase& c) {
    GpuResult got;
    ExpectFp16PrefillMatchesDequantizedAttention(c, *ws, true, &got);
    if (::testing::Test::HasFatalFailure()) return;
    if (c.dim == 64) {
      const GpuResult want = RunPrefill(c.kv, c.s.desc, c.prefix, c.q, c.q_heads, *ws);
      ASSERT_TRUE(want.status.ok()) << want.status.ToString();
      EXPECT_EQ(std::memcmp(got.out.data(), want.out.data(), got.out.size() * 4), 0) << c.label;
      EXPECT_EQ(std::memcmp(got.lse.data(), want.lse.data(), got.lse.size() * 4), 0) << c.label;
    }
  });
}

// fp16 and bf16 q and out (HackPrefillArgs::io_dtype) on the chunked-prefill shapes
// (ForEachFp16PrefillCase), through the fp16 path unstaged and staged and through the homomorphic
// kernel: the call over 16-bit queries computes what the fp32 call over the same values computes,
// so its out is that call's out rounded to the io type and its lse the same (bit for bit on the
// fp16 path; the homomorphic kernel's fp32 sums vary in the last bits between calls, so per row
// within io's unit roundoff there: NotTheFp32OutputsRounded); the fp16 path's also against
// attention over the dequantized KV
// (with the rounded queries) within its tolerances. An io_dtype that is no DType is refused.
TEST(HackGpu, PrefillTakesFp16AndBf16QueriesAndOutputs) {
  KVD_REQUIRE_GPU();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  struct Path {
    HackPrefillMath math;
    bool staged;
    const char* name;
  };
  constexpr Path kPaths[] = {{HackPrefillMath::kDequantFp16, false, "fp16 path"},
                             {HackPrefillMath::kDequantFp16, true, "fp16 path staged"},
                             {HackPrefillMath::kHomomorphicInt8, false, "homomorphic"}};
  ForEachFp16PrefillCase(13000, [&](const Fp16PrefillCase& c) {
    for (const DType io : {DType::kFloat16, DType::kBFloat16}) {
      std::vector<float> q(c.q.size());
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = From16(To16(c.q[i], io), io);
      AttentionOptions ao;
      ao.q_heads = c.q_heads;
      const KvTensor deq = DequantizeHack(c.s.chunk, DType::kFloat32);
      Result<AttentionResult> ref = PrefillAttention(deq.view(), c.layer, q, c.prefix, ao);
      ASSERT_TRUE(ref.ok()) << ref.status().ToString();
      for (const Path& path : kPaths) {
        const std::string label = std::string(DTypeName(io)) + " " + path.name + " " + c.label;
        const GpuResult wide = RunPrefill(c.kv, c.s.desc, c.prefix, q, c.q_heads, *ws, path.staged,
                                          DType::kFloat32, path.math);
        ASSERT_TRUE(wide.status.ok()) << label << ": " << wide.status.ToString();
        const GpuResult got =
            RunPrefill(c.kv, c.s.desc, c.prefix, q, c.q_heads, *ws, path.staged, io, path.math);
        ASSERT_TRUE(got.status.ok()) << label << ": " << got.status.ToString();
        const bool per_row = path.math == HackPrefillMath::kHomomorphicInt8;
        if (per_row) {  // how much two fp32 calls differ, for the record
          const GpuResult again = RunPrefill(c.kv, c.s.desc, c.prefix, q, c.q_heads, *ws,
                                             path.staged, DType::kFloat32, path.math);
          std::size_t n = 0;
          for (std::size_t i = 0; i < again.out.size(); ++i) n += again.out[i] != wide.out[i];
          if (n > 0)
            std::printf("[ info ] %s: two fp32 calls differ in %zu outputs\n", label.c_str(), n);
        }
        EXPECT_EQ(NotTheFp32OutputsRounded(got.out, wide.out, io, c.dim, per_row), 0u)
            << label << ": outputs (or rows) that are not the fp32 call's, rounded";
        EXPECT_EQ(LseDiffer(got.lse, wide.lse, per_row), 0u) << label;
        if (path.math == HackPrefillMath::kDequantFp16) {
          ExpectCloseFp16(ref->out, got.out, c.dim, "io " + label);
        }
      }
    }
  });
  // An io_dtype that is no DType is refused before anything is launched.
  const KvTensor t = Synth({2, 16, 2, 128}, DType::kFloat16, 5);
  const GpuSeq s = MakeSeq(t, {});
  const HackKvCache kv = KvFor(t, DType::kFloat16, 1);
  DeviceBuffer d_q = DevAlloc(16 * 16 * 128 * 4), d_out = DevAlloc(16 * 16 * 128 * 4);
  HackPrefillArgs a;
  a.seq = s.desc;
  a.queries = 16;
  a.q_heads = 16;
  a.q = d_q.data();
  a.out = d_out.data();
  for (const HackPrefillMath math :
       {HackPrefillMath::kHomomorphicInt8, HackPrefillMath::kDequantFp16}) {
    a.math = math;
    a.io_dtype = static_cast<DType>(9);
    const Status st = EnqueueHackPrefillAttention(kv, a, *ws, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("io_dtype 9 is not fp16, bf16 or fp32"), std::string::npos)
        << st.ToString();
  }
}

// A staging scratch smaller than HackPrefillStagingBytes, or misaligned, is an error that names
// the sizes; the staging alone needs a scratch.
TEST(HackGpu, DequantFp16PrefillStagingScratchErrors) {
  KVD_REQUIRE_GPU();
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  const std::uint32_t dim = 128, layers = 2, layer = 1, kv_heads = 2, group = 8;
  const std::uint32_t q_heads = kv_heads * group, T = 1000, fresh = 300;
  const KvTensor t = Synth({layers, T, kv_heads, dim}, DType::kBFloat16, 901);
  HackOptions o;
  o.sinks = 4;
  const GpuSeq s = MakeSeq(t, o);
  const std::vector<float> q = RandomQueries(std::size_t{fresh} * q_heads * dim, 77);
  const HackKvCache kv = KvFor(t, DType::kBFloat16, layer);
  // Too small by 16 bytes, and misaligned: errors, nothing launched.
  DeviceBuffer d_q = Dev(q.data(), q.size());
  DeviceBuffer d_out = DevAlloc(q.size() * 4);
  HackPrefillArgs a;
  a.seq = s.desc;
  a.queries = fresh;
  a.first_position = T - fresh;
  a.q_heads = q_heads;
  a.q = d_q.as<float>();
  a.out = d_out.as<float>();
  a.math = HackPrefillMath::kDequantFp16;
  const std::uint64_t need = HackPrefillStagingBytes(kv, a);
  ASSERT_EQ(need, std::uint64_t{kv_heads} * 17u * kHackPrefillStageBytes);
  DeviceBuffer scratch = DevAlloc(need + 16);
  a.staging = scratch.data();
  a.staging_bytes = need - 16;
  const Status small = EnqueueHackPrefillAttention(kv, a, *ws, nullptr);
  EXPECT_EQ(small.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.message().find("staging scratch of " + std::to_string(need - 16) +
                                 " bytes is too small: this call needs " + std::to_string(need) +
                                 " bytes"),
            std::string::npos)
      << small.ToString();
  EXPECT_EQ(EnqueueHackPrefillStaging(kv, a, *ws, nullptr).code(), StatusCode::kInvalidArgument);
  a.staging = scratch.as<std::uint8_t>() + 8;
  a.staging_bytes = need;
  EXPECT_EQ(EnqueueHackPrefillAttention(kv, a, *ws, nullptr).code(), StatusCode::kInvalidArgument);
  // Without a scratch the staging alone is refused (the call does not stage).
  a.staging = nullptr;
  EXPECT_EQ(EnqueueHackPrefillStaging(kv, a, *ws, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(FinishHackAttention(*ws, nullptr).ok());
}

}  // namespace
}  // namespace kvdepot::cuda
