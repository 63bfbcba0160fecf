// Rate-distortion of kvdepot's CacheGen against LMCache's CacheGen scheme, computed on the same
// data (docs/cachegen.md records the output). Not a timing benchmark: it prints bytes and errors.
//
// LMCache's scheme, as its serializer does it: per (layer, K|V, token) symmetric quantization by
// the token's max |x| over all channels into bins-1 levels; an arithmetic coder per
// (layer, channel) stream with an int16 CDF table [2 * layers, channels, 33]; the per-token maxima.
// Its size is estimated favourably to LMCache: payload = the per-stream empirical entropy (what an
// ideal coder with its per-stream tables reaches), tables = 2L * C * 33 * 2 bytes, maxima = 2 bytes
// per (layer, K|V, token). kvdepot's size is the real container.
//
// Errors: relative L2 over the tensor, and the relative L2 of attention outputs: per (layer, head),
// 64 queries drawn as the chunk's own K rows at random positions plus Gaussian noise of K's std,
// softmax(q K^T / sqrt(d)) V with exact vs reconstructed K and V (in double).
//
// Usage: kvdepot_cachegen_rd [REAL.npy]   (default: ../shared/data/tinystories656k-kv-768tok.npy)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kvdepot/codec/cachegen.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/codec/tensor.h"
#include "real_kv.h"

namespace kvdepot {
namespace {

struct Errors {
  double rel_l2;
  double attn_rel_l2;
};

std::vector<double> AsDouble(const KvTensorView& t) {
  std::vector<double> out(t.shape.elements());
  for (std::uint64_t i = 0; i < out.size(); ++i) out[i] = ElementAsFloat(t, i);
  return out;
}

// Attention error costs O(tokens^2 * head_dim) per head; sweeps skip it.
Errors Measure(const KvTensorView& ref, const std::vector<double>& got, bool attention = true) {
  const KvShape& s = ref.shape;
  const std::vector<double> x = AsDouble(ref);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - got[i]) * (x[i] - got[i]);
    den += x[i] * x[i];
  }
  if (!attention) return {std::sqrt(num / den), 0};
  const std::uint32_t C = s.kv_heads * s.head_dim, D = s.head_dim, T = s.tokens;
  auto at = [&](const std::vector<double>& v, std::uint32_t l, int kv, std::uint32_t t,
                std::uint32_t h,
                std::uint32_t d) { return v[((std::size_t{l} * 2 + kv) * T + t) * C + h * D + d]; };
  std::mt19937_64 rng(0);
  std::normal_distribution<double> noise(0, 1);
  double anum = 0, aden = 0;
  std::vector<double> q(D), p_ref(T), p_got(T);
  for (std::uint32_t l = 0; l < s.layers; ++l) {
    for (std::uint32_t h = 0; h < s.kv_heads; ++h) {
      double kstd = 0;
      for (std::uint32_t t = 0; t < T; ++t)
        for (std::uint32_t d = 0; d < D; ++d) kstd += at(x, l, 0, t, h, d) * at(x, l, 0, t, h, d);
      kstd = std::sqrt(kstd / (T * D));
      for (int qi = 0; qi < 64; ++qi) {
        const std::uint32_t pos = static_cast<std::uint32_t>(rng() % T);
        for (std::uint32_t d = 0; d < D; ++d) q[d] = at(x, l, 0, pos, h, d) + kstd * noise(rng);
        for (const std::vector<double>* kv : {&x, &got}) {
          std::vector<double>& p = kv == &x ? p_ref : p_got;
          double mx = -1e300;
          for (std::uint32_t t = 0; t < T; ++t) {
            double dot = 0;
            for (std::uint32_t d = 0; d < D; ++d) dot += q[d] * at(*kv, l, 0, t, h, d);
            p[t] = dot / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, p[t]);
          }
          double z = 0;
          for (double& v : p) z += (v = std::exp(v - mx));
          for (double& v : p) v /= z;
        }
        for (std::uint32_t d = 0; d < D; ++d) {
          double o_ref = 0, o_got = 0;
          for (std::uint32_t t = 0; t < T; ++t) {
            o_ref += p_ref[t] * at(x, l, 1, t, h, d);
            o_got += p_got[t] * at(got, l, 1, t, h, d);
          }
          anum += (o_ref - o_got) * (o_ref - o_got);
          aden += o_ref * o_ref;
        }
      }
    }
  }
  return {std::sqrt(num / den), std::sqrt(anum / aden)};
}

struct SchemeResult {
  double bytes;
  Errors errors;
};

// LMCache's quantization and its size estimate (see the file comment).
SchemeResult LmCache(const KvTensorView& t, const CacheGenOptions& profile, bool attention) {
  const KvShape& s = t.shape;
  const std::uint32_t C = s.kv_heads * s.head_dim, T = s.tokens;
  const std::vector<double> x = AsDouble(t);
  std::vector<double> recon(x.size());
  std::vector<int> sym(x.size());
  for (std::uint32_t lk = 0; lk < s.layers * 2; ++lk) {
    const int bins = lk % 2 == 0 ? profile.k_bins[lk / 2] : profile.v_bins[lk / 2];
    const double max_level = bins / 2 - 1;
    for (std::uint32_t tok = 0; tok < T; ++tok) {
      const std::size_t row = (std::size_t{lk} * T + tok) * C;
      double m = 0;
      for (std::uint32_t c = 0; c < C; ++c) m = std::max(m, std::fabs(x[row + c]));
      const double mh = HalfBitsToFloat(FloatToHalfBits(static_cast<float>(m)));  // kept as fp16
      for (std::uint32_t c = 0; c < C; ++c) {
        const double f = mh > 0 ? max_level / mh : 0;
        const int q = static_cast<int>(
            std::clamp(std::nearbyint(x[row + c] * f + max_level), 0.0, 2 * max_level));
        sym[row + c] = q;
        recon[row + c] = mh > 0 ? (q - max_level) / max_level * mh : 0;
      }
    }
  }
  double bits = 0;
  for (std::uint32_t lk = 0; lk < s.layers * 2; ++lk) {
    for (std::uint32_t c = 0; c < C; ++c) {
      std::map<int, std::uint32_t> counts;
      for (std::uint32_t tok = 0; tok < T; ++tok)
        ++counts[sym[(std::size_t{lk} * T + tok) * C + c]];
      for (const auto& [q, n] : counts) bits -= n * std::log2(static_cast<double>(n) / T);
    }
  }
  const double tables = 2.0 * s.layers * C * 33 * 2;
  const double maxima = 2.0 * s.layers * T * 2;
  return {bits / 8 + tables + maxima, Measure(t, recon, attention)};
}

SchemeResult Ours(const KvTensorView& t, const CacheGenOptions& profile, bool attention) {
  auto c = EncodeCacheGen(t, profile);
  auto d = DecodeChunk(*c);
  return {static_cast<double>(c->size()), Measure(t, AsDouble(d->view()), attention)};
}

// Coded payload over the symbols' empirical entropy under the codec's model.
double PayloadOverEntropy(const KvTensorView& t) {
  auto c = EncodeCacheGen(t);
  auto view = ParseContainer(*c);
  const double payload = static_cast<double>(CacheGenSectionSizes(*view)->codes);
  return payload / (*CacheGenSymbolEntropyBits(t) / 8);
}

CacheGenOptions Uniform(std::uint32_t layers, std::uint8_t bins) {
  return {std::vector<std::uint8_t>(layers, bins), std::vector<std::uint8_t>(layers, bins)};
}

// Splits [L, 2, T, H, D] into chunks of up to 256 tokens (copies).
std::vector<KvTensor> Chunks(const KvTensor& t) {
  std::vector<KvTensor> out;
  const std::size_t es = DTypeSize(t.dtype);
  const std::size_t row = std::size_t{t.shape.kv_heads} * t.shape.head_dim * es;
  for (std::uint32_t start = 0; start < t.shape.tokens; start += 256) {
    const std::uint32_t n = std::min<std::uint32_t>(256, t.shape.tokens - start);
    KvTensor c = KvTensor::Zeros(t.dtype, {t.shape.layers, n, t.shape.kv_heads, t.shape.head_dim});
    for (std::uint32_t lk = 0; lk < t.shape.layers * 2; ++lk) {
      std::memcpy(c.data.data() + std::size_t{lk} * n * row,
                  t.data.data() + (std::size_t{lk} * t.shape.tokens + start) * row, n * row);
    }
    out.push_back(std::move(c));
  }
  return out;
}

void Report(const char* name, const std::vector<KvTensor>& chunks) {
  const std::uint32_t layers = chunks[0].shape.layers;
  double fp16 = 0;
  for (const KvTensor& c : chunks) fp16 += c.shape.elements() * 2.0;
  auto total = [&](auto scheme, const CacheGenOptions& p, bool attention = true) {
    SchemeResult sum{0, {0, 0}};
    for (const KvTensor& c : chunks) {
      const SchemeResult r = scheme(c.view(), p, attention);
      sum.bytes += r.bytes;
      sum.errors.rel_l2 += r.errors.rel_l2 / chunks.size();
      sum.errors.attn_rel_l2 += r.errors.attn_rel_l2 / chunks.size();
    }
    return sum;
  };
  std::printf("== %s: %zu chunk(s) of %s, %.0f fp16 bytes\n", name, chunks.size(),
              chunks[0].shape.ToString().c_str(), fp16);
  std::printf("%-34s %12s %8s %9s %10s\n", "scheme", "bytes", "of fp16", "rel_l2", "attn_err");
  const CacheGenOptions def = CacheGenDefaultProfile(layers);
  const SchemeResult lm = total(LmCache, def);
  std::printf("%-34s %12.0f %8.4f %9.4f %10.4f\n", "LMCache (default profile)", lm.bytes,
              lm.bytes / fp16, lm.errors.rel_l2, lm.errors.attn_rel_l2);
  const SchemeResult ours_def = total(Ours, def);
  std::printf("%-34s %12.0f %8.4f %9.4f %10.4f\n", "kvdepot (default profile)", ours_def.bytes,
              ours_def.bytes / fp16, ours_def.errors.rel_l2, ours_def.errors.attn_rel_l2);
  double best_bytes = 0;
  int best_bins = 0;
  for (int bins = 4; bins <= 40; ++bins) {
    const bool row = bins % 8 == 0;
    const SchemeResult r = total(Ours, Uniform(layers, static_cast<std::uint8_t>(bins)), row);
    if (row) {
      std::printf("%-34s %12.0f %8.4f %9.4f %10.4f\n",
                  ("kvdepot, " + std::to_string(bins) + " bins everywhere").c_str(), r.bytes,
                  r.bytes / fp16, r.errors.rel_l2, r.errors.attn_rel_l2);
    }
    if (best_bins == 0 && r.errors.rel_l2 <= lm.errors.rel_l2) {
      best_bins = bins;
      best_bytes = r.bytes;
    }
  }
  std::printf(
      "smallest kvdepot at rel_l2 <= LMCache's: %d bins, %.0f bytes: %.2fx fewer bytes "
      "than LMCache\n",
      best_bins, best_bytes, lm.bytes / best_bytes);
  std::printf(
      "kvdepot default profile: %.2fx fewer bytes than LMCache's default, rel_l2 %.4f vs "
      "%.4f\n",
      lm.bytes / ours_def.bytes, ours_def.errors.rel_l2, lm.errors.rel_l2);
  std::printf(
      "coded payload / empirical entropy of the symbols (default profile, chunk 0): %.4f\n\n",
      PayloadOverEntropy(chunks[0].view()));
}

}  // namespace
}  // namespace kvdepot

int main(int argc, char** argv) {
  using namespace kvdepot;
  if (auto t = bench::LoadRealKv(argc, argv)) {
    Report("real KV (TinyStories-656K)", Chunks(*t));
  }
  std::vector<KvTensor> llama;
  for (std::uint64_t seed = 1; seed <= 2; ++seed) {
    llama.push_back(*SynthesizeKv(SynthOptions{{32, 256, 8, 128}, seed, DType::kFloat16}));
  }
  Report("synthetic Llama-3.1-8B-shaped KV", llama);
  return 0;
}
