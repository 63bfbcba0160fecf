#include "kvdepot/codec/kv_quality.h"

#include <gtest/gtest.h>

#include <vector>

#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/synth.h"

namespace kvdepot {
namespace {

KvTensor Synth(std::uint32_t layers, std::uint32_t tokens, std::uint32_t heads, std::uint32_t dim,
               std::uint64_t seed = 1) {
  return *SynthesizeKv(SynthOptions{{layers, tokens, heads, dim}, seed, DType::kFloat16});
}

TEST(KvQualityTest, OriginalAgainstItselfIsExact) {
  const KvTensor t = Synth(2, 40, 2, 32);
  KvQualityOptions o;
  o.queries_per_layer = 8;
  auto probe = KvQualityProbe::Create(t.view(), o);
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  auto q = probe->Measure(t.view());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->k_rel_l2, 0);
  EXPECT_EQ(q->v_rel_l2, 0);
  EXPECT_EQ(q->attn_rel_l2, 0);
  EXPECT_EQ(q->top1, 1);
}

TEST(KvQualityTest, SeparatesKAndVAndOrdersPartitions) {
  const KvTensor t = Synth(2, 256, 2, 64);
  KvQualityOptions o;
  o.queries_per_layer = 16;
  const KvQualityProbe probe = *KvQualityProbe::Create(t.view(), o);
  // V left exact: only K's error is non-zero.
  KvTensor k_only = *DecodeChunk(*EncodeHack(t.view()));
  const std::size_t half = k_only.data.size() / 4;  // [layer][kv]: planes of equal size
  for (std::size_t layer = 0; layer < 2; ++layer) {
    std::copy_n(t.data.begin() + static_cast<std::ptrdiff_t>((2 * layer + 1) * half), half,
                k_only.data.begin() + static_cast<std::ptrdiff_t>((2 * layer + 1) * half));
  }
  const KvQuality kq = *probe.Measure(k_only.view());
  EXPECT_GT(kq.k_rel_l2, 0.1);
  EXPECT_EQ(kq.v_rel_l2, 0);
  EXPECT_GT(kq.attn_rel_l2, 0);
  // Smaller partitions, smaller errors (docs/hack.md's table).
  HackOptions p32;
  p32.partition = 32;
  const KvQuality q32 = *probe.Measure(DecodeChunk(*EncodeHack(t.view(), p32))->view());
  const KvQuality q64 = *probe.Measure(DecodeChunk(*EncodeHack(t.view()))->view());
  EXPECT_LT(q32.k_rel_l2, q64.k_rel_l2);
  EXPECT_LT(q32.v_rel_l2, q64.v_rel_l2);
  EXPECT_LT(q32.attn_rel_l2, q64.attn_rel_l2);
}

TEST(KvQualityTest, RefusesBadInput) {
  const KvTensor t = Synth(1, 8, 1, 16);
  KvQualityOptions none;
  none.queries_per_layer = 0;
  EXPECT_EQ(KvQualityProbe::Create(t.view(), none).status().code(), StatusCode::kInvalidArgument);
  const KvQualityProbe probe = *KvQualityProbe::Create(t.view());
  const KvTensor other = Synth(1, 9, 1, 16);
  const Status s = probe.Measure(other.view()).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[1, 2, 9, 1, 16]"), std::string::npos) << s.ToString();
}

TEST(KvQualityTest, SliceAndConcatRoundTrip) {
  const KvTensor t = Synth(2, 30, 3, 8);
  const std::vector<KvTensor> parts = {SliceTokens(t.view(), 0, 7), SliceTokens(t.view(), 7, 23)};
  auto joined = ConcatTokens(parts);
  ASSERT_TRUE(joined.ok());
  EXPECT_EQ(joined->shape, t.shape);
  EXPECT_EQ(joined->data, t.data);
  const std::vector<KvTensor> mismatched = {SliceTokens(t.view(), 0, 7), Synth(2, 5, 3, 16)};
  EXPECT_EQ(ConcatTokens(mismatched).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ConcatTokens({}).status().code(), StatusCode::kInvalidArgument);
}

// --sinks N starts the blocks after the sinks: the tail is (tokens - N) mod P.
TEST(KvQualityTest, HackUnquantizedTokensMatchTheContainer) {
  struct Case {
    std::uint32_t tokens, partition, sinks, want_sinks, want_tail;
  };
  for (const Case& c : {Case{256, 64, 0, 0, 0}, Case{256, 64, 4, 4, 60}, Case{256, 64, 64, 64, 0},
                        Case{256, 32, 4, 4, 28}, Case{200, 64, 0, 0, 8}, Case{10, 64, 300, 10, 0},
                        Case{100, 128, 0, 0, 100}}) {
    SCOPED_TRACE(std::to_string(c.tokens) + " tokens, P " + std::to_string(c.partition) +
                 ", sinks " + std::to_string(c.sinks));
    const KvTensor t = Synth(1, c.tokens, 2, 128);
    HackOptions o;
    o.partition = c.partition;
    o.sinks = c.sinks;
    const HackUnquantized u = HackUnquantizedTokens(t.shape, o);
    EXPECT_EQ(u.sinks, c.want_sinks);
    EXPECT_EQ(u.tail, c.want_tail);
    const std::vector<std::byte> enc = *EncodeHack(t.view(), o);
    const HackSizes sizes = *HackSectionSizes(*ParseContainer(enc));
    EXPECT_EQ(sizes.tail,
              std::uint64_t{u.sinks + u.tail} * 2 * 2 * 128 * 2);  // K|V, heads, dim, fp16
  }
}

}  // namespace
}  // namespace kvdepot
