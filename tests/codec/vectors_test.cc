// The committed test vectors (tests/vectors/manifest.txt): every valid container decodes to its
// expected tensor and re-encodes to the same bytes; every malformed one fails with its error code.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kvdepot/base/file_io.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/npy.h"

namespace kvdepot {
namespace {

const std::string kVectorDir = std::string(KVDEPOT_SOURCE_DIR) + "/tests/vectors/";

struct VectorCase {
  std::string file;
  std::string expect;  // "ok" or "error"
  std::string arg;     // expected .npy or status code name
};

std::vector<VectorCase> LoadManifest() {
  std::vector<VectorCase> cases;
  std::ifstream in(kVectorDir + "manifest.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    VectorCase c;
    fields >> c.file >> c.expect >> c.arg;
    cases.push_back(c);
  }
  return cases;
}

TEST(VectorsTest, ManifestIsComplete) {
  const auto cases = LoadManifest();
  EXPECT_GE(cases.size(), 10u);
  int ok = 0;
  for (const auto& c : cases) ok += c.expect == "ok";
  EXPECT_GE(ok, 5);
}

TEST(VectorsTest, EveryVectorBehavesAsDocumented) {
  for (const VectorCase& c : LoadManifest()) {
    SCOPED_TRACE(c.file);
    auto bytes = ReadFile(kVectorDir + c.file, 1 << 20);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    auto decoded = DecodeChunk(*bytes);
    if (c.expect == "error") {
      ASSERT_FALSE(decoded.ok());
      EXPECT_EQ(StatusCodeName(decoded.status().code()), c.arg) << decoded.status().ToString();
      continue;
    }
    ASSERT_EQ(c.expect, "ok");
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    auto expected = ReadKvNpy(kVectorDir + c.arg, NpyReadOptions{/*uint16_as_bf16=*/true});
    ASSERT_TRUE(expected.ok()) << expected.status().ToString();
    EXPECT_EQ(decoded->shape, expected->shape);
    EXPECT_EQ(decoded->data, expected->data);
    if (decoded->dtype != DType::kBFloat16) {
      EXPECT_EQ(decoded->dtype, expected->dtype);
    }
    // The raw encoder is canonical: re-encoding the expected tensor reproduces the vector, except
    // where the vector carries an extra (optional) section the encoder never writes. (Lossy
    // codecs' vectors pair a container with its decoded tensor, which does not re-encode to it.)
    if (c.file.rfind("raw-", 0) == 0 && c.file.find("optional-section") == std::string::npos) {
      KvTensorView view{decoded->dtype, expected->shape, expected->data};
      auto again = EncodeChunk(view, EncodeOptions{});
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(*again, *bytes);
    }
  }
}

}  // namespace
}  // namespace kvdepot
