// LMCache's two v1 wire layouts (kvdepot/protocol/lm_wire.h): detection from a connection's first
// 36 bytes, decoding of each layout into the same request, the legacy reply as the current one
// without `location`, and the v0 protocol told apart.
#include "kvdepot/protocol/lm_wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kvdepot/base/byte_order.h"

namespace kvdepot::lm {
namespace {

struct Fields {
  std::int32_t command = kCommandGet, length = 0, fmt = 1, dtype = 3, location = 1;
  std::int32_t shape[4] = {2, 32, 256, 1024};
  std::string key = "vllm@1@0@0123456789abcdef@bfloat16";
};

// The request as LMCache's struct.pack writes it: "iiiiiiiii150s" (current) or "iiiiiiii150s".
std::vector<std::byte> Pack(const Fields& f, Wire wire) {
  std::vector<std::int32_t> ints = {f.command, f.length, f.fmt, f.dtype};
  if (wire == Wire::kCurrent) ints.push_back(f.location);
  ints.insert(ints.end(), f.shape, f.shape + 4);
  std::vector<std::byte> out(ints.size() * 4 + kWireKeyBytes, std::byte{' '});
  for (std::size_t i = 0; i < ints.size(); ++i) {
    StoreLE<std::uint32_t>(&out[4 * i], static_cast<std::uint32_t>(ints[i]));
  }
  std::memcpy(&out[ints.size() * 4], f.key.data(), f.key.size());
  return out;
}

Wire Detect(const std::vector<std::byte>& bytes) {
  return DetectWire(std::span<const std::byte, kWireProbeBytes>(bytes.data(), kWireProbeBytes));
}

TEST(LmWireTest, BothLayoutsDecodeIntoTheSameRequest) {
  Fields f;
  const auto current = Pack(f, Wire::kCurrent);
  const auto legacy = Pack(f, Wire::kLegacy);
  ASSERT_EQ(current.size(), kRequestHeaderBytes);
  ASSERT_EQ(legacy.size(), kLegacyRequestHeaderBytes);
  auto a = DecodeRequestHeader(current, Wire::kCurrent);
  auto b = DecodeRequestHeader(legacy, Wire::kLegacy);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->key, f.key);
  EXPECT_EQ(b->key, f.key);
  EXPECT_EQ(a->meta.location, 1);
  EXPECT_EQ(b->meta.location, 0);  // the legacy layout has none
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b->meta.shape[i], f.shape[i]);
  EXPECT_EQ(b->meta.dtype, 3);
  // A header of the other layout's length is refused, naming the layout.
  auto wrong = DecodeRequestHeader(current, Wire::kLegacy);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("legacy"), std::string::npos);
}

TEST(LmWireTest, DetectionTellsTheLayoutsApartForEveryCommandAndKey) {
  for (std::int32_t command = kCommandPut; command <= kCommandHealth; ++command) {
    for (const std::string& key :
         std::vector<std::string>{"", "k", "vllm@1@0@ff@half", std::string(150, 'x')}) {
      Fields f;
      f.command = command;
      f.key = key;
      f.shape[3] = command == kCommandHealth ? 0 : 1 << 20;
      SCOPED_TRACE(std::to_string(command) + " '" + key + "'");
      EXPECT_EQ(Detect(Pack(f, Wire::kCurrent)), Wire::kCurrent);
      EXPECT_EQ(Detect(Pack(f, Wire::kLegacy)), Wire::kLegacy);
      EXPECT_FALSE(IsVersion0Request(
          std::span<const std::byte, kWireProbeBytes>(Pack(f, Wire::kLegacy).data(), 36)));
    }
  }
}

TEST(LmWireTest, TheV0ProtocolIsRecognised) {
  // "ii150s": command, length, key.
  std::vector<std::byte> v0(8 + kWireKeyBytes, std::byte{' '});
  StoreLE<std::uint32_t>(&v0[0], kCommandExist);
  const std::string key = "vllm@1@0@abc";
  std::memcpy(&v0[8], key.data(), key.size());
  EXPECT_TRUE(IsVersion0Request(std::span<const std::byte, kWireProbeBytes>(v0.data(), 36)));
}

TEST(LmWireTest, TheLegacyReplyIsTheCurrentOneWithoutLocation) {
  ValueHeader meta;
  meta.fmt = 2;
  meta.dtype = 4;
  meta.location = 2;
  meta.shape[0] = 7;
  const auto reply = EncodeReplyHeader(kReplySuccess, 123, &meta);
  EXPECT_EQ(ReplyHeaderBytes(Wire::kLegacy), 32u);
  EXPECT_EQ(LoadLE<std::uint32_t>(&reply[16]), 7u);  // shape[0], where the legacy client reads it
  EXPECT_EQ(LoadLE<std::uint32_t>(&reply[32]), 2u);  // location: past a legacy reply's end
}

TEST(LmWireTest, OnlyANegativePutLengthIsMalformed) {
  Fields f;
  f.command = kCommandPut;
  f.length = 0x7fffffff;  // over any limit: the listener reads and drops it
  EXPECT_TRUE(DecodeRequestHeader(Pack(f, Wire::kCurrent), Wire::kCurrent).ok());
  f.length = -1;
  EXPECT_FALSE(DecodeRequestHeader(Pack(f, Wire::kCurrent), Wire::kCurrent).ok());
}

}  // namespace
}  // namespace kvdepot::lm
