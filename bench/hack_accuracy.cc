// Accuracy report of the hack-int2 codec and its homomorphic attention (docs/hack.md records the
// output). Not a timing benchmark: it prints bytes and errors.
//
// For each configuration (K orientation, rounding, partition size P, sinks), over a sequence cut
// into chunks of 256 tokens (each encoded on its own; sinks only in the first chunk):
//   - bytes of the containers over fp16 bytes; relative L2 of the decoded KV;
//   - decode attention of 64 queries per (layer, head): kv_quality.h's probe queries (the
//     sequence's own K row at a random position plus Gaussian noise of K's standard deviation, as
//     bench/cachegen_rd.cc); one query head per KV head. Against exact float64 attention over the
//     original KV:
//       "dequant": attention over the dequantized KV (the homomorphic math with exact Q and P),
//       "int8":    the homomorphic math with INT8 Q and P (what the kernels compute);
//     relative L2 of the outputs over all queries and heads, and the fraction of (query, head)
//     whose top-1 attended position is the exact one's.
//
// Usage: kvdepot_hack_accuracy [REAL.npy]   (default: ../shared/data/tinystories656k-kv-768tok.npy)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/compare.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/hack_attention.h"
#include "kvdepot/codec/kv_quality.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/codec/tensor.h"
#include "real_kv.h"

namespace kvdepot {
namespace {

constexpr std::uint32_t kChunkTokens = 256;
constexpr std::uint32_t kQueriesPerLayer = 64;

// Splits [L, 2, T, H, D] into chunks of up to 256 tokens (copies).
std::vector<KvTensor> Chunks(const KvTensor& t) {
  std::vector<KvTensor> out;
  for (std::uint32_t start = 0; start < t.shape.tokens; start += kChunkTokens) {
    out.push_back(SliceTokens(t.view(), start,
                              std::min<std::uint32_t>(kChunkTokens, t.shape.tokens - start)));
  }
  return out;
}

struct Data {
  std::string name;
  KvTensor full;
  std::vector<KvTensor> chunks;
  std::vector<std::vector<float>> queries;
  std::vector<AttentionResult> exact;  // [layer]: all queries of the layer
};

Data Prepare(std::string name, KvTensor full) {
  Data d;
  d.name = std::move(name);
  d.chunks = Chunks(full);
  d.queries = ProbeQueries(full.view(), KvQualityOptions{kQueriesPerLayer, 0});
  AttentionOptions o;
  o.q_heads = full.shape.kv_heads;
  const std::size_t per_query = std::size_t{full.shape.kv_heads} * full.shape.head_dim;
  for (std::uint32_t l = 0; l < full.shape.layers; ++l) {
    AttentionResult all;
    for (std::uint32_t q = 0; q < kQueriesPerLayer; ++q) {
      auto r = DecodeAttention(
          full.view(), l, std::span<const float>(d.queries[l]).subspan(q * per_query, per_query),
          o);
      all.out.insert(all.out.end(), r->out.begin(), r->out.end());
      all.top1.insert(all.top1.end(), r->top1.begin(), r->top1.end());
    }
    d.exact.push_back(std::move(all));
  }
  d.full = std::move(full);
  return d;
}

struct Row {
  double ratio = 0, kv_rel_l2 = 0;
  double attn_dequant = 0, top1_dequant = 0;
  double attn_int8 = 0, top1_int8 = 0;
};

Row Evaluate(const Data& data, HackOptions options) {
  Row row;
  std::vector<HackChunk> seq;
  double bytes = 0, fp16 = 0, num = 0, den = 0;
  for (std::size_t i = 0; i < data.chunks.size(); ++i) {
    HackOptions o = options;
    if (i > 0) o.sinks = 0;
    const KvTensor& c = data.chunks[i];
    auto enc = EncodeHack(c.view(), o);
    if (!enc.ok()) {
      std::printf("encode failed: %s\n", enc.status().ToString().c_str());
      return row;
    }
    bytes += static_cast<double>(enc->size());
    fp16 += static_cast<double>(c.shape.elements()) * 2;
    auto view = ParseContainer(*enc);
    seq.push_back(*UnpackHack(*view));
    const KvTensor dec = *DecodeChunk(*enc);
    for (std::uint64_t e = 0; e < c.shape.elements(); ++e) {
      const double a = ElementAsFloat(c.view(), e), b = ElementAsFloat(dec.view(), e);
      num += (a - b) * (a - b);
      den += a * a;
    }
  }
  row.ratio = bytes / fp16;
  row.kv_rel_l2 = std::sqrt(num / den);
  const KvShape& s = data.full.shape;
  const std::size_t per_query = std::size_t{s.kv_heads} * s.head_dim;
  for (int int8 = 0; int8 < 2; ++int8) {
    AttentionOptions o;
    o.q_heads = s.kv_heads;
    o.int8_q = o.int8_p = int8 == 1;
    double an = 0, ad = 0, hits = 0, total = 0;
    for (std::uint32_t l = 0; l < s.layers; ++l) {
      for (std::uint32_t q = 0; q < kQueriesPerLayer; ++q) {
        auto r = HackDecodeAttention(
            seq, l, std::span<const float>(data.queries[l]).subspan(q * per_query, per_query), o);
        for (std::size_t i = 0; i < r->out.size(); ++i) {
          const double ref = data.exact[l].out[q * per_query + i];
          an += (r->out[i] - ref) * (r->out[i] - ref);
          ad += ref * ref;
        }
        for (std::uint32_t h = 0; h < s.kv_heads; ++h) {
          hits += r->top1[h] == data.exact[l].top1[q * s.kv_heads + h];
          total += 1;
        }
      }
    }
    (int8 ? row.attn_int8 : row.attn_dequant) = std::sqrt(an / ad);
    (int8 ? row.top1_int8 : row.top1_dequant) = hits / total;
  }
  return row;
}

void Report(const Data& data) {
  std::printf("== %s: %s fp16, %zu chunk(s) of <= %u tokens, %u queries per (layer, head)\n",
              data.name.c_str(), data.full.shape.ToString().c_str(), data.chunks.size(),
              kChunkTokens, kQueriesPerLayer);
  std::printf("%-8s %-10s %4s %5s %8s %8s %10s %9s %10s %9s\n", "K orient", "rounding", "P",
              "sinks", "of fp16", "kv_rl2", "attn_deq", "top1_deq", "attn_int8", "top1_int8");
  for (HackOrientation orient : {HackOrientation::kChannel, HackOrientation::kToken}) {
    for (HackRounding rounding : {HackRounding::kNearest, HackRounding::kStochastic}) {
      for (std::uint32_t p : {32u, 64u, 128u}) {
        for (std::uint32_t sinks : {0u, 4u}) {
          if (sinks != 0 && (p != 64 || rounding != HackRounding::kNearest)) continue;
          HackOptions o;
          o.partition = p;
          o.orientation = orient;
          o.rounding = rounding;
          o.seed = 12345;
          o.sinks = sinks;
          const Row r = Evaluate(data, o);
          std::printf("%-8s %-10s %4u %5u %8.4f %8.4f %10.4f %9.3f %10.4f %9.3f\n",
                      std::string(HackOrientationName(orient)).c_str(),
                      std::string(HackRoundingName(rounding)).c_str(), p, sinks, r.ratio,
                      r.kv_rel_l2, r.attn_dequant, r.top1_dequant, r.attn_int8, r.top1_int8);
          std::fflush(stdout);
        }
      }
    }
  }
  std::printf("\n");
}

}  // namespace
}  // namespace kvdepot

int main(int argc, char** argv) {
  using namespace kvdepot;
  if (auto t = bench::LoadRealKv(argc, argv)) {
    Report(Prepare("real KV (TinyStories-656K)", std::move(*t)));
  }
  for (std::uint64_t seed = 1; seed <= 2; ++seed) {
    Report(Prepare("synthetic KV, seed " + std::to_string(seed),
                   *SynthesizeKv(SynthOptions{{4, 1024, 8, 128}, seed, DType::kFloat16})));
  }
  // Llama-3.1-8B-shaped chunk: size with the defaults.
  const KvTensor llama = *SynthesizeKv(SynthOptions{{32, 256, 8, 128}, 1, DType::kFloat16});
  auto c = EncodeHack(llama.view());
  auto sizes = HackSectionSizes(*ParseContainer(*c));
  std::printf(
      "Llama-3.1-8B-shaped chunk %s fp16, defaults: %zu bytes = %.4f of fp16 "
      "(codes %llu, scales %llu, sums %llu, tail %llu, params %llu)\n",
      llama.shape.ToString().c_str(), c->size(),
      static_cast<double>(c->size()) / (llama.shape.elements() * 2.0),
      static_cast<unsigned long long>(sizes->codes), static_cast<unsigned long long>(sizes->scales),
      static_cast<unsigned long long>(sizes->sums), static_cast<unsigned long long>(sizes->tail),
      static_cast<unsigned long long>(sizes->params));
  return 0;
}
