#include "kvdepot/codec/kv_quality.h"

#include <cmath>
#include <cstring>
#include <random>
#include <utility>

namespace kvdepot {
namespace {

std::uint64_t ElementIndex(const KvShape& s, std::uint32_t layer, std::uint32_t kv,
                           std::uint32_t token, std::uint32_t head, std::uint32_t dim) {
  return (((std::uint64_t{layer} * 2 + kv) * s.tokens + token) * s.kv_heads + head) * s.head_dim +
         dim;
}

// Bytes of one token row (all heads of one layer's K or V).
std::size_t RowBytes(const KvTensorView& t) {
  return std::size_t{t.shape.kv_heads} * t.shape.head_dim * DTypeSize(t.dtype);
}

AttentionOptions ProbeAttention(const KvShape& s) {
  AttentionOptions o;
  o.q_heads = s.kv_heads;
  return o;
}

}  // namespace

std::vector<std::vector<float>> ProbeQueries(const KvTensorView& t,
                                             const KvQualityOptions& options) {
  const KvShape& s = t.shape;
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<double> noise(0, 1);
  std::vector<std::vector<float>> out(s.layers);
  for (std::uint32_t l = 0; l < s.layers; ++l) {
    std::vector<double> kstd(s.kv_heads, 0);
    for (std::uint32_t h = 0; h < s.kv_heads; ++h) {
      for (std::uint32_t tok = 0; tok < s.tokens; ++tok) {
        for (std::uint32_t d = 0; d < s.head_dim; ++d) {
          const double k = ElementAsFloat(t, ElementIndex(s, l, 0, tok, h, d));
          kstd[h] += k * k;
        }
      }
      kstd[h] = std::sqrt(kstd[h] / (static_cast<double>(s.tokens) * s.head_dim));
    }
    for (std::uint32_t q = 0; q < options.queries_per_layer; ++q) {
      for (std::uint32_t h = 0; h < s.kv_heads; ++h) {
        const auto pos = static_cast<std::uint32_t>(rng() % s.tokens);
        for (std::uint32_t d = 0; d < s.head_dim; ++d) {
          const double k = ElementAsFloat(t, ElementIndex(s, l, 0, pos, h, d));
          out[l].push_back(static_cast<float>(k + kstd[h] * noise(rng)));
        }
      }
    }
  }
  return out;
}

Result<KvQualityProbe> KvQualityProbe::Create(const KvTensorView& original,
                                              const KvQualityOptions& options) {
  KVD_RETURN_IF_ERROR(original.Validate().WithContext("kv quality: original"));
  if (options.queries_per_layer == 0) {
    return InvalidArgument("kv quality: queries_per_layer must be at least 1");
  }
  KvQualityProbe p;
  p.original_ = KvTensor{original.dtype, original.shape,
                         std::vector<std::byte>(original.data.begin(), original.data.end())};
  p.queries_per_layer_ = options.queries_per_layer;
  p.queries_ = ProbeQueries(original, options);
  const KvShape& s = original.shape;
  const std::size_t per_query = std::size_t{s.kv_heads} * s.head_dim;
  for (std::uint32_t l = 0; l < s.layers; ++l) {
    AttentionResult all;
    for (std::uint32_t q = 0; q < options.queries_per_layer; ++q) {
      KVD_ASSIGN_OR_RETURN(
          AttentionResult r,
          DecodeAttention(original, l,
                          std::span<const float>(p.queries_[l]).subspan(q * per_query, per_query),
                          ProbeAttention(s)));
      all.out.insert(all.out.end(), r.out.begin(), r.out.end());
      all.top1.insert(all.top1.end(), r.top1.begin(), r.top1.end());
    }
    p.exact_.push_back(std::move(all));
  }
  return p;
}

Result<KvQuality> KvQualityProbe::Measure(const KvTensorView& restored) const {
  KVD_RETURN_IF_ERROR(restored.Validate().WithContext("kv quality: restored"));
  const KvShape& s = original_.shape;
  if (!(restored.shape == s)) {
    return InvalidArgument("kv quality: restored shape " + restored.shape.ToString() +
                           " differs from the original's " + s.ToString());
  }
  KvQuality quality;
  const KvTensorView orig = original_.view();
  double num[2] = {0, 0}, den[2] = {0, 0};
  const std::uint64_t plane = std::uint64_t{s.tokens} * s.kv_heads * s.head_dim;
  for (std::uint64_t e = 0; e < s.elements(); ++e) {
    const int kv = static_cast<int>((e / plane) % 2);
    const double a = ElementAsFloat(orig, e), b = ElementAsFloat(restored, e);
    num[kv] += (a - b) * (a - b);
    den[kv] += a * a;
  }
  quality.k_rel_l2 = den[0] > 0 ? std::sqrt(num[0] / den[0]) : std::sqrt(num[0]);
  quality.v_rel_l2 = den[1] > 0 ? std::sqrt(num[1] / den[1]) : std::sqrt(num[1]);

  const std::size_t per_query = std::size_t{s.kv_heads} * s.head_dim;
  double an = 0, ad = 0, hits = 0, total = 0;
  for (std::uint32_t l = 0; l < s.layers; ++l) {
    for (std::uint32_t q = 0; q < queries_per_layer_; ++q) {
      KVD_ASSIGN_OR_RETURN(
          AttentionResult r,
          DecodeAttention(restored, l,
                          std::span<const float>(queries_[l]).subspan(q * per_query, per_query),
                          ProbeAttention(s)));
      for (std::size_t i = 0; i < r.out.size(); ++i) {
        const double ref = exact_[l].out[q * per_query + i];
        an += (r.out[i] - ref) * (r.out[i] - ref);
        ad += ref * ref;
      }
      for (std::uint32_t h = 0; h < s.kv_heads; ++h) {
        hits += r.top1[h] == exact_[l].top1[q * s.kv_heads + h] ? 1 : 0;
        total += 1;
      }
    }
  }
  quality.attn_rel_l2 = ad > 0 ? std::sqrt(an / ad) : std::sqrt(an);
  quality.top1 = hits / total;
  return quality;
}

KvTensor SliceTokens(const KvTensorView& t, std::uint32_t first, std::uint32_t count) {
  KvTensor out =
      KvTensor::Zeros(t.dtype, {t.shape.layers, count, t.shape.kv_heads, t.shape.head_dim});
  const std::size_t row = RowBytes(t);
  for (std::uint32_t plane = 0; plane < t.shape.layers * 2; ++plane) {
    std::memcpy(out.data.data() + std::size_t{plane} * count * row,
                t.data.data() + (std::size_t{plane} * t.shape.tokens + first) * row, count * row);
  }
  return out;
}

Result<KvTensor> ConcatTokens(std::span<const KvTensor> parts) {
  if (parts.empty()) return InvalidArgument("concat tokens: no parts");
  const KvTensor& head = parts.front();
  std::uint32_t tokens = 0;
  for (const KvTensor& p : parts) {
    if (p.dtype != head.dtype || p.shape.layers != head.shape.layers ||
        p.shape.kv_heads != head.shape.kv_heads || p.shape.head_dim != head.shape.head_dim) {
      return InvalidArgument("concat tokens: part " + p.shape.ToString() + " " +
                             std::string(DTypeName(p.dtype)) + " does not match " +
                             head.shape.ToString() + " " + std::string(DTypeName(head.dtype)));
    }
    tokens += p.shape.tokens;
  }
  KvTensor out = KvTensor::Zeros(
      head.dtype, {head.shape.layers, tokens, head.shape.kv_heads, head.shape.head_dim});
  const std::size_t row = RowBytes(head.view());
  for (std::uint32_t plane = 0; plane < head.shape.layers * 2; ++plane) {
    std::size_t at = std::size_t{plane} * tokens * row;
    for (const KvTensor& p : parts) {
      const std::size_t n = std::size_t{p.shape.tokens} * row;
      std::memcpy(out.data.data() + at, p.data.data() + std::size_t{plane} * n, n);
      at += n;
    }
  }
  return out;
}

}  // namespace kvdepot
