// The `kvdepot` commands that talk to kvdepotd, run in-process through RunCli against an
// in-process server: stats sections and --json, top / stats --watch, ls with a header, sort,
// glob and prefix, del --prefix / --namespace with and without --yes, bench's cleanup, help and
// shell completion generated from the command table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "in_process_server.h"
#include "kvdepot/cli/cli.h"
#include "kvdepot/client/client.h"

namespace kvdepot::cli {
namespace {

using Json = nlohmann::json;

struct CliResult {
  int code;
  std::string out;
  std::string err;
};

class CliRemoteTest : public daemon::InProcessServerTest {
 protected:
  void SetUp() override {
    daemon::HostTierOptions host;
    host.capacity_bytes = 64ull << 20;
    StartServerWith(host, daemon::ServerOptions{});
    addr_ = TcpOptions().address;
    conn_ = ConnectOrFail(TcpOptions());
    ASSERT_NE(conn_, nullptr);
  }

  // `kvdepot --addr ADDR ARGS...` in-process; stdin, stdout and stderr are not terminals.
  CliResult Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"kvdepot", "--addr", addr_});
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err);
    return {code, out.str(), err.str()};
  }

  void Put(const std::string& key, std::size_t bytes) {
    const std::vector<std::byte> value(bytes, std::byte{7});
    const Status s = conn_->Put(key, value);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Every stored key starting with `prefix`.
  std::vector<std::string> KeysUnder(const std::string& prefix) {
    protocol::ScanRequest q;
    q.prefix = prefix;
    q.limit = 1000;
    std::vector<std::string> keys;
    while (true) {
      auto page = conn_->Scan(q);
      EXPECT_TRUE(page.ok()) << page.status().ToString();
      if (!page.ok()) return keys;
      for (const auto& e : page->entries) keys.push_back(e.key);
      if (page->next_cursor.empty() || page->entries.empty()) return keys;
      q.cursor = page->next_cursor;
    }
  }

  static std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::string addr_;
  std::unique_ptr<client::Connection> conn_;
};

bool Contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// ---- stats -------------------------------------------------------------------------------------

TEST_F(CliRemoteTest, StatsShowsSectionsHumanUnitsAndHitRates) {
  Put("k1", 3000);
  ASSERT_TRUE(conn_->Get("k1").ok());
  ASSERT_TRUE(conn_->Get("missing").ok());
  const CliResult r = Run({"stats"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* section : {"# server", "# connections", "# tiers", "# host"}) {
    EXPECT_TRUE(Contains(r.out, section)) << section << "\n" << r.out;
  }
  EXPECT_TRUE(Contains(r.out, "pid")) << r.out;
  EXPECT_TRUE(Contains(r.out, std::to_string(::getpid()))) << r.out;  // the server is in-process
  EXPECT_TRUE(Contains(r.out, "version")) << r.out;
  EXPECT_TRUE(Contains(r.out, "64.0 MiB")) << r.out;  // host capacity
  EXPECT_TRUE(Contains(r.out, "50.0%")) << r.out;     // one hit, one miss
  EXPECT_TRUE(Contains(r.out, "HIT RATE")) << r.out;
}

TEST_F(CliRemoteTest, StatsJsonKeepsTheRawNumbers) {
  Put("k1", 3000);
  const CliResult r = Run({"stats", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json doc = Json::parse(r.out);
  EXPECT_EQ(doc["tiers"]["host"]["capacity"].get<std::uint64_t>(), 64ull << 20);
  EXPECT_EQ(doc["tiers"]["host"]["chunks"].get<std::uint64_t>(), 1u);
  EXPECT_GE(doc["tiers"]["host"]["bytes"].get<std::uint64_t>(), 3000u);  // plus the entry's own
  EXPECT_EQ(doc["pid"].get<std::int64_t>(), ::getpid());
  EXPECT_TRUE(doc["version"].is_string()) << r.out;
}

// ---- top / stats --watch -----------------------------------------------------------------------

TEST_F(CliRemoteTest, TopStopsAfterCountLines) {
  const CliResult r = Run({"top", "--interval", "0.05", "--count", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;  // the header, then one line per interval
  EXPECT_TRUE(Contains(lines[0], "req/s") && Contains(lines[0], "host hit") &&
              Contains(lines[0], "conns") && Contains(lines[0], "rtt ms"))
      << lines[0];
}

TEST_F(CliRemoteTest, TopJsonAndStatsWatchGiveOneObjectPerInterval) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"top", "--interval", "0.05", "--count", "2", "--json"},
           {"stats", "--watch", "0.05", "--count", "2", "--json"}}) {
    const CliResult r = Run(args);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto lines = Lines(r.out);
    ASSERT_EQ(lines.size(), 2u) << r.out;
    for (const auto& line : lines) {
      const Json j = Json::parse(line);
      EXPECT_TRUE(j.contains("requests_per_s") && j.contains("bytes_in_per_s") &&
                  j.contains("evictions_per_s") && j["hit_rate"].contains("host"))
          << line;
      EXPECT_GE(j["connections_open"].get<int>(), 1) << line;  // this test's own connection
    }
  }
  EXPECT_EQ(Run({"top", "--interval", "0"}).code, 2);
  EXPECT_EQ(Run({"stats", "--count", "2"}).code, 2);  // --count without --watch
}

// ---- ls ----------------------------------------------------------------------------------------

TEST_F(CliRemoteTest, LsHasAHeaderHumanSizesAndAFooter) {
  Put("model-a", 100);
  Put("model-b", 3000);
  const CliResult r = Run({"ls"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_TRUE(Contains(lines[0], "TIER") && Contains(lines[0], "SIZE") &&
              Contains(lines[0], "IDLE") && Contains(lines[0], "KEY"))
      << lines[0];
  EXPECT_TRUE(Contains(r.out, "2.93 KiB")) << r.out;
  EXPECT_TRUE(Contains(r.out, "100 B")) << r.out;
  EXPECT_TRUE(Contains(lines[3], "2 keys")) << lines[3];
}

std::vector<std::string> KeysOf(const std::string& json) {
  std::vector<std::string> keys;
  for (const auto& e : Json::parse(json)) keys.push_back(e["key"].get<std::string>());
  return keys;
}

TEST_F(CliRemoteTest, LsSortsByKeySizeTierAndIdle) {
  Put("a", 50);
  Put("b", 3000);
  Put("c", 1000);
  using V = std::vector<std::string>;
  EXPECT_EQ(KeysOf(Run({"ls", "--json"}).out), (V{"a", "b", "c"}));
  EXPECT_EQ(KeysOf(Run({"ls", "--sort", "key", "--json"}).out), (V{"a", "b", "c"}));
  EXPECT_EQ(KeysOf(Run({"ls", "--sort", "size", "--json"}).out), (V{"b", "c", "a"}));
  EXPECT_EQ(KeysOf(Run({"ls", "--sort", "tier", "--json"}).out), (V{"a", "b", "c"}));
  EXPECT_EQ(Run({"ls", "--sort", "idle", "--json"}).code, 0);
  const CliResult bad = Run({"ls", "--sort", "colour"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(Contains(bad.err, "--sort colour")) << bad.err;
}

TEST_F(CliRemoteTest, LsMatchesAGlobOrAPrefix) {
  Put("model-1/a", 10);
  Put("model-2/b", 10);
  Put("other/model-3", 10);
  using V = std::vector<std::string>;
  EXPECT_EQ(KeysOf(Run({"ls", "model-*", "--json"}).out), (V{"model-1/a", "model-2/b"}));
  EXPECT_EQ(KeysOf(Run({"ls", "*/b", "--json"}).out), (V{"model-2/b"}));
  EXPECT_EQ(KeysOf(Run({"ls", "*model-?", "--json"}).out), (V{"other/model-3"}));
  EXPECT_EQ(KeysOf(Run({"ls", "model-2", "--json"}).out), (V{"model-2/b"}));  // a prefix
  EXPECT_EQ(KeysOf(Run({"ls", "--prefix", "oth", "--json"}).out), (V{"other/model-3"}));
  EXPECT_EQ(Run({"ls", "model-*", "--prefix", "m"}).code, 2);
  const CliResult limited = Run({"ls", "model-*", "--limit", "1"});
  EXPECT_TRUE(Contains(limited.out, "raise --limit")) << limited.out;
}

// ---- del --prefix / --namespace ----------------------------------------------------------------

TEST_F(CliRemoteTest, DelPrefixRefusesWithoutYesWhenStdinIsNoTerminal) {
  for (int i = 0; i < 5; ++i) Put("llama/" + std::to_string(i), 1000);
  const CliResult r = Run({"del", "--prefix", "llama/"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "5 keys") && Contains(r.err, "--yes") &&
              Contains(r.err, "not a terminal"))
      << r.err;
  EXPECT_EQ(KeysUnder("llama/").size(), 5u);  // nothing deleted
}

TEST_F(CliRemoteTest, DelPrefixWithYesPurgesInBatchesAndCounts) {
  for (int i = 0; i < 1200; ++i) Put("llama/" + std::to_string(i), 100);  // over one batch
  Put("mistral/0", 100);
  const CliResult r = Run({"del", "--prefix", "llama/", "--yes", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["keys_deleted"].get<int>(), 1200);
  EXPECT_EQ(j["bytes_deleted"].get<int>(), 120000);
  EXPECT_TRUE(KeysUnder("llama/").empty());
  EXPECT_EQ(KeysUnder("mistral/").size(), 1u);
  const CliResult again = Run({"del", "--prefix", "mistral/", "--yes"});
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(Contains(again.out, "deleted 1 key (100 B) under prefix 'mistral/'")) << again.out;
}

TEST_F(CliRemoteTest, DelNamespacePurgesChunkKeys) {
  const std::string ns(16, '\x11'), other(16, '\x22');
  Put(ns + std::string(32, 'a'), 64);
  Put(ns + std::string(32, 'b'), 64);
  Put(other + std::string(32, 'a'), 64);
  const CliResult r = Run({"del", "--namespace", std::string(32, '1'), "--yes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "deleted 2 keys")) << r.out;
  EXPECT_TRUE(KeysUnder(ns).empty());
  EXPECT_EQ(KeysUnder(other).size(), 1u);
  EXPECT_EQ(Run({"del", "--namespace", "xyz", "--yes"}).code, 2);
  EXPECT_EQ(Run({"del", "--prefix", "", "--yes"}).code, 2);         // would delete everything
  EXPECT_EQ(Run({"del", "--prefix", "a", "k1", "--yes"}).code, 2);  // keys and a prefix
}

// ---- bench -------------------------------------------------------------------------------------

TEST_F(CliRemoteTest, BenchDeletesItsKeysAfterwards) {
  Put("keep-me", 10);
  for (const bool chunk_keys : {false, true}) {
    std::vector<std::string> args = {"bench", "--op",          "mixed", "--duration",
                                     "1",     "--keys",        "16",    "--value-size",
                                     "4096",  "--connections", "2",     "--json"};
    if (chunk_keys) args.push_back("--chunk-keys");
    const CliResult r = Run(args);
    ASSERT_EQ(r.code, 0) << r.err;
    const Json j = Json::parse(r.out);
    ASSERT_EQ(j.size(), 1u);
    EXPECT_GT(j[0]["ops"].get<int>(), 0);
    EXPECT_EQ(j[0]["keys_removed"].get<int>(), 16) << r.out;
    const std::string prefix = j[0]["key_prefix"].get<std::string>();
    EXPECT_TRUE(KeysUnder(prefix).empty()) << prefix;
    EXPECT_EQ(r.err, "");  // stderr is no terminal: no progress bar
  }
  const auto left = KeysUnder("");
  EXPECT_EQ(left, std::vector<std::string>{"keep-me"});  // nothing else was touched or left
}

// ---- help and completion -----------------------------------------------------------------------

TEST_F(CliRemoteTest, EveryCommandHasHelp) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"ls", "--help"},
                                                                {"help", "del"},
                                                                {"top", "-h"},
                                                                {"codec", "encode", "--help"},
                                                                {"help", "codec", "synth"},
                                                                {"bench", "--help"}}) {
    const CliResult r = Run(args);
    EXPECT_EQ(r.code, 0) << args[0] << ": " << r.err;
    EXPECT_TRUE(Contains(r.out, "usage: kvdepot")) << r.out;
  }
  EXPECT_TRUE(Contains(Run({"ls", "--help"}).out, "--sort key|size|tier|idle"));
  EXPECT_TRUE(Contains(Run({"help", "del"}).out, "--yes"));
  EXPECT_EQ(Run({"help", "nonsense"}).code, 2);
}

TEST_F(CliRemoteTest, CompletionScriptsNameEveryCommandAndFlag) {
  const std::vector<std::string> words = {"ping",
                                          "stats",
                                          "top",
                                          "ls",
                                          "inspect",
                                          "get",
                                          "put",
                                          "del",
                                          "lookup",
                                          "bench",
                                          "codec",
                                          "encode",
                                          "decode",
                                          "compare",
                                          "synth",
                                          "completion",
                                          "version",
                                          "help",
                                          "--sort",
                                          "--yes",
                                          "--watch",
                                          "--interval",
                                          "--count",
                                          "--chunk-keys",
                                          "--k-bins",
                                          "--max-rel-l2",
                                          "--addr",
                                          "--token-file",
                                          "--tls-server-name",
                                          "key size tier idle",
                                          "get put lookup mixed",
                                          "raw cachegen hack-int2"};
  for (const char* shell : {"bash", "zsh"}) {
    const CliResult r = Run({"completion", shell});
    ASSERT_EQ(r.code, 0) << r.err;
    for (const auto& w : words) EXPECT_TRUE(Contains(r.out, w)) << shell << " lacks " << w;
  }
  EXPECT_TRUE(Contains(Run({"completion", "bash"}).out, "complete -F _kvdepot kvdepot"));
  EXPECT_TRUE(Contains(Run({"completion", "zsh"}).out, "#compdef kvdepot"));
  const CliResult fish = Run({"completion", "fish"});
  EXPECT_EQ(fish.code, 2);
  EXPECT_TRUE(Contains(fish.err, "bash or zsh")) << fish.err;
}

}  // namespace
}  // namespace kvdepot::cli
