// `kvdepot codec ...`: offline encode / decode / inspect / compare / synth of KV chunk files.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>

#include "cli_args.h"
#include "cli_codec_quality.h"
#include "cli_commands.h"
#include "cli_internal.h"
#include "cli_json.h"
#include "kvdepot/base/file_io.h"
#include "kvdepot/codec/cachegen.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/compare.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/npy.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot::cli {
namespace {

// Largest input file any codec command reads: the largest decodable tensor plus headers.
constexpr std::uint64_t kMaxInputBytes = kMaxDecodedBytes + (1u << 20);

std::string Hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool LooksLikeContainer(std::span<const std::byte> bytes) {
  return bytes.size() >= sizeof(kContainerMagic) &&
         std::memcmp(bytes.data(), kContainerMagic, sizeof(kContainerMagic)) == 0;
}

// Reads a KV tensor from a .npy file or a .kvd container (told apart by content, not name).
// `uint16_as_bf16`: how to read a '<u2' .npy (see docs/npy.md).
Result<KvTensor> LoadTensor(const std::string& path, bool uint16_as_bf16) {
  KVD_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadFile(path, kMaxInputBytes));
  if (LooksLikeContainer(bytes)) {
    auto decoded = DecodeChunk(bytes);
    if (!decoded.ok()) return decoded.status().WithContext(path);
    return decoded;
  }
  auto parsed = ParseKvNpy(bytes, NpyReadOptions{uint16_as_bf16});
  if (!parsed.ok()) return parsed.status().WithContext(path);
  return parsed;
}

// --dtype on inputs: only "bf16" changes anything (it declares '<u2' arrays as bfloat16).
Result<bool> InputIsBf16(const Args& args) {
  const auto name = args.Get("--dtype");
  if (!name) return false;
  KVD_ASSIGN_OR_RETURN(DType dtype, ParseFlagValue("--dtype", *name, ParseDType));
  return dtype == DType::kBFloat16;
}

Json ShapeJson(const KvShape& s) {
  return Json::array({s.layers, 2, s.tokens, s.kv_heads, s.head_dim});
}

// The --json report of a command that wrote `file`: its size in bytes, the tensor's shape and
// dtype and (for a container) its codec.
// `extra`'s fields (an object, or null) are appended.
void WrittenJson(Io io, const std::string& file, const KvTensor& tensor, std::string_view codec,
                 const Json& extra = nullptr) {
  std::error_code ec;
  const std::uintmax_t bytes = std::filesystem::file_size(file, ec);
  Json json = {{"file", file}, {"bytes", ec ? 0 : bytes}};
  if (!codec.empty()) json["codec"] = std::string(codec);
  json["dtype"] = std::string(DTypeName(tensor.dtype));
  json["shape"] = ShapeJson(tensor.shape);
  if (extra.is_object()) json.update(extra);
  PrintJson(json, io.out);
}

std::uint64_t Fp16Bytes(const KvShape& shape) {
  return shape.elements() * 2;
}

// Encoded size over fp16 size, 4 decimals ("1.0003", "0.1406").
std::string FormatRatio(std::uint64_t encoded, const KvShape& shape) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4f",
                static_cast<double>(encoded) / static_cast<double>(Fp16Bytes(shape)));
  return buf;
}

// Share of the container that is not coded payload, params or headers: tables + scales + index.
double Overhead(const CacheGenSizes& s) {
  return static_cast<double>(s.tables + s.scales + s.index) / static_cast<double>(s.total);
}

std::string FormatDouble(double v, int precision = 6) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream os;
  os << std::setprecision(precision) << v;
  return os.str();
}

// ---- encode ----------------------------------------------------------------------------------

Status Encode(std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("codec encode")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"IN.npy", "OUT.kvd"}));
  const std::string& in = args.positional()[0];
  const std::string& out = args.positional()[1];
  EncodeOptions options;
  KVD_ASSIGN_OR_RETURN(options.codec, ParseFlagValue("--codec", args.Get("--codec").value_or("raw"),
                                                     ParseCodecName));
  const CodecId codec = options.codec;
  if (codec != CodecId::kCacheGen && (args.Has("--k-bins") || args.Has("--v-bins"))) {
    return UsageError("--k-bins and --v-bins apply to --codec cachegen only");
  }
  for (const char* flag : {"--partition", "--orientation", "--rounding", "--seed", "--sinks"}) {
    if (codec != CodecId::kHackInt2 && args.Has(flag)) {
      return UsageError(std::string(flag) + " applies to --codec hack-int2 only");
    }
  }
  KVD_ASSIGN_OR_RETURN(std::uint64_t partition,
                       args.GetUint("--partition", options.hack.partition, 32, 128));
  options.hack.partition = static_cast<std::uint32_t>(partition);
  if (const auto name = args.Get("--orientation")) {
    KVD_ASSIGN_OR_RETURN(options.hack.orientation,
                         ParseFlagValue("--orientation", *name, ParseHackOrientation));
  }
  if (const auto name = args.Get("--rounding")) {
    KVD_ASSIGN_OR_RETURN(options.hack.rounding,
                         ParseFlagValue("--rounding", *name, ParseHackRounding));
  }
  KVD_ASSIGN_OR_RETURN(options.hack.seed, args.GetUint("--seed", 0, 0, UINT64_MAX));
  KVD_ASSIGN_OR_RETURN(std::uint64_t sinks, args.GetUint("--sinks", 0, 0, kMaxTokens));
  options.hack.sinks = static_cast<std::uint32_t>(sinks);
  KVD_RETURN_IF_ERROR(ValidateHackOptions(options.hack));
  KVD_ASSIGN_OR_RETURN(bool bf16, InputIsBf16(args));
  KVD_ASSIGN_OR_RETURN(KvTensor tensor, LoadTensor(in, bf16));
  if (args.Has("--dtype") && !bf16) {
    KVD_ASSIGN_OR_RETURN(DType want, ParseFlagValue("--dtype", *args.Get("--dtype"), ParseDType));
    KVD_ASSIGN_OR_RETURN(tensor, ConvertDType(tensor.view(), want));
  }
  if (const auto spec = args.Get("--k-bins")) {
    KVD_ASSIGN_OR_RETURN(options.cachegen.k_bins, ParseBinsSpec(*spec, tensor.shape.layers));
  }
  if (const auto spec = args.Get("--v-bins")) {
    KVD_ASSIGN_OR_RETURN(options.cachegen.v_bins, ParseBinsSpec(*spec, tensor.shape.layers));
  }
  if (codec == CodecId::kCacheGen) {
    const CacheGenOptions defaults = CacheGenDefaultProfile(tensor.shape.layers);
    if (options.cachegen.k_bins.empty()) options.cachegen.k_bins = defaults.k_bins;
    if (options.cachegen.v_bins.empty()) options.cachegen.v_bins = defaults.v_bins;
  }
  auto encoded = EncodeChunk(tensor.view(), options);
  if (!encoded.ok()) return encoded.status().WithContext(in);
  KVD_RETURN_IF_ERROR(WriteFileAtomic(out, *encoded));
  const bool hack = codec == CodecId::kHackInt2;
  const HackUnquantized kept = HackUnquantizedTokens(tensor.shape, options.hack);
  if (args.Has("--json")) {
    Json extra;
    if (hack) {
      extra = {{"unquantized_tokens", {{"sinks", kept.sinks}, {"tail", kept.tail}}}};
    }
    WrittenJson(io, out, tensor, CodecName(codec), extra);
  } else if (!args.Has("--quiet")) {
    io.out << "wrote " << out << ": " << CodecName(codec) << ", " << tensor.shape.ToString() << " "
           << DTypeName(tensor.dtype) << ", " << encoded->size() << " bytes ("
           << FormatRatio(encoded->size(), tensor.shape) << " of fp16)";
    if (hack) {
      io.out << "; unquantized tokens per (layer, K|V, head): " << kept.sinks << " sinks + "
             << kept.tail << " tail of " << tensor.shape.tokens;
    }
    io.out << "\n";
  }
  return Status::Ok();
}

// ---- decode ----------------------------------------------------------------------------------

Status Decode(std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("codec decode")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"IN.kvd", "OUT.npy"}));
  const std::string& in = args.positional()[0];
  const std::string& out = args.positional()[1];
  KVD_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadFile(in, kMaxInputBytes));
  if (!LooksLikeContainer(bytes)) {
    return Corruption(in + ": not a kvdepot chunk container (bad magic)");
  }
  auto decoded = DecodeChunk(bytes);
  if (!decoded.ok()) return decoded.status().WithContext(in);
  KvTensor tensor = std::move(*decoded);
  if (const auto name = args.Get("--dtype")) {
    KVD_ASSIGN_OR_RETURN(DType want, ParseFlagValue("--dtype", *name, ParseDType));
    KVD_ASSIGN_OR_RETURN(tensor, ConvertDType(tensor.view(), want));
  }
  KVD_RETURN_IF_ERROR(WriteKvNpy(out, tensor.view()));
  if (args.Has("--json")) {
    WrittenJson(io, out, tensor, "");
  } else if (!args.Has("--quiet")) {
    io.out << "wrote " << out << ": " << tensor.shape.ToString() << " " << DTypeName(tensor.dtype)
           << (tensor.dtype == DType::kBFloat16 ? " (as '<u2' bfloat16 bits)" : "") << "\n";
  }
  return Status::Ok();
}

// ---- inspect ---------------------------------------------------------------------------------

Status Inspect(std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("codec inspect")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"IN.kvd"}));
  const std::string& in = args.positional()[0];
  KVD_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadFile(in, kMaxInputBytes));
  return InspectContainerBytes(in, bytes, args.Has("--json"), io);
}

}  // namespace

Status InspectContainerBytes(const std::string& in, std::span<const std::byte> bytes, bool json_out,
                             Io io) {
  auto parsed = ParseContainer(bytes, ParseOptions{/*verify_checksums=*/false});
  if (!parsed.ok()) return parsed.status().WithContext(in);
  const ContainerView& view = *parsed;
  const ContainerHeader& h = view.header;
  const ChecksumReport sums = VerifyChecksums(view, bytes);
  const double ratio = static_cast<double>(h.total_bytes) / static_cast<double>(Fp16Bytes(h.shape));
  std::optional<CacheGenSizes> cachegen_sizes;
  std::optional<HackSizes> hack_sizes;
  if (h.codec == CodecId::kCacheGen && sums.all_ok()) {
    auto sizes = CacheGenSectionSizes(view);
    if (!sizes.ok()) return sizes.status().WithContext(in);
    cachegen_sizes = *sizes;
  }
  if (h.codec == CodecId::kHackInt2 && sums.all_ok()) {
    auto sizes = HackSectionSizes(view);
    if (!sizes.ok()) return sizes.status().WithContext(in);
    hack_sizes = *sizes;
  }

  if (json_out) {
    Json json;
    json["file"] = in;
    json["format_version"] = h.version;
    json["codec"] = std::string(CodecName(h.codec));
    json["dtype"] = std::string(DTypeName(h.dtype));
    json["shape"] = ShapeJson(h.shape);
    json["encoded_bytes"] = h.total_bytes;
    json["fp16_bytes"] = Fp16Bytes(h.shape);
    json["ratio_vs_fp16"] = ratio;
    json["header_checksum"] = Hex64(h.header_checksum);
    json["header_checksum_ok"] = sums.header_ok;
    json["checksums_ok"] = sums.all_ok();
    if (cachegen_sizes) {
      json["cachegen"] = {{"payload_bytes", cachegen_sizes->codes},
                          {"table_bytes", cachegen_sizes->tables},
                          {"scale_bytes", cachegen_sizes->scales},
                          {"index_bytes", cachegen_sizes->index},
                          {"overhead_fraction", Overhead(*cachegen_sizes)}};
    }
    if (hack_sizes) {
      json["hack"] = {{"code_bytes", hack_sizes->codes},
                      {"scale_bytes", hack_sizes->scales},
                      {"sum_bytes", hack_sizes->sums},
                      {"tail_bytes", hack_sizes->tail}};
    }
    Json sections = Json::array();
    for (std::size_t i = 0; i < view.sections.size(); ++i) {
      const SectionView& s = view.sections[i];
      sections.push_back({{"index", i},
                          {"kind", std::string(SectionKindName(s.kind))},
                          {"kind_id", s.kind},
                          {"flags", s.flags},
                          {"offset", s.offset},
                          {"length", s.length},
                          {"checksum", Hex64(s.checksum)},
                          {"checksum_ok", static_cast<bool>(sums.section_ok[i])}});
    }
    json["sections"] = std::move(sections);
    PrintJson(json, io.out);
  } else {
    io.out << "file             " << in << "\n"
           << "format version   " << h.version << "\n"
           << "codec            " << CodecName(h.codec) << "\n"
           << "dtype            " << DTypeName(h.dtype) << "\n"
           << "shape            " << h.shape.ToString()
           << "  [layers, K/V, tokens, kv_heads, head_dim]\n"
           << "encoded bytes    " << h.total_bytes << "\n"
           << "fp16 bytes       " << Fp16Bytes(h.shape) << "\n"
           << "ratio vs fp16    " << FormatRatio(h.total_bytes, h.shape) << "\n"
           << "header checksum  " << Hex64(h.header_checksum) << " "
           << (sums.header_ok ? "ok" : "MISMATCH") << "\n";
    if (cachegen_sizes) {
      io.out << "cachegen         payload " << cachegen_sizes->codes << " B, tables "
             << cachegen_sizes->tables << " B, scales " << cachegen_sizes->scales << " B, index "
             << cachegen_sizes->index << " B (tables+scales+index "
             << FormatDouble(100.0 * Overhead(*cachegen_sizes), 3) << "% of the container)\n";
    }
    if (hack_sizes) {
      io.out << "hack-int2        codes " << hack_sizes->codes << " B, scales+mins "
             << hack_sizes->scales << " B, sums " << hack_sizes->sums << " B, tail "
             << hack_sizes->tail << " B\n";
    }
    io.out << "sections\n";
    io.out << "  #  kind       offset        length  checksum          status\n";
    for (std::size_t i = 0; i < view.sections.size(); ++i) {
      const SectionView& s = view.sections[i];
      io.out << "  " << std::left << std::setw(3) << i << std::setw(9) << SectionKindName(s.kind)
             << std::right << std::setw(8) << s.offset << std::setw(14) << s.length << "  "
             << Hex64(s.checksum) << "  " << (sums.section_ok[i] ? "ok" : "MISMATCH") << "\n";
    }
  }
  if (!sums.header_ok) return Corruption(in + ": header checksum mismatch");
  for (std::size_t i = 0; i < sums.section_ok.size(); ++i) {
    if (!sums.section_ok[i]) {
      return Corruption(in + ": section " + std::to_string(i) + " (" +
                        std::string(SectionKindName(view.sections[i].kind)) +
                        "): checksum mismatch");
    }
  }
  return Status::Ok();
}

namespace {

// ---- compare ---------------------------------------------------------------------------------

// --probe-queries bound: the attention comparison costs queries x layers x tokens x heads x dim.
constexpr std::uint64_t kMaxProbeQueries = 4096;

Status Compare(std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("codec compare")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"A", "B"}));
  const std::string& a_path = args.positional()[0];
  const std::string& b_path = args.positional()[1];
  KVD_ASSIGN_OR_RETURN(bool bf16, InputIsBf16(args));
  double max_rel_l2 = -1;
  if (const auto v = args.Get("--max-rel-l2")) {
    char* end = nullptr;
    max_rel_l2 = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !(max_rel_l2 >= 0)) {
      return UsageError("--max-rel-l2 expects a non-negative number, got '" + *v + "'");
    }
  }
  KVD_ASSIGN_OR_RETURN(KvTensor a, LoadTensor(a_path, bf16));
  KVD_ASSIGN_OR_RETURN(KvTensor b, LoadTensor(b_path, bf16));
  KVD_ASSIGN_OR_RETURN(CompareStats st, CompareTensors(a.view(), b.view()));
  KVD_ASSIGN_OR_RETURN(
      const std::uint64_t probes,
      args.GetUint("--probe-queries", KvQualityOptions{}.queries_per_layer, 0, kMaxProbeQueries));
  std::optional<AttentionComparison> attention;
  if (probes > 0) {
    auto measured = CompareAttention(a, b, static_cast<std::uint32_t>(probes));
    if (!measured.ok()) {
      return measured.status().WithContext(
          "attention comparison (pass --probe-queries 0 to compare values only)");
    }
    attention = std::move(*measured);
  }
  if (args.Has("--json")) {
    Json json;
    json["a"] = a_path;
    json["b"] = b_path;
    json["shape"] = ShapeJson(a.shape);
    json["dtype_a"] = std::string(DTypeName(a.dtype));
    json["dtype_b"] = std::string(DTypeName(b.dtype));
    json["elements"] = st.elements;
    json["max_abs"] = st.max_abs;
    json["mean_abs"] = st.mean_abs;
    json["rel_l2"] = st.rel_l2;
    json["snr_db"] = st.snr_db;  // null when infinite (identical values)
    json["bit_exact"] = st.bit_exact;
    json["nonfinite_mismatches"] = st.nonfinite_mismatches;
    if (attention) json["attention"] = AttentionComparisonJson(*attention);
    PrintJson(json, io.out);
  } else {
    io.out << "shape       " << a.shape.ToString() << "  (" << DTypeName(a.dtype) << " vs "
           << DTypeName(b.dtype) << ")\n"
           << "elements    " << st.elements << "\n"
           << "max_abs     " << FormatDouble(st.max_abs) << "\n"
           << "mean_abs    " << FormatDouble(st.mean_abs) << "\n"
           << "rel_l2      " << FormatDouble(st.rel_l2) << "\n"
           << "snr_db      " << FormatDouble(st.snr_db) << "\n"
           << "bit_exact   " << (st.bit_exact ? "yes" : "no") << "\n"
           << "non-finite mismatches  " << st.nonfinite_mismatches << "\n";
    if (attention) PrintAttentionComparison(*attention, io.out);
  }
  if (args.Has("--expect-bit-exact") && !st.bit_exact) {
    return InvalidArgument(a_path + " and " + b_path + " are not bit-exact (rel_l2 " +
                           FormatDouble(st.rel_l2) + ")");
  }
  if (max_rel_l2 >= 0 && !(st.rel_l2 <= max_rel_l2)) {
    return InvalidArgument("rel_l2 " + FormatDouble(st.rel_l2) + " exceeds --max-rel-l2 " +
                           FormatDouble(max_rel_l2));
  }
  return Status::Ok();
}

// ---- synth -----------------------------------------------------------------------------------

Status Synth(std::span<const char* const> argv, Io io) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("codec synth")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({"OUT.npy"}));
  SynthOptions options;
  KVD_ASSIGN_OR_RETURN(std::uint64_t layers, args.GetUint("--layers", 2, 1, kMaxLayers));
  KVD_ASSIGN_OR_RETURN(std::uint64_t tokens, args.GetUint("--tokens", 256, 1, kMaxTokens));
  KVD_ASSIGN_OR_RETURN(std::uint64_t heads, args.GetUint("--heads", 8, 1, kMaxKvHeads));
  KVD_ASSIGN_OR_RETURN(std::uint64_t dim, args.GetUint("--dim", 128, 1, kMaxHeadDim));
  KVD_ASSIGN_OR_RETURN(options.seed, args.GetUint("--seed", 0, 0, UINT64_MAX));
  options.shape = {static_cast<std::uint32_t>(layers), static_cast<std::uint32_t>(tokens),
                   static_cast<std::uint32_t>(heads), static_cast<std::uint32_t>(dim)};
  if (const auto name = args.Get("--dtype")) {
    KVD_ASSIGN_OR_RETURN(options.dtype, ParseFlagValue("--dtype", *name, ParseDType));
  }
  KVD_ASSIGN_OR_RETURN(KvTensor tensor, SynthesizeKv(options));
  const std::string& out = args.positional()[0];
  KVD_RETURN_IF_ERROR(WriteKvNpy(out, tensor.view()));
  if (args.Has("--json")) {
    WrittenJson(io, out, tensor, "");
  } else if (!args.Has("--quiet")) {
    io.out << "wrote " << out << ": synthetic KV " << tensor.shape.ToString() << " "
           << DTypeName(tensor.dtype) << ", seed " << options.seed << "\n";
  }
  return Status::Ok();
}

}  // namespace

void PrintCodecUsage(std::ostream& out) {
  out << "kvdepot codec commands:\n"
         "  codec encode [--codec raw|cachegen|hack-int2] [--dtype fp16|bf16|fp32] IN.npy OUT.kvd\n"
         "               cachegen: [--k-bins SPEC] [--v-bins SPEC], SPEC = B or B1:N1,...,Bk\n"
         "               (default K 32:10,16 and V 32:2,16; 32 everywhere below 10 layers)\n"
         "               hack-int2: [--partition 32|64|128] [--orientation channel|token]\n"
         "               [--rounding nearest|stochastic] [--seed N] [--sinks N]\n"
         "               (default 64, channel, nearest; --partition 32 is recommended: 11-15%\n"
         "               lower attention error at 0.20-0.21 of fp16, docs/hack.md; --seed for\n"
         "               stochastic rounding). Tokens after the P-token blocks stay unquantized\n"
         "               (the tail: (tokens - N) mod P). --sinks N keeps the first N tokens\n"
         "               unquantized AND starts the blocks after them, so the tail changes too:\n"
         "               256 tokens, P 64, --sinks 4 keep 4 + 60 tokens unquantized (the\n"
         "               bytes of --sinks 64); N a multiple of P keeps only the first N. For a\n"
         "               sequence's first chunk; encode reports the sinks and tail it kept.\n"
         "  codec decode [--dtype fp16|bf16|fp32] IN.kvd OUT.npy\n"
         "  codec inspect [--json] IN.kvd\n"
         "  codec compare [--json] [--expect-bit-exact] [--max-rel-l2 X] [--probe-queries N]\n"
         "               A B   (.npy or .kvd; A the original, B a restored copy): value errors,\n"
         "               K and V errors, and the attention-output error of N probe queries per\n"
         "               layer (default 64; 0 skips it) against exact attention over A, next to\n"
         "               that of hack-int2 at its defaults on A (docs/hack.md)\n"
         "  codec synth OUT.npy [--layers L] [--tokens T] [--heads H] [--dim D] [--seed S]\n"
         "              [--dtype fp16|bf16|fp32]\n"
         "encode, decode and synth take --json (a report of what was written) or --quiet.\n"
         "Arrays are [layers, 2, tokens, kv_heads, head_dim]. bf16 travels in .npy as '<u2' bits:\n"
         "pass --dtype bf16 to read such a file as bfloat16.\n";
}

Status RunCodecCommand(std::span<const char* const> argv, Io io) {
  if (argv.empty()) return UsageError("kvdepot codec SUBCOMMAND (see 'kvdepot help')");
  const std::string_view sub = argv[0];
  const auto rest = argv.subspan(1);
  if (sub == "encode") return Encode(rest, io);
  if (sub == "decode") return Decode(rest, io);
  if (sub == "inspect") return Inspect(rest, io);
  if (sub == "compare") return Compare(rest, io);
  if (sub == "synth") return Synth(rest, io);
  if (sub == "help" || sub == "--help") {
    PrintCodecUsage(io.out);
    return Status::Ok();
  }
  return UsageError("unknown codec subcommand '" + std::string(sub) + "'");
}

}  // namespace kvdepot::cli
