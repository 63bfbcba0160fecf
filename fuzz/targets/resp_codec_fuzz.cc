// resp_codec: the resp:// request parser (daemon/src/resp/resp_codec.h) and its reply encoders.
// Byte 0 picks the limits (bit 0: tiny ones, so that every "over the limit" path is reachable),
// byte 1 seeds the split points; the rest is a client's byte stream. It is parsed twice, as the
// connection does (unconsumed bytes kept, large bulk payloads consumed by the caller): whole, and
// cut at pseudo-random points. Traps on:
// - a result that depends on the split points (the requests, their large bulks and the protocol
//   error must be the same);
// - an event breaking resp_codec.h's contract: `consumed` past the input; a request with no
//   arguments, more than max_args, or a large argument that is not an empty placeholder; a large
//   bulk outside (max_inline_bulk, max_bulk_bytes]; an error with no message, not in Redis's
//   "Protocol error" wording, or not final; InRequest() after a whole request;
// - encoders whose output does not parse back: every request re-encoded as a multibulk parses to
//   the same arguments, simple strings and errors are one line, integers print what ParseInt64
//   read.
// GlobMatch and SplitInline run on the arguments (they must terminate and not crash).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_targets.h"
#include "resp/resp_codec.h"

namespace kvdepot::fuzz {
namespace {

using daemon::resp::ParserLimits;
using daemon::resp::RequestParser;

struct Request {
  std::vector<std::string> args;
  std::vector<std::size_t> large_args;
  std::vector<std::uint64_t> large_bytes;  // each large bulk's length, in order
  bool operator==(const Request&) const = default;
};

struct Outcome {
  std::vector<Request> requests;
  std::string error;        // the protocol error, empty when none
  bool in_request = false;  // the stream ended inside a request
  bool operator==(const Outcome&) const = default;
};

ParserLimits TinyLimits() {
  ParserLimits l;
  l.max_args = 8;
  l.max_bulk_bytes = 4096;
  l.max_inline_bulk = 16;
  l.max_inline_request = 64;
  l.max_request_bytes = 256;
  return l;
}

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// Feeds `stream` to a parser in chunks of the sizes `next_chunk` returns (0: the rest), as the
// connection does, and records what it reports.
template <typename NextChunk>
Outcome Parse(std::string_view stream, const ParserLimits& limits, NextChunk next_chunk) {
  RequestParser parser(limits);
  Outcome out;
  Request current;
  std::string pending;           // bytes read and not consumed
  bool in_large = false;         // a large bulk's payload is being consumed
  std::uint64_t large_left = 0;  // its bytes still to come
  std::size_t fed = 0;
  while (true) {
    if (in_large) {  // the caller's own reads: from what is buffered, then the stream
      const std::size_t take =
          static_cast<std::size_t>(std::min<std::uint64_t>(large_left, pending.size()));
      pending.erase(0, take);
      large_left -= take;
      if (large_left > 0) {
        if (fed == stream.size()) break;
        std::size_t n = next_chunk();
        n = n == 0 ? stream.size() - fed : std::min(n, stream.size() - fed);
        n = static_cast<std::size_t>(std::min<std::uint64_t>(n, large_left));
        fed += n;
        large_left -= n;
        continue;
      }
      in_large = false;
      parser.LargeBulkDone();
    }
    std::size_t consumed = 0;
    const auto event = parser.Next(pending, consumed);
    Check(consumed <= pending.size());
    pending.erase(0, consumed);
    switch (event) {
      case RequestParser::Event::kCommand: {
        const auto& args = parser.args();
        Check(!args.empty() && args.size() <= limits.max_args);
        Check(!parser.InRequest());
        for (std::size_t i : parser.large_args()) Check(i < args.size() && args[i].empty());
        current.args = args;
        current.large_args = parser.large_args();
        Check(current.large_args.size() == current.large_bytes.size());
        out.requests.push_back(std::move(current));
        current = Request{};
        continue;
      }
      case RequestParser::Event::kLargeBulk: {
        const std::uint64_t n = parser.large_bulk_bytes();
        Check(n > limits.max_inline_bulk && n <= limits.max_bulk_bytes);
        Check(!parser.large_args().empty() &&
              parser.large_args().back() + 1 == parser.args().size());
        current.large_bytes.push_back(n);
        in_large = true;
        large_left = n;
        continue;
      }
      case RequestParser::Event::kError: {
        out.error = parser.error();
        Check(out.error.rfind("Protocol error", 0) == 0);
        std::size_t again = 0;
        Check(parser.Next(pending, again) == RequestParser::Event::kError);
        return out;
      }
      case RequestParser::Event::kNeedMore: break;
    }
    if (fed == stream.size()) break;
    std::size_t n = next_chunk();
    n = n == 0 ? stream.size() - fed : std::min(n, stream.size() - fed);
    pending.append(stream.substr(fed, n));
    fed += n;
  }
  out.in_request = parser.InRequest() || in_large;
  return out;
}

// The encoders on what was parsed.
void CheckEncoders(const Request& r) {
  std::string wire;
  daemon::resp::AppendArrayHeader(wire, r.args.size());
  for (const auto& a : r.args) daemon::resp::AppendBulk(wire, a);
  ParserLimits roomy;  // every argument inline, whatever its length
  roomy.max_inline_bulk = roomy.max_inline_request;
  RequestParser parser(roomy);
  std::size_t consumed = 0;
  Check(parser.Next(wire, consumed) == RequestParser::Event::kCommand);
  Check(consumed == wire.size() && parser.args() == r.args);

  for (const auto& a : r.args) {
    std::string line;
    daemon::resp::AppendSimple(line, a);
    daemon::resp::AppendError(line, a);
    // Two lines: "+a\r\n-a\r\n", each of 1 + a.size() bytes before its CRLF and none inside.
    Check(line.size() == 2 * (a.size() + 3));
    Check(line.find_first_of("\r\n") == a.size() + 1);
    Check(line.find_first_of("\r\n", a.size() + 3) == 2 * a.size() + 4);
    std::int64_t n = 0;
    if (daemon::resp::ParseInt64(a, n)) {
      std::string integer;
      daemon::resp::AppendInteger(integer, n);
      Check(integer == ":" + std::to_string(n) + "\r\n");
      Check(a == std::to_string(n) || (a.size() > 1 && (a[0] == '0' || a.rfind("-0", 0) == 0)));
    }
  }
  // Glob matching must terminate on any pattern; a pattern always matches itself when it has no
  // special characters, and "*" matches everything.
  if (r.args.size() >= 2) {
    (void)daemon::resp::GlobMatch(r.args[0], r.args[1], /*nocase=*/false);
    (void)daemon::resp::GlobMatch(r.args[0], r.args[1], /*nocase=*/true);
  }
  for (const auto& a : r.args) {
    Check(daemon::resp::GlobMatch("*", a));
    if (a.find_first_of("*?[\\") == std::string::npos) Check(daemon::resp::GlobMatch(a, a));
    std::vector<std::string> words;
    (void)daemon::resp::SplitInline(a, words);
  }
}

}  // namespace

int FuzzRespCodec(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const ParserLimits limits = (data[0] & 1) ? TinyLimits() : ParserLimits{};
  std::uint32_t state = data[1] * 2654435761u + 1;
  const std::string_view stream(reinterpret_cast<const char*>(data + 2), size - 2);

  const Outcome whole = Parse(stream, limits, [] { return std::size_t{0}; });
  const Outcome split = Parse(stream, limits, [&state] {
    state = state * 1664525u + 1013904223u;  // chunks of 1 to 32 bytes
    return static_cast<std::size_t>((state >> 16) % 32 + 1);
  });
  Check(whole == split);
  for (const Request& r : whole.requests) CheckEncoders(r);
  return 0;
}

}  // namespace kvdepot::fuzz
