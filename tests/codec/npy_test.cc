#include "kvdepot/codec/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvdepot/base/file_io.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {
namespace {

std::vector<std::byte> Bytes(std::string_view text) {
  std::vector<std::byte> out;
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

std::string Text(const std::vector<std::byte>& bytes, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n && i < bytes.size(); ++i) {
    out.push_back(static_cast<char>(bytes[i]));
  }
  return out;
}

// A .npy image of format `major`.0 whose header is `dict` padded numpy-style (spaces and '\n' up
// to a multiple of 64 bytes), followed by `data`.
std::vector<std::byte> MakeNpy(std::string_view dict, const std::vector<std::byte>& data,
                               int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string header(dict);
  header.append(64 - (prefix + header.size() + 1) % 64, ' ');
  header.push_back('\n');
  std::string image("\x93NUMPY", 6);
  image.push_back(static_cast<char>(major));
  image.push_back('\0');
  const std::size_t len = header.size();
  for (std::size_t i = 0; i < prefix - 8; ++i) image.push_back(static_cast<char>(len >> (8 * i)));
  image += header;
  std::vector<std::byte> out = Bytes(image);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// `n` bytes of a fixed pseudo-random pattern.
std::vector<std::byte> Pattern(std::size_t n, std::uint32_t seed = 1) {
  std::vector<std::byte> out(n);
  std::uint32_t x = seed;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return out;
}

KvTensor PatternTensor(DType dtype, const KvShape& shape) {
  KvTensor t = KvTensor::Zeros(dtype, shape);
  t.data = Pattern(t.data.size(), static_cast<std::uint32_t>(dtype));
  return t;
}

constexpr KvShape kSmall{1, 3, 1, 2};  // [1, 2, 3, 1, 2]: 12 elements
constexpr std::string_view kSmallF2 =
    "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2, 3, 1, 2), }";

void ExpectError(const Result<KvTensor>& r, StatusCode code, std::string_view substring) {
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << substring;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(substring), std::string::npos) << r.status().ToString();
  EXPECT_EQ(r.status().message().rfind("npy: ", 0), 0u) << r.status().ToString();
}

// ---- writing and round trips ---------------------------------------------------------------

TEST(NpyTest, SerializedHeaderMatchesNumpy) {
  // numpy 1.24: np.save(f, np.zeros((1, 2, 3, 1, 2), np.float16)); header length 0x76 = 118.
  std::string expected("\x93NUMPY\x01\x00\x76\x00", 10);
  expected += "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2, 3, 1, 2), }";
  expected += std::string(49, ' ') + "\n";
  ASSERT_EQ(expected.size(), 128u);

  const KvTensor t = PatternTensor(DType::kFloat16, kSmall);
  const std::vector<std::byte> file = SerializeKvNpy(t.view());
  ASSERT_EQ(file.size(), 128u + t.data.size());
  EXPECT_EQ(Text(file, 128), expected);
  EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), file.begin() + 128));
}

TEST(NpyTest, SerializedDescrPerDtype) {
  for (auto [dtype, descr] :
       {std::pair{DType::kFloat16, "'descr': '<f2'"}, std::pair{DType::kFloat32, "'descr': '<f4'"},
        std::pair{DType::kBFloat16, "'descr': '<u2'"}}) {
    const std::vector<std::byte> file = SerializeKvNpy(PatternTensor(dtype, kSmall).view());
    EXPECT_NE(Text(file, 128).find(descr), std::string::npos) << DTypeName(dtype);
  }
}

TEST(NpyTest, RoundTripEachDtype) {
  const KvShape shapes[] = {kSmall, {2, 768, 4, 16}, {3, 5, 7, 9}, {1000, 1, 1, 1}};
  for (DType dtype : {DType::kFloat16, DType::kFloat32, DType::kBFloat16}) {
    for (const KvShape& shape : shapes) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + shape.ToString());
      const KvTensor t = PatternTensor(dtype, shape);
      const std::vector<std::byte> file = SerializeKvNpy(t.view());
      ASSERT_FALSE(file.empty());
      EXPECT_EQ((file.size() - t.data.size()) % 64, 0u);  // data offset aligned
      const Result<KvTensor> back = ParseKvNpy(file, {.uint16_as_bf16 = true});
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(back->dtype, dtype);
      EXPECT_EQ(back->shape, shape);
      EXPECT_EQ(back->data, t.data);
    }
  }
}

TEST(NpyTest, SerializeInvalidTensorIsEmpty) {
  KvTensor t = PatternTensor(DType::kFloat16, kSmall);
  t.data.pop_back();
  EXPECT_TRUE(SerializeKvNpy(t.view()).empty());
  EXPECT_TRUE(SerializeKvNpy(KvTensorView{}).empty());
}

// ---- reading: accepted variants -------------------------------------------------------------

TEST(NpyTest, ReadsVersion2And3Headers) {
  const std::vector<std::byte> data = Pattern(24);
  for (int major : {2, 3}) {
    const Result<KvTensor> r = ParseKvNpy(MakeNpy(kSmallF2, data, major));
    ASSERT_TRUE(r.ok()) << major << ": " << r.status().ToString();
    EXPECT_EQ(r->dtype, DType::kFloat16);
    EXPECT_EQ(r->shape, kSmall);
    EXPECT_EQ(r->data, data);
  }
}

TEST(NpyTest, AcceptsHeaderSyntaxVariants) {
  const std::vector<std::byte> data = Pattern(24);
  for (std::string_view dict : {
           "{'shape': (1, 2, 3, 1, 2), 'fortran_order': False, 'descr': '<f2'}",
           "{\"descr\": \"<f2\", \"fortran_order\": False, \"shape\": (1,2,3,1,2,),}",
           "  {  'descr' :'<f2' ,'fortran_order':False,'shape':( 1 , 2 , 3 , 1 , 2 )  }  ",
           "{'descr': '<f2',\n 'fortran_order': False,\t'shape': (1, 2, 3, 1, 2)}\r\n",
       }) {
    const Result<KvTensor> r = ParseKvNpy(MakeNpy(dict, data));
    ASSERT_TRUE(r.ok()) << dict << ": " << r.status().ToString();
    EXPECT_EQ(r->shape, kSmall);
    EXPECT_EQ(r->data, data);
  }
}

TEST(NpyTest, BigEndianIsByteSwapped) {
  // shape [1, 2, 1, 1, 2]: 4 elements.
  const std::vector<std::byte> be2 = Bytes(std::string("\x3c\x00\xc0\x00\x12\x34\xab\xcd", 8));
  const std::vector<std::byte> le2 = Bytes(std::string("\x00\x3c\x00\xc0\x34\x12\xcd\xab", 8));
  for (auto [descr, dtype] :
       {std::pair{"'>f2'", DType::kFloat16}, std::pair{"'>u2'", DType::kBFloat16}}) {
    const std::string dict =
        std::string("{'descr': ") + descr + ", 'fortran_order': False, 'shape': (1, 2, 1, 1, 2), }";
    const Result<KvTensor> r = ParseKvNpy(MakeNpy(dict, be2), {.uint16_as_bf16 = true});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->dtype, dtype);
    EXPECT_EQ(r->data, le2);
  }
  const std::vector<std::byte> be4 = Bytes(std::string("\x3f\x80\x00\x00\xc0\x00\x00\x01", 8));
  const Result<KvTensor> r = ParseKvNpy(
      MakeNpy("{'descr': '>f4', 'fortran_order': False, 'shape': (1, 2, 1, 1, 1), }", be4));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->dtype, DType::kFloat32);
  EXPECT_EQ(ElementAsFloat(r->view(), 0), 1.0f);
  EXPECT_EQ(r->data, Bytes(std::string("\x00\x00\x80\x3f\x01\x00\x00\xc0", 8)));
}

TEST(NpyTest, Uint16NeedsBf16Declared) {
  const std::vector<std::byte> file =
      MakeNpy("{'descr': '<u2', 'fortran_order': False, 'shape': (1, 2, 3, 1, 2), }", Pattern(24));
  const Result<KvTensor> r = ParseKvNpy(file);
  ExpectError(r, StatusCode::kInvalidArgument, "uint16");
  EXPECT_NE(r.status().message().find("--dtype bf16"), std::string::npos);
  const Result<KvTensor> bf = ParseKvNpy(file, {.uint16_as_bf16 = true});
  ASSERT_TRUE(bf.ok()) << bf.status().ToString();
  EXPECT_EQ(bf->dtype, DType::kBFloat16);
}

TEST(NpyTest, RejectsUnsupportedDescr) {
  for (std::string_view descr :
       {"<f8", "<i4", "|O", "|b1", "|V2", "<V2", "f2", "=f2", "<u4", "<c8", "", "<f2 "}) {
    const std::string dict = "{'descr': '" + std::string(descr) +
                             "', 'fortran_order': False, 'shape': (1, 2, 3, 1, 2), }";
    const Result<KvTensor> r = ParseKvNpy(MakeNpy(dict, Pattern(24)), {.uint16_as_bf16 = true});
    ExpectError(r, StatusCode::kInvalidArgument,
                "header field 'descr' is '" + std::string(descr) + "'");
  }
}

TEST(NpyTest, RejectsFortranOrder) {
  const Result<KvTensor> r = ParseKvNpy(
      MakeNpy("{'descr': '<f2', 'fortran_order': True, 'shape': (1, 2, 3, 1, 2), }", Pattern(24)));
  ExpectError(r, StatusCode::kInvalidArgument, "'fortran_order' is True");
}

TEST(NpyTest, TruncatedAndTrailingData) {
  std::vector<std::byte> data = Pattern(23);
  ExpectError(ParseKvNpy(MakeNpy(kSmallF2, data)), StatusCode::kCorruption,
              "truncated: data has 23 bytes, shape needs 24");
  data = Pattern(25);
  ExpectError(ParseKvNpy(MakeNpy(kSmallF2, data)), StatusCode::kCorruption,
              "trailing bytes: data has 25 bytes, shape needs 24");
}

TEST(NpyTest, EveryPrefixOfAValidFileFails) {
  const std::vector<std::byte> file = SerializeKvNpy(PatternTensor(DType::kFloat32, kSmall).view());
  ASSERT_TRUE(ParseKvNpy(file).ok());
  for (std::size_t n = 0; n < file.size(); ++n) {
    const Result<KvTensor> r = ParseKvNpy(std::span(file).first(n));
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().message().rfind("npy: ", 0), 0u) << r.status().ToString();
  }
}

// ---- hostile input --------------------------------------------------------------------------

struct HostileCase {
  const char* name;
  std::string dict;
  StatusCode code;
  const char* substring;
};

TEST(NpyHostileHeaderTest, RejectedWithAClearError) {
  const std::string f2 = "{'descr': '<f2', 'fortran_order': False, 'shape': ";
  std::string many_dims = "(";
  for (int i = 0; i < 5000; ++i) many_dims += "1, ";
  const HostileCase cases[] = {
      {"overflowing dim", f2 + "(1, 2, 99999999999999999999999999999999, 1, 2), }",
       StatusCode::kOutOfRange, "dimension 2 is out of range"},
      {"dim beyond uint32", f2 + "(4294967297, 2, 3, 1, 2), }", StatusCode::kOutOfRange,
       "dimension 0 is out of range"},
      {"overflowing product", f2 + "(1024, 2, 65536, 1024, 1024), }", StatusCode::kOutOfRange,
       "over the limit"},
      {"dim beyond kMax", f2 + "(1, 2, 65537, 1, 2), }", StatusCode::kOutOfRange,
       "tokens = 65537 is out of range"},
      {"zero dim", f2 + "(1, 2, 3, 0, 2), }", StatusCode::kOutOfRange, "kv_heads = 0"},
      {"negative dim", f2 + "(1, 2, -3, 1, 2), }", StatusCode::kOutOfRange,
       "dimension 2 is negative"},
      {"6-D shape", f2 + "(1, 2, 3, 1, 2, 1), }", StatusCode::kInvalidArgument,
       "'shape' has 6 dimensions, expected 5 [layers, 2, tokens, kv_heads, head_dim]"},
      {"4-D shape", f2 + "(2, 3, 1, 2), }", StatusCode::kInvalidArgument, "has 4 dimensions"},
      {"empty tuple", f2 + "(), }", StatusCode::kInvalidArgument, "has 0 dimensions"},
      {"one-element tuple", f2 + "(3,), }", StatusCode::kInvalidArgument, "has 1 dimensions"},
      {"parenthesized int", f2 + "(3), }", StatusCode::kInvalidArgument, "not a tuple"},
      {"list shape", f2 + "[1, 2, 3, 1, 2], }", StatusCode::kInvalidArgument, "a tuple"},
      {"float dim", f2 + "(1, 2, 3.0, 1, 2), }", StatusCode::kInvalidArgument, "offset"},
      {"5000 dims", f2 + many_dims + "), }", StatusCode::kInvalidArgument, "has 5000 dimensions"},
      {"axis 1 is 3", f2 + "(1, 3, 3, 1, 2), }", StatusCode::kInvalidArgument,
       "axis 1 is 3, expected 2"},
      {"missing shape", "{'descr': '<f2', 'fortran_order': False, }", StatusCode::kInvalidArgument,
       "missing key 'shape'"},
      {"missing descr", "{'fortran_order': False, 'shape': (1, 2, 3, 1, 2)}",
       StatusCode::kInvalidArgument, "missing key 'descr'"},
      {"empty dict", "{}", StatusCode::kInvalidArgument, "missing key"},
      {"duplicate key", f2 + "(1, 2, 3, 1, 2), 'descr': '<f2', }", StatusCode::kInvalidArgument,
       "key 'descr' more than once"},
      {"unknown key", f2 + "(1, 2, 3, 1, 2), 'extra': 1, }", StatusCode::kInvalidArgument,
       "unknown key 'extra'"},
      {"string swallowing a comma", "{'descr': '<f2, 'fortran_order': False}",
       StatusCode::kInvalidArgument, "expected ',' or '}'"},
      {"string with a line break", "{'descr': '<f2\n', 'fortran_order': False}",
       StatusCode::kInvalidArgument, "unterminated string starting at offset 10"},
      {"unterminated at end", "{'descr': '<f2", StatusCode::kInvalidArgument,
       "unterminated string"},
      {"mismatched quotes", "{\"descr': '<f2'}", StatusCode::kInvalidArgument, "unterminated"},
      {"escape", "{'de\\scr': '<f2'}", StatusCode::kInvalidArgument, "escape"},
      {"unclosed dict", f2 + "(1, 2, 3, 1, 2)", StatusCode::kInvalidArgument, "'}'"},
      {"unclosed tuple", f2 + "(1, 2, 3, 1, 2}", StatusCode::kInvalidArgument, "')'"},
      {"text after dict", std::string(kSmallF2) + "x", StatusCode::kInvalidArgument,
       "after the closing '}'"},
      {"not a dict", "[1, 2]", StatusCode::kInvalidArgument, "'{'"},
      {"bool not word", "{'descr': '<f2', 'fortran_order': Falsey, 'shape': (1, 2, 3, 1, 2)}",
       StatusCode::kInvalidArgument, "True or False"},
      {"descr not string", "{'descr': 2, 'fortran_order': False, 'shape': (1, 2, 3, 1, 2)}",
       StatusCode::kInvalidArgument, "value of 'descr'"},
      {"non-ascii key", "{'d\xc3\xa9scr': '<f2'}", StatusCode::kInvalidArgument,
       "unknown key 'd\\xc3\\xa9scr'"},
  };
  for (const HostileCase& c : cases) {
    SCOPED_TRACE(c.name);
    ExpectError(ParseKvNpy(MakeNpy(c.dict, Pattern(24), 2)), c.code, c.substring);
  }
}

TEST(NpyHostileHeaderTest, BadPreamble) {
  const std::vector<std::byte> valid = MakeNpy(kSmallF2, Pattern(24));
  ExpectError(ParseKvNpy({}), StatusCode::kCorruption, "truncated");
  ExpectError(ParseKvNpy(Bytes("PK\x03\x04 not npy at all")), StatusCode::kInvalidArgument,
              "not an .npy file");

  std::vector<std::byte> bad = valid;
  bad[6] = std::byte{4};
  ExpectError(ParseKvNpy(bad), StatusCode::kInvalidArgument, "format version 4.0");
  bad = valid;
  bad[7] = std::byte{1};
  ExpectError(ParseKvNpy(bad), StatusCode::kInvalidArgument, "format version 1.1");

  bad = valid;  // header length 0xffff, beyond the file
  bad[8] = bad[9] = std::byte{0xff};
  ExpectError(ParseKvNpy(bad), StatusCode::kCorruption, "beyond the end of the file");

  bad = MakeNpy(kSmallF2, Pattern(24), 2);  // v2.0 header length 2^32 - 1
  for (int i = 8; i < 12; ++i) bad[i] = std::byte{0xff};
  ExpectError(ParseKvNpy(bad), StatusCode::kOutOfRange, "over the limit of 65536");

  // A header over 64 KiB that is otherwise valid and present in full.
  std::string dict(kSmallF2);
  dict.insert(1, 70000, ' ');
  ExpectError(ParseKvNpy(MakeNpy(dict, Pattern(24), 3)), StatusCode::kOutOfRange, "over the limit");
}

TEST(NpyFuzzTest, RandomHeaderByteFlipsNeverCrash) {
  const std::vector<std::byte> valid =
      SerializeKvNpy(PatternTensor(DType::kFloat16, kSmall).view());
  std::mt19937 rng(20240601);
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<std::byte> file = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      file[rng() % 128] = static_cast<std::byte>(rng());
    }
    const Result<KvTensor> r = ParseKvNpy(file, {.uint16_as_bf16 = (iter & 1) != 0});
    if (r.ok()) {
      ++accepted;
      ASSERT_TRUE(r->view().Validate().ok());
    } else {
      ASSERT_EQ(r.status().message().rfind("npy: ", 0), 0u) << r.status().ToString();
    }
  }
  EXPECT_GT(accepted, 0);  // flips inside the padding are harmless
}

TEST(NpyFuzzTest, RandomTokenSoupNeverCrashes) {
  const char* tokens[] = {
      "{",
      "}",
      "(",
      ")",
      ",",
      ":",
      " ",
      "'",
      "\"",
      "\\",
      "\n",
      "[",
      "-",
      "1",
      "2",
      "True",
      "False",
      "'descr'",
      "'<f2'",
      "'<u2'",
      "'shape'",
      "'fortran_order'",
      "99999999999999999999",
  };
  std::mt19937 rng(7);
  for (int iter = 0; iter < 5000; ++iter) {
    std::string dict;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) dict += tokens[rng() % std::size(tokens)];
    const Result<KvTensor> r =
        ParseKvNpy(MakeNpy(dict, Pattern(rng() % 64), 1 + static_cast<int>(rng() % 3)));
    if (!r.ok()) {
      ASSERT_EQ(r.status().message().rfind("npy: ", 0), 0u) << r.status().ToString();
    }
  }
}

// ---- files ----------------------------------------------------------------------------------

std::string TempPath(std::string_view name) {
  return ::testing::TempDir() + "kvdepot_npy_test_" + std::to_string(::getpid()) + "_" +
         std::string(name);
}

TEST(NpyFileTest, WriteThenRead) {
  const std::string path = TempPath("bf16.npy");
  const KvTensor t = PatternTensor(DType::kBFloat16, {2, 5, 3, 8});
  ASSERT_TRUE(WriteKvNpy(path, t.view()).ok());
  const Result<KvTensor> r = ReadKvNpy(path, {.uint16_as_bf16 = true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->data, t.data);
  EXPECT_EQ(r->shape, t.shape);

  const Result<KvTensor> undeclared = ReadKvNpy(path);
  ASSERT_FALSE(undeclared.ok());
  EXPECT_EQ(undeclared.status().message().rfind(path + ": npy: ", 0), 0u)
      << undeclared.status().ToString();
  std::filesystem::remove(path);
}

TEST(NpyFileTest, ErrorsNameThePath) {
  const std::string missing = TempPath("missing.npy");
  const Result<KvTensor> r = ReadKvNpy(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message().rfind(missing + ":", 0), 0u) << r.status().ToString();

  KvTensor bad = PatternTensor(DType::kFloat16, kSmall);
  bad.data.resize(5);
  const std::string path = TempPath("invalid.npy");
  const Status s = WriteKvNpy(path, bad.view());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind(path + ": npy: ", 0), 0u) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(NpyFileTest, ReadsSharedTinyStoriesKv) {
  const std::string path = std::string(KVDEPOT_SHARED_DATA_DIR) + "/tinystories656k-kv-768tok.npy";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared data file absent: " << path;
  const Result<KvTensor> r = ReadKvNpy(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->dtype, DType::kFloat16);
  EXPECT_EQ(r->shape, (KvShape{2, 768, 4, 16}));
  for (std::uint64_t i = 0; i < r->shape.elements(); ++i) {
    ASSERT_TRUE(std::isfinite(ElementAsFloat(r->view(), i))) << "element " << i;
  }
  // numpy wrote it; serializing the parsed tensor reproduces the file byte for byte.
  const Result<std::vector<std::byte>> original = ReadFile(path, std::uint64_t{1} << 24);
  ASSERT_TRUE(original.ok()) << original.status().ToString();
  EXPECT_EQ(SerializeKvNpy(r->view()), *original);
}

}  // namespace
}  // namespace kvdepot
