#include "kvdepot/codec/hack.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/codec/numeric.h"

namespace kvdepot {
namespace {

using hack::Layout;
using hack::Quant;

// Section order in the container.
constexpr SectionKind kSectionOrder[] = {SectionKind::kParams, SectionKind::kScales,
                                         SectionKind::kSums, SectionKind::kCodes,
                                         SectionKind::kTail};

bool IsFinite(float x) {
  return cachegen::IsFiniteFloat(x);
}

std::vector<float> ToFloat(const KvTensorView& t) {
  std::vector<float> out(t.shape.elements());
  const std::byte* p = t.data.data();
  switch (t.dtype) {
    case DType::kFloat16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = HalfBitsToFloat(LoadLE<std::uint16_t>(p + i * 2));
      }
      break;
    case DType::kBFloat16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = Bf16BitsToFloat(LoadLE<std::uint16_t>(p + i * 2));
      }
      break;
    case DType::kFloat32:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = LoadLE<float>(p + i * 4);
      break;
  }
  return out;
}

float LoadElement(DType dtype, const std::byte* base, std::uint64_t i) {
  switch (dtype) {
    case DType::kFloat16: return HalfBitsToFloat(LoadLE<std::uint16_t>(base + i * 2));
    case DType::kBFloat16: return Bf16BitsToFloat(LoadLE<std::uint16_t>(base + i * 2));
    case DType::kFloat32: return LoadLE<float>(base + i * 4);
  }
  return 0.0f;
}

void StoreElement(DType dtype, std::byte* base, std::uint64_t i, float v) {
  switch (dtype) {
    case DType::kFloat16: StoreLE<std::uint16_t>(base + i * 2, FloatToHalfBits(v)); break;
    case DType::kBFloat16: StoreLE<std::uint16_t>(base + i * 2, FloatToBf16Bits(v)); break;
    case DType::kFloat32: StoreLE<float>(base + i * 4, v); break;
  }
}

// Calls f(layer, kv, head, block) for every group, in storage order.
template <typename F>
void ForEachGroup(const Layout& lay, F f) {
  for (std::uint32_t l = 0; l < lay.layers; ++l) {
    for (std::uint32_t kv = 0; kv < 2; ++kv) {
      for (std::uint32_t h = 0; h < lay.heads; ++h) {
        for (std::uint32_t b = 0; b < lay.blocks(); ++b) f(l, kv, h, b);
      }
    }
  }
}

// Section byte lengths, in kSectionOrder.
struct SectionLengths {
  std::uint64_t bytes[5];
};

SectionLengths Lengths(const Layout& lay, DType dtype) {
  const HackSectionBytes b = HackSectionBytesFor(lay, dtype);
  return {{hack::kParamsBytes, b.scales, b.sums, b.codes, b.tail}};
}

}  // namespace

std::string_view HackOrientationName(HackOrientation orientation) {
  switch (orientation) {
    case HackOrientation::kChannel: return "channel";
    case HackOrientation::kToken: return "token";
  }
  return "invalid";
}

Result<HackOrientation> ParseHackOrientation(std::string_view name) {
  if (name == "channel") return HackOrientation::kChannel;
  if (name == "token") return HackOrientation::kToken;
  return InvalidArgument("unknown hack-int2 orientation '" + std::string(name) +
                         "' (expected channel or token)");
}

std::string_view HackRoundingName(HackRounding rounding) {
  switch (rounding) {
    case HackRounding::kNearest: return "nearest";
    case HackRounding::kStochastic: return "stochastic";
  }
  return "invalid";
}

Result<HackRounding> ParseHackRounding(std::string_view name) {
  if (name == "nearest") return HackRounding::kNearest;
  if (name == "stochastic") return HackRounding::kStochastic;
  return InvalidArgument("unknown hack-int2 rounding '" + std::string(name) +
                         "' (expected nearest or stochastic)");
}

Status ValidateHackOptions(const HackOptions& o) {
  if (!hack::IsValidPartition(o.partition)) {
    return InvalidArgument("hack-int2: partition = " + std::to_string(o.partition) +
                           " is not supported (32, 64 or 128)");
  }
  const auto orientation = static_cast<std::uint8_t>(o.orientation);
  if (orientation != hack::kOrientChannel && orientation != hack::kOrientToken) {
    return InvalidArgument("hack-int2: orientation = " + std::to_string(orientation) +
                           " is invalid (0 channel, 1 token)");
  }
  const auto rounding = static_cast<std::uint8_t>(o.rounding);
  if (rounding != hack::kRoundNearest && rounding != hack::kRoundStochastic) {
    return InvalidArgument("hack-int2: rounding = " + std::to_string(rounding) +
                           " is invalid (0 nearest, 1 stochastic)");
  }
  return Status::Ok();
}

HackUnquantized HackUnquantizedTokens(const KvShape& shape, const HackOptions& options) {
  const Layout lay = HackLayoutFor(shape, options);
  return {lay.sinks, lay.tokens - lay.tail_begin()};
}

hack::Layout HackLayoutFor(const KvShape& shape, const HackOptions& options) {
  Layout lay;
  lay.layers = shape.layers;
  lay.tokens = shape.tokens;
  lay.heads = shape.kv_heads;
  lay.dim = shape.head_dim;
  lay.partition = options.partition;
  lay.sinks = std::min(options.sinks, shape.tokens);
  lay.orientation = static_cast<std::uint8_t>(options.orientation);
  return lay;
}

HackSectionBytes HackSectionBytesFor(const hack::Layout& layout, DType dtype) {
  HackSectionBytes b;
  b.codes = layout.codes() / hack::kCodesPerByte;
  b.scales = layout.partitions() * hack::kPartitionEntryBytes;
  b.sums = layout.sums() * hack::SumBytes(layout.partition);
  b.tail = layout.unquantized_elements() * DTypeSize(dtype);
  return b;
}

Result<HackChunk> QuantizeHack(const KvTensorView& tensor, const HackOptions& options) {
  KVD_RETURN_IF_ERROR(ValidateHackOptions(options));
  KVD_RETURN_IF_ERROR(tensor.Validate().WithContext("hack-int2 encode"));
  const KvShape& shape = tensor.shape;
  const std::vector<float> x = ToFloat(tensor);
  for (std::uint64_t i = 0; i < x.size(); ++i) {
    if (!IsFinite(x[i])) {
      return InvalidArgument("hack-int2: non-finite value at " + ElementPosition(shape, i) +
                             " (hack-int2 cannot represent NaN/Inf; use the raw codec)");
    }
    if (std::fabs(x[i]) > hack::kMaxAbsValue) {
      return InvalidArgument("hack-int2: value " + std::to_string(x[i]) + " at " +
                             ElementPosition(shape, i) +
                             " is beyond the fp16 range of its scales (|x| <= 65504); use the "
                             "raw codec");
    }
  }

  HackChunk c;
  c.dtype = tensor.dtype;
  c.shape = shape;
  c.options = options;
  if (c.options.sinks > shape.tokens) c.options.sinks = shape.tokens;
  if (c.options.rounding == HackRounding::kNearest) c.options.seed = 0;
  c.layout = HackLayoutFor(shape, c.options);
  const Layout& lay = c.layout;
  const bool stochastic = c.options.rounding == HackRounding::kStochastic;
  const std::uint64_t seed = c.options.seed;
  c.codes.assign(lay.codes(), 0);
  c.quants.resize(lay.partitions());
  c.sums.assign(lay.sums(), 0);

  ForEachGroup(lay, [&](std::uint32_t l, std::uint32_t kv, std::uint32_t h, std::uint32_t b) {
    const std::uint32_t token0 = lay.sinks + b * lay.partition;
    std::uint8_t* codes = &c.codes[lay.code_base(lay.group(l, kv, h, b))];
    Quant* quants = &c.quants[lay.partition_base(l, kv, h, b)];
    std::uint16_t* sums = &c.sums[lay.sum_base(l, kv, h, b)];
    for (std::uint32_t p = 0; p < lay.partitions_per_group(kv); ++p) {
      const std::uint32_t n = lay.partition_size(kv, p);
      float mn = 0, mx = 0;
      for (std::uint32_t i = 0; i < n; ++i) {
        std::uint32_t t, d;
        lay.partition_element(kv, p, i, &t, &d);
        const float v = x[lay.element_index(l, kv, token0 + t, h, d)];
        if (i == 0 || v < mn) mn = v;
        if (i == 0 || v > mx) mx = v;
      }
      const Quant q = hack::PartitionQuant(mn, mx);
      quants[p] = q;
      for (std::uint32_t i = 0; i < n; ++i) {
        std::uint32_t t, d;
        lay.partition_element(kv, p, i, &t, &d);
        const std::uint64_t e = lay.element_index(l, kv, token0 + t, h, d);
        const std::uint32_t code =
            stochastic ? hack::QuantizeStochastic(x[e], q, hack::StochasticUniform(seed, e))
                       : hack::QuantizeNearest(x[e], q);
        codes[lay.code_offset(kv, t, d)] = static_cast<std::uint8_t>(code);
        sums[lay.sum_offset(kv, t, d)] =
            static_cast<std::uint16_t>(sums[lay.sum_offset(kv, t, d)] + code);
      }
    }
  });

  c.unquantized.resize(lay.unquantized_elements());
  for (std::uint32_t l = 0; l < lay.layers; ++l) {
    for (std::uint32_t kv = 0; kv < 2; ++kv) {
      for (std::uint32_t u = 0; u < lay.unquantized_tokens(); ++u) {
        for (std::uint32_t h = 0; h < lay.heads; ++h) {
          for (std::uint32_t d = 0; d < lay.dim; ++d) {
            c.unquantized[lay.unquantized_offset(l, kv, u, h, d)] =
                x[lay.element_index(l, kv, lay.unquantized_token(u), h, d)];
          }
        }
      }
    }
  }
  return c;
}

Result<std::vector<std::byte>> EncodeHack(const KvTensorView& tensor, const HackOptions& options) {
  KVD_ASSIGN_OR_RETURN(HackChunk c, QuantizeHack(tensor, options));
  const Layout& lay = c.layout;
  const SectionLengths len = Lengths(lay, c.dtype);
  ContainerWriter::SectionPlan plans[5];
  for (std::size_t i = 0; i < 5; ++i) plans[i] = {kSectionOrder[i], len.bytes[i]};
  KVD_ASSIGN_OR_RETURN(ContainerWriter w,
                       ContainerWriter::Create(CodecId::kHackInt2, c.dtype, c.shape, plans));

  std::byte* p = w.section(0).data();
  hack::WriteParams(p, lay.partition, lay.orientation,
                    static_cast<std::uint8_t>(c.options.rounding), lay.sinks, c.options.seed);

  std::byte* s = w.section(1).data();
  for (std::size_t i = 0; i < c.quants.size(); ++i) {
    StoreLE<std::uint16_t>(s + i * 4, FloatToHalfBits(c.quants[i].scale));
    StoreLE<std::uint16_t>(s + i * 4 + 2, FloatToHalfBits(c.quants[i].min));
  }
  std::byte* sums = w.section(2).data();
  const std::uint32_t sum_bytes = hack::SumBytes(lay.partition);
  for (std::size_t i = 0; i < c.sums.size(); ++i) {
    if (sum_bytes == 1) {
      sums[i] = static_cast<std::byte>(c.sums[i]);
    } else {
      StoreLE<std::uint16_t>(sums + i * 2, c.sums[i]);
    }
  }
  std::byte* codes = w.section(3).data();
  for (std::size_t i = 0; i < c.codes.size(); ++i) {
    codes[i / 4] |= static_cast<std::byte>(c.codes[i] << (2 * (i % 4)));
  }
  std::byte* tail = w.section(4).data();
  for (std::size_t i = 0; i < c.unquantized.size(); ++i) {
    StoreElement(c.dtype, tail, i, c.unquantized[i]);
  }
  return std::move(w).Finish();
}

namespace {

Status Bad(const std::string& what) {
  return Corruption("hack-int2 decode: " + what);
}

// The one section of `kind`; other known kinds not flagged optional are corruption.
Result<const SectionView*> Need(const ContainerView& view, SectionKind kind) {
  const SectionView* found = nullptr;
  for (const SectionView& sec : view.sections) {
    if (sec.kind == static_cast<std::uint32_t>(kind)) {
      if (found != nullptr) {
        return Bad("more than one " + std::string(SectionKindName(sec.kind)) + " section");
      }
      found = &sec;
      continue;
    }
    bool expected = false;
    for (SectionKind k : kSectionOrder) expected |= sec.kind == static_cast<std::uint32_t>(k);
    if (!expected && (sec.flags & kSectionFlagOptional) == 0) {
      return Bad("unexpected " + std::string(SectionKindName(sec.kind)) + " section");
    }
  }
  if (found == nullptr) {
    return Bad("no " + std::string(SectionKindName(static_cast<std::uint32_t>(kind))) + " section");
  }
  return found;
}

struct Sections {
  const SectionView* s[5];
};

// Finds the sections and checks params and every section size; fills options and layout.
Result<Sections> CheckStructure(const ContainerView& view, HackStructure& c) {
  if (view.header.codec != CodecId::kHackInt2) {
    return InvalidArgument("hack-int2 decode: container codec is '" +
                           std::string(CodecName(view.header.codec)) + "'");
  }
  Sections sec;
  for (std::size_t i = 0; i < 5; ++i) {
    KVD_ASSIGN_OR_RETURN(sec.s[i], Need(view, kSectionOrder[i]));
  }
  const SectionView& params = *sec.s[0];
  if (params.length != hack::kParamsBytes) {
    return Bad("params section is " + std::to_string(params.length) + " bytes, expected " +
               std::to_string(hack::kParamsBytes));
  }
  const std::byte* p = params.bytes.data();
  const auto version = std::to_integer<std::uint8_t>(p[hack::kParamsOffVersion]);
  if (version != hack::kParamsVersion) {
    return Status(StatusCode::kUnimplemented, "hack-int2 decode: params version " +
                                                  std::to_string(version) + " is not supported");
  }
  const auto partition = std::to_integer<std::uint8_t>(p[hack::kParamsOffPartition]);
  if (!hack::IsValidPartition(partition)) {
    return Bad("params field 'partition' = " + std::to_string(partition) +
               " is invalid (32, 64 or 128)");
  }
  const auto orientation = std::to_integer<std::uint8_t>(p[hack::kParamsOffOrientation]);
  if (orientation != hack::kOrientChannel && orientation != hack::kOrientToken) {
    return Bad("params field 'orientation' = " + std::to_string(orientation) +
               " is invalid (0 channel, 1 token)");
  }
  const auto rounding = std::to_integer<std::uint8_t>(p[hack::kParamsOffRounding]);
  if (rounding != hack::kRoundNearest && rounding != hack::kRoundStochastic) {
    return Bad("params field 'rounding' = " + std::to_string(rounding) +
               " is invalid (0 nearest, 1 stochastic)");
  }
  const auto sum_bytes = std::to_integer<std::uint8_t>(p[hack::kParamsOffSumBytes]);
  if (sum_bytes != hack::SumBytes(partition)) {
    return Bad("params field 'sum_bytes' = " + std::to_string(sum_bytes) + ", expected " +
               std::to_string(hack::SumBytes(partition)) + " for partition " +
               std::to_string(partition));
  }
  for (std::size_t i = 0; i < 3; ++i) {
    if (p[hack::kParamsOffReserved8 + i] != std::byte{0})
      return Bad("params field 'reserved8' is not zero");
  }
  if (LoadLE<std::uint32_t>(p + hack::kParamsOffReserved32) != 0) {
    return Bad("params field 'reserved32' is not zero");
  }
  const auto sinks = LoadLE<std::uint32_t>(p + hack::kParamsOffSinks);
  const KvShape& shape = view.header.shape;
  if (sinks > shape.tokens) {
    return Bad("params field 'sinks' = " + std::to_string(sinks) +
               " exceeds tokens = " + std::to_string(shape.tokens));
  }
  const auto seed = LoadLE<std::uint64_t>(p + hack::kParamsOffSeed);
  if (rounding == hack::kRoundNearest && seed != 0) {
    return Bad("params field 'seed' is not zero with round-to-nearest");
  }
  c.dtype = view.header.dtype;
  c.shape = shape;
  c.options.partition = partition;
  c.options.orientation = static_cast<HackOrientation>(orientation);
  c.options.rounding = static_cast<HackRounding>(rounding);
  c.options.seed = seed;
  c.options.sinks = sinks;
  c.layout = HackLayoutFor(shape, c.options);
  const SectionLengths want = Lengths(c.layout, c.dtype);
  for (std::size_t i = 1; i < 5; ++i) {
    if (sec.s[i]->length != want.bytes[i]) {
      return Bad(std::string(SectionKindName(sec.s[i]->kind)) + " section is " +
                 std::to_string(sec.s[i]->length) + " bytes, expected " +
                 std::to_string(want.bytes[i]));
    }
  }
  return sec;
}

// "partition 5 of layer 0 V head 1 block 2"
std::string PartitionLabel(std::uint32_t p, std::uint32_t l, std::uint32_t kv, std::uint32_t h,
                           std::uint32_t b) {
  return "partition " + std::to_string(p) + " of layer " + std::to_string(l) +
         (kv == 0 ? " K" : " V") + " head " + std::to_string(h) + " block " + std::to_string(b);
}

}  // namespace

namespace {

Status BadScale(std::size_t i) {
  return Bad("scales entry " + std::to_string(i) +
             " is invalid (scale must be finite and non-negative, min finite, "
             "min + 3 * scale < 65520)");
}

// LoadQuants' checks without building the quants. Entries whose scale and |min| are below 8192
// (fp16 exponent field <= 27: min + 3 * scale < 32768) pass on their bits alone.
Status CheckScales(const HackStructure& st) {
  const std::byte* scales = st.scales.bytes.data();
  const std::size_t n = st.layout.partitions();
  for (std::size_t i = 0; i < n; ++i) {
    const auto scale_bits = LoadLE<std::uint16_t>(scales + i * 4);
    const auto min_bits = LoadLE<std::uint16_t>(scales + i * 4 + 2);
    if (scale_bits < (28u << 10) && (min_bits & 0x7fffu) < (28u << 10)) continue;
    const float scale = HalfBitsToFloat(scale_bits), min = HalfBitsToFloat(min_bits);
    if ((scale_bits & 0x8000u) != 0 || !IsFinite(scale) || !IsFinite(min) ||
        !(min + 3.0f * scale < hack::kFp16Overflow)) {
      return BadScale(i);
    }
  }
  return Status::Ok();
}

// The scales section as quants, each checked.
Result<std::vector<Quant>> LoadQuants(const HackStructure& st) {
  const std::byte* scales = st.scales.bytes.data();
  std::vector<Quant> quants(st.layout.partitions());
  for (std::size_t i = 0; i < quants.size(); ++i) {
    const auto scale_bits = LoadLE<std::uint16_t>(scales + i * 4);
    Quant& q = quants[i];
    q.scale = HalfBitsToFloat(scale_bits);
    q.min = HalfBitsToFloat(LoadLE<std::uint16_t>(scales + i * 4 + 2));
    if ((scale_bits & 0x8000u) != 0 || !IsFinite(q.scale) || !IsFinite(q.min) ||
        !(q.min + 3.0f * q.scale < hack::kFp16Overflow)) {
      return BadScale(i);
    }
  }
  return quants;
}

// The tail section's values, each checked.
Result<std::vector<float>> LoadTail(const HackStructure& st) {
  const Layout& lay = st.layout;
  const std::byte* tail = st.tail.bytes.data();
  std::vector<float> values(lay.unquantized_elements());
  for (std::uint32_t l = 0; l < lay.layers; ++l) {
    for (std::uint32_t kv = 0; kv < 2; ++kv) {
      for (std::uint32_t u = 0; u < lay.unquantized_tokens(); ++u) {
        for (std::uint32_t h = 0; h < lay.heads; ++h) {
          for (std::uint32_t d = 0; d < lay.dim; ++d) {
            const std::uint64_t i = lay.unquantized_offset(l, kv, u, h, d);
            const float v = LoadElement(st.dtype, tail, i);
            if (!IsFinite(v) || std::fabs(v) > hack::kMaxAbsValue) {
              return Bad("tail value at " + ElementPosition(l, kv, lay.unquantized_token(u), h, d) +
                         " is not finite or beyond the fp16 range");
            }
            values[i] = v;
          }
        }
      }
    }
  }
  return values;
}

Result<HackStructure> Structure(const ContainerView& view) {
  HackStructure st;
  KVD_ASSIGN_OR_RETURN(const Sections sec, CheckStructure(view, st));
  st.scales = *sec.s[1];
  st.sums = *sec.s[2];
  st.codes = *sec.s[3];
  st.tail = *sec.s[4];
  return st;
}

}  // namespace

Result<HackStructure> InspectHackExceptScales(const ContainerView& view) {
  KVD_ASSIGN_OR_RETURN(HackStructure st, Structure(view));
  KVD_RETURN_IF_ERROR(LoadTail(st).status());
  return st;
}

Result<HackStructure> InspectHack(const ContainerView& view) {
  KVD_ASSIGN_OR_RETURN(HackStructure st, Structure(view));
  KVD_RETURN_IF_ERROR(CheckScales(st));
  KVD_RETURN_IF_ERROR(LoadTail(st).status());
  return st;
}

Status HackScalesEntryError(std::size_t entry) {
  return BadScale(entry);
}

Result<HackChunk> UnpackHack(const ContainerView& view) {
  KVD_ASSIGN_OR_RETURN(const HackStructure st, Structure(view));
  HackChunk c;
  c.dtype = st.dtype;
  c.shape = st.shape;
  c.options = st.options;
  c.layout = st.layout;
  const Layout& lay = c.layout;
  const std::byte* sums = st.sums.bytes.data();
  const std::byte* codes = st.codes.bytes.data();
  KVD_ASSIGN_OR_RETURN(c.quants, LoadQuants(st));
  c.codes.resize(lay.codes());
  for (std::size_t i = 0; i < c.codes.size(); ++i) {
    c.codes[i] = static_cast<std::uint8_t>(
        (std::to_integer<std::uint32_t>(codes[i / 4]) >> (2 * (i % 4))) & 3u);
  }
  const std::uint32_t sum_bytes = hack::SumBytes(lay.partition);
  c.sums.resize(lay.sums());
  for (std::size_t i = 0; i < c.sums.size(); ++i) {
    c.sums[i] = sum_bytes == 1 ? std::to_integer<std::uint16_t>(sums[i])
                               : LoadLE<std::uint16_t>(sums + i * 2);
  }

  // Every stored sum must equal its codes' sum; zero-scale partitions hold only code 0.
  std::vector<std::uint32_t> recomputed;
  Status status;
  ForEachGroup(lay, [&](std::uint32_t l, std::uint32_t kv, std::uint32_t h, std::uint32_t b) {
    if (!status.ok()) return;
    const std::uint8_t* gc = &c.codes[lay.code_base(lay.group(l, kv, h, b))];
    const Quant* gq = &c.quants[lay.partition_base(l, kv, h, b)];
    const std::uint16_t* gs = &c.sums[lay.sum_base(l, kv, h, b)];
    recomputed.assign(lay.sums_per_group(kv), 0);
    for (std::uint32_t t = 0; t < lay.partition; ++t) {
      for (std::uint32_t d = 0; d < lay.dim; ++d) {
        const std::uint32_t code = gc[lay.code_offset(kv, t, d)];
        recomputed[lay.sum_offset(kv, t, d)] += code;
        const std::uint32_t p = lay.partition_offset(kv, t, d);
        if (code != 0 && gq[p].scale == 0.0f) {
          status = Bad(PartitionLabel(p, l, kv, h, b) + " has scale 0 but a non-zero code");
          return;
        }
      }
    }
    for (std::uint32_t i = 0; i < lay.sums_per_group(kv); ++i) {
      if (recomputed[i] != gs[i]) {
        status = Bad("sum " + std::to_string(i) + " of layer " + std::to_string(l) +
                     (kv == 0 ? " K" : " V") + " head " + std::to_string(h) + " block " +
                     std::to_string(b) + " is " + std::to_string(gs[i]) + ", its codes sum to " +
                     std::to_string(recomputed[i]));
        return;
      }
    }
  });
  KVD_RETURN_IF_ERROR(status);

  KVD_ASSIGN_OR_RETURN(c.unquantized, LoadTail(st));
  return c;
}

KvTensor DequantizeHack(const HackChunk& c, DType dtype) {
  KvTensor out = KvTensor::Zeros(dtype, c.shape);
  const Layout& lay = c.layout;
  std::byte* base = out.data.data();
  ForEachGroup(lay, [&](std::uint32_t l, std::uint32_t kv, std::uint32_t h, std::uint32_t b) {
    const std::uint32_t token0 = lay.sinks + b * lay.partition;
    const std::uint8_t* gc = &c.codes[lay.code_base(lay.group(l, kv, h, b))];
    const Quant* gq = &c.quants[lay.partition_base(l, kv, h, b)];
    for (std::uint32_t t = 0; t < lay.partition; ++t) {
      for (std::uint32_t d = 0; d < lay.dim; ++d) {
        const float v =
            hack::Dequantize(gc[lay.code_offset(kv, t, d)], gq[lay.partition_offset(kv, t, d)]);
        StoreElement(dtype, base, lay.element_index(l, kv, token0 + t, h, d), v);
      }
    }
  });
  for (std::uint32_t l = 0; l < lay.layers; ++l) {
    for (std::uint32_t kv = 0; kv < 2; ++kv) {
      for (std::uint32_t u = 0; u < lay.unquantized_tokens(); ++u) {
        for (std::uint32_t h = 0; h < lay.heads; ++h) {
          for (std::uint32_t d = 0; d < lay.dim; ++d) {
            StoreElement(dtype, base, lay.element_index(l, kv, lay.unquantized_token(u), h, d),
                         c.unquantized[lay.unquantized_offset(l, kv, u, h, d)]);
          }
        }
      }
    }
  }
  return out;
}

Result<KvTensor> DecodeHack(const ContainerView& view) {
  KVD_ASSIGN_OR_RETURN(HackChunk c, UnpackHack(view));
  return DequantizeHack(c, c.dtype);
}

Result<HackSizes> HackSectionSizes(const ContainerView& view) {
  HackStructure st;
  KVD_ASSIGN_OR_RETURN(Sections sec, CheckStructure(view, st));
  HackSizes sizes;
  sizes.params = sec.s[0]->length;
  sizes.scales = sec.s[1]->length;
  sizes.sums = sec.s[2]->length;
  sizes.codes = sec.s[3]->length;
  sizes.tail = sec.s[4]->length;
  sizes.total = view.header.total_bytes;
  return sizes;
}

}  // namespace kvdepot
