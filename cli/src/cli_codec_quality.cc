#include "cli_codec_quality.h"

#include <cstdio>

#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/hack.h"

namespace kvdepot::cli {
namespace {

// v with `digits` decimals ("0.5943").
std::string Fixed(double v, int digits = 4) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// v with 6 significant digits.
std::string Sig(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// hack-int2 with `options` applied to A, measured by `probe`.
Result<HackReference> Reference(const KvQualityProbe& probe, const KvTensor& a,
                                const HackOptions& options) {
  HackReference r;
  auto encoded = EncodeHack(a.view(), options);
  if (!encoded.ok()) {
    r.note = "no reference: hack-int2 cannot encode A (" + encoded.status().message() + ")";
    return r;
  }
  KVD_ASSIGN_OR_RETURN(const KvTensor restored, DecodeChunk(*encoded));
  KVD_ASSIGN_OR_RETURN(r.quality, probe.Measure(restored.view()));
  r.of_fp16 = static_cast<double>(encoded->size()) / static_cast<double>(a.shape.elements() * 2);
  return r;
}

std::string Verdict(const KvQuality& measured, const HackReference& ref, const std::string& name) {
  if (!ref.quality) return ref.note;
  const double e = ref.quality->attn_rel_l2;
  if (e == 0) return name + " is exact on this input (attention error 0); no ratio";
  return Fixed(measured.attn_rel_l2 / e, 2) + "x the attention error of hack-int2 " + name +
         " on A: " + Fixed(e) + " at " + Fixed(ref.of_fp16) + " of fp16";
}

Json ReferenceJson(const KvQuality& measured, const HackReference& ref) {
  if (!ref.quality) return {{"note", ref.note}};
  const KvQuality& q = *ref.quality;
  return {{"attn_rel_l2", q.attn_rel_l2},
          {"top1", q.top1},
          {"k_rel_l2", q.k_rel_l2},
          {"v_rel_l2", q.v_rel_l2},
          {"of_fp16", ref.of_fp16},
          {"attn_ratio",
           q.attn_rel_l2 > 0 ? Json(measured.attn_rel_l2 / q.attn_rel_l2) : Json(nullptr)}};
}

}  // namespace

Result<AttentionComparison> CompareAttention(const KvTensor& a, const KvTensor& b,
                                             std::uint32_t queries_per_layer) {
  KvQualityOptions options;
  options.queries_per_layer = queries_per_layer;
  KVD_ASSIGN_OR_RETURN(const KvQualityProbe probe, KvQualityProbe::Create(a.view(), options));
  AttentionComparison c;
  c.queries_per_layer = queries_per_layer;
  KVD_ASSIGN_OR_RETURN(c.measured, probe.Measure(b.view()));
  KVD_ASSIGN_OR_RETURN(c.defaults, Reference(probe, a, HackOptions{}));
  KVD_ASSIGN_OR_RETURN(c.recommended, Reference(probe, a, RecommendedHackOptions()));
  return c;
}

HackOptions RecommendedHackOptions() {
  HackOptions o;
  o.partition = 32;
  return o;
}

void PrintAttentionComparison(const AttentionComparison& c, std::ostream& out) {
  out << "k_rel_l2    " << Sig(c.measured.k_rel_l2) << "\n"
      << "v_rel_l2    " << Sig(c.measured.v_rel_l2) << "\n"
      << "attention   rel_l2 " << Sig(c.measured.attn_rel_l2) << ", top-1 kept "
      << Fixed(c.measured.top1, 3) << " (" << c.queries_per_layer
      << " probe queries per layer against exact attention over A; docs/hack.md)\n"
      << "vs defaults     " << Verdict(c.measured, c.defaults, "at its defaults (--partition 64)")
      << "\n"
      << "vs recommended  " << Verdict(c.measured, c.recommended, "--partition 32 (recommended)")
      << "\n";
}

Json AttentionComparisonJson(const AttentionComparison& c) {
  Json j;
  j["k_rel_l2"] = c.measured.k_rel_l2;
  j["v_rel_l2"] = c.measured.v_rel_l2;
  j["attn_rel_l2"] = c.measured.attn_rel_l2;
  j["top1"] = c.measured.top1;
  j["probe_queries_per_layer"] = c.queries_per_layer;
  j["hack_int2_defaults"] = ReferenceJson(c.measured, c.defaults);
  j["hack_int2_recommended"] = ReferenceJson(c.measured, c.recommended);
  return j;
}

}  // namespace kvdepot::cli
