#include "kvdepot/codec/cachegen.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/codec/cachegen_format.h"
#include "kvdepot/codec/numeric.h"

namespace kvdepot {
namespace {

using cachegen::ChannelScale;
using cachegen::kLanes;
using cachegen::kProbScale;
using cachegen::kStateLow;

using cachegen::kParamsFixedBytes;

// Everything about a chunk's coding layout that follows from its shape and parameters.
struct Layout {
  std::uint32_t layers = 0;
  std::uint32_t tokens = 0;
  std::uint32_t channels = 0;  // kv_heads * head_dim
  std::uint32_t cpl = 1;       // channels per lane
  std::uint32_t groups_per_lk = 0;
  std::uint8_t scale_dtype = cachegen::kScaleFp16;
  std::vector<std::uint8_t> bins;          // [layer * 2 + kv]
  std::vector<std::uint32_t> table_start;  // [layer * 2 + kv], index into the frequency array

  std::uint32_t lk_count() const { return layers * 2; }
  std::uint32_t groups() const { return lk_count() * groups_per_lk; }
  std::size_t table_entries() const { return table_start.empty() ? 0 : table_start.back(); }
  std::size_t scale_bytes() const {
    return std::size_t{lk_count()} * channels * 2 * (scale_dtype == cachegen::kScaleFp16 ? 2 : 4);
  }
};

Layout MakeLayout(const KvShape& shape, std::vector<std::uint8_t> bins, std::uint8_t scale_dtype) {
  Layout l;
  l.layers = shape.layers;
  l.tokens = shape.tokens;
  l.channels = shape.kv_heads * shape.head_dim;
  l.cpl = cachegen::ChannelsPerLane(shape.tokens);
  l.groups_per_lk = cachegen::GroupsPerLayerKv(l.channels, l.cpl);
  l.scale_dtype = scale_dtype;
  l.bins = std::move(bins);
  l.table_start.resize(l.bins.size() + 1);
  for (std::size_t i = 0; i < l.bins.size(); ++i)
    l.table_start[i + 1] = l.table_start[i] + l.bins[i];
  return l;
}

// The quantized chunk: per-(lk, channel) scales and the symbols, [lk][token][channel].
struct Quantized {
  Layout layout;
  std::vector<ChannelScale> scales;  // [lk * channels + c]
  std::vector<std::uint8_t> symbols;
};

template <typename Load>
void LoadAll(const KvTensorView& t, std::vector<float>& out, Load load) {
  const std::uint64_t n = t.shape.elements();
  for (std::uint64_t i = 0; i < n; ++i) out[i] = load(t.data.data() + i * DTypeSize(t.dtype));
}

std::vector<float> ToFloat(const KvTensorView& t) {
  std::vector<float> out(t.shape.elements());
  switch (t.dtype) {
    case DType::kFloat16:
      LoadAll(t, out, [](const std::byte* p) { return HalfBitsToFloat(LoadLE<std::uint16_t>(p)); });
      break;
    case DType::kBFloat16:
      LoadAll(t, out, [](const std::byte* p) { return Bf16BitsToFloat(LoadLE<std::uint16_t>(p)); });
      break;
    case DType::kFloat32:
      LoadAll(t, out, [](const std::byte* p) { return LoadLE<float>(p); });
      break;
  }
  return out;
}

Result<Quantized> Quantize(const KvTensorView& tensor, const CacheGenOptions& options) {
  KVD_RETURN_IF_ERROR(tensor.Validate().WithContext("cachegen encode"));
  const KvShape& shape = tensor.shape;
  KVD_ASSIGN_OR_RETURN(const CacheGenOptions opts, ResolveCacheGenOptions(options, shape.layers));
  std::vector<std::uint8_t> bins(std::size_t{shape.layers} * 2);
  for (std::uint32_t l = 0; l < shape.layers; ++l) {
    bins[l * 2] = opts.k_bins[l];
    bins[l * 2 + 1] = opts.v_bins[l];
  }

  const std::vector<float> x = ToFloat(tensor);
  const std::uint32_t channels = shape.kv_heads * shape.head_dim;
  const std::uint32_t lks = shape.layers * 2;
  std::vector<float> mins(std::size_t{lks} * channels), maxs(std::size_t{lks} * channels);
  for (std::uint32_t lk = 0; lk < lks; ++lk) {
    float* mn = &mins[std::size_t{lk} * channels];
    float* mx = &maxs[std::size_t{lk} * channels];
    for (std::uint32_t t = 0; t < shape.tokens; ++t) {
      const std::uint64_t row = (std::uint64_t{lk} * shape.tokens + t) * channels;
      for (std::uint32_t c = 0; c < channels; ++c) {
        const float v = x[row + c];
        if (!cachegen::IsFiniteFloat(v)) {
          return InvalidArgument("cachegen: non-finite value at " +
                                 ElementPosition(shape, row + c) +
                                 " (CacheGen cannot represent NaN/Inf; use the raw codec)");
        }
        if (t == 0 || v < mn[c]) mn[c] = v;
        if (t == 0 || v > mx[c]) mx[c] = v;
      }
    }
  }

  Quantized qz;
  qz.scales.resize(mins.size());
  bool fp16_ok = true;
  for (std::size_t i = 0; i < mins.size() && fp16_ok; ++i) {
    qz.scales[i] = cachegen::ScaleFp16(mins[i], maxs[i], bins[i / channels], &fp16_ok);
  }
  std::uint8_t scale_dtype = cachegen::kScaleFp16;
  if (!fp16_ok) {
    scale_dtype = cachegen::kScaleFp32;
    for (std::size_t i = 0; i < mins.size(); ++i) {
      bool ok = true;
      qz.scales[i] = cachegen::ScaleFp32(mins[i], maxs[i], bins[i / channels], &ok);
      if (!ok) {
        return InvalidArgument("cachegen: the value range of channel " +
                               std::to_string(i % channels) + " of layer " +
                               std::to_string(i / channels / 2) + " overflows float");
      }
    }
  }
  qz.layout = MakeLayout(shape, std::move(bins), scale_dtype);
  qz.symbols.resize(x.size());
  for (std::uint32_t lk = 0; lk < lks; ++lk) {
    const std::uint32_t b = qz.layout.bins[lk];
    const ChannelScale* sc = &qz.scales[std::size_t{lk} * channels];
    for (std::uint32_t t = 0; t < shape.tokens; ++t) {
      const std::uint64_t row = (std::uint64_t{lk} * shape.tokens + t) * channels;
      for (std::uint32_t c = 0; c < channels; ++c) {
        qz.symbols[row + c] = static_cast<std::uint8_t>(cachegen::Quantize(x[row + c], sc[c], b));
      }
    }
  }
  return qz;
}

void StoreElement(DType dtype, std::byte* base, std::uint64_t i, float v) {
  switch (dtype) {
    case DType::kFloat16: StoreLE<std::uint16_t>(base + i * 2, FloatToHalfBits(v)); break;
    case DType::kBFloat16: StoreLE<std::uint16_t>(base + i * 2, FloatToBf16Bits(v)); break;
    case DType::kFloat32: StoreLE<float>(base + i * 4, v); break;
  }
}

// Appends one group's word stream (decoder order) to `codes`. `scratch` is reused storage.
void EncodeGroup(const Layout& lay, const std::uint8_t* sym, const std::uint16_t* freq,
                 const std::uint16_t* cum, std::uint32_t group, std::vector<std::uint16_t>& scratch,
                 std::vector<std::uint16_t>& codes) {
  std::uint32_t state[kLanes];
  std::fill(std::begin(state), std::end(state), kStateLow);
  scratch.clear();
  const std::uint32_t steps = lay.cpl * lay.tokens;
  for (std::uint32_t s = steps; s-- > 0;) {
    const std::uint32_t k = s / lay.tokens, t = s % lay.tokens;
    for (std::uint32_t lane = kLanes; lane-- > 0;) {
      const std::uint32_t c = cachegen::LaneChannel(group, k, lane, lay.cpl);
      if (c >= lay.channels) continue;
      const std::uint8_t q = sym[std::size_t{t} * lay.channels + c];
      std::uint16_t word;
      if (cachegen::RansEncodeStep(&state[lane], freq[q], cum[q], &word)) scratch.push_back(word);
    }
  }
  for (std::uint32_t lane = kLanes; lane-- > 0;) {
    if (cachegen::LaneChannel(group, 0, lane, lay.cpl) >= lay.channels) continue;
    scratch.push_back(static_cast<std::uint16_t>(state[lane] >> 16));
    scratch.push_back(static_cast<std::uint16_t>(state[lane] & 0xffffu));
  }
  codes.insert(codes.end(), scratch.rbegin(), scratch.rend());
}

}  // namespace

CacheGenOptions CacheGenDefaultProfile(std::uint32_t layers) {
  CacheGenOptions o;
  o.k_bins.assign(layers, 32);
  o.v_bins.assign(layers, 32);
  if (layers >= 10) {
    for (std::uint32_t l = 10; l < layers; ++l) o.k_bins[l] = 16;
    for (std::uint32_t l = 2; l < layers; ++l) o.v_bins[l] = 16;
  }
  return o;
}

Result<CacheGenOptions> ResolveCacheGenOptions(const CacheGenOptions& options,
                                               std::uint32_t layers) {
  CacheGenOptions opts = options;
  const CacheGenOptions defaults = CacheGenDefaultProfile(layers);
  if (opts.k_bins.empty()) opts.k_bins = defaults.k_bins;
  if (opts.v_bins.empty()) opts.v_bins = defaults.v_bins;
  for (const auto& [bins, which] : {std::pair{&opts.k_bins, "K"}, std::pair{&opts.v_bins, "V"}}) {
    if (bins->size() != layers) {
      return InvalidArgument(std::string("cachegen: ") + which + " bins profile has " +
                             std::to_string(bins->size()) + " layers, the tensor has " +
                             std::to_string(layers));
    }
    for (std::size_t i = 0; i < bins->size(); ++i) {
      if ((*bins)[i] < cachegen::kMinBins || (*bins)[i] > cachegen::kMaxBins) {
        return InvalidArgument(std::string("cachegen: ") + which + " bins of layer " +
                               std::to_string(i) + " = " + std::to_string((*bins)[i]) +
                               " is out of range [2, 64]");
      }
    }
  }
  return opts;
}

Result<std::vector<std::uint8_t>> ParseBinsSpec(std::string_view spec, std::uint32_t layers) {
  std::vector<std::uint8_t> bins;
  auto parse_uint = [](std::string_view s, std::uint32_t& v) {
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
  };
  std::string_view rest = spec;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view part = rest.substr(0, comma);
    const auto colon = part.find(':');
    std::uint32_t b = 0, n = 0;
    if (!parse_uint(part.substr(0, colon), b) || b < cachegen::kMinBins || b > cachegen::kMaxBins) {
      return InvalidArgument("bins spec '" + std::string(spec) + "': '" + std::string(part) +
                             "' needs bins in [2, 64]");
    }
    if (colon == std::string_view::npos) {
      if (comma != std::string_view::npos) {
        return InvalidArgument("bins spec '" + std::string(spec) +
                               "': only the last part may omit ':LAYERS'");
      }
      while (bins.size() < layers) bins.push_back(static_cast<std::uint8_t>(b));
      break;
    }
    if (!parse_uint(part.substr(colon + 1), n) || n == 0) {
      return InvalidArgument("bins spec '" + std::string(spec) + "': '" + std::string(part) +
                             "' needs a positive layer count after ':'");
    }
    for (std::uint32_t i = 0; i < n && bins.size() < layers; ++i) {
      bins.push_back(static_cast<std::uint8_t>(b));
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (bins.size() != layers) {
    return InvalidArgument("bins spec '" + std::string(spec) + "' covers " +
                           std::to_string(bins.size()) + " of " + std::to_string(layers) +
                           " layers (end it with a part without ':LAYERS')");
  }
  return bins;
}

Result<std::vector<std::byte>> EncodeCacheGen(const KvTensorView& tensor,
                                              const CacheGenOptions& options) {
  KVD_ASSIGN_OR_RETURN(Quantized qz, Quantize(tensor, options));
  const Layout& lay = qz.layout;

  // Frequency tables, one per (layer, K|V).
  std::vector<std::uint16_t> freq(lay.table_entries()), cum(lay.table_entries());
  for (std::uint32_t lk = 0; lk < lay.lk_count(); ++lk) {
    std::uint32_t counts[cachegen::kMaxBins] = {};
    const std::uint8_t* sym = &qz.symbols[std::size_t{lk} * lay.tokens * lay.channels];
    for (std::size_t i = 0; i < std::size_t{lay.tokens} * lay.channels; ++i) ++counts[sym[i]];
    std::uint16_t* f = &freq[lay.table_start[lk]];
    cachegen::NormalizeFrequencies(counts, lay.bins[lk], f);
    std::uint16_t* cu = &cum[lay.table_start[lk]];
    std::uint32_t acc = 0;
    for (std::uint32_t s = 0; s < lay.bins[lk]; ++s) {
      cu[s] = static_cast<std::uint16_t>(acc);
      acc += f[s];
    }
  }

  // rANS word streams, group by group.
  std::vector<std::uint16_t> codes, scratch;
  std::vector<std::uint32_t> group_end(lay.groups());
  for (std::uint32_t lk = 0; lk < lay.lk_count(); ++lk) {
    const std::uint8_t* sym = &qz.symbols[std::size_t{lk} * lay.tokens * lay.channels];
    for (std::uint32_t g = 0; g < lay.groups_per_lk; ++g) {
      EncodeGroup(lay, sym, &freq[lay.table_start[lk]], &cum[lay.table_start[lk]], g, scratch,
                  codes);
      group_end[lk * lay.groups_per_lk + g] = static_cast<std::uint32_t>(codes.size());
    }
  }

  const ContainerWriter::SectionPlan plans[] = {
      {SectionKind::kParams, kParamsFixedBytes + lay.bins.size()},
      {SectionKind::kTables, freq.size() * 2},
      {SectionKind::kScales, lay.scale_bytes()},
      {SectionKind::kIndex, group_end.size() * 4},
      {SectionKind::kCodes, codes.size() * 2},
  };
  KVD_ASSIGN_OR_RETURN(ContainerWriter w, ContainerWriter::Create(CodecId::kCacheGen, tensor.dtype,
                                                                  tensor.shape, plans));
  std::byte* p = w.section(0).data();
  cachegen::WriteParamsFixed(p, lay.scale_dtype, lay.cpl);
  std::memcpy(p + kParamsFixedBytes, lay.bins.data(), lay.bins.size());
  std::byte* t = w.section(1).data();
  for (std::size_t i = 0; i < freq.size(); ++i) StoreLE<std::uint16_t>(t + i * 2, freq[i]);
  std::byte* s = w.section(2).data();
  for (std::size_t i = 0; i < qz.scales.size(); ++i) {
    if (lay.scale_dtype == cachegen::kScaleFp16) {
      StoreLE<std::uint16_t>(s + i * 4, FloatToHalfBits(qz.scales[i].lo));
      StoreLE<std::uint16_t>(s + i * 4 + 2, FloatToHalfBits(qz.scales[i].step));
    } else {
      StoreLE<float>(s + i * 8, qz.scales[i].lo);
      StoreLE<float>(s + i * 8 + 4, qz.scales[i].step);
    }
  }
  std::byte* ix = w.section(3).data();
  for (std::size_t i = 0; i < group_end.size(); ++i)
    StoreLE<std::uint32_t>(ix + i * 4, group_end[i]);
  std::byte* cw = w.section(4).data();
  for (std::size_t i = 0; i < codes.size(); ++i) StoreLE<std::uint16_t>(cw + i * 2, codes[i]);
  return std::move(w).Finish();
}

Result<KvTensor> CacheGenQuantizeDequantize(const KvTensorView& tensor,
                                            const CacheGenOptions& options) {
  KVD_ASSIGN_OR_RETURN(Quantized qz, Quantize(tensor, options));
  KvTensor out = KvTensor::Zeros(tensor.dtype, tensor.shape);
  const Layout& lay = qz.layout;
  for (std::uint64_t i = 0; i < qz.symbols.size(); ++i) {
    const std::uint64_t c = i % lay.channels;
    const std::uint64_t lk = i / (std::uint64_t{lay.tokens} * lay.channels);
    const float v = cachegen::Dequantize(qz.symbols[i], qz.scales[lk * lay.channels + c]);
    StoreElement(tensor.dtype, out.data.data(), i, v);
  }
  return out;
}

Result<double> CacheGenSymbolEntropyBits(const KvTensorView& tensor,
                                         const CacheGenOptions& options) {
  KVD_ASSIGN_OR_RETURN(Quantized qz, Quantize(tensor, options));
  const Layout& lay = qz.layout;
  const std::size_t per_lk = std::size_t{lay.tokens} * lay.channels;
  double bits = 0;
  for (std::uint32_t lk = 0; lk < lay.lk_count(); ++lk) {
    std::uint64_t counts[cachegen::kMaxBins] = {};
    for (std::size_t i = 0; i < per_lk; ++i) ++counts[qz.symbols[lk * per_lk + i]];
    for (std::uint64_t c : counts) {
      if (c != 0) bits -= static_cast<double>(c) * std::log2(static_cast<double>(c) / per_lk);
    }
  }
  return bits;
}

namespace {

Status Bad(const std::string& what) {
  return Corruption("cachegen decode: " + what);
}

// Scale pair i of a scales section in `scale_dtype`. Precondition: the section is long enough.
ChannelScale LoadScale(std::span<const std::byte> scales, std::uint8_t scale_dtype, std::size_t i) {
  if (scale_dtype == cachegen::kScaleFp16) {
    return {HalfBitsToFloat(LoadLE<std::uint16_t>(scales.data() + i * 4)),
            HalfBitsToFloat(LoadLE<std::uint16_t>(scales.data() + i * 4 + 2))};
  }
  return {LoadLE<float>(scales.data() + i * 8), LoadLE<float>(scales.data() + i * 8 + 4)};
}

// The parsed, validated sections of a cachegen container.
struct Parsed {
  Layout layout;
  std::vector<std::uint16_t> freq;  // concatenated tables
  std::vector<ChannelScale> scales;
  std::span<const std::byte> index;
  std::span<const std::byte> codes;
};

Result<const SectionView*> Need(const ContainerView& view, SectionKind kind) {
  const SectionView* s = nullptr;
  for (const SectionView& sec : view.sections) {
    if (sec.kind == static_cast<std::uint32_t>(kind)) {
      if (s != nullptr) {
        return Bad("more than one " + std::string(SectionKindName(sec.kind)) + " section");
      }
      s = &sec;
    } else if (sec.kind > kMaxKnownSectionKind) {
      continue;  // unknown optional section (the container parser rejected required ones)
    } else if (sec.kind != 1 && sec.kind != 3 && sec.kind != 4 && sec.kind != 5 && sec.kind != 8 &&
               (sec.flags & kSectionFlagOptional) == 0) {
      return Bad("unexpected " + std::string(SectionKindName(sec.kind)) + " section");
    }
  }
  if (s == nullptr)
    return Bad("no " + std::string(SectionKindName(static_cast<std::uint32_t>(kind))) + " section");
  return s;
}

}  // namespace

Result<CacheGenSections> ValidateCacheGenSections(const ContainerView& view) {
  if (view.header.codec != CodecId::kCacheGen) {
    return InvalidArgument("cachegen decode: container codec is '" +
                           std::string(CodecName(view.header.codec)) + "'");
  }
  const KvShape& shape = view.header.shape;
  CacheGenSections out;
  KVD_ASSIGN_OR_RETURN(out.params, Need(view, SectionKind::kParams));
  KVD_ASSIGN_OR_RETURN(out.tables, Need(view, SectionKind::kTables));
  KVD_ASSIGN_OR_RETURN(out.scales, Need(view, SectionKind::kScales));
  KVD_ASSIGN_OR_RETURN(out.index, Need(view, SectionKind::kIndex));
  KVD_ASSIGN_OR_RETURN(out.codes, Need(view, SectionKind::kCodes));

  const std::uint64_t want_params = kParamsFixedBytes + std::uint64_t{shape.layers} * 2;
  if (out.params->length != want_params) {
    return Bad("params section is " + std::to_string(out.params->length) + " bytes, expected " +
               std::to_string(want_params));
  }
  const std::byte* p = out.params->bytes.data();
  const auto version = std::to_integer<std::uint8_t>(p[cachegen::kParamsOffVersion]);
  const auto prob_bits = std::to_integer<std::uint8_t>(p[cachegen::kParamsOffProbBits]);
  out.scale_dtype = std::to_integer<std::uint8_t>(p[cachegen::kParamsOffScaleDType]);
  const auto cpl = std::to_integer<std::uint8_t>(p[cachegen::kParamsOffChannelsPerLane]);
  if (version != cachegen::kParamsVersion) {
    return Status(StatusCode::kUnimplemented, "cachegen decode: params version " +
                                                  std::to_string(version) + " is not supported");
  }
  if (prob_bits != cachegen::kProbBits) {
    return Bad("params field 'prob_bits' = " + std::to_string(prob_bits) + ", expected 12");
  }
  if (out.scale_dtype != cachegen::kScaleFp16 && out.scale_dtype != cachegen::kScaleFp32) {
    return Bad("params field 'scale_dtype' = " + std::to_string(out.scale_dtype) + " is invalid");
  }
  if (cpl != cachegen::ChannelsPerLane(shape.tokens)) {
    return Bad("params field 'channels_per_lane' = " + std::to_string(cpl) + ", expected " +
               std::to_string(cachegen::ChannelsPerLane(shape.tokens)));
  }
  if (LoadLE<std::uint32_t>(p + cachegen::kParamsOffReserved) != 0)
    return Bad("params field 'reserved' is not zero");
  out.bins.resize(std::size_t{shape.layers} * 2);
  std::memcpy(out.bins.data(), p + kParamsFixedBytes, out.bins.size());
  for (std::size_t i = 0; i < out.bins.size(); ++i) {
    if (out.bins[i] < cachegen::kMinBins || out.bins[i] > cachegen::kMaxBins) {
      return Bad("params: bins of layer " + std::to_string(i / 2) + (i % 2 ? " V" : " K") + " = " +
                 std::to_string(out.bins[i]) + " is out of range [2, 64]");
    }
  }
  const Layout lay = MakeLayout(shape, out.bins, out.scale_dtype);
  out.table_entries = lay.table_entries();
  if (out.tables->length != lay.table_entries() * 2) {
    return Bad("tables section is " + std::to_string(out.tables->length) + " bytes, expected " +
               std::to_string(lay.table_entries() * 2));
  }
  for (std::uint32_t lk = 0; lk < lay.lk_count(); ++lk) {
    std::uint32_t sum = 0;
    for (std::uint32_t s = 0; s < lay.bins[lk]; ++s) {
      sum += LoadLE<std::uint16_t>(out.tables->bytes.data() + (lay.table_start[lk] + s) * 2);
    }
    if (sum != kProbScale) {
      return Bad("frequency table of layer " + std::to_string(lk / 2) + (lk % 2 ? " V" : " K") +
                 " sums to " + std::to_string(sum) + ", expected 4096");
    }
  }
  if (out.scales->length != lay.scale_bytes()) {
    return Bad("scales section is " + std::to_string(out.scales->length) + " bytes, expected " +
               std::to_string(lay.scale_bytes()));
  }
  const std::size_t n_scales = std::size_t{lay.lk_count()} * lay.channels;
  for (std::size_t i = 0; i < n_scales; ++i) {
    const ChannelScale sc = LoadScale(out.scales->bytes, out.scale_dtype, i);
    if (!cachegen::IsFiniteFloat(sc.lo) || !cachegen::IsFiniteFloat(sc.step) || !(sc.step > 0)) {
      return Bad("scale of channel " + std::to_string(i % lay.channels) + " of layer " +
                 std::to_string(i / lay.channels / 2) + " is not finite and positive");
    }
  }
  if (out.index->length != std::uint64_t{lay.groups()} * 4) {
    return Bad("index section is " + std::to_string(out.index->length) + " bytes, expected " +
               std::to_string(std::uint64_t{lay.groups()} * 4));
  }
  if (out.codes->length % 2 != 0) return Bad("codes section has an odd length");
  std::uint32_t prev = 0;
  for (std::uint32_t g = 0; g < lay.groups(); ++g) {
    const auto end = LoadLE<std::uint32_t>(out.index->bytes.data() + std::size_t{g} * 4);
    if (end < prev || end > out.codes->length / 2) {
      return Bad("index entry " + std::to_string(g) + " = " + std::to_string(end) +
                 " is out of order or past the codes section");
    }
    prev = end;
  }
  if (prev != out.codes->length / 2) {
    return Bad("index ends at word " + std::to_string(prev) + " but the codes section holds " +
               std::to_string(out.codes->length / 2));
  }
  return out;
}

namespace {

Result<Parsed> ParseSections(const ContainerView& view) {
  KVD_ASSIGN_OR_RETURN(CacheGenSections sections, ValidateCacheGenSections(view));
  Parsed out;
  out.layout = MakeLayout(view.header.shape, sections.bins, sections.scale_dtype);
  out.freq.resize(sections.table_entries);
  for (std::size_t i = 0; i < out.freq.size(); ++i) {
    out.freq[i] = LoadLE<std::uint16_t>(sections.tables->bytes.data() + i * 2);
  }
  out.scales.resize(std::size_t{out.layout.lk_count()} * out.layout.channels);
  for (std::size_t i = 0; i < out.scales.size(); ++i) {
    out.scales[i] = LoadScale(sections.scales->bytes, sections.scale_dtype, i);
  }
  out.index = sections.index->bytes;
  out.codes = sections.codes->bytes;
  return out;
}

// Decodes one group into `out` (original dtype); kCorruption when the stream is inconsistent.
Status DecodeGroup(const Parsed& pz, std::uint32_t lk, std::uint32_t group,
                   const std::uint8_t* slot_to_symbol, DType dtype, std::byte* out) {
  const Layout& lay = pz.layout;
  const std::uint32_t g = lk * lay.groups_per_lk + group;
  const std::uint32_t begin = g == 0 ? 0 : LoadLE<std::uint32_t>(pz.index.data() + (g - 1) * 4);
  const std::uint32_t end = LoadLE<std::uint32_t>(pz.index.data() + g * 4);
  auto word = [&](std::uint32_t i) { return LoadLE<std::uint16_t>(pz.codes.data() + i * 2); };
  const std::uint16_t* freq = &pz.freq[lay.table_start[lk]];
  std::uint16_t cum[cachegen::kMaxBins];
  for (std::uint32_t s = 0, acc = 0; s < lay.bins[lk]; acc += freq[s], ++s) cum[s] = acc;
  const ChannelScale* sc = &pz.scales[std::size_t{lk} * lay.channels];

  std::uint32_t state[kLanes] = {};
  std::uint32_t pos = begin;
  for (std::uint32_t lane = 0; lane < kLanes; ++lane) {
    if (cachegen::LaneChannel(group, 0, lane, lay.cpl) >= lay.channels) break;
    if (end - pos < 2) return Bad("group " + std::to_string(g) + " is too short for its states");
    state[lane] = word(pos) | (static_cast<std::uint32_t>(word(pos + 1)) << 16);
    pos += 2;
    if (state[lane] < kStateLow) return Bad("group " + std::to_string(g) + " has an invalid state");
  }
  const std::uint64_t lk_base = std::uint64_t{lk} * lay.tokens * lay.channels;
  for (std::uint32_t k = 0; k < lay.cpl; ++k) {
    for (std::uint32_t t = 0; t < lay.tokens; ++t) {
      for (std::uint32_t lane = 0; lane < kLanes; ++lane) {
        const std::uint32_t c = cachegen::LaneChannel(group, k, lane, lay.cpl);
        if (c >= lay.channels) break;
        const std::uint32_t slot = cachegen::RansSlot(state[lane]);
        const std::uint32_t q = slot_to_symbol[slot];
        state[lane] = cachegen::RansDecodeAdvance(state[lane], slot, freq[q], cum[q]);
        if (state[lane] < kStateLow) {
          if (pos >= end) return Bad("group " + std::to_string(g) + " ends early");
          state[lane] = (state[lane] << 16) | word(pos++);
        }
        StoreElement(dtype, out, lk_base + std::uint64_t{t} * lay.channels + c,
                     cachegen::Dequantize(q, sc[c]));
      }
    }
  }
  if (pos != end) return Bad("group " + std::to_string(g) + " has trailing words");
  for (std::uint32_t lane = 0; lane < kLanes; ++lane) {
    if (cachegen::LaneChannel(group, 0, lane, lay.cpl) >= lay.channels) break;
    if (state[lane] != kStateLow) {
      return Bad("group " + std::to_string(g) + " does not end in the initial state");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<KvTensor> DecodeCacheGen(const ContainerView& view) {
  KVD_ASSIGN_OR_RETURN(Parsed pz, ParseSections(view));
  const Layout& lay = pz.layout;
  KvTensor out = KvTensor::Zeros(view.header.dtype, view.header.shape);
  std::uint8_t slot_to_symbol[kProbScale];
  for (std::uint32_t lk = 0; lk < lay.lk_count(); ++lk) {
    const std::uint16_t* freq = &pz.freq[lay.table_start[lk]];
    for (std::uint32_t s = 0, slot = 0; s < lay.bins[lk]; ++s) {
      for (std::uint32_t i = 0; i < freq[s]; ++i)
        slot_to_symbol[slot++] = static_cast<std::uint8_t>(s);
    }
    for (std::uint32_t g = 0; g < lay.groups_per_lk; ++g) {
      KVD_RETURN_IF_ERROR(DecodeGroup(pz, lk, g, slot_to_symbol, out.dtype, out.data.data()));
    }
  }
  return out;
}

Result<CacheGenSizes> CacheGenSectionSizes(const ContainerView& view) {
  KVD_ASSIGN_OR_RETURN(Parsed pz, ParseSections(view));
  CacheGenSizes sizes;
  sizes.params = view.Find(SectionKind::kParams)->length;
  sizes.tables = view.Find(SectionKind::kTables)->length;
  sizes.scales = view.Find(SectionKind::kScales)->length;
  sizes.index = view.Find(SectionKind::kIndex)->length;
  sizes.codes = view.Find(SectionKind::kCodes)->length;
  sizes.total = view.header.total_bytes;
  return sizes;
}

}  // namespace kvdepot
