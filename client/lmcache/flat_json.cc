#include "flat_json.h"

#include <cctype>

namespace kvdepot::lmcache {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view t) : t_(t) {}

  Result<std::map<std::string, std::string>> Object() {
    std::map<std::string, std::string> out;
    Skip();
    if (!Eat('{')) return Error("expected '{'");
    Skip();
    if (Eat('}')) return Finish(out);
    for (;;) {
      Skip();
      KVD_ASSIGN_OR_RETURN(std::string key, String());
      Skip();
      if (!Eat(':')) return Error("expected ':'");
      Skip();
      if (Peek() == '{' || Peek() == '[') {
        KVD_RETURN_IF_ERROR(SkipNested());
        out.erase(key);
      } else if (Peek() == '"') {
        KVD_ASSIGN_OR_RETURN(out[key], String());
      } else {
        KVD_ASSIGN_OR_RETURN(out[key], Scalar());
      }
      Skip();
      if (Eat('}')) return Finish(out);
      if (!Eat(',')) return Error("expected ',' or '}'");
    }
  }

 private:
  Result<std::map<std::string, std::string>> Finish(std::map<std::string, std::string>& out) {
    Skip();
    if (pos_ != t_.size()) return Error("trailing characters");
    return std::move(out);
  }
  Status Error(const std::string& what) const {
    return InvalidArgument("config JSON: " + what + " at offset " + std::to_string(pos_));
  }
  char Peek() const { return pos_ < t_.size() ? t_[pos_] : '\0'; }
  bool Eat(char c) {
    if (Peek() != c || pos_ >= t_.size()) return false;
    ++pos_;
    return true;
  }
  void Skip() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' ||
                                t_[pos_] == '\r')) {
      ++pos_;
    }
  }

  static void AppendUtf8(std::string& s, unsigned cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      s += static_cast<char>(0xe0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  Result<std::string> String() {
    if (!Eat('"')) return Error("expected a string");
    std::string s;
    while (pos_ < t_.size()) {
      const char c = t_[pos_++];
      if (c == '"') return s;
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      if (c != '\\') {
        s += c;
        continue;
      }
      if (pos_ >= t_.size()) break;
      const char e = t_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': s += e; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          if (t_.size() - pos_ < 4) return Error("short \\u escape");
          unsigned cp = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = t_[pos_++];
            if (!std::isxdigit(static_cast<unsigned char>(h))) return Error("bad \\u escape");
            cp = cp * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(h))
                                                      ? h - '0'
                                                      : (std::tolower(h) - 'a' + 10));
          }
          AppendUtf8(s, cp);
          break;
        }
        default: return Error("bad escape");
      }
    }
    return Error("unterminated string");
  }

  Result<std::string> Scalar() {
    const std::size_t start = pos_;
    while (pos_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[pos_])) ||
                                t_[pos_] == '-' || t_[pos_] == '+' || t_[pos_] == '.')) {
      ++pos_;
    }
    if (pos_ == start) return Error("expected a value");
    return std::string(t_.substr(start, pos_ - start));
  }

  // Skips a nested object or array (strings inside may hold brackets).
  Status SkipNested() {
    int depth = 0;
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == '"') {
        KVD_RETURN_IF_ERROR(String().status());
        continue;
      }
      ++pos_;
      if (c == '{' || c == '[') {
        if (++depth > 64) return Error("nesting deeper than 64");
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return Status::Ok();
      }
    }
    return Error("unterminated object or array");
  }

  std::string_view t_;
  std::size_t pos_ = 0;
};

}  // namespace

Result<std::map<std::string, std::string>> ParseFlatJsonObject(std::string_view text) {
  return Parser(text).Object();
}

}  // namespace kvdepot::lmcache
