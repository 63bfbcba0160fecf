// The Redis protocol (RESP2 and RESP3) as kvdepotd's resp:// listener reads and writes it
// (docs/resp.md): an incremental request parser, reply encoders and Redis's glob matching.
//
// Requests: arrays of bulk strings ("*N\r\n$L\r\n...\r\n") or inline commands (a line of words,
// as telnet and `redis-cli --pipe` send them). Every length is checked against the limits before
// anything is allocated for it; a request that breaks the protocol yields one "Protocol error"
// message (Redis's wording) after which the stream cannot be resynchronised.
//
// Large bulk strings (over ParserLimits::max_inline_bulk) are not buffered by the parser: it
// stops at their header (Event::kLargeBulk) and the caller consumes the payload itself — straight
// into a stored value, or dropped — then calls LargeBulkDone(). The payload's CRLF terminator is
// then checked by the parser.
//
// Thread-safety: none; a parser belongs to one connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvdepot::daemon::resp {

struct ParserLimits {
  std::size_t max_args = 1024 * 1024;             // elements of one request (Redis's limit)
  std::uint64_t max_bulk_bytes = 512ull << 20;    // a longer bulk length is a protocol error
  std::size_t max_inline_bulk = 16 * 1024;        // longer bulks are handed over (kLargeBulk)
  std::size_t max_inline_request = 64 * 1024;     // an inline command line, or a length line
  std::uint64_t max_request_bytes = 64ull << 20;  // bytes of the buffered arguments of a request
};

class RequestParser {
 public:
  enum class Event {
    kNeedMore,   // every byte given was consumed or is part of an incomplete element
    kCommand,    // args() holds a whole request; the next call starts a new one
    kLargeBulk,  // a bulk of large_bulk_bytes() follows; consume it, then LargeBulkDone()
    kError,      // error() says how the protocol was broken; the parser is unusable
  };

  explicit RequestParser(const ParserLimits& limits = {}) : limits_(limits) {}

  // Parses from `input` and sets `consumed` to the bytes used (the caller drops them). Call again
  // with the rest (plus newly read bytes) after kCommand or kLargeBulk.
  Event Next(std::string_view input, std::size_t& consumed);

  // The request's arguments. After kLargeBulk: those before the large bulk. A large bulk's own
  // argument is an empty string, its index listed in large_args().
  const std::vector<std::string>& args() const { return args_; }
  const std::vector<std::size_t>& large_args() const { return large_args_; }
  std::uint64_t large_bulk_bytes() const { return large_bytes_; }
  // The payload of the kLargeBulk just reported has been consumed by the caller.
  void LargeBulkDone();

  // Bytes of a request have been read but the request is not complete.
  bool InRequest() const { return state_ != State::kIdle; }
  const std::string& error() const { return error_; }

 private:
  enum class State { kIdle, kBulkHeader, kBulkBody, kLargeBody, kBulkEnd, kFailed };
  Event Fail(std::string message);
  Event Complete();
  Event ParseInline(std::string_view input, std::size_t& consumed);

  ParserLimits limits_;
  State state_ = State::kIdle;
  std::vector<std::string> args_;
  std::vector<std::size_t> large_args_;
  std::uint64_t remaining_ = 0;  // elements still to come
  std::uint64_t bulk_bytes_ = 0;
  std::uint64_t large_bytes_ = 0;
  std::uint64_t request_bytes_ = 0;
  std::string error_;
};

// Splits an inline command line into words like Redis (sdssplitargs): blanks separate words;
// "double quotes" with \n \r \t \b \a \\ \" \xHH escapes; 'single quotes' with \'. False for
// unbalanced quotes or a closing quote not followed by a blank.
bool SplitInline(std::string_view line, std::vector<std::string>& words);

// Redis's glob matching (stringmatchlen): * ? [abc] [^a-z] and \ escapes; `nocase` folds ASCII.
bool GlobMatch(std::string_view pattern, std::string_view text, bool nocase = false);

// ASCII case-insensitive equality (command names and options).
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
std::string ToLower(std::string_view s);

// Parses a decimal integer as Redis does (optional '-', no '+', no blanks, no overflow).
bool ParseInt64(std::string_view text, std::int64_t& out);

// Reply encoders: each appends one RESP value to `out`. `resp3` selects the RESP3 forms of null
// and map; the others are the same in both.
void AppendSimple(std::string& out, std::string_view text);  // +text (CR/LF become spaces)
void AppendError(std::string& out, std::string_view text);   // -text, e.g. "ERR ..." (idem)
void AppendInteger(std::string& out, std::int64_t n);
void AppendBulk(std::string& out, std::string_view bytes);
void AppendBulkHeader(std::string& out, std::size_t bytes);  // then the bytes and "\r\n"
void AppendNull(std::string& out, bool resp3);               // a missing value
void AppendArrayHeader(std::string& out, std::size_t n);
void AppendMapHeader(std::string& out, std::size_t pairs, bool resp3);  // RESP2: array of 2n
void AppendSetHeader(std::string& out, std::size_t n, bool resp3);      // RESP2: array

}  // namespace kvdepot::daemon::resp
