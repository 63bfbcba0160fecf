// 16-bit queries and outputs at decode (HackDecodeArgs::io_dtype, cuda/src/io_element.cuh), both
// maths: a call over fp16 / bf16 q gives the fp32 call's outputs over the same values rounded to
// nearest even and the same lse (bit for bit on the fp16 path, per row within io's unit roundoff
// on the homomorphic one: NotTheFp32OutputsRounded); out needs only its element's alignment; an
// io_dtype that is no DType, or an out misaligned for its element, is refused. (Prefill's:
// HackGpu.PrefillTakesFp16AndBf16QueriesAndOutputs in hack_prefill_fp16_gpu_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "hack_attention_test_util.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/cuda/hack.h"

namespace kvdepot::cuda {
namespace {

// A ragged decode batch (2 KV heads, `sinks` on every other sequence) on the device.
struct DecodeBatch {
  std::vector<GpuSeq> seqs;
  std::vector<HackAttentionSeq> descs;
  std::uint32_t max_tokens = 0;
  std::uint32_t q_heads = 0;
  std::uint32_t dim = 0;
  HackKvCache kv;
  std::vector<float> q;  // fp32 values
  std::string label;
};

DecodeBatch MakeBatch(std::uint32_t dim, std::uint32_t group, DType dtype,
                      const std::vector<std::uint32_t>& lengths, std::uint32_t sinks,
                      std::uint64_t seed) {
  constexpr std::uint32_t kKvHeads = 2, kLayers = 2, kLayer = 1;
  DecodeBatch b;
  b.q_heads = kKvHeads * group;
  b.dim = dim;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const KvTensor t = Synth({kLayers, lengths[i], kKvHeads, dim}, dtype, seed + i);
    HackOptions o;
    o.sinks = i % 2 == 0 ? sinks : 0;
    b.seqs.push_back(MakeSeq(t, o));
    b.descs.push_back(b.seqs.back().desc);
    b.max_tokens = std::max(b.max_tokens, lengths[i]);
  }
  b.kv = KvFor(KvTensor::Zeros(dtype, {kLayers, 1, kKvHeads, dim}), dtype, kLayer);
  b.q = RandomQueries(lengths.size() * b.q_heads * dim, seed * 31);
  // Piece by piece: `"x" + std::to_string(n)` trips a GCC 12 -O3 -Wrestrict false positive.
  b.label = "d";
  for (const std::uint32_t n : {dim, group}) {
    b.label += std::to_string(n);
    b.label += " g";
  }
  b.label.resize(b.label.size() - 2);
  b.label += ' ';
  b.label += DTypeName(dtype);
  b.label += " T";
  for (std::uint32_t l : lengths) {
    b.label += ' ';
    b.label += std::to_string(l);
  }
  return b;
}

std::string MathName(HackDecodeMath math) {
  return math == HackDecodeMath::kDequantFp16 ? "fp16 path" : "homomorphic";
}

// For fp16 and bf16: q rounded to the type; the 16-bit call (its out 2 bytes past an aligned
// address) against the fp32 call over the same values.
void ExpectIoIsTheFp32CallRounded(const DecodeBatch& b, HackDecodeMath math) {
  for (const DType io : {DType::kFloat16, DType::kBFloat16}) {
    const std::string label = std::string(DTypeName(io)) + " " + MathName(math) + " " + b.label;
    std::vector<float> q(b.q.size());
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = From16(To16(b.q[i], io), io);
    const GpuResult wide = RunDecode(b.kv, b.descs, b.max_tokens, q, b.q_heads, math);
    ASSERT_TRUE(wide.status.ok()) << label << ": " << wide.status.ToString();
    const GpuResult got = RunDecode(b.kv, b.descs, b.max_tokens, q, b.q_heads, math, io, 2);
    ASSERT_TRUE(got.status.ok()) << label << ": " << got.status.ToString();
    const bool per_row = math == HackDecodeMath::kHomomorphicInt8;
    EXPECT_EQ(NotTheFp32OutputsRounded(got.out, wide.out, io, b.dim, per_row), 0u)
        << label << ": outputs (or rows) that are not the fp32 call's, rounded";
    EXPECT_EQ(LseDiffer(got.lse, wide.lse, per_row), 0u) << label;
  }
}

constexpr HackDecodeMath kMaths[] = {HackDecodeMath::kHomomorphicInt8,
                                     HackDecodeMath::kDequantFp16};

TEST(HackGpu, DecodeTakesFp16AndBf16QueriesAndOutputs) {
  KVD_REQUIRE_GPU();
  std::uint64_t seed = 14000;
  for (const HackDecodeMath math : kMaths) {
    for (const std::uint32_t dim : {64u, 128u}) {
      for (const std::uint32_t group : {8u, 3u}) {
        ExpectIoIsTheFp32CallRounded(
            MakeBatch(dim, group, DType::kFloat16, {1, 17, 255, 1000, 64, 65}, 4, seed += 10),
            math);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    // Split KV (a long sequence) and, homomorphic at head_dim 128, twin warps (4K tokens).
    ExpectIoIsTheFp32CallRounded(MakeBatch(128, 8, DType::kBFloat16, {20000, 3000}, 4, seed += 10),
                                 math);
    ExpectIoIsTheFp32CallRounded(MakeBatch(128, 8, DType::kFloat16, {4096}, 0, seed += 10), math);
  }
}

// An fp32 out 4 bytes past a 16-byte-aligned address gives the aligned call's outputs (the fp16
// path's bits; it once stored float4s there: a misaligned-address fault).
TEST(HackGpu, DecodeOutNeedsOnlyItsElementsAlignment) {
  KVD_REQUIRE_GPU();
  std::uint64_t seed = 15000;
  for (const HackDecodeMath math : kMaths) {
    for (const std::uint32_t dim : {64u, 128u}) {
      const DecodeBatch b = MakeBatch(dim, 8, DType::kFloat16, {1000, 65, 4096}, 4, seed += 10);
      const std::string label = MathName(math) + " " + b.label;
      const GpuResult aligned = RunDecode(b.kv, b.descs, b.max_tokens, b.q, b.q_heads, math);
      ASSERT_TRUE(aligned.status.ok()) << label << ": " << aligned.status.ToString();
      const GpuResult shifted =
          RunDecode(b.kv, b.descs, b.max_tokens, b.q, b.q_heads, math, DType::kFloat32, 4);
      ASSERT_TRUE(shifted.status.ok()) << label << ": " << shifted.status.ToString();
      if (math == HackDecodeMath::kDequantFp16) {
        EXPECT_EQ(std::memcmp(aligned.out.data(), shifted.out.data(), aligned.out.size() * 4), 0)
            << label;
      } else {  // blocks dealt at run time: the last bits may differ between any two calls
        EXPECT_EQ(NotTheFp32OutputsRounded(shifted.out, aligned.out, DType::kFloat16, b.dim, true),
                  0u)
            << label;
      }
    }
  }
}

// Refused before anything is launched: an io_dtype that is no DType, an out misaligned for its
// element, a q not 16-byte aligned.
TEST(HackGpu, DecodeIoArgumentErrors) {
  KVD_REQUIRE_GPU();
  const DecodeBatch b = MakeBatch(128, 8, DType::kFloat16, {100}, 0, 16000);
  auto ws = HackAttentionWorkspace::Create();
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  DeviceBuffer d_seqs = Dev(b.descs.data(), b.descs.size());
  DeviceBuffer d_q = DevAlloc(b.q.size() * 4 + 16), d_out = DevAlloc(b.q.size() * 4 + 16);
  auto* const out = d_out.as<std::uint8_t>();
  struct Case {
    DType io;
    std::size_t q_offset, out_offset;
    const char* message;
  };
  const Case cases[] = {
      {static_cast<DType>(9), 0, 0, "io_dtype 9 is not fp16, bf16 or fp32"},
      {static_cast<DType>(0), 0, 0, "io_dtype 0 is not fp16, bf16 or fp32"},
      {DType::kFloat32, 0, 2, "out 4-byte aligned (fp32 io_dtype)"},
      {DType::kBFloat16, 0, 1, "out 2-byte aligned (bf16 io_dtype)"},
      {DType::kFloat16, 8, 0, "q must be 16-byte aligned"},
  };
  for (const HackDecodeMath math : kMaths) {
    for (const Case& c : cases) {
      HackDecodeArgs a;
      a.seqs = d_seqs.as<HackAttentionSeq>();
      a.num_seqs = 1;
      a.max_tokens = b.max_tokens;
      a.q_heads = b.q_heads;
      a.q = d_q.as<std::uint8_t>() + c.q_offset;
      a.out = out + c.out_offset;
      a.math = math;
      a.io_dtype = c.io;
      const Status st = EnqueueHackDecodeAttention(b.kv, a, *ws, nullptr);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
      EXPECT_NE(st.message().find(c.message), std::string::npos)
          << MathName(math) << ": " << st.ToString();
    }
  }
  EXPECT_TRUE(FinishHackAttention(*ws, nullptr).ok());
}

}  // namespace
}  // namespace kvdepot::cuda
