// The HACK attention calls' host side (cuda/src/hack_attention_api.cc) without a device: the
// argument errors found before anything is enqueued (head_dim, partition, GQA group, tail dtype,
// layer, softmax_scale, workspace, paging), and the staged prefill's scratch size
// (HackPrefillStagingBytes).
#include "kvdepot/cuda/hack.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvdepot::cuda {
namespace {

TEST(NoDeviceHackGpu, AttentionArgumentErrorsBeforeTouchingTheDevice) {
  HackAttentionWorkspace ws;  // never created: the checks below come first
  HackKvCache kv;
  kv.layers = 1;
  kv.kv_heads = 2;
  kv.head_dim = 128;
  HackDecodeArgs args;
  args.q_heads = 8;
  auto code = [&]() { return EnqueueHackDecodeAttention(kv, args, ws, nullptr).code(); };
  kv.head_dim = 96;
  EXPECT_EQ(code(), StatusCode::kUnimplemented);
  kv.head_dim = 256;
  EXPECT_EQ(code(), StatusCode::kUnimplemented);
  kv.head_dim = 128;
  kv.partition = 32;
  EXPECT_EQ(code(), StatusCode::kUnimplemented);
  kv.partition = 48;
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);
  kv.partition = 64;
  args.q_heads = 32;  // 16 query heads per KV head
  EXPECT_EQ(code(), StatusCode::kUnimplemented);
  args.q_heads = 7;
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);
  args.q_heads = 8;
  kv.dtype = DType::kFloat32;
  EXPECT_EQ(code(), StatusCode::kUnimplemented);
  kv.dtype = DType::kFloat16;
  kv.layer = 1;
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);
  kv.layer = 0;
  args.softmax_scale = -1;
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);
  args.softmax_scale = 0;
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);  // workspace not created, no sequences
  kv.page_blocks = 4;                               // paged without a pool
  EXPECT_EQ(code(), StatusCode::kInvalidArgument);
}

// The staging scratch's size: kv_heads x the call's key tiles x 32 KiB, at head_dim 128 with
// kDequantFp16 only.
TEST(NoDeviceHackGpu, PrefillStagingBytesCountTheCallsKeyTiles) {
  HackKvCache kv;
  kv.layers = 2;
  kv.kv_heads = 2;
  kv.head_dim = 128;
  HackPrefillArgs a;
  a.math = HackPrefillMath::kDequantFp16;
  a.seq.tokens = 1000;
  a.seq.sinks = 4;
  a.first_position = 900;
  a.queries = 100;
  // 1 sink tile, 15 blocks (positions 4..963), 1 tail tile (964..999).
  EXPECT_EQ(HackPrefillStagingBytes(kv, a), 2u * 17u * kHackPrefillStageBytes);
  a.first_position = 0;
  a.queries = 68;  // keys 0..67: the sink tile and block 0
  EXPECT_EQ(HackPrefillStagingBytes(kv, a), 2u * 2u * kHackPrefillStageBytes);
  a.seq.sinks = 0;
  a.seq.tokens = 4096;
  a.queries = 4096;
  kv.kv_heads = 8;
  EXPECT_EQ(HackPrefillStagingBytes(kv, a), std::uint64_t{16} << 20);  // the 4K prompt
  a.math = HackPrefillMath::kHomomorphicInt8;
  EXPECT_EQ(HackPrefillStagingBytes(kv, a), 0u);
  a.math = HackPrefillMath::kDequantFp16;
  kv.head_dim = 64;
  EXPECT_EQ(HackPrefillStagingBytes(kv, a), 0u);
}

}  // namespace
}  // namespace kvdepot::cuda
