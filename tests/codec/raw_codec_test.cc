#include "kvdepot/codec/raw_codec.h"

#include <gtest/gtest.h>

#include "kvdepot/codec/codec.h"
#include "test_util.h"

namespace kvdepot {
namespace {

using testing::RandomTensor;

class RawRoundTrip : public ::testing::TestWithParam<std::tuple<DType, KvShape>> {};

TEST_P(RawRoundTrip, BitExact) {
  const auto [dtype, shape] = GetParam();
  const KvTensor t = RandomTensor(dtype, shape, shape.elements());
  EncodeOptions options;
  options.codec = CodecId::kRaw;
  auto c = EncodeChunk(t.view(), options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->size(), ContainerSize(std::vector<std::uint64_t>{t.data.size()}));
  auto again = EncodeRaw(t.view());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*c, *again) << "encoding must be deterministic";
  auto d = DecodeChunk(*c);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->dtype, dtype);
  EXPECT_EQ(d->shape, shape);
  EXPECT_EQ(d->data, t.data);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RawRoundTrip,
    ::testing::Combine(::testing::Values(DType::kFloat16, DType::kBFloat16, DType::kFloat32),
                       ::testing::Values(KvShape{1, 1, 1, 1}, KvShape{1, 17, 3, 80},
                                         KvShape{5, 255, 1, 64}, KvShape{2, 256, 8, 128})));

TEST(RawCodecTest, RejectsInconsistentInput) {
  KvTensor t = RandomTensor(DType::kFloat16, {1, 2, 1, 2}, 1);
  KvTensorView v = t.view();
  v.data = v.data.first(v.data.size() - 2);
  EXPECT_EQ(EncodeRaw(v).status().code(), StatusCode::kInvalidArgument);
  v = t.view();
  v.shape.tokens = 0;
  EXPECT_EQ(EncodeRaw(v).status().code(), StatusCode::kOutOfRange);
}

TEST(RawCodecTest, PayloadMustMatchShape) {
  const ContainerWriter::SectionPlan plan[] = {{SectionKind::kPayload, 6}};
  auto w = ContainerWriter::Create(CodecId::kRaw, DType::kFloat16, {1, 1, 1, 2}, plan);
  ASSERT_TRUE(w.ok());
  const std::vector<std::byte> c = std::move(*w).Finish();
  const Status s = DecodeChunk(c).status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("payload is 6 bytes"), std::string::npos) << s.message();

  const ContainerWriter::SectionPlan two[] = {{SectionKind::kPayload, 8},
                                              {SectionKind::kTables, 1}};
  auto w2 = ContainerWriter::Create(CodecId::kRaw, DType::kFloat16, {1, 1, 1, 2}, two);
  ASSERT_TRUE(w2.ok());
  const std::vector<std::byte> c2 = std::move(*w2).Finish();
  EXPECT_NE(DecodeChunk(c2).status().message().find("unexpected section"), std::string::npos);
}

TEST(RawCodecTest, PayloadViewIsZeroCopy) {
  const KvTensor t = RandomTensor(DType::kBFloat16, {2, 4, 2, 8}, 9);
  auto c = EncodeRaw(t.view());
  ASSERT_TRUE(c.ok());
  auto view = ParseContainer(*c);
  ASSERT_TRUE(view.ok());
  auto payload = RawPayloadView(*view);
  ASSERT_TRUE(payload.ok());
  EXPECT_EQ(payload->data.data(), c->data() + 128);
  EXPECT_EQ(payload->shape, t.shape);
}

}  // namespace
}  // namespace kvdepot
