// The `kvdepot codec` commands, run in-process through RunCli.
#include "kvdepot/cli/cli.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "kvdepot/base/file_io.h"
#include "kvdepot/codec/npy.h"

namespace kvdepot::cli {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int code;
  std::string out;
  std::string err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvdepot-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  CliResult Run(std::vector<std::string> args) {
    args.insert(args.begin(), "kvdepot");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err);
    return {code, out.str(), err.str()};
  }

  // Asserts a failure with exactly one "kvdepot: error: " line on stderr.
  static void ExpectOneLineError(const CliResult& r, int code, const std::string& needle) {
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_EQ(r.err.rfind("kvdepot: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }

  fs::path dir_;
};

TEST_F(CliTest, RawRoundTripIsBitExact) {
  for (const char* dtype : {"fp16", "bf16", "fp32"}) {
    SCOPED_TRACE(dtype);
    ASSERT_EQ(Run({"codec", "synth", Path("in.npy"), "--layers", "3", "--tokens", "17", "--heads",
                   "3", "--dim", "80", "--seed", "9", "--dtype", dtype})
                  .code,
              kExitOk);
    const std::string flag = std::string("--dtype=") + dtype;
    CliResult r = Run({"codec", "encode", "--codec", "raw", flag, Path("in.npy"), Path("c.kvd")});
    ASSERT_EQ(r.code, kExitOk) << r.err;
    r = Run({"codec", "decode", Path("c.kvd"), Path("out.npy")});
    ASSERT_EQ(r.code, kExitOk) << r.err;
    EXPECT_EQ(*ReadFile(Path("in.npy"), 1 << 24), *ReadFile(Path("out.npy"), 1 << 24));
    r = Run({"codec", "compare", "--expect-bit-exact", flag, Path("in.npy"), Path("c.kvd")});
    EXPECT_EQ(r.code, kExitOk) << r.err;
  }
}

TEST_F(CliTest, InspectJsonHasTheDocumentedFields) {
  ASSERT_EQ(
      Run({"codec", "synth", Path("in.npy"), "--tokens", "4", "--heads", "1", "--dim", "8"}).code,
      kExitOk);
  ASSERT_EQ(Run({"codec", "encode", Path("in.npy"), Path("c.kvd")}).code, kExitOk);
  const CliResult r = Run({"codec", "inspect", "--json", Path("c.kvd")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* key :
       {"\"codec\":\"raw\"", "\"shape\":[2,2,4,1,8]", "\"encoded_bytes\":", "\"fp16_bytes\":256",
        "\"sections\":[", "\"kind\":\"payload\"", "\"checksums_ok\":true"}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
}

TEST_F(CliTest, InspectReportsCorruptionAndFails) {
  ASSERT_EQ(
      Run({"codec", "synth", Path("in.npy"), "--tokens", "4", "--heads", "1", "--dim", "8"}).code,
      kExitOk);
  ASSERT_EQ(Run({"codec", "encode", Path("in.npy"), Path("c.kvd")}).code, kExitOk);
  std::vector<std::byte> bytes = *ReadFile(Path("c.kvd"), 1 << 20);
  bytes.back() ^= std::byte{1};
  ASSERT_TRUE(WriteFileAtomic(Path("bad.kvd"), bytes).ok());
  const CliResult r = Run({"codec", "inspect", Path("bad.kvd")});
  EXPECT_NE(r.out.find("MISMATCH"), std::string::npos) << r.out;
  ExpectOneLineError(r, kExitError, "checksum mismatch");
  ExpectOneLineError(Run({"codec", "decode", Path("bad.kvd"), Path("o.npy")}), kExitError,
                     "checksum mismatch");
  EXPECT_FALSE(fs::exists(Path("o.npy"))) << "a failed decode must not leave output";
}

TEST_F(CliTest, EveryTruncatedContainerFailsCleanly) {
  ASSERT_EQ(
      Run({"codec", "synth", Path("in.npy"), "--tokens", "2", "--heads", "1", "--dim", "4"}).code,
      kExitOk);
  ASSERT_EQ(Run({"codec", "encode", Path("in.npy"), Path("c.kvd")}).code, kExitOk);
  const std::vector<std::byte> bytes = *ReadFile(Path("c.kvd"), 1 << 20);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    ASSERT_TRUE(WriteFileAtomic(Path("cut.kvd"), std::span(bytes).first(n)).ok());
    const CliResult r = Run({"codec", "decode", Path("cut.kvd"), Path("o.npy")});
    ASSERT_EQ(r.code, kExitError) << n;
    ASSERT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST_F(CliTest, CompareReportsDifferences) {
  ASSERT_EQ(Run({"codec", "synth", Path("a.npy"), "--tokens", "8", "--seed", "1"}).code, kExitOk);
  ASSERT_EQ(Run({"codec", "synth", Path("b.npy"), "--tokens", "8", "--seed", "2"}).code, kExitOk);
  CliResult r = Run({"codec", "compare", "--json", Path("a.npy"), Path("b.npy")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* key : {"\"max_abs\":", "\"rel_l2\":", "\"snr_db\":", "\"bit_exact\":false"}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  ExpectOneLineError(Run({"codec", "compare", "--expect-bit-exact", Path("a.npy"), Path("b.npy")}),
                     kExitError, "not bit-exact");
  ExpectOneLineError(
      Run({"codec", "compare", "--max-rel-l2", "0.001", Path("a.npy"), Path("b.npy")}), kExitError,
      "exceeds --max-rel-l2");
  ASSERT_EQ(Run({"codec", "synth", Path("c.npy"), "--tokens", "9"}).code, kExitOk);
  ExpectOneLineError(Run({"codec", "compare", Path("a.npy"), Path("c.npy")}), kExitError, "shape");
}

TEST_F(CliTest, CompareReportsAttentionErrorAgainstHackDefaults) {
  ASSERT_EQ(Run({"codec", "synth", Path("a.npy"), "--tokens", "128", "--dim", "64", "--heads", "2",
                 "--seed", "3"})
                .code,
            kExitOk);
  ASSERT_EQ(Run({"codec", "encode", "--codec", "hack-int2", "--partition", "32", Path("a.npy"),
                 Path("p32.kvd")})
                .code,
            kExitOk);
  CliResult r = Run({"codec", "compare", "--probe-queries", "8", Path("a.npy"), Path("p32.kvd")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* line :
       {"k_rel_l2 ", "v_rel_l2 ", "attention   rel_l2 ", "8 probe queries per layer",
        "vs defaults     0.", "the attention error of hack-int2 at its defaults (--partition 64)",
        "vs recommended  1.00x the attention error of hack-int2 --partition 32 (recommended)"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << " in " << r.out;
  }
  r = Run({"codec", "compare", "--json", "--probe-queries", "8", Path("a.npy"), Path("p32.kvd")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* key : {"\"attention\":{", "\"attn_rel_l2\":", "\"hack_int2_defaults\":{",
                          "\"hack_int2_recommended\":{", "\"attn_ratio\":1.0"}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  // Identical inputs: no error, ratio 0; --probe-queries 0 leaves the attention part out.
  r = Run({"codec", "compare", "--probe-queries", "4", Path("a.npy"), Path("a.npy")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("vs defaults     0.00x"), std::string::npos) << r.out;
  r = Run({"codec", "compare", "--probe-queries", "0", Path("a.npy"), Path("a.npy")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out.find("attention"), std::string::npos) << r.out;
  ExpectOneLineError(
      Run({"codec", "compare", "--probe-queries", "x", Path("a.npy"), Path("a.npy")}), kExitUsage,
      "--probe-queries");
}

TEST_F(CliTest, EncodeReportsTheTokensHackKeepsUnquantized) {
  ASSERT_EQ(Run({"codec", "synth", Path("a.npy"), "--tokens", "256", "--dim", "64", "--heads", "1",
                 "--layers", "1"})
                .code,
            kExitOk);
  CliResult r = Run(
      {"codec", "encode", "--codec", "hack-int2", "--sinks", "4", Path("a.npy"), Path("s.kvd")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("unquantized tokens per (layer, K|V, head): 4 sinks + 60 tail of 256"),
            std::string::npos)
      << r.out;
  r = Run({"codec", "encode", "--json", "--codec", "hack-int2", "--sinks", "64", Path("a.npy"),
           Path("s.kvd")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("\"unquantized_tokens\":{\"sinks\":64,\"tail\":0}"), std::string::npos)
      << r.out;
  r = Run({"codec", "encode", "--json", "--codec", "raw", Path("a.npy"), Path("r.kvd")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out.find("unquantized_tokens"), std::string::npos) << r.out;
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  ExpectOneLineError(Run({"nope"}), kExitUsage, "unknown command 'nope'");
  ExpectOneLineError(Run({"codec"}), kExitUsage, "SUBCOMMAND");
  ExpectOneLineError(Run({"codec", "encode", Path("x.npy")}), kExitUsage, "missing argument");
  ExpectOneLineError(Run({"codec", "encode", "--bogus", "a", "b"}), kExitUsage,
                     "unknown option --bogus");
  ExpectOneLineError(Run({"codec", "synth", Path("o.npy"), "--tokens", "0"}), kExitUsage,
                     "--tokens = 0 is out of range");
  ExpectOneLineError(Run({"codec", "synth", Path("o.npy"), "--layers", "x"}), kExitUsage,
                     "--layers expects");
  ExpectOneLineError(Run({"codec", "synth", Path("o.npy"), "--dim"}), kExitUsage, "needs a value");
  EXPECT_EQ(Run({"help"}).code, kExitOk);
  EXPECT_EQ(Run({"version"}).out, "kvdepot 0.1.0\n");
}

TEST_F(CliTest, BadInputsAreOneLineErrors) {
  ExpectOneLineError(Run({"codec", "encode", Path("missing.npy"), Path("o.kvd")}), kExitError,
                     "missing.npy");
  ASSERT_TRUE(WriteFileAtomic(Path("junk.npy"), std::as_bytes(std::span("garbage\n"))).ok());
  ExpectOneLineError(Run({"codec", "encode", Path("junk.npy"), Path("o.kvd")}), kExitError,
                     "junk.npy");
  ExpectOneLineError(Run({"codec", "decode", Path("junk.npy"), Path("o.npy")}), kExitError,
                     "not a kvdepot chunk container");
  // A flag value no codec has is a wrong command line (exit 2), named with its flag.
  ExpectOneLineError(Run({"codec", "encode", "--codec", "zstd", Path("junk.npy"), Path("o.kvd")}),
                     kExitUsage, "--codec zstd: unknown codec 'zstd'");
  ExpectOneLineError(Run({"codec", "synth", Path("o.npy"), "--dtype", "fp8"}), kExitUsage,
                     "--dtype fp8");
  ExpectOneLineError(Run({"codec", "inspect", dir_.string()}), kExitError, "not a regular file");
}

}  // namespace
}  // namespace kvdepot::cli
