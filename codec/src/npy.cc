#include "kvdepot/codec/npy.h"

#include <bit>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "kvdepot/base/file_io.h"
#include "kvdepot/base/hex.h"

namespace kvdepot {
namespace {

static_assert(std::endian::native == std::endian::little,
              "npy.cc assumes a little-endian host (KvTensor data is little-endian)");

constexpr std::string_view kMagic("\x93NUMPY", 6);
constexpr std::size_t kArrayAlign = 64;           // numpy's ARRAY_ALIGN
constexpr std::size_t kGrowthAxisMaxDigits = 21;  // numpy's GROWTH_AXIS_MAX_DIGITS
constexpr std::size_t kMaxQuotedChars = 40;       // untrusted text echoed in an error message
constexpr std::uint64_t kReadSlackBytes = std::uint64_t{1} << 20;
constexpr std::string_view kShapeAxes = "[layers, 2, tokens, kv_heads, head_dim]";

// Untrusted header text made safe for a one-line message: at most kMaxQuotedChars characters,
// bytes outside printable ASCII as \xNN.
std::string Printable(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < kMaxQuotedChars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      AppendHexEscape(out, c);
    }
  }
  if (text.size() > kMaxQuotedChars) out += "...";
  return out;
}

// Printable(text) in single quotes. Built by appending: `"'" + std::string` inserts at the front
// of the temporary, which GCC 12 at -O3 reports as a -Wrestrict overlap inside libstdc++ (a false
// positive that breaks -DKVDEPOT_WERROR=ON release builds).
std::string Quoted(std::string_view text) {
  std::string out(1, '\'');
  out += Printable(text);
  out += '\'';
  return out;
}

Status SyntaxError(std::string message) {
  return InvalidArgument("npy: header: " + message);
}

// One shape entry as written: magnitude (saturated at UINT64_MAX), sign and source text.
struct ShapeDim {
  std::uint64_t value = 0;
  bool negative = false;
  bool overflow = false;
  std::string_view text;
};

struct NpyHeader {
  std::optional<std::string_view> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<ShapeDim>> shape;
};

// Recursive-descent parser for the subset of Python dict literals numpy writes:
//   '{' (key ':' value ',')* [key ':' value] '}'  followed only by whitespace,
// keys 'descr' (a string), 'fortran_order' (True/False) and 'shape' (a tuple of decimal integers),
// strings in single or double quotes without escapes. Every read is bounds-checked against the
// header text; the parser never allocates more than one ShapeDim per two header bytes.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  Result<NpyHeader> Parse() {
    NpyHeader header;
    SkipSpace();
    KVD_RETURN_IF_ERROR(Expect('{', "'{' opening the header dict"));
    SkipSpace();
    while (!AtEnd() && Peek() != '}') {
      const std::size_t key_pos = pos_;
      KVD_ASSIGN_OR_RETURN(std::string_view key, ParseString("a quoted key"));
      SkipSpace();
      KVD_RETURN_IF_ERROR(Expect(':', "':' after key '" + Printable(key) + "'"));
      SkipSpace();
      if (key == "descr") {
        if (header.descr) return Duplicate(key);
        KVD_ASSIGN_OR_RETURN(header.descr, ParseString("a quoted string as the value of 'descr'"));
      } else if (key == "fortran_order") {
        if (header.fortran_order) return Duplicate(key);
        KVD_ASSIGN_OR_RETURN(header.fortran_order, ParseBool());
      } else if (key == "shape") {
        if (header.shape) return Duplicate(key);
        KVD_ASSIGN_OR_RETURN(header.shape, ParseShape());
      } else {
        return InvalidArgument("npy: header has unknown key '" + Printable(key) + "' at offset " +
                               std::to_string(key_pos) +
                               " (expected only 'descr', 'fortran_order', 'shape')");
      }
      SkipSpace();
      if (AtEnd() || Peek() != ',') break;
      ++pos_;
      SkipSpace();
    }
    KVD_RETURN_IF_ERROR(Expect('}', "',' or '}' in the header dict"));
    SkipSpace();
    if (!AtEnd()) {
      return SyntaxError("unexpected '" + Printable(text_.substr(pos_)) + "' at offset " +
                         std::to_string(pos_) + " after the closing '}'");
    }
    if (!header.descr) return Missing("descr");
    if (!header.fortran_order) return Missing("fortran_order");
    if (!header.shape) return Missing("shape");
    return header;
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }  // precondition: !AtEnd()

  void SkipSpace() {
    while (!AtEnd()) {
      const char c = Peek();
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') return;
      ++pos_;
    }
  }

  // The syntax error for "wanted `expected` at the current position".
  Status Unexpected(std::string_view expected) const {
    const std::string found =
        AtEnd() ? std::string("the end of the header") : Quoted(text_.substr(pos_, 1));
    return SyntaxError("expected " + std::string(expected) + " at offset " + std::to_string(pos_) +
                       ", found " + found);
  }

  Status Expect(char c, std::string_view what) {
    if (AtEnd() || Peek() != c) return Unexpected(what);
    ++pos_;
    return Status::Ok();
  }

  static Status Duplicate(std::string_view key) {
    return InvalidArgument("npy: header has key '" + std::string(key) + "' more than once");
  }
  static Status Missing(std::string_view key) {
    return InvalidArgument("npy: header is missing key '" + std::string(key) + "'");
  }

  // A string literal in ' or " quotes without escapes or line breaks; returns its contents.
  Result<std::string_view> ParseString(std::string_view what) {
    if (AtEnd() || (Peek() != '\'' && Peek() != '"')) return Unexpected(what);
    const std::size_t open = pos_;
    const char quote = Peek();
    ++pos_;
    const std::size_t begin = pos_;
    while (!AtEnd() && Peek() != quote) {
      if (Peek() == '\\') {
        return SyntaxError("escape sequence in the string at offset " + std::to_string(open) +
                           " (escapes are not supported)");
      }
      if (Peek() == '\n' || Peek() == '\r') break;
      ++pos_;
    }
    if (AtEnd() || Peek() != quote) {
      return SyntaxError("unterminated string starting at offset " + std::to_string(open));
    }
    const std::string_view contents = text_.substr(begin, pos_ - begin);
    ++pos_;
    return contents;
  }

  bool ConsumeWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    const std::size_t end = pos_ + word.size();
    if (end < text_.size()) {  // "Trueish" is an identifier, not True
      const char next = text_[end];
      if ((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') ||
          (next >= '0' && next <= '9') || next == '_') {
        return false;
      }
    }
    pos_ = end;
    return true;
  }

  Result<bool> ParseBool() {
    if (ConsumeWord("True")) return true;
    if (ConsumeWord("False")) return false;
    return Unexpected("True or False as the value of 'fortran_order'");
  }

  // An optionally negative decimal integer.
  Result<ShapeDim> ParseInt() {
    ShapeDim dim;
    const std::size_t begin = pos_;
    if (!AtEnd() && Peek() == '-') {
      dim.negative = true;
      ++pos_;
      SkipSpace();
    }
    if (AtEnd() || Peek() < '0' || Peek() > '9') {
      return Unexpected("a decimal integer in 'shape'");
    }
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      const auto digit = static_cast<std::uint64_t>(Peek() - '0');
      if (dim.value > (UINT64_MAX - digit) / 10) {
        dim.overflow = true;
        dim.value = UINT64_MAX;
      } else if (!dim.overflow) {
        dim.value = dim.value * 10 + digit;
      }
      ++pos_;
    }
    dim.text = text_.substr(begin, pos_ - begin);
    return dim;
  }

  // '(' [int (',' int)* [',']] ')'. "(3)" is a parenthesized integer in Python, not a tuple.
  Result<std::vector<ShapeDim>> ParseShape() {
    KVD_RETURN_IF_ERROR(Expect('(', "a tuple '(...)' as the value of 'shape'"));
    std::vector<ShapeDim> dims;
    bool saw_comma = false;
    SkipSpace();
    while (!AtEnd() && Peek() != ')') {
      KVD_ASSIGN_OR_RETURN(ShapeDim dim, ParseInt());
      dims.push_back(dim);
      SkipSpace();
      if (AtEnd() || Peek() != ',') break;
      saw_comma = true;
      ++pos_;
      SkipSpace();
    }
    KVD_RETURN_IF_ERROR(Expect(')', "',' or ')' in 'shape'"));
    if (dims.size() == 1 && !saw_comma) {
      return InvalidArgument("npy: header field 'shape' is '(" + Printable(dims[0].text) +
                             ")', an integer, not a tuple (a 1-tuple is written '(n,)')");
    }
    return dims;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

std::string ShapeText(const std::vector<ShapeDim>& dims) {
  std::string out = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    out += Printable(dims[i].text);
    if (out.size() > 4 * kMaxQuotedChars) {
      out += ", ...";
      break;
    }
  }
  out += dims.size() == 1 ? ",)" : ")";
  return out;
}

// The descr values ParseKvNpy accepts, and what they mean.
struct ElementFormat {
  DType dtype;
  bool big_endian;
};

Result<ElementFormat> ParseDescr(std::string_view descr, const NpyReadOptions& options) {
  if (descr == "<f2") return ElementFormat{DType::kFloat16, false};
  if (descr == ">f2") return ElementFormat{DType::kFloat16, true};
  if (descr == "<f4") return ElementFormat{DType::kFloat32, false};
  if (descr == ">f4") return ElementFormat{DType::kFloat32, true};
  if (descr == "<u2" || descr == ">u2") {
    if (!options.uint16_as_bf16) {
      return InvalidArgument(
          "npy: header field 'descr' is '" + std::string(descr) +
          "': the array is uint16, which kvdepot reads only as bfloat16 bit patterns; declare bf16 "
          "to read it (--dtype bf16 on the CLI, NpyReadOptions::uint16_as_bf16 in C++)");
    }
    return ElementFormat{DType::kBFloat16, descr[0] == '>'};
  }
  std::string hint;
  if (descr.size() >= 2 && descr[1] == 'V') {
    hint =
        " (opaque void bytes, e.g. an ml_dtypes bfloat16 array; save bf16 as its uint16 bits, "
        "arr.view(np.uint16), and declare bf16 when reading)";
  }
  return InvalidArgument("npy: header field 'descr' is '" + Printable(descr) + "'" + hint +
                         "; accepted are '<f2', '>f2' (fp16), '<f4', '>f4' (fp32), and '<u2', "
                         "'>u2' (bf16 bits, when declared)");
}

// Checks rank, axis 1 and the range of every dimension; returns the KvShape.
Result<KvShape> ToKvShape(const std::vector<ShapeDim>& dims, DType dtype) {
  if (dims.size() != 5) {
    return InvalidArgument("npy: header field 'shape' has " + std::to_string(dims.size()) +
                           " dimensions, expected 5 " + std::string(kShapeAxes));
  }
  const std::string context = "npy: header field 'shape' " + ShapeText(dims);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const ShapeDim& d = dims[i];
    if (d.negative && d.value != 0) {
      return OutOfRange(context + ": dimension " + std::to_string(i) + " is negative");
    }
    if (d.overflow || d.value > UINT32_MAX) {
      return OutOfRange(context + ": dimension " + std::to_string(i) + " is out of range");
    }
  }
  if (dims[1].value != 2) {
    return InvalidArgument(context + ": axis 1 is " + std::to_string(dims[1].value) +
                           ", expected 2 (K and V) in " + std::string(kShapeAxes));
  }
  KvShape shape;
  shape.layers = static_cast<std::uint32_t>(dims[0].value);
  shape.tokens = static_cast<std::uint32_t>(dims[2].value);
  shape.kv_heads = static_cast<std::uint32_t>(dims[3].value);
  shape.head_dim = static_cast<std::uint32_t>(dims[4].value);
  const Status valid = ValidateShape(shape, dtype);
  if (!valid.ok()) return valid.WithContext(context);
  return shape;
}

std::uint32_t LoadLe(const std::byte* p, std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= std::to_integer<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

void SwapElements(std::vector<std::byte>& data, std::size_t item_size) {
  for (std::size_t i = 0; i + item_size <= data.size(); i += item_size) {
    for (std::size_t a = i, b = i + item_size - 1; a < b; ++a, --b) std::swap(data[a], data[b]);
  }
}

std::string_view DescrFor(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return "<f2";
    case DType::kBFloat16: return "<u2";
    case DType::kFloat32: return "<f4";
  }
  return "";
}

}  // namespace

Result<KvTensor> ParseKvNpy(std::span<const std::byte> file, const NpyReadOptions& options) {
  const auto* bytes = reinterpret_cast<const char*>(file.data());
  const std::string_view image(bytes, file.size());
  if (image.substr(0, kMagic.size()) != kMagic) {
    if (image.size() < kMagic.size() && image == kMagic.substr(0, image.size())) {
      return Corruption("npy: file is " + std::to_string(image.size()) +
                        " bytes, truncated inside the magic string");
    }
    return InvalidArgument("npy: not an .npy file (it does not start with \"\\x93NUMPY\")");
  }
  if (image.size() < kMagic.size() + 2) {
    return Corruption("npy: file is " + std::to_string(image.size()) +
                      " bytes, truncated before the format version");
  }
  const auto major = static_cast<unsigned char>(image[6]);
  const auto minor = static_cast<unsigned char>(image[7]);
  if (minor != 0 || major < 1 || major > 3) {
    return InvalidArgument("npy: format version " + std::to_string(major) + "." +
                           std::to_string(minor) + " is not supported (1.0, 2.0 and 3.0 are)");
  }
  const std::size_t length_size = major == 1 ? 2 : 4;
  const std::size_t prefix = kMagic.size() + 2 + length_size;
  if (image.size() < prefix) {
    return Corruption("npy: file is " + std::to_string(image.size()) +
                      " bytes, truncated before the header length");
  }
  const std::uint32_t header_len = LoadLe(file.data() + kMagic.size() + 2, length_size);
  if (header_len > kMaxNpyHeaderBytes) {
    return OutOfRange("npy: header length " + std::to_string(header_len) +
                      " is over the limit of " + std::to_string(kMaxNpyHeaderBytes) + " bytes");
  }
  if (header_len > image.size() - prefix) {
    return Corruption("npy: header length " + std::to_string(header_len) +
                      " reaches beyond the end of the file (" + std::to_string(image.size()) +
                      " bytes, header starts at " + std::to_string(prefix) + ")");
  }
  KVD_ASSIGN_OR_RETURN(NpyHeader header, HeaderParser(image.substr(prefix, header_len)).Parse());
  KVD_ASSIGN_OR_RETURN(ElementFormat format, ParseDescr(*header.descr, options));
  if (*header.fortran_order) {
    return InvalidArgument(
        "npy: header field 'fortran_order' is True; only C-order arrays are supported (save "
        "np.ascontiguousarray(arr))");
  }
  KVD_ASSIGN_OR_RETURN(KvShape shape, ToKvShape(*header.shape, format.dtype));

  const std::size_t item_size = DTypeSize(format.dtype);
  const std::uint64_t need = shape.elements() * item_size;  // <= kMaxDecodedBytes: no overflow
  const std::size_t data_offset = prefix + header_len;
  const std::uint64_t have = image.size() - data_offset;
  if (have != need) {
    return Corruption(std::string("npy: ") + (have < need ? "truncated" : "trailing bytes") +
                      ": data has " + std::to_string(have) + " bytes, shape needs " +
                      std::to_string(need) + " (" + shape.ToString() + " of '" +
                      std::string(*header.descr) + "', data at offset " +
                      std::to_string(data_offset) + ")");
  }
  KvTensor tensor;
  tensor.dtype = format.dtype;
  tensor.shape = shape;
  tensor.data.assign(file.begin() + static_cast<std::ptrdiff_t>(data_offset), file.end());
  if (format.big_endian) SwapElements(tensor.data, item_size);
  return tensor;
}

Result<KvTensor> ReadKvNpy(const std::string& path, const NpyReadOptions& options) {
  // ReadFile's messages already start with the path.
  KVD_ASSIGN_OR_RETURN(std::vector<std::byte> file,
                       ReadFile(path, kMaxDecodedBytes + kReadSlackBytes));
  Result<KvTensor> tensor = ParseKvNpy(file, options);
  if (!tensor.ok()) return tensor.status().WithContext(path);
  return tensor;
}

std::vector<std::byte> SerializeKvNpy(const KvTensorView& tensor) {
  if (!tensor.Validate().ok()) return {};
  const KvShape& s = tensor.shape;
  const std::string first_dim = std::to_string(s.layers);
  // Exactly what numpy 1.24's _write_array_header produces: sorted keys, repr() values, spare
  // spaces for growing axis 0, then _wrap_header's padding to kArrayAlign and a final '\n'.
  std::string header = "{'descr': '" + std::string(DescrFor(tensor.dtype)) +
                       "', 'fortran_order': False, 'shape': (" + first_dim + ", 2, " +
                       std::to_string(s.tokens) + ", " + std::to_string(s.kv_heads) + ", " +
                       std::to_string(s.head_dim) + "), }";
  header.append(kGrowthAxisMaxDigits - first_dim.size(), ' ');
  const std::size_t prefix = kMagic.size() + 2 + 2;
  const std::size_t unpadded = header.size() + 1;  // + '\n'
  const std::size_t pad = kArrayAlign - (prefix + unpadded) % kArrayAlign;
  header.append(pad, ' ');
  header.push_back('\n');
  const std::size_t header_len = header.size();  // < 256: fits format 1.0's uint16

  std::vector<std::byte> out;
  out.reserve(prefix + header_len + tensor.data.size());
  auto append = [&out](std::string_view text) {
    for (char c : text) out.push_back(static_cast<std::byte>(c));
  };
  append(kMagic);
  out.push_back(std::byte{1});
  out.push_back(std::byte{0});
  out.push_back(static_cast<std::byte>(header_len & 0xff));
  out.push_back(static_cast<std::byte>(header_len >> 8));
  append(header);
  out.insert(out.end(), tensor.data.begin(), tensor.data.end());
  return out;
}

Status WriteKvNpy(const std::string& path, const KvTensorView& tensor) {
  const Status valid = tensor.Validate();
  if (!valid.ok()) return valid.WithContext(path + ": npy");
  // WriteFileAtomic's messages already start with the path.
  return WriteFileAtomic(path, SerializeKvNpy(tensor));
}

}  // namespace kvdepot
