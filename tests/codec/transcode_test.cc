#include "kvdepot/codec/transcode.h"

#include <gtest/gtest.h>

#include "kvdepot/codec/synth.h"

namespace kvdepot {
namespace {

KvTensor Synth(DType dtype) {
  return *SynthesizeKv(SynthOptions{KvShape{2, 256, 2, 64}, 5, dtype});
}

std::vector<std::byte> Encode(const KvTensor& t, CodecId codec) {
  EncodeOptions o;
  o.codec = codec;
  return *EncodeChunk(t.view(), o);
}

TEST(TranscodeTest, CacheGenToRawIsTheDecodedTensor) {
  const KvTensor t = Synth(DType::kFloat16);
  const auto cg = Encode(t, CodecId::kCacheGen);
  TranscodeTimings timings;
  auto raw = TranscodeChunk(cg, CodecId::kRaw, {}, &timings);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  EXPECT_EQ(*raw, Encode(*DecodeChunk(cg), CodecId::kRaw));
  EXPECT_EQ(timings.from, CodecId::kCacheGen);
  EXPECT_EQ(timings.raw_bytes, t.data.size());
  EXPECT_EQ(timings.output_bytes, raw->size());
}

TEST(TranscodeTest, EveryPairMatchesDecodeThenEncode) {
  const KvTensor t = Synth(DType::kBFloat16);
  for (CodecId from : {CodecId::kRaw, CodecId::kCacheGen, CodecId::kHackInt2}) {
    const auto stored = Encode(t, from);
    for (CodecId to : {CodecId::kRaw, CodecId::kCacheGen, CodecId::kHackInt2}) {
      auto out = TranscodeChunk(stored, to);
      ASSERT_TRUE(out.ok()) << CodecName(from) << "->" << CodecName(to) << ": "
                            << out.status().ToString();
      const auto want = from == to ? stored : Encode(*DecodeChunk(stored), to);
      EXPECT_EQ(*out, want) << CodecName(from) << "->" << CodecName(to);
    }
  }
}

TEST(TranscodeTest, BadInputIsAnError) {
  const auto raw = Encode(Synth(DType::kFloat16), CodecId::kRaw);
  auto flipped = raw;
  flipped[flipped.size() / 2] ^= std::byte{1};
  EXPECT_FALSE(TranscodeChunk(flipped, CodecId::kCacheGen).ok());
  EXPECT_FALSE(TranscodeChunk(std::span(raw).first(100), CodecId::kRaw).ok());
}

}  // namespace
}  // namespace kvdepot
