// The one hex encoder/decoder (kvdepot/base/hex.h).
#include "kvdepot/base/hex.h"

#include <gtest/gtest.h>

#include <string>

namespace kvdepot {
namespace {

TEST(HexTest, EncodesLowercaseInOrder) {
  EXPECT_EQ(HexLower(std::string_view("")), "");
  EXPECT_EQ(HexLower(std::string_view("\x00\x7f\x80\xff", 4)), "007f80ff");
  const std::uint8_t bytes[] = {0xde, 0xad, 0xbe, 0xef};
  EXPECT_EQ(HexLower(bytes), "deadbeef");
  EXPECT_EQ(HexU64(0), "0000000000000000");
  EXPECT_EQ(HexU64(0x0123456789abcdefULL), "0123456789abcdef");
}

TEST(HexTest, DecodesEitherCaseAndRoundTrips) {
  EXPECT_EQ(HexDecode("DeadBEEF"), std::string("\xde\xad\xbe\xef"));
  EXPECT_EQ(HexDecode(""), std::string());
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  EXPECT_EQ(HexDecode(HexLower(all)), all);
}

TEST(HexTest, RefusesOddLengthsAndNonDigits) {
  EXPECT_EQ(HexDecode("abc"), std::nullopt);
  EXPECT_EQ(HexDecode("0g"), std::nullopt);
  EXPECT_EQ(HexDecode("+1"), std::nullopt);
  EXPECT_EQ(HexDecode(" 1"), std::nullopt);
  EXPECT_EQ(HexDigitValue('f'), 15);
  EXPECT_EQ(HexDigitValue('F'), 15);
  EXPECT_EQ(HexDigitValue('/'), -1);
  EXPECT_EQ(HexDigitValue(':'), -1);
}

TEST(HexTest, EscapesBytes) {
  std::string out = "a";
  AppendHexEscape(out, 0x0a);
  AppendHexEscape(out, 0xff);
  EXPECT_EQ(out, "a\\x0a\\xff");
}

}  // namespace
}  // namespace kvdepot
