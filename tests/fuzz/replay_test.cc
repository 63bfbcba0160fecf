// Every input under fuzz/corpus/<target>/ and fuzz/regressions/<target>/ run through its fuzz
// target (fuzz/targets/). A regression input is one that once crashed a target or tripped a
// sanitizer (docs/fuzzing.md lists each one and its fix); under `make test-asan` this test also
// runs them with AddressSanitizer + UBSan.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "fuzz_targets.h"

namespace kvdepot::fuzz {
namespace {
namespace fs = std::filesystem;

std::vector<fs::path> Inputs(const std::string& target, const char* kind) {
  std::vector<fs::path> out;
  const fs::path dir = fs::path(KVDEPOT_SOURCE_DIR) / "fuzz" / kind / target;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::uint8_t> ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

// Test names show the target, not its bytes.
void PrintTo(const Target& t, std::ostream* os);
void PrintTo(const Target& t, std::ostream* os) {
  *os << t.name;
}

namespace {

class FuzzReplayTest : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplayTest, CorpusAndRegressionsRunClean) {
  const Target t = GetParam();
  const auto corpus = Inputs(std::string(t.name), "corpus");
  EXPECT_FALSE(corpus.empty()) << "fuzz/corpus/" << t.name << " has no seed inputs";
  std::size_t runs = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    for (const fs::path& p : Inputs(std::string(t.name), kind)) {
      SCOPED_TRACE(p.string());
      const auto bytes = ReadAll(p);
      EXPECT_EQ(t.fn(bytes.data(), bytes.size()), 0);
      ++runs;
    }
  }
  RecordProperty("inputs", static_cast<int>(runs));
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplayTest,
                         ::testing::ValuesIn(AllTargets().begin(), AllTargets().end()),
                         [](const ::testing::TestParamInfo<Target>& param) {
                           return std::string(param.param.name);
                         });

}  // namespace
}  // namespace kvdepot::fuzz
