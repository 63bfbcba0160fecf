// The resp:// listener's request parser, reply encoders and glob matching (daemon/src/resp/).
#include "resp/resp_codec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "resp/resp_commands.h"

namespace kvdepot::daemon::resp {
namespace {

using Event = RequestParser::Event;

// Feeds `input` whole; returns the event and the bytes consumed.
Event Feed(RequestParser& p, std::string_view input, std::size_t& consumed) {
  return p.Next(input, consumed);
}

std::vector<std::string> ParseOne(std::string_view input, const ParserLimits& limits = {}) {
  RequestParser p(limits);
  std::size_t used = 0;
  EXPECT_EQ(Feed(p, input, used), Event::kCommand) << p.error();
  EXPECT_EQ(used, input.size());
  return p.args();
}

std::string ErrorOf(std::string_view input, const ParserLimits& limits = {}) {
  RequestParser p(limits);
  std::size_t used = 0;
  Event e = p.Next(input, used);
  while (e == Event::kCommand) {
    input.remove_prefix(used);
    e = p.Next(input, used);
  }
  EXPECT_EQ(e, Event::kError) << "input was accepted";
  // Once failed, the parser stays failed.
  EXPECT_EQ(p.Next("*1\r\n$4\r\nPING\r\n", used), Event::kError);
  return p.error();
}

TEST(RespParser, MultibulkCommand) {
  EXPECT_EQ(ParseOne("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"),
            (std::vector<std::string>{"SET", "k", "hello"}));
}

TEST(RespParser, BinarySafeArguments) {
  const std::string value("a\r\nb\0c", 6);
  const std::string input = "*2\r\n$4\r\nECHO\r\n$6\r\n" + value + "\r\n";
  EXPECT_EQ(ParseOne(input), (std::vector<std::string>{"ECHO", value}));
}

TEST(RespParser, EmptyBulkAndEmptyArrays) {
  EXPECT_EQ(ParseOne("*2\r\n$3\r\nGET\r\n$0\r\n\r\n"), (std::vector<std::string>{"GET", ""}));
  // "*0" and "*-1" run nothing; the next request follows.
  EXPECT_EQ(ParseOne("*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n"), (std::vector<std::string>{"PING"}));
}

TEST(RespParser, ByteAtATime) {
  const std::string input = "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
  RequestParser p;
  std::string buffered;
  for (std::size_t i = 0; i < input.size(); ++i) {
    buffered.push_back(input[i]);
    std::size_t used = 0;
    const Event e = p.Next(buffered, used);
    buffered.erase(0, used);
    if (i + 1 < input.size()) {
      ASSERT_EQ(e, Event::kNeedMore) << "at byte " << i;
      EXPECT_TRUE(p.InRequest() || i < 3);
    } else {
      ASSERT_EQ(e, Event::kCommand);
    }
  }
  EXPECT_EQ(p.args(), (std::vector<std::string>{"GET", "key"}));
  EXPECT_FALSE(p.InRequest());
}

TEST(RespParser, Pipelined) {
  const std::string input = "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\nPING\r\n";
  RequestParser p;
  std::string_view rest = input;
  std::vector<std::vector<std::string>> commands;
  std::size_t used = 0;
  while (p.Next(rest, used) == Event::kCommand) {
    commands.push_back(p.args());
    rest.remove_prefix(used);
  }
  rest.remove_prefix(used);
  EXPECT_TRUE(rest.empty());
  ASSERT_EQ(commands.size(), 3u);
  EXPECT_EQ(commands[1], (std::vector<std::string>{"ECHO", "x"}));
  EXPECT_EQ(commands[2], (std::vector<std::string>{"PING"}));
}

TEST(RespParser, InlineCommands) {
  EXPECT_EQ(ParseOne("SET k v\r\n"), (std::vector<std::string>{"SET", "k", "v"}));
  EXPECT_EQ(ParseOne("  get   key\n"), (std::vector<std::string>{"get", "key"}));
  EXPECT_EQ(ParseOne("SET \"a b\" 'c d'\r\n"), (std::vector<std::string>{"SET", "a b", "c d"}));
  EXPECT_EQ(ParseOne("ECHO \"\\x41\\n\\\"\"\r\n"), (std::vector<std::string>{"ECHO", "A\n\""}));
  EXPECT_EQ(ParseOne("ECHO 'it\\'s'\r\n"), (std::vector<std::string>{"ECHO", "it's"}));
  // Blank lines are skipped.
  EXPECT_EQ(ParseOne("\r\n\n  \r\nPING\r\n"), (std::vector<std::string>{"PING"}));
}

TEST(RespParser, InlineWaitsForItsNewline) {
  RequestParser p;
  std::size_t used = 0;
  EXPECT_EQ(p.Next("SET k", used), Event::kNeedMore);
  EXPECT_EQ(used, 0u);
}

TEST(RespParser, LargeBulkIsHandedOver) {
  ParserLimits limits;
  limits.max_inline_bulk = 4;
  RequestParser p(limits);
  const std::string input = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n";
  std::size_t used = 0;
  ASSERT_EQ(p.Next(input, used), Event::kLargeBulk);
  EXPECT_EQ(p.large_bulk_bytes(), 10u);
  EXPECT_EQ(p.args(), (std::vector<std::string>{"SET", "k", ""}));
  EXPECT_EQ(p.large_args(), (std::vector<std::size_t>{2}));
  EXPECT_EQ(input.substr(used, 10), "0123456789");
  // Until the caller is done, the parser waits.
  std::size_t again = 0;
  EXPECT_EQ(p.Next(std::string_view(input).substr(used), again), Event::kLargeBulk);
  EXPECT_EQ(again, 0u);
  p.LargeBulkDone();
  ASSERT_EQ(p.Next(std::string_view(input).substr(used + 10), again), Event::kCommand);
  EXPECT_EQ(again, 2u);
  EXPECT_EQ(p.args().size(), 3u);
}

TEST(RespParser, LargeBulkMustEndWithCrlf) {
  ParserLimits limits;
  limits.max_inline_bulk = 4;
  RequestParser p(limits);
  const std::string input = "*2\r\n$3\r\nSET\r\n$10\r\n0123456789XY";
  std::size_t used = 0;
  ASSERT_EQ(p.Next(input, used), Event::kLargeBulk);
  p.LargeBulkDone();
  std::size_t again = 0;
  EXPECT_EQ(p.Next(std::string_view(input).substr(used + 10), again), Event::kError);
}

// ---- every malformed case ----------------------------------------------------------------------
TEST(RespParserErrors, MultibulkLength) {
  EXPECT_EQ(ErrorOf("*x\r\n"), "Protocol error: invalid multibulk length");
  EXPECT_EQ(ErrorOf("*\r\n"), "Protocol error: invalid multibulk length");
  EXPECT_EQ(ErrorOf("*+1\r\n"), "Protocol error: invalid multibulk length");
  EXPECT_EQ(ErrorOf("*1 \r\n"), "Protocol error: invalid multibulk length");
  EXPECT_EQ(ErrorOf("*99999999999999999999999\r\n"), "Protocol error: invalid multibulk length");
  EXPECT_EQ(ErrorOf("*1048577\r\n"), "Protocol error: invalid multibulk length");  // too many
}

TEST(RespParserErrors, TooManyArgsIsCheckedBeforeAllocating) {
  ParserLimits limits;
  limits.max_args = 3;
  EXPECT_EQ(ErrorOf("*4\r\n", limits), "Protocol error: invalid multibulk length");
  EXPECT_EQ(ErrorOf("a b c d\r\n", limits), "Protocol error: invalid multibulk length");
}

TEST(RespParserErrors, BulkLength) {
  EXPECT_EQ(ErrorOf("*1\r\n$-1\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(ErrorOf("*1\r\n$abc\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(ErrorOf("*1\r\n$\r\n"), "Protocol error: invalid bulk length");
  // Huge lengths are refused from the header alone.
  EXPECT_EQ(ErrorOf("*1\r\n$536870913\r\n"), "Protocol error: invalid bulk length");
  EXPECT_EQ(ErrorOf("*1\r\n$99999999999999999999\r\n"), "Protocol error: invalid bulk length");
}

TEST(RespParserErrors, WrongLengths) {
  // The bulk is longer than announced: its CRLF is not where the length says.
  EXPECT_EQ(ErrorOf("*1\r\n$3\r\nPINGG\r\n"), "Protocol error: bulk string longer than its length");
  EXPECT_EQ(ErrorOf("*2\r\n$4\r\nPING\r\n$1\r\n\r\n\r\n"),
            "Protocol error: bulk string longer than its length");
}

TEST(RespParserErrors, NestedAndNonBulkElements) {
  EXPECT_EQ(ErrorOf("*1\r\n*1\r\n$4\r\nPING\r\n"), "Protocol error: expected '$', got '*'");
  EXPECT_EQ(ErrorOf("*1\r\n:1\r\n"), "Protocol error: expected '$', got ':'");
  EXPECT_EQ(ErrorOf("*1\r\n+OK\r\n"), "Protocol error: expected '$', got '+'");
  EXPECT_EQ(ErrorOf(std::string("*1\r\n\x01", 5)), "Protocol error: expected '$', got '\\x01'");
}

TEST(RespParserErrors, OverlongLines) {
  ParserLimits limits;
  limits.max_inline_request = 16;
  EXPECT_EQ(ErrorOf("*" + std::string(20, '1'), limits),
            "Protocol error: too big mbulk count string");
  EXPECT_EQ(ErrorOf("*1\r\n$" + std::string(20, '1'), limits),
            "Protocol error: too big bulk count string");
  EXPECT_EQ(ErrorOf(std::string(20, 'a'), limits), "Protocol error: too big inline request");
}

// A length line of exactly max_inline_request bytes is accepted however the reads split it, also
// when its CR arrives in one read and its LF in the next (fuzz/regressions/resp_codec/).
TEST(RespParser, LongestLengthLineWithItsCrAloneAtTheEnd) {
  ParserLimits limits;
  limits.max_inline_request = 16;
  const std::string count_line = "*" + std::string(14, '0') + "1";  // 16 bytes
  RequestParser p(limits);
  std::size_t used = 0;
  EXPECT_EQ(p.Next(count_line + "\r", used), Event::kNeedMore) << p.error();
  const std::string rest = count_line.substr(used) + "\r\n$4\r\nPING\r\n";
  EXPECT_EQ(p.Next(rest, used), Event::kCommand) << p.error();
  EXPECT_EQ(p.args(), std::vector<std::string>{"PING"});
  // One byte more can no longer fit, CR or not.
  EXPECT_EQ(ErrorOf("*" + std::string(15, '0') + "1\r", limits),
            "Protocol error: too big mbulk count string");
}

TEST(RespParserErrors, UnbalancedQuotes) {
  EXPECT_EQ(ErrorOf("SET \"k v\r\n"), "Protocol error: unbalanced quotes in request");
  EXPECT_EQ(ErrorOf("SET 'k v\r\n"), "Protocol error: unbalanced quotes in request");
  EXPECT_EQ(ErrorOf("SET \"k\"v\r\n"), "Protocol error: unbalanced quotes in request");
}

TEST(RespParserErrors, RequestBytesAreBounded) {
  ParserLimits limits;
  limits.max_request_bytes = 8;
  EXPECT_EQ(ErrorOf("*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n", limits),
            "Protocol error: request arguments over 8 bytes");
}

// ---- encoders ----------------------------------------------------------------------------------
TEST(RespEncoder, Values) {
  std::string out;
  AppendSimple(out, "OK");
  AppendError(out, "ERR bad\r\nline");
  AppendInteger(out, -42);
  AppendBulk(out, std::string("a\0b", 3));
  AppendNull(out, false);
  AppendNull(out, true);
  AppendArrayHeader(out, 2);
  AppendMapHeader(out, 2, false);
  AppendMapHeader(out, 2, true);
  AppendSetHeader(out, 1, true);
  AppendBulkHeader(out, 7);
  EXPECT_EQ(out,
            std::string("+OK\r\n-ERR bad  line\r\n:-42\r\n$3\r\na\0b\r\n$-1\r\n_\r\n*2\r\n*4\r\n"
                        "%2\r\n~1\r\n$7\r\n",
                        64));
}

TEST(RespEncoder, Helpers) {
  std::int64_t n = 0;
  EXPECT_TRUE(ParseInt64("-12", n));
  EXPECT_EQ(n, -12);
  EXPECT_FALSE(ParseInt64("+1", n));
  EXPECT_FALSE(ParseInt64("1x", n));
  EXPECT_FALSE(ParseInt64("", n));
  EXPECT_TRUE(EqualsIgnoreCase("GeT", "get"));
  EXPECT_FALSE(EqualsIgnoreCase("gets", "get"));
  EXPECT_EQ(ToLower("MSET"), "mset");
}

// ---- glob matching (Redis's stringmatchlen semantics) ------------------------------------------
TEST(RespGlob, Patterns) {
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("*", "anything"));
  EXPECT_TRUE(GlobMatch("key:*", "key:1"));
  EXPECT_FALSE(GlobMatch("key:*", "kex:1"));
  EXPECT_TRUE(GlobMatch("h?llo", "hello"));
  EXPECT_FALSE(GlobMatch("h?llo", "hllo"));
  EXPECT_TRUE(GlobMatch("h[ae]llo", "hallo"));
  EXPECT_FALSE(GlobMatch("h[ae]llo", "hillo"));
  EXPECT_TRUE(GlobMatch("h[^e]llo", "hallo"));
  EXPECT_FALSE(GlobMatch("h[^e]llo", "hello"));
  EXPECT_TRUE(GlobMatch("h[a-b]llo", "hbllo"));
  EXPECT_TRUE(GlobMatch("h[b-a]llo", "hallo"));  // reversed ranges are swapped
  EXPECT_TRUE(GlobMatch("a\\*b", "a*b"));
  EXPECT_FALSE(GlobMatch("a\\*b", "axb"));
  EXPECT_TRUE(GlobMatch("[\\]]", "]"));
  EXPECT_TRUE(GlobMatch("a*b*c", "a--b--b--c"));
  EXPECT_FALSE(GlobMatch("a*b*c", "a--b--b--"));
  EXPECT_TRUE(GlobMatch("*.bin", std::string("x\0y.bin", 7)));
  EXPECT_TRUE(GlobMatch("HELLO", "hello", /*nocase=*/true));
  EXPECT_TRUE(GlobMatch("[A-C]", "b", /*nocase=*/true));
  EXPECT_FALSE(GlobMatch("ab[", "ab"));  // an unterminated class matches no character
  EXPECT_FALSE(GlobMatch("ab[", "abc"));
  EXPECT_TRUE(GlobMatch("ab[c", "abc"));
}

TEST(RespGlob, NoExponentialBlowUp) {
  const std::string text(4000, 'a');
  EXPECT_FALSE(GlobMatch("*a*a*a*a*a*a*a*a*a*a*a*a*b", text));
}

// ---- the command table -------------------------------------------------------------------------
TEST(RespCommands, LookupAndArity) {
  const CommandSpec* set = FindCommand("SeT");
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(set->id, CommandId::kSet);
  EXPECT_FALSE(ArityAllows(*set, 2));
  EXPECT_TRUE(ArityAllows(*set, 3));
  EXPECT_TRUE(ArityAllows(*set, 6));
  const CommandSpec* get = FindCommand("get");
  ASSERT_NE(get, nullptr);
  EXPECT_TRUE(ArityAllows(*get, 2));
  EXPECT_FALSE(ArityAllows(*get, 3));
  EXPECT_EQ(FindCommand("flushall"), nullptr);
  std::string info;
  AppendCommandInfo(info, *get, false);
  EXPECT_EQ(info.rfind("*10\r\n$3\r\nget\r\n:2\r\n", 0), 0u);
}

}  // namespace
}  // namespace kvdepot::daemon::resp
