// The hack-int2 quality study (`make hack-quality`; docs/hack.md "Choosing hack-int2 options"
// records its output): for options within HACK's format family, bytes as a fraction of fp16,
// K and V reconstruction error, and the attention-output error against exact float64 attention
// (kv_quality.h: probe queries, decode attention over the whole sequence).
//
// A sequence is cut into chunks of 256 tokens, each encoded on its own with the real codec
// (EncodeHack / DecodeChunk), as a store of 256-token chunks would hold it; `sinks` apply to the
// first chunk only. Options the container cannot express are simulated around the real codec and
// marked "sim" (their bytes are what a format holding them would store):
//   - K and V partitions differing: K from an encode with P_K, V from one with P_V; bytes: K's
//     sections at P_K plus V's at P_V.
//   - recent R: the sequence's last R tokens kept unquantized: the last chunk's first T - R tokens
//     are encoded as a chunk of their own (blocks from its start, its own tail), the R tokens
//     appended unchanged; bytes: as a chunk whose unquantized tokens are those.
//   - Hadamard K: K rotated along head_dim by the orthonormal Walsh-Hadamard matrix before
//     quantization (in fp32) and rotated back after decoding (a kernel would rotate the query
//     instead); same bytes.
//   - K outliers N: per (layer, head, chunk), the N channels of largest mean |K| are zeroed before
//     quantization and restored exactly afterwards; bytes add N fp16 values per token (the zeroed
//     channels' codes are still counted: an upper bound).
// Attention is computed over the dequantized KV (the `deq` column of docs/hack.md's K-orientation
// tables); the homomorphic INT8 math differs from it by at most 0.002 there.
//
// Usage: kvdepot_hack_quality [REAL.npy]  (default ../shared/data/tinystories656k-kv-768tok.npy)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/kv_quality.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/codec/tensor.h"
#include "real_kv.h"

namespace kvdepot {
namespace {

constexpr std::uint32_t kChunkTokens = 256;

struct Variant {
  std::string label;
  HackOrientation orientation = HackOrientation::kChannel;
  std::uint32_t k_partition = 64;
  std::uint32_t v_partition = 64;
  std::uint32_t sinks = 0;
  std::uint32_t recent = 0;
  bool hadamard_k = false;
  std::uint32_t k_outliers = 0;

  bool simulated() const {
    return k_partition != v_partition || recent != 0 || hadamard_k || k_outliers != 0;
  }
};

// fp32 tensor data as floats (the host is little-endian: numeric.h's contract).
std::vector<float> Floats(const KvTensor& t) {
  std::vector<float> v(t.shape.elements());
  for (std::uint64_t i = 0; i < v.size(); ++i) v[i] = ElementAsFloat(t.view(), i);
  return v;
}

KvTensor Fp32(const KvShape& shape, const std::vector<float>& v) {
  KvTensor t = KvTensor::Zeros(DType::kFloat32, shape);
  std::memcpy(t.data.data(), v.data(), v.size() * sizeof(float));
  return t;
}

std::uint64_t Index(const KvShape& s, std::uint32_t l, std::uint32_t kv, std::uint32_t t,
                    std::uint32_t h, std::uint32_t d) {
  return (((std::uint64_t{l} * 2 + kv) * s.tokens + t) * s.kv_heads + h) * s.head_dim + d;
}

// In-place orthonormal Walsh-Hadamard transform of every K row (head_dim a power of two); it is
// its own inverse.
void HadamardK(const KvShape& s, std::vector<float>& x) {
  std::vector<double> row(s.head_dim);
  const double norm = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  for (std::uint32_t l = 0; l < s.layers; ++l) {
    for (std::uint32_t t = 0; t < s.tokens; ++t) {
      for (std::uint32_t h = 0; h < s.kv_heads; ++h) {
        const std::uint64_t base = Index(s, l, 0, t, h, 0);
        for (std::uint32_t d = 0; d < s.head_dim; ++d) row[d] = x[base + d];
        for (std::uint32_t len = 1; len < s.head_dim; len *= 2) {
          for (std::uint32_t i = 0; i < s.head_dim; i += 2 * len) {
            for (std::uint32_t j = i; j < i + len; ++j) {
              const double a = row[j], b = row[j + len];
              row[j] = a + b;
              row[j + len] = a - b;
            }
          }
        }
        for (std::uint32_t d = 0; d < s.head_dim; ++d)
          x[base + d] = static_cast<float>(row[d] * norm);
      }
    }
  }
}

// Per (layer, head): the n K channels of largest mean |K|, as flags [layer][head][dim].
std::vector<bool> OutlierChannels(const KvShape& s, const std::vector<float>& x, std::uint32_t n) {
  std::vector<bool> flags(std::size_t{s.layers} * s.kv_heads * s.head_dim, false);
  std::vector<std::pair<double, std::uint32_t>> mag(s.head_dim);
  for (std::uint32_t l = 0; l < s.layers; ++l) {
    for (std::uint32_t h = 0; h < s.kv_heads; ++h) {
      for (std::uint32_t d = 0; d < s.head_dim; ++d) {
        double m = 0;
        for (std::uint32_t t = 0; t < s.tokens; ++t) m += std::fabs(x[Index(s, l, 0, t, h, d)]);
        mag[d] = {m, d};
      }
      std::sort(mag.begin(), mag.end(), [](const auto& a, const auto& b) { return a > b; });
      for (std::uint32_t i = 0; i < std::min(n, s.head_dim); ++i) {
        flags[(std::size_t{l} * s.kv_heads + h) * s.head_dim + mag[i].second] = true;
      }
    }
  }
  return flags;
}

// Bytes one of K (kv 0) or V (kv 1) takes in a chunk of `shape` (fp16) with `partition` and
// `unquantized_front` leading unquantized tokens (sinks, or any unquantized tokens whose count
// the layout treats alike: only counts matter for sizes).
std::uint64_t HalfBytes(const KvShape& shape, const Variant& v, std::uint32_t kv,
                        std::uint32_t unquantized_front) {
  hack::Layout lay;
  lay.layers = shape.layers;
  lay.tokens = shape.tokens;
  lay.heads = shape.kv_heads;
  lay.dim = shape.head_dim;
  lay.partition = kv == 0 ? v.k_partition : v.v_partition;
  lay.sinks = std::min(unquantized_front, shape.tokens);
  lay.orientation = static_cast<std::uint8_t>(v.orientation);
  const std::uint64_t groups = std::uint64_t{lay.layers} * lay.heads * lay.blocks();
  const std::uint64_t per_group =
      std::uint64_t{lay.partitions_per_group(kv)} * hack::kPartitionEntryBytes +
      std::uint64_t{lay.sums_per_group(kv)} * hack::SumBytes(lay.partition) +
      std::uint64_t{lay.partition} * lay.dim / hack::kCodesPerByte;
  return groups * per_group +
         std::uint64_t{lay.layers} * lay.heads * lay.dim * lay.unquantized_tokens() * 2;
}

// Encodes `t` with the variant's options at `partition` and decodes it to fp32 floats; adds the
// container's bytes beyond its K and V sections (header, params, padding) to *overhead.
std::vector<float> RoundTrip(const KvTensor& t, const Variant& v, std::uint32_t partition,
                             std::uint32_t sinks, double* overhead) {
  HackOptions o;
  o.partition = partition;
  o.orientation = v.orientation;
  o.sinks = sinks;
  auto enc = EncodeHack(t.view(), o);
  if (!enc.ok()) {
    std::fprintf(stderr, "encode failed: %s\n", enc.status().ToString().c_str());
    std::exit(1);
  }
  if (overhead != nullptr) {
    const HackSizes sizes = *HackSectionSizes(*ParseContainer(*enc));
    *overhead +=
        static_cast<double>(sizes.total - sizes.scales - sizes.sums - sizes.codes - sizes.tail);
  }
  return Floats(*DecodeChunk(*enc));
}

struct Measured {
  double bytes_ratio = 0;
  KvQuality q;
};

// One chunk through the variant: the restored values (fp32) and the bytes stored.
KvTensor RestoreChunk(const KvTensor& chunk, const Variant& v, std::uint32_t sinks,
                      std::uint32_t recent, double* bytes) {
  const KvShape& cs = chunk.shape;
  const std::uint32_t quantized_tokens = cs.tokens - recent;
  std::vector<KvTensor> parts;
  if (quantized_tokens > 0) {
    const KvTensor part = SliceTokens(chunk.view(), 0, quantized_tokens);
    const KvShape& s = part.shape;
    std::vector<float> x = Floats(part);
    std::vector<bool> outliers;
    if (v.k_outliers > 0) {
      outliers = OutlierChannels(s, x, v.k_outliers);
      for (std::uint32_t l = 0; l < s.layers; ++l)
        for (std::uint32_t t = 0; t < s.tokens; ++t)
          for (std::uint32_t h = 0; h < s.kv_heads; ++h)
            for (std::uint32_t d = 0; d < s.head_dim; ++d)
              if (outliers[(std::size_t{l} * s.kv_heads + h) * s.head_dim + d])
                x[Index(s, l, 0, t, h, d)] = 0;
    }
    if (v.hadamard_k) HadamardK(s, x);
    const KvTensor prepared =
        (v.hadamard_k || v.k_outliers > 0) ? Fp32(s, x) : *ConvertDType(part.view(), part.dtype);
    double overhead = 0;
    std::vector<float> k = RoundTrip(prepared, v, v.k_partition, sinks, &overhead);
    if (v.v_partition != v.k_partition) {
      const std::vector<float> vv = RoundTrip(prepared, v, v.v_partition, sinks, nullptr);
      for (std::uint64_t i = 0; i < k.size(); ++i) {
        if ((i / (std::uint64_t{s.tokens} * s.kv_heads * s.head_dim)) % 2 == 1) k[i] = vv[i];
      }
    }
    if (v.hadamard_k) HadamardK(s, k);
    if (v.k_outliers > 0) {
      const std::vector<float> orig = Floats(part);
      for (std::uint32_t l = 0; l < s.layers; ++l)
        for (std::uint32_t t = 0; t < s.tokens; ++t)
          for (std::uint32_t h = 0; h < s.kv_heads; ++h)
            for (std::uint32_t d = 0; d < s.head_dim; ++d)
              if (outliers[(std::size_t{l} * s.kv_heads + h) * s.head_dim + d])
                k[Index(s, l, 0, t, h, d)] = orig[Index(s, l, 0, t, h, d)];
    }
    parts.push_back(Fp32(s, k));
    *bytes += overhead;
  }
  if (recent > 0) {
    parts.push_back(
        *ConvertDType(SliceTokens(chunk.view(), quantized_tokens, recent).view(), DType::kFloat32));
  }
  // Sizes: recent tokens count like leading unquantized ones (only counts matter).
  *bytes += static_cast<double>(HalfBytes(cs, v, 0, sinks + recent) +
                                HalfBytes(cs, v, 1, sinks + recent));
  *bytes +=
      static_cast<double>(std::uint64_t{cs.layers} * cs.tokens * cs.kv_heads * v.k_outliers * 2);
  return *ConcatTokens(parts);
}

Measured Evaluate(const KvQualityProbe& probe, const Variant& v) {
  const KvTensor& full = probe.original();
  const std::uint32_t T = full.shape.tokens;
  std::vector<KvTensor> restored;
  double bytes = 0;
  for (std::uint32_t start = 0; start < T; start += kChunkTokens) {
    const std::uint32_t n = std::min(kChunkTokens, T - start);
    const KvTensor chunk = SliceTokens(full.view(), start, n);
    const std::uint32_t sinks = start == 0 ? std::min(v.sinks, n) : 0;
    // The sequence's last `recent` tokens, within this chunk (after its sinks).
    const std::uint32_t recent_from = T - std::min(v.recent, T);
    std::uint32_t recent = start + n > recent_from ? start + n - std::max(recent_from, start) : 0;
    recent = std::min(recent, n - sinks);
    restored.push_back(RestoreChunk(chunk, v, sinks, recent, &bytes));
  }
  Measured m;
  m.bytes_ratio = bytes / (static_cast<double>(full.shape.elements()) * 2);
  m.q = *probe.Measure(ConcatTokens(restored)->view());
  return m;
}

std::vector<Variant> Variants() {
  using O = HackOrientation;
  std::vector<Variant> v;
  auto add = [&](std::string label, auto set) {
    Variant x;
    x.label = std::move(label);
    set(x);
    v.push_back(std::move(x));
  };
  add("**defaults**: channel, P 64", [](Variant&) {});
  add("channel, P 32", [](Variant& x) { x.k_partition = x.v_partition = 32; });
  add("channel, P 128", [](Variant& x) { x.k_partition = x.v_partition = 128; });
  add("channel, P_K 32 / P_V 64", [](Variant& x) { x.k_partition = 32; });
  add("channel, P_K 64 / P_V 32", [](Variant& x) { x.v_partition = 32; });
  add("channel, P_K 32 / P_V 128", [](Variant& x) { x.k_partition = 32, x.v_partition = 128; });
  add("channel, P_K 128 / P_V 32", [](Variant& x) { x.k_partition = 128, x.v_partition = 32; });
  add("token, P 64", [](Variant& x) { x.orientation = O::kToken; });
  add("token, P 32",
      [](Variant& x) { x.orientation = O::kToken, x.k_partition = x.v_partition = 32; });
  add("channel, P 64, --sinks 4", [](Variant& x) { x.sinks = 4; });
  add("channel, P 64, --sinks 64", [](Variant& x) { x.sinks = 64; });
  add("channel, P 32, --sinks 4",
      [](Variant& x) { x.k_partition = x.v_partition = 32, x.sinks = 4; });
  add("channel, P 64, recent 64", [](Variant& x) { x.recent = 64; });
  add("channel, P 64, recent 128", [](Variant& x) { x.recent = 128; });
  add("channel, P 32, recent 64",
      [](Variant& x) { x.k_partition = x.v_partition = 32, x.recent = 64; });
  add("channel, P 64, --sinks 64, recent 64", [](Variant& x) { x.sinks = 64, x.recent = 64; });
  add("channel, P 64, Hadamard K", [](Variant& x) { x.hadamard_k = true; });
  add("channel, P 32, Hadamard K",
      [](Variant& x) { x.k_partition = x.v_partition = 32, x.hadamard_k = true; });
  add("token, P 64, Hadamard K",
      [](Variant& x) { x.orientation = O::kToken, x.hadamard_k = true; });
  add("token, P 64, K outliers 2", [](Variant& x) { x.orientation = O::kToken, x.k_outliers = 2; });
  add("channel, P 64, K outliers 2", [](Variant& x) { x.k_outliers = 2; });
  return v;
}

void Report(const std::string& name, const KvTensor& full) {
  const KvQualityProbe probe = *KvQualityProbe::Create(full.view());
  std::printf("== %s: %s %s, chunks of %u tokens, %u probe queries per layer\n", name.c_str(),
              full.shape.ToString().c_str(), std::string(DTypeName(full.dtype)).c_str(),
              kChunkTokens, KvQualityOptions{}.queries_per_layer);
  std::printf("| option | of fp16 | K rel L2 | V rel L2 | attn rel L2 | top-1 | vs defaults |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  double reference = 0;
  for (const Variant& v : Variants()) {
    const Measured m = Evaluate(probe, v);
    if (reference == 0) reference = m.q.attn_rel_l2;
    std::printf("| %s%s | %.4f | %.4f | %.4f | %.4f | %.3f | %.2fx |\n", v.label.c_str(),
                v.simulated() ? " (sim)" : "", m.bytes_ratio, m.q.k_rel_l2, m.q.v_rel_l2,
                m.q.attn_rel_l2, m.q.top1, m.q.attn_rel_l2 / reference);
    std::fflush(stdout);
  }
  std::printf("\n");
}

}  // namespace
}  // namespace kvdepot

int main(int argc, char** argv) {
  using namespace kvdepot;
  std::string real;
  if (auto t = bench::LoadRealKv(argc, argv, &real)) {
    Report("real KV (TinyStories-656K, " + real + ")", *t);
  }
  Report("synthetic KV (SynthesizeKv seed 1)",
         *SynthesizeKv(SynthOptions{{4, 1024, 8, 128}, 1, DType::kFloat16}));
  return 0;
}
