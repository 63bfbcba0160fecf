#include "kvdepot/codec/hack_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "kvdepot/codec/hack_format.h"

namespace kvdepot {
namespace {

using hack::Int8Quant;
using hack::Layout;
using hack::Quant;

bool IsFinite(float x) {
  return cachegen::IsFiniteFloat(x);
}

// Query heads, KV heads, head_dim and the softmax scale of one call.
struct Geometry {
  std::uint32_t q_heads = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t dim = 0;
  std::uint64_t tokens = 0;
  double scale = 0;
};

Result<Geometry> MakeGeometry(const char* fn, std::uint32_t kv_heads, std::uint32_t dim,
                              std::uint64_t tokens, const AttentionOptions& o) {
  if (o.q_heads == 0 || o.q_heads % kv_heads != 0) {
    return InvalidArgument(std::string(fn) + ": q_heads = " + std::to_string(o.q_heads) +
                           " is not a positive multiple of kv_heads = " + std::to_string(kv_heads));
  }
  if (!std::isfinite(o.softmax_scale) || o.softmax_scale < 0) {
    return InvalidArgument(std::string(fn) + ": softmax_scale must be finite and >= 0");
  }
  if (tokens > std::numeric_limits<std::uint32_t>::max()) {
    return InvalidArgument(std::string(fn) + ": the sequence has more than 2^32 - 1 tokens");
  }
  Geometry g;
  g.q_heads = o.q_heads;
  g.kv_heads = kv_heads;
  g.dim = dim;
  g.tokens = tokens;
  g.scale = o.softmax_scale > 0 ? o.softmax_scale : 1.0 / std::sqrt(static_cast<double>(dim));
  return g;
}

Status CheckQueries(const char* fn, std::span<const float> q, std::uint64_t count,
                    const Geometry& g) {
  const std::uint64_t want = count * g.q_heads * g.dim;
  if (q.size() != want) {
    return InvalidArgument(std::string(fn) + ": queries hold " + std::to_string(q.size()) +
                           " values, expected " + std::to_string(want) + " (" +
                           std::to_string(count) + " x " + std::to_string(g.q_heads) + " heads x " +
                           std::to_string(g.dim) + ")");
  }
  for (std::size_t i = 0; i < q.size(); ++i) {
    if (!IsFinite(q[i])) {
      return InvalidArgument(std::string(fn) + ": query value " + std::to_string(i) +
                             " is not finite");
    }
  }
  return Status::Ok();
}

// The homomorphic KV source: a sequence of hack-int2 chunks, one layer.
class HackSource {
 public:
  HackSource(HackSequence seq, std::uint32_t layer, const AttentionOptions& o)
      : seq_(seq), layer_(layer), int8_q_(o.int8_q), int8_p_(o.int8_p) {}

  // s[t] = q · k_t for t in 0 .. last.
  void Scores(std::uint32_t h, const float* q, std::uint64_t last, double* s) const {
    std::uint64_t pos = 0;
    for (const HackChunk& c : seq_) {
      if (pos > last) break;
      const Layout& lay = c.layout;
      for (std::uint32_t u = 0; u < lay.unquantized_tokens(); ++u) {
        const std::uint64_t at = pos + lay.unquantized_token(u);
        if (at > last) continue;
        const float* k = &c.unquantized[lay.unquantized_offset(layer_, 0, u, h, 0)];
        double dot = 0;
        for (std::uint32_t d = 0; d < lay.dim; ++d) dot += static_cast<double>(q[d]) * k[d];
        s[at] = dot;
      }
      for (std::uint32_t b = 0; b < lay.blocks(); ++b) {
        const std::uint64_t at = pos + lay.sinks + std::uint64_t{b} * lay.partition;
        if (at > last) break;
        const auto n =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(lay.partition, last - at + 1));
        ScoreBlock(c, h, b, q, n, s + at);
      }
      pos += lay.tokens;
    }
  }

  // out[d] += Σ_t p[t] v_t[d] for t in 0 .. last.
  void Accumulate(std::uint32_t h, const double* p, std::uint64_t last, double* out) const {
    std::uint64_t pos = 0;
    std::vector<double> pv;
    std::vector<std::uint32_t> qp;
    for (const HackChunk& c : seq_) {
      if (pos > last) break;
      const Layout& lay = c.layout;
      for (std::uint32_t u = 0; u < lay.unquantized_tokens(); ++u) {
        const std::uint64_t at = pos + lay.unquantized_token(u);
        if (at > last) continue;
        const float* v = &c.unquantized[lay.unquantized_offset(layer_, 1, u, h, 0)];
        for (std::uint32_t d = 0; d < lay.dim; ++d) out[d] += p[at] * v[d];
      }
      const std::uint32_t P = lay.partition;
      pv.resize(P);
      qp.resize(P);
      for (std::uint32_t b = 0; b < lay.blocks(); ++b) {
        const std::uint64_t at = pos + lay.sinks + std::uint64_t{b} * P;
        if (at > last) break;
        for (std::uint32_t t = 0; t < P; ++t) pv[t] = at + t <= last ? p[at + t] : 0.0;
        const std::uint8_t* codes = &c.codes[lay.code_base(lay.group(layer_, 1, h, b))];
        const Quant* quants = &c.quants[lay.partition_base(layer_, 1, h, b)];
        const std::uint16_t* sums = &c.sums[lay.sum_base(layer_, 1, h, b)];
        if (int8_p_) {
          float mn = static_cast<float>(pv[0]), mx = mn;
          for (std::uint32_t t = 1; t < P; ++t) {
            mn = std::min(mn, static_cast<float>(pv[t]));
            mx = std::max(mx, static_cast<float>(pv[t]));
          }
          const Int8Quant ip = hack::Int8Params(mn, mx);
          std::uint32_t psum = 0;
          for (std::uint32_t t = 0; t < P; ++t) {
            qp[t] = hack::QuantizeInt8(static_cast<float>(pv[t]), ip);
            psum += qp[t];
          }
          for (std::uint32_t d = 0; d < lay.dim; ++d) {
            std::int64_t dot = 0;
            const std::uint8_t* row = codes + lay.code_offset(1, 0, d);
            for (std::uint32_t t = 0; t < P; ++t) dot += std::int64_t{qp[t]} * row[t];
            out[d] += hack::HomomorphicDot<double>(dot, psum, sums[d], P, ip.scale, ip.min,
                                                   quants[d].scale, quants[d].min);
          }
        } else {
          double psum = 0;
          for (std::uint32_t t = 0; t < P; ++t) psum += pv[t];
          for (std::uint32_t d = 0; d < lay.dim; ++d) {
            double dot = 0;
            const std::uint8_t* row = codes + lay.code_offset(1, 0, d);
            for (std::uint32_t t = 0; t < P; ++t) dot += pv[t] * row[t];
            out[d] += static_cast<double>(quants[d].scale) * dot +
                      static_cast<double>(quants[d].min) * psum;
          }
        }
      }
      pos += lay.tokens;
    }
  }

 private:
  // Scores of the first n tokens of block b of KV head h.
  void ScoreBlock(const HackChunk& c, std::uint32_t h, std::uint32_t b, const float* q,
                  std::uint32_t n, double* s) const {
    const Layout& lay = c.layout;
    const std::uint32_t D = lay.dim, G = lay.dim_groups();
    const std::uint8_t* codes = &c.codes[lay.code_base(lay.group(layer_, 0, h, b))];
    const Quant* quants = &c.quants[lay.partition_base(layer_, 0, h, b)];
    const std::uint16_t* sums = &c.sums[lay.sum_base(layer_, 0, h, b)];
    const bool token = lay.orientation == hack::kOrientToken;

    // The query as the kernels see it: q itself (token orientation) or q with the block's K
    // scales folded in (channel orientation), INT8-quantized per dim group when int8_q.
    std::vector<float> qf(D);
    for (std::uint32_t d = 0; d < D; ++d) qf[d] = token ? q[d] : q[d] * quants[d].scale;
    std::vector<std::uint32_t> qq(D);
    std::vector<Int8Quant> qquant(G);
    std::vector<std::uint32_t> qsum(G, 0);
    if (int8_q_) {
      for (std::uint32_t g = 0; g < G; ++g) {
        const std::uint32_t d0 = g * lay.partition, len = lay.dim_group_size(g);
        float mn = qf[d0], mx = qf[d0];
        for (std::uint32_t d = d0; d < d0 + len; ++d) {
          mn = std::min(mn, qf[d]);
          mx = std::max(mx, qf[d]);
        }
        qquant[g] = hack::Int8Params(mn, mx);
        for (std::uint32_t d = d0; d < d0 + len; ++d) {
          qq[d] = hack::QuantizeInt8(qf[d], qquant[g]);
          qsum[g] += qq[d];
        }
      }
    }
    double mins_term = 0;  // channel orientation: Σ_d q_d * min_d
    if (!token) {
      for (std::uint32_t d = 0; d < D; ++d) {
        mins_term += static_cast<double>(q[d]) * static_cast<double>(quants[d].min);
      }
    }
    for (std::uint32_t t = 0; t < n; ++t) {
      const std::uint8_t* row = codes + lay.code_offset(0, t, 0);
      double score = mins_term;
      for (std::uint32_t g = 0; g < G; ++g) {
        const std::uint32_t d0 = g * lay.partition, len = lay.dim_group_size(g);
        const std::uint32_t k_sum = sums[t * G + g];
        if (int8_q_) {
          std::int64_t dot = 0;
          for (std::uint32_t d = d0; d < d0 + len; ++d) dot += std::int64_t{qq[d]} * row[d];
          if (token) {
            const Quant& k = quants[t * G + g];
            score += hack::HomomorphicDot<double>(dot, qsum[g], k_sum, len, qquant[g].scale,
                                                  qquant[g].min, k.scale, k.min);
          } else {  // K's scales are in Q', its mins in mins_term: K contributes codes only
            score += hack::HomomorphicDot<double>(dot, qsum[g], k_sum, len, qquant[g].scale,
                                                  qquant[g].min, 1.0, 0.0);
          }
        } else {
          double dot = 0, qs = 0;
          for (std::uint32_t d = d0; d < d0 + len; ++d) {
            const double qd =
                token ? static_cast<double>(q[d]) : static_cast<double>(q[d]) * quants[d].scale;
            dot += qd * row[d];
            qs += q[d];
          }
          if (token) {
            const Quant& k = quants[t * G + g];
            score += static_cast<double>(k.scale) * dot + static_cast<double>(k.min) * qs;
          } else {
            score += dot;
          }
        }
      }
      s[t] = score;
    }
  }

  HackSequence seq_;
  std::uint32_t layer_;
  bool int8_q_, int8_p_;
};

// The plain KV source: one layer of a float tensor.
class PlainSource {
 public:
  PlainSource(const KvTensorView& kv, std::uint32_t layer) : shape_(kv.shape) {
    const std::uint64_t per = std::uint64_t{shape_.tokens} * shape_.kv_heads * shape_.head_dim;
    k_.resize(per);
    v_.resize(per);
    for (std::uint64_t i = 0; i < per; ++i) {
      k_[i] = ElementAsFloat(kv, (std::uint64_t{layer} * 2) * per + i);
      v_[i] = ElementAsFloat(kv, (std::uint64_t{layer} * 2 + 1) * per + i);
    }
  }

  void Scores(std::uint32_t h, const float* q, std::uint64_t last, double* s) const {
    for (std::uint64_t t = 0; t <= last; ++t) {
      const float* k = &k_[(t * shape_.kv_heads + h) * shape_.head_dim];
      double dot = 0;
      for (std::uint32_t d = 0; d < shape_.head_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
      s[t] = dot;
    }
  }

  void Accumulate(std::uint32_t h, const double* p, std::uint64_t last, double* out) const {
    for (std::uint64_t t = 0; t <= last; ++t) {
      const float* v = &v_[(t * shape_.kv_heads + h) * shape_.head_dim];
      for (std::uint32_t d = 0; d < shape_.head_dim; ++d) out[d] += p[t] * v[d];
    }
  }

 private:
  KvShape shape_;
  std::vector<float> k_, v_;  // [tokens][kv_heads][head_dim]
};

// Attention of every query head of one query token at position `last` (attending to 0 .. last).
template <typename Source>
void AttendToken(const Source& src, const Geometry& g, const float* query, std::uint64_t last,
                 double* out, std::uint32_t* top1) {
  std::vector<double> s(last + 1), p(last + 1);
  const std::uint32_t group = g.q_heads / g.kv_heads;
  for (std::uint32_t j = 0; j < g.q_heads; ++j) {
    const std::uint32_t h = j / group;
    src.Scores(h, query + std::size_t{j} * g.dim, last, s.data());
    double mx = -std::numeric_limits<double>::infinity();
    std::uint32_t best = 0;
    for (std::uint64_t t = 0; t <= last; ++t) {
      s[t] *= g.scale;
      if (s[t] > mx) {
        mx = s[t];
        best = static_cast<std::uint32_t>(t);
      }
    }
    double z = 0;
    for (std::uint64_t t = 0; t <= last; ++t) z += (p[t] = std::exp(s[t] - mx));
    double* o = out + std::size_t{j} * g.dim;
    std::fill(o, o + g.dim, 0.0);
    src.Accumulate(h, p.data(), last, o);
    for (std::uint32_t d = 0; d < g.dim; ++d) o[d] /= z;
    top1[j] = best;
  }
}

// Runs `count` query tokens at positions first .. first + count - 1.
template <typename Source>
AttentionResult Attend(const Source& src, const Geometry& g, std::span<const float> queries,
                       std::uint64_t count, std::uint64_t first) {
  AttentionResult r;
  r.out.resize(count * g.q_heads * g.dim);
  r.top1.resize(count * g.q_heads);
  for (std::uint64_t i = 0; i < count; ++i) {
    AttendToken(src, g, queries.data() + i * g.q_heads * g.dim, first + i,
                r.out.data() + i * g.q_heads * g.dim, r.top1.data() + i * g.q_heads);
  }
  return r;
}

void Append(AttentionResult& all, const AttentionResult& one) {
  all.out.insert(all.out.end(), one.out.begin(), one.out.end());
  all.top1.insert(all.top1.end(), one.top1.begin(), one.top1.end());
}

// Validates a sequence; returns its geometry.
Result<Geometry> CheckSequence(const char* fn, HackSequence seq, std::uint32_t layer,
                               const AttentionOptions& o) {
  if (seq.empty()) return InvalidArgument(std::string(fn) + ": the sequence has no chunk");
  const KvShape& first = seq[0].shape;
  std::uint64_t tokens = 0;
  for (std::size_t i = 0; i < seq.size(); ++i) {
    const HackChunk& c = seq[i];
    const Layout& lay = c.layout;
    const std::string where = std::string(fn) + ": chunk " + std::to_string(i);
    if (c.shape.kv_heads != first.kv_heads || c.shape.head_dim != first.head_dim) {
      return InvalidArgument(where + " has shape " + c.shape.ToString() +
                             ", inconsistent with chunk 0's " + first.ToString());
    }
    if (layer >= c.shape.layers) {
      return InvalidArgument(where + ": layer " + std::to_string(layer) + " is out of range [0, " +
                             std::to_string(c.shape.layers) + ")");
    }
    const bool consistent = lay.layers == c.shape.layers && lay.tokens == c.shape.tokens &&
                            lay.heads == c.shape.kv_heads && lay.dim == c.shape.head_dim &&
                            hack::IsValidPartition(lay.partition) && lay.sinks <= lay.tokens &&
                            c.codes.size() == lay.codes() && c.quants.size() == lay.partitions() &&
                            c.sums.size() == lay.sums() &&
                            c.unquantized.size() == lay.unquantized_elements();
    if (!consistent) {
      return InvalidArgument(where + " is not a chunk made by QuantizeHack or UnpackHack");
    }
    tokens += c.shape.tokens;
  }
  return MakeGeometry(fn, first.kv_heads, first.head_dim, tokens, o);
}

Result<Geometry> CheckTensor(const char* fn, const KvTensorView& kv, std::uint32_t layer,
                             const AttentionOptions& o) {
  KVD_RETURN_IF_ERROR(kv.Validate().WithContext(fn));
  if (layer >= kv.shape.layers) {
    return InvalidArgument(std::string(fn) + ": layer " + std::to_string(layer) +
                           " is out of range [0, " + std::to_string(kv.shape.layers) + ")");
  }
  return MakeGeometry(fn, kv.shape.kv_heads, kv.shape.head_dim, kv.shape.tokens, o);
}

Status CheckPrefill(const char* fn, std::uint64_t count, std::uint32_t first_position,
                    const Geometry& g) {
  if (count == 0 || first_position + count > g.tokens) {
    return InvalidArgument(std::string(fn) + ": " + std::to_string(count) +
                           " queries from position " + std::to_string(first_position) +
                           " do not fit a sequence of " + std::to_string(g.tokens) + " tokens");
  }
  return Status::Ok();
}

std::uint64_t QueryCount(std::span<const float> q, const Geometry& g) {
  return q.size() / (std::uint64_t{g.q_heads} * g.dim);
}

// The batch form of a one-sequence decode: sequence b takes the next q_heads * dim query values.
// `check(fn, seq, layer, options)` gives a sequence's Geometry; `one(seq, layer, query, options)`
// attends it.
template <typename Seq, typename Check, typename One>
Result<AttentionResult> DecodeEach(const char* fn, std::span<const Seq> batch, std::uint32_t layer,
                                   std::span<const float> queries, const AttentionOptions& options,
                                   Check check, One one) {
  AttentionResult all;
  std::size_t offset = 0;
  for (std::size_t b = 0; b < batch.size(); ++b) {
    Result<Geometry> g = check(fn, batch[b], layer, options);
    if (!g.ok()) return g.status().WithContext("sequence " + std::to_string(b));
    const std::size_t n = std::size_t{g->q_heads} * g->dim;
    if (queries.size() < offset + n) {
      return InvalidArgument(std::string(fn) + ": queries hold " + std::to_string(queries.size()) +
                             " values, too few for sequence " + std::to_string(b));
    }
    KVD_ASSIGN_OR_RETURN(AttentionResult r,
                         one(batch[b], layer, queries.subspan(offset, n), options));
    Append(all, r);
    offset += n;
  }
  if (offset != queries.size()) {
    return InvalidArgument(std::string(fn) + ": queries hold " + std::to_string(queries.size()) +
                           " values, the batch needs " + std::to_string(offset));
  }
  return all;
}

}  // namespace

Result<AttentionResult> HackDecodeAttention(HackSequence seq, std::uint32_t layer,
                                            std::span<const float> query,
                                            const AttentionOptions& options) {
  constexpr const char* kFn = "hack decode attention";
  KVD_ASSIGN_OR_RETURN(Geometry g, CheckSequence(kFn, seq, layer, options));
  KVD_RETURN_IF_ERROR(CheckQueries(kFn, query, 1, g));
  return Attend(HackSource(seq, layer, options), g, query, 1, g.tokens - 1);
}

Result<AttentionResult> HackDecodeAttentionBatch(std::span<const HackSequence> batch,
                                                 std::uint32_t layer,
                                                 std::span<const float> queries,
                                                 const AttentionOptions& options) {
  return DecodeEach("hack decode attention batch", batch, layer, queries, options, CheckSequence,
                    HackDecodeAttention);
}

Result<AttentionResult> HackPrefillAttention(HackSequence seq, std::uint32_t layer,
                                             std::span<const float> queries,
                                             std::uint32_t first_position,
                                             const AttentionOptions& options) {
  constexpr const char* kFn = "hack prefill attention";
  KVD_ASSIGN_OR_RETURN(Geometry g, CheckSequence(kFn, seq, layer, options));
  const std::uint64_t count = QueryCount(queries, g);
  KVD_RETURN_IF_ERROR(CheckQueries(kFn, queries, count, g));
  KVD_RETURN_IF_ERROR(CheckPrefill(kFn, count, first_position, g));
  return Attend(HackSource(seq, layer, options), g, queries, count, first_position);
}

Result<AttentionResult> DecodeAttention(const KvTensorView& kv, std::uint32_t layer,
                                        std::span<const float> query,
                                        const AttentionOptions& options) {
  constexpr const char* kFn = "decode attention";
  KVD_ASSIGN_OR_RETURN(Geometry g, CheckTensor(kFn, kv, layer, options));
  KVD_RETURN_IF_ERROR(CheckQueries(kFn, query, 1, g));
  return Attend(PlainSource(kv, layer), g, query, 1, g.tokens - 1);
}

Result<AttentionResult> DecodeAttentionBatch(std::span<const KvTensorView> batch,
                                             std::uint32_t layer, std::span<const float> queries,
                                             const AttentionOptions& options) {
  return DecodeEach("decode attention batch", batch, layer, queries, options, CheckTensor,
                    DecodeAttention);
}

Result<AttentionResult> PrefillAttention(const KvTensorView& kv, std::uint32_t layer,
                                         std::span<const float> queries,
                                         std::uint32_t first_position,
                                         const AttentionOptions& options) {
  constexpr const char* kFn = "prefill attention";
  KVD_ASSIGN_OR_RETURN(Geometry g, CheckTensor(kFn, kv, layer, options));
  const std::uint64_t count = QueryCount(queries, g);
  KVD_RETURN_IF_ERROR(CheckQueries(kFn, queries, count, g));
  KVD_RETURN_IF_ERROR(CheckPrefill(kFn, count, first_position, g));
  return Attend(PlainSource(kv, layer), g, queries, count, first_position);
}

}  // namespace kvdepot
