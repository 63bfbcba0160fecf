#include "resp/resp_codec.h"
#include "kvdepot/base/hex.h"

#include <algorithm>
#include <charconv>

namespace kvdepot::daemon::resp {
namespace {

char FoldCase(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// The line starting `rest` up to (not including) its "\r\n": 1 found (`used` includes the CRLF),
// 0 incomplete, -1 longer than `max`. Incomplete input is judged by the earliest place its CRLF
// can still start (a trailing '\r' may be the CR), so the answer does not depend on where the
// reads split the stream.
int TakeLine(std::string_view rest, std::size_t max, std::string_view& line, std::size_t& used) {
  const std::size_t end = rest.find("\r\n");
  if (end == std::string_view::npos) {
    const std::size_t earliest_end = rest.size() - (rest.ends_with('\r') ? 1 : 0);
    return earliest_end > max ? -1 : 0;
  }
  if (end > max) return -1;
  line = rest.substr(0, end);
  used = end + 2;
  return 1;
}

// `c` as text for an error message: itself when printable, else \xHH.
std::string Printable(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string(1, c);
  std::string escaped;
  AppendHexEscape(escaped, u);
  return escaped;
}

bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Whether the pattern token at `p` (not '*') matches `c`; advances `p` past the token.
bool MatchToken(std::string_view pattern, std::size_t& p, char c, bool nocase) {
  const auto eq = [nocase](char a, char b) { return nocase ? FoldCase(a) == FoldCase(b) : a == b; };
  switch (pattern[p]) {
    case '?': ++p; return true;
    case '\\':
      if (p + 1 < pattern.size()) {
        p += 2;
        return eq(pattern[p - 1], c);
      }
      ++p;
      return eq('\\', c);
    case '[': {
      ++p;
      const bool negate = p < pattern.size() && pattern[p] == '^';
      if (negate) ++p;
      bool match = false;
      while (p < pattern.size() && pattern[p] != ']') {
        if (pattern[p] == '\\' && p + 1 < pattern.size()) {
          ++p;
          if (eq(pattern[p], c)) match = true;
          ++p;
        } else if (p + 2 < pattern.size() && pattern[p + 1] == '-') {
          char lo = pattern[p], hi = pattern[p + 2];
          if (lo > hi) std::swap(lo, hi);
          char x = c;
          if (nocase) {
            lo = FoldCase(lo);
            hi = FoldCase(hi);
            x = FoldCase(x);
          }
          if (x >= lo && x <= hi) match = true;
          p += 3;
        } else {
          if (eq(pattern[p], c)) match = true;
          ++p;
        }
      }
      if (p < pattern.size()) ++p;  // the ']'; an unterminated class ends with the pattern
      return match != negate;
    }
    default: ++p; return eq(pattern[p - 1], c);
  }
}

}  // namespace

RequestParser::Event RequestParser::Fail(std::string message) {
  state_ = State::kFailed;
  error_ = std::move(message);
  return Event::kError;
}

RequestParser::Event RequestParser::Complete() {
  state_ = State::kIdle;
  return Event::kCommand;
}

void RequestParser::LargeBulkDone() {
  if (state_ == State::kLargeBody) state_ = State::kBulkEnd;
}

RequestParser::Event RequestParser::ParseInline(std::string_view input, std::size_t& consumed) {
  const std::string_view rest = input.substr(consumed);
  const std::size_t nl = rest.find('\n');
  if (nl == std::string_view::npos || nl > limits_.max_inline_request) {
    if (rest.size() > limits_.max_inline_request) {
      return Fail("Protocol error: too big inline request");
    }
    return Event::kNeedMore;
  }
  std::string_view line = rest.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  args_.clear();
  large_args_.clear();
  if (!SplitInline(line, args_)) return Fail("Protocol error: unbalanced quotes in request");
  consumed += nl + 1;
  if (args_.size() > limits_.max_args) return Fail("Protocol error: invalid multibulk length");
  if (args_.empty()) return Event::kNeedMore;  // a blank line: nothing to run (the caller loops)
  return Event::kCommand;
}

RequestParser::Event RequestParser::Next(std::string_view input, std::size_t& consumed) {
  consumed = 0;
  while (true) {
    const std::string_view rest = input.substr(consumed);
    switch (state_) {
      case State::kFailed: return Event::kError;
      case State::kIdle: {
        if (rest.empty()) return Event::kNeedMore;
        if (rest[0] != '*') {
          const std::size_t before = consumed;
          const Event e = ParseInline(input, consumed);
          if (e == Event::kNeedMore && consumed != before) continue;  // a blank line
          return e;
        }
        std::string_view line;
        std::size_t used = 0;
        const int got = TakeLine(rest, limits_.max_inline_request, line, used);
        if (got < 0) return Fail("Protocol error: too big mbulk count string");
        if (got == 0) return Event::kNeedMore;
        std::int64_t n = 0;
        if (!ParseInt64(line.substr(1), n) || n > static_cast<std::int64_t>(limits_.max_args)) {
          return Fail("Protocol error: invalid multibulk length");
        }
        consumed += used;
        if (n <= 0) continue;  // "*0" and "*-1": nothing to run
        args_.clear();
        large_args_.clear();
        args_.reserve(static_cast<std::size_t>(std::min<std::int64_t>(n, 1024)));
        remaining_ = static_cast<std::uint64_t>(n);
        request_bytes_ = 0;
        state_ = State::kBulkHeader;
        continue;
      }
      case State::kBulkHeader: {
        if (rest.empty()) return Event::kNeedMore;
        if (rest[0] != '$') {
          return Fail("Protocol error: expected '$', got '" + Printable(rest[0]) + "'");
        }
        std::string_view line;
        std::size_t used = 0;
        const int got = TakeLine(rest, limits_.max_inline_request, line, used);
        if (got < 0) return Fail("Protocol error: too big bulk count string");
        if (got == 0) return Event::kNeedMore;
        std::int64_t n = 0;
        if (!ParseInt64(line.substr(1), n) || n < 0 ||
            static_cast<std::uint64_t>(n) > limits_.max_bulk_bytes) {
          return Fail("Protocol error: invalid bulk length");
        }
        consumed += used;
        if (static_cast<std::uint64_t>(n) > limits_.max_inline_bulk) {
          large_bytes_ = static_cast<std::uint64_t>(n);
          large_args_.push_back(args_.size());
          args_.emplace_back();
          state_ = State::kLargeBody;
          return Event::kLargeBulk;
        }
        request_bytes_ += static_cast<std::uint64_t>(n);
        if (request_bytes_ > limits_.max_request_bytes) {
          return Fail("Protocol error: request arguments over " +
                      std::to_string(limits_.max_request_bytes) + " bytes");
        }
        bulk_bytes_ = static_cast<std::uint64_t>(n);
        state_ = State::kBulkBody;
        continue;
      }
      case State::kBulkBody: {
        if (rest.size() < bulk_bytes_ + 2) return Event::kNeedMore;
        if (rest[bulk_bytes_] != '\r' || rest[bulk_bytes_ + 1] != '\n') {
          return Fail("Protocol error: bulk string longer than its length");
        }
        args_.emplace_back(rest.substr(0, bulk_bytes_));
        consumed += bulk_bytes_ + 2;
        if (--remaining_ == 0) return Complete();
        state_ = State::kBulkHeader;
        continue;
      }
      case State::kLargeBody: return Event::kLargeBulk;  // LargeBulkDone() not called yet
      case State::kBulkEnd: {
        if (rest.size() < 2) return Event::kNeedMore;
        if (rest[0] != '\r' || rest[1] != '\n') {
          return Fail("Protocol error: bulk string longer than its length");
        }
        consumed += 2;
        if (--remaining_ == 0) return Complete();
        state_ = State::kBulkHeader;
        continue;
      }
    }
  }
}

bool SplitInline(std::string_view line, std::vector<std::string>& words) {
  std::size_t i = 0;
  while (true) {
    while (i < line.size() && IsBlank(line[i])) ++i;
    if (i == line.size()) return true;
    std::string word;
    bool in_double = false, in_single = false;
    while (true) {
      if (in_double) {
        if (i == line.size()) return false;
        if (line[i] == '\\' && i + 3 < line.size() && line[i + 1] == 'x' &&
            HexDigitValue(line[i + 2]) >= 0 && HexDigitValue(line[i + 3]) >= 0) {
          word.push_back(
              static_cast<char>(HexDigitValue(line[i + 2]) * 16 + HexDigitValue(line[i + 3])));
          i += 4;
        } else if (line[i] == '\\' && i + 1 < line.size()) {
          const char e = line[i + 1];
          word.push_back(e == 'n'   ? '\n'
                         : e == 'r' ? '\r'
                         : e == 't' ? '\t'
                         : e == 'b' ? '\b'
                         : e == 'a' ? '\a'
                                    : e);
          i += 2;
        } else if (line[i] == '"') {
          if (i + 1 < line.size() && !IsBlank(line[i + 1])) return false;
          ++i;
          break;
        } else {
          word.push_back(line[i++]);
        }
      } else if (in_single) {
        if (i == line.size()) return false;
        if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '\'') {
          word.push_back('\'');
          i += 2;
        } else if (line[i] == '\'') {
          if (i + 1 < line.size() && !IsBlank(line[i + 1])) return false;
          ++i;
          break;
        } else {
          word.push_back(line[i++]);
        }
      } else {
        if (i == line.size() || IsBlank(line[i])) break;
        if (line[i] == '"') {
          in_double = true;
        } else if (line[i] == '\'') {
          in_single = true;
        } else {
          word.push_back(line[i]);
        }
        ++i;
      }
    }
    words.push_back(std::move(word));
  }
}

bool GlobMatch(std::string_view pattern, std::string_view text, bool nocase) {
  // Greedy matching with one backtrack point (the last '*'): every other token matches exactly
  // one character, so this is O(pattern x text) with no recursion.
  std::size_t p = 0, t = 0;
  std::size_t star = std::string_view::npos, star_text = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      while (p < pattern.size() && pattern[p] == '*') ++p;
      if (p == pattern.size()) return true;
      star = p;
      star_text = t;
      continue;
    }
    std::size_t next = p;
    if (p < pattern.size() && MatchToken(pattern, next, text[t], nocase)) {
      p = next;
      ++t;
      continue;
    }
    if (star == std::string_view::npos) return false;
    p = star;
    t = ++star_text;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return FoldCase(x) == FoldCase(y);
         });
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = FoldCase(c);
  return out;
}

bool ParseInt64(std::string_view text, std::int64_t& out) {
  if (text.empty() || text[0] == '+') return false;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size();
}

namespace {
void AppendLine(std::string& out, char type, std::string_view text) {
  out.push_back(type);
  const std::size_t at = out.size();
  out.append(text);
  std::replace_if(
      out.begin() + static_cast<std::ptrdiff_t>(at), out.end(),
      [](char c) { return c == '\r' || c == '\n'; }, ' ');
  out.append("\r\n");
}
void AppendCount(std::string& out, char type, std::int64_t n) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), n);
  out.push_back(type);
  out.append(buf, end);
  out.append("\r\n");
}
}  // namespace

void AppendSimple(std::string& out, std::string_view text) {
  AppendLine(out, '+', text);
}
void AppendError(std::string& out, std::string_view text) {
  AppendLine(out, '-', text);
}
void AppendInteger(std::string& out, std::int64_t n) {
  AppendCount(out, ':', n);
}
void AppendBulkHeader(std::string& out, std::size_t bytes) {
  AppendCount(out, '$', static_cast<std::int64_t>(bytes));
}
void AppendBulk(std::string& out, std::string_view bytes) {
  AppendBulkHeader(out, bytes.size());
  out.append(bytes);
  out.append("\r\n");
}
void AppendNull(std::string& out, bool resp3) {
  out.append(resp3 ? "_\r\n" : "$-1\r\n");
}
void AppendArrayHeader(std::string& out, std::size_t n) {
  AppendCount(out, '*', static_cast<std::int64_t>(n));
}
void AppendMapHeader(std::string& out, std::size_t pairs, bool resp3) {
  if (resp3) return AppendCount(out, '%', static_cast<std::int64_t>(pairs));
  AppendArrayHeader(out, 2 * pairs);
}
void AppendSetHeader(std::string& out, std::size_t n, bool resp3) {
  AppendCount(out, resp3 ? '~' : '*', static_cast<std::int64_t>(n));
}

}  // namespace kvdepot::daemon::resp
