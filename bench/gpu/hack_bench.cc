// kvdepot_hack_bench: GPU HACK INT2 kernels (docs/hack-gpu.md) against a cudaMemcpy D2D ceiling.
//
//  * decode attention, Llama-3.1-70B heads (64 query heads, 8 KV heads, head_dim 128), batch 1 and
//    16, KV lengths 4K, 32K and 128K (contiguous layout, P = 64, channel orientation): one
//    synchronous call per rep (launch to finish), and "-stream": 8 calls enqueued back to back per
//    rep (as an engine calls attention layer after layer), reported per call; and "-graph": the
//    way engines run decode, a CUDA graph of G calls (each over the next of the rotating KV sets,
//    G >= 16 and a multiple of the set count) captured once and replayed per rep, reported per
//    call (bench/gpu/torch_sdpa.py --graph times SDPA the same way); each with HACK's INT8 math
//    and with the dequantize-on-load fp16 path (rows "...-fp16"; --decode-math picks,
//    --decode-rows graph keeps only the graph rows); with --decode-io fp16|bf16 q and out are that
//    type (HackDecodeArgs::io_dtype; default fp32), q the random values rounded to it;
//  * causal prefill over 1K and 4K prompts (same heads), and chunked prefill (--chunked
//    NEW:PREFIX,...: NEW queries at positions PREFIX.. over a sequence of PREFIX + NEW tokens,
//    the call an engine makes after a prefix hit), reported against torch SDPA bf16 by
//    bench/gpu/torch_sdpa.py; each with HACK's INT8 math ("prefill", "prefill-chunked") and with
//    the dequantize-on-load fp16 path ("...-fp16"; --prefill-math picks), replayed from CUDA
//    graphs; with --prefill-staged on, each fp16 shape also as a staged call (HackPrefillArgs::
//    staging: the staging kernel then the attention kernel, "...-fp16-staged", its output checked
//    against the unstaged call's within kHackDequantPrefillRelL2Tolerance) and the staging kernel
//    alone ("...-fp16-stage"); with --prefill-io fp16|bf16 q and out are that type
//    (HackPrefillArgs::io_dtype; an engine's activations, as SDPA's bf16 baseline; default fp32),
//    q the random values rounded to it;
//  * quantize and dequantize of Llama-3.1-8B and 70B-shaped chunks [32|80, 2, 256, 8, 128] fp16:
//    one synchronous call per rep (launch to finish); "-stream": 8 calls enqueued back to back
//    on one stream per rep (as an engine streams chunks; the launch of one call overlaps the
//    kernel of the previous), reported per call; "-batch" (quantize): one
//    EnqueueQuantizeHackBatch of 8 and of 16 (kHackQuantizeMaxChunks) chunks per rep (as an engine
//    stores a prompt's chunks: 2K and 4K tokens), reported per chunk.
//
// Inputs are random (never zero); every variant rotates over enough copies of its inputs that the
// copies together are at least 3x the L2 size (and at least 2), so no rep reads what the previous
// one left in L2. Times are cudaEvent intervals around a rep's Enqueues; the median over --reps
// (>= 50) timed reps after --warmup reps is reported. "bytes" = what the kernel must move: for
// attention the KV codes, scales, V sums, tail and queries it reads; for quantize the fp16 input
// plus the sections written; for dequantize the sections read plus the output. GB/s = bytes /
// median time; "% d2d" compares that rate with the D2D copy rate (read + write bytes). After
// timing, the results are checked against the CPU reference (attention: relative L2 <= 1e-3 on
// sequence 0 where its length is <= 32K, prefill: <= --prefill-verify-max; quantize / dequantize:
// byte for byte); a mismatch fails the run.
//
// Usage: kvdepot_hack_bench [--json FILE] [--reps N] [--warmup N] [--device N]
//                           [--only decode|prefill|quantize|dequantize] [--lengths 4096,...]
//                           [--batches 1,16] [--prefill-lengths 1024,...]
//                           [--chunked 4096:28672,...] [--prefill-verify-max TOKENS]
//                           [--prefill-math int8|fp16|both] [--prefill-staged off|on]
//                           [--prefill-io fp32|fp16|bf16]
//                           [--decode-math int8|fp16|both] [--decode-rows all|graph]
//                           [--decode-io fp32|fp16|bf16]
//                           [--codec-layers 32,80]
// Exit status: 0 ok, 1 error or mismatch, 2 no GPU, 64 bad usage.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "kvdepot/base/status.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/hack_attention.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/hack.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {
namespace {

using bench::JsonEscape;
using bench::MeasureD2d;
using bench::Median;
using bench::SetsFor;
using bench::Time;

constexpr std::uint32_t kQHeads = 64;
constexpr std::uint32_t kKvHeads = 8;
constexpr std::uint32_t kDim = 128;
constexpr std::uint32_t kVerifyMaxTokens = 32768;
constexpr std::uint32_t kStreamCalls = 8;     // calls per rep of the "-stream" rows
constexpr std::uint32_t kGraphMinCalls = 16;  // fewest calls captured per graph ("-graph" rows)

struct Options : bench::CommonOptions {
  std::string only;
  std::vector<std::uint32_t> lengths = {4096, 32768, 131072};
  std::vector<std::uint32_t> batches = {1, 16};
  std::vector<std::uint32_t> prefill_lengths = {1024, 4096};
  std::vector<std::pair<std::uint32_t, std::uint32_t>> chunked;  // {new tokens, cached prefix}
  std::string prefill_math = "both";                   // int8 | fp16 | both (HackPrefillMath)
  std::string decode_math = "both";                    // int8 | fp16 | both (HackDecodeMath)
  std::string decode_rows = "all";                     // all | graph
  std::vector<std::uint32_t> codec_layers = {32, 80};  // quantize / dequantize chunk layers
  // Prefill rows are checked against the CPU reference where the sequence has at most this many
  // tokens (0: none; the float64 reference of 4K new over 28K cached takes ~30 s of CPU).
  std::uint32_t prefill_verify_max = kVerifyMaxTokens;
  bool prefill_staged = false;  // fp16 prefill also staged, and the staging alone
  // The prefill's q and out element type (HackPrefillArgs::io_dtype), both maths.
  DType prefill_io = DType::kFloat32;
  DType decode_io = DType::kFloat32;  // the decode's (HackDecodeArgs::io_dtype), both maths
};

struct Row {
  std::string op;
  std::string shape;
  std::uint32_t batch = 0;
  std::uint32_t tokens = 0;
  double median_us = 0;
  double min_us = 0;
  std::uint64_t bytes = 0;
  double gbps = 0;
  double pct_d2d = 0;
  double tops = 0;  // prefill: 4 * q_heads * head_dim * causal pairs / time (multiply-adds x 2)
  std::string config;
};

std::uint64_t Align256(std::uint64_t n) {
  return (n + 255) & ~std::uint64_t{255};
}

// ---- synthetic hack-int2 KV (random codes and quantizers; the sums match the codes) ----

struct HostSeq {
  hack::Layout lay;
  std::vector<std::uint8_t> codes, scales, sums;
  std::vector<std::uint16_t> tail;  // fp16
};

std::uint16_t RandomHalf(std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  float v = u(rng);
  if (v == 0.0f) v = 0.001f;
  return FloatToHalfBits(v);
}

HostSeq MakeHostSeq(std::uint32_t tokens, std::uint64_t seed) {
  HostSeq s;
  s.lay = HackLayoutFor({1, tokens, kKvHeads, kDim}, {});
  const hack::Layout& lay = s.lay;
  const HackSectionBytes b = HackSectionBytesFor(lay, DType::kFloat16);
  std::mt19937_64 rng(seed);
  s.codes.resize(b.codes);
  for (std::size_t i = 0; i < s.codes.size(); i += 8) {
    const std::uint64_t r = rng();
    std::memcpy(s.codes.data() + i, &r, std::min<std::size_t>(8, s.codes.size() - i));
  }
  s.scales.resize(b.scales);
  for (std::size_t i = 0; i < s.scales.size() / 4; ++i) {
    const std::uint16_t scale = RandomHalf(rng, 0.02f, 0.3f), mn = RandomHalf(rng, -1.0f, -0.1f);
    std::memcpy(s.scales.data() + 4 * i, &scale, 2);
    std::memcpy(s.scales.data() + 4 * i + 2, &mn, 2);
  }
  s.sums.assign(b.sums, 0);
  auto code = [&](std::uint64_t i) { return (s.codes[i / 4] >> (2 * (i % 4))) & 3u; };
  for (std::uint32_t kv = 0; kv < 2; ++kv) {
    for (std::uint32_t h = 0; h < kKvHeads; ++h) {
      for (std::uint32_t blk = 0; blk < lay.blocks(); ++blk) {
        const std::uint64_t base = lay.code_base(lay.group(0, kv, h, blk));
        const std::uint64_t sb = lay.sum_base(0, kv, h, blk);
        for (std::uint32_t t = 0; t < lay.partition; ++t) {
          for (std::uint32_t d = 0; d < kDim; ++d) {
            s.sums[sb + lay.sum_offset(kv, t, d)] +=
                static_cast<std::uint8_t>(code(base + lay.code_offset(kv, t, d)));
          }
        }
      }
    }
  }
  s.tail.resize(lay.unquantized_elements());
  for (std::uint16_t& x : s.tail) x = RandomHalf(rng, -1.0f, 1.0f);
  return s;
}

HackChunk ToChunk(const HostSeq& s) {
  HackChunk c;
  c.dtype = DType::kFloat16;
  c.shape = {1, s.lay.tokens, kKvHeads, kDim};
  c.layout = s.lay;
  c.codes.resize(s.lay.codes());
  for (std::size_t i = 0; i < c.codes.size(); ++i) {
    c.codes[i] = static_cast<std::uint8_t>((s.codes[i / 4] >> (2 * (i % 4))) & 3u);
  }
  c.quants.resize(s.lay.partitions());
  for (std::size_t i = 0; i < c.quants.size(); ++i) {
    std::uint16_t a, b;
    std::memcpy(&a, s.scales.data() + 4 * i, 2);
    std::memcpy(&b, s.scales.data() + 4 * i + 2, 2);
    c.quants[i] = {HalfBitsToFloat(a), HalfBitsToFloat(b)};
  }
  c.sums.assign(s.sums.begin(), s.sums.end());
  c.unquantized.resize(s.tail.size());
  for (std::size_t i = 0; i < s.tail.size(); ++i) c.unquantized[i] = HalfBitsToFloat(s.tail[i]);
  return c;
}

// Device copies: `sets` x `batch` sequences, each its four sections at 256-byte aligned offsets.
struct DeviceKv {
  DeviceBuffer buffer;
  DeviceBuffer descs;  // [sets][batch] HackAttentionSeq
  std::uint64_t seq_bytes = 0;
  std::uint64_t read_bytes = 0;  // per sequence, what the kernel reads
};

Result<DeviceKv> Replicate(const HostSeq& s, int sets, std::uint32_t batch) {
  DeviceKv kv;
  const std::uint64_t o1 = Align256(s.codes.size());
  const std::uint64_t o2 = o1 + Align256(s.scales.size());
  const std::uint64_t o3 = o2 + Align256(s.sums.size());
  kv.seq_bytes = o3 + Align256(s.tail.size() * 2);
  const std::uint64_t vsums = std::uint64_t{s.lay.blocks()} * kKvHeads * kDim;
  kv.read_bytes = s.codes.size() + s.scales.size() + vsums + s.tail.size() * 2 +
                  std::uint64_t{kQHeads} * kDim * 4;
  const std::uint64_t n = std::uint64_t(sets) * batch;
  KVD_ASSIGN_OR_RETURN(kv.buffer, DeviceBuffer::Allocate(n * kv.seq_bytes));
  auto* base = kv.buffer.as<std::uint8_t>();
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(base, s.codes.data(), s.codes.size(), cudaMemcpyHostToDevice),
                           "upload codes");
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(base + o1, s.scales.data(), s.scales.size(), cudaMemcpyHostToDevice),
      "upload scales");
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(base + o2, s.sums.data(), s.sums.size(), cudaMemcpyHostToDevice), "upload sums");
  if (!s.tail.empty()) {
    KVD_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(base + o3, s.tail.data(), s.tail.size() * 2, cudaMemcpyHostToDevice),
        "upload tail");
  }
  for (std::uint64_t i = 1; i < n; ++i) {
    KVD_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(base + i * kv.seq_bytes, base, kv.seq_bytes, cudaMemcpyDeviceToDevice),
        "replicate");
  }
  std::vector<HackAttentionSeq> descs(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint8_t* p = base + i * kv.seq_bytes;
    descs[i].codes = p;
    descs[i].scales = p + o1;
    descs[i].sums = p + o2;
    descs[i].tail = s.tail.empty() ? nullptr : p + o3;
    descs[i].tokens = s.lay.tokens;
    descs[i].sinks = 0;
  }
  KVD_ASSIGN_OR_RETURN(kv.descs, DeviceBuffer::Allocate(n * sizeof(HackAttentionSeq)));
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(kv.descs.data(), descs.data(), n * sizeof(HackAttentionSeq),
                                      cudaMemcpyHostToDevice),
                           "upload descriptors");
  KVD_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "replicate");
  return Result<DeviceKv>(std::move(kv));
}

std::vector<float> RandomFloats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) {
    x = nd(rng);
    if (x == 0.0f) x = 0.5f;
  }
  return v;
}

Status CheckClose(const std::vector<double>& ref, const std::vector<float>& got,
                  const std::string& what, double tolerance = kHackAttentionRelL2Tolerance) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double e = static_cast<double>(got[i]) - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
  }
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  if (!(rel <= tolerance)) {
    return Internal("verify: " + what + ": relative L2 " + std::to_string(rel) +
                    " against the CPU reference exceeds " + std::to_string(tolerance));
  }
  return Status::Ok();
}

// A relative-L2 tolerance for outputs stored as `io`: each output is the fp32 one rounded once, so
// the error grows by at most the unit roundoff u (bf16 2^-8, fp16 2^-11) of the fp32 output's norm.
double WithIoRounding(double tolerance, DType io) {
  const double u = io == DType::kBFloat16 ? 0x1p-8 : io == DType::kFloat16 ? 0x1p-11 : 0.0;
  return tolerance + u * (1.0 + tolerance);
}

HackKvCache Kv() {
  HackKvCache kv;
  kv.dtype = DType::kFloat16;
  kv.layers = 1;
  kv.layer = 0;
  kv.kv_heads = kKvHeads;
  kv.head_dim = kDim;
  return kv;
}

// q / out device buffers of fp32 or a 16-bit type (HackDecodeArgs / HackPrefillArgs::io_dtype).
struct IoBuffers {
  DType dtype;
  std::size_t elem;  // bytes per element
  static IoBuffers Of(DType d) { return {d, d == DType::kFloat32 ? 4u : 2u}; }
  // Uploads `values`, first rounding them in place to the 16-bit type (what the kernel then sees).
  Result<DeviceBuffer> Upload(std::vector<float>& values) const {
    KVD_ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::Allocate(values.size() * elem));
    std::vector<std::uint16_t> bits(elem == 2 ? values.size() : 0);
    for (std::size_t i = 0; i < bits.size(); ++i) {
      bits[i] = dtype == DType::kBFloat16 ? FloatToBf16Bits(values[i]) : FloatToHalfBits(values[i]);
      values[i] = dtype == DType::kBFloat16 ? Bf16BitsToFloat(bits[i]) : HalfBitsToFloat(bits[i]);
    }
    const void* src = elem == 2 ? static_cast<const void*>(bits.data()) : values.data();
    KVD_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(d.data(), src, values.size() * elem, cudaMemcpyHostToDevice), "upload q");
    return d;
  }
  // The first `count` elements of `d` as floats.
  Result<std::vector<float>> Download(const DeviceBuffer& d, std::size_t count) const {
    std::vector<float> out(count);
    std::vector<std::uint16_t> bits(elem == 2 ? count : 0);
    void* dst = elem == 2 ? static_cast<void*>(bits.data()) : out.data();
    KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, d.data(), count * elem, cudaMemcpyDeviceToHost),
                             "download out");
    for (std::size_t i = 0; i < bits.size(); ++i) {
      out[i] = dtype == DType::kBFloat16 ? Bf16BitsToFloat(bits[i]) : HalfBitsToFloat(bits[i]);
    }
    return out;
  }
};

// The launch configuration SizeGrid picks for a decode call, for the table (mirrors
// hack_attention.cu: ceil(tokens / 64) units; warps before the head_dim-128 kernel's twin
// doubling).
std::string DecodeConfig(std::uint32_t pairs, std::uint64_t tokens, int sms,
                         std::uint64_t max_warps) {
  const std::uint64_t units = (tokens + 63) / 64;
  std::uint64_t splits = 1;
  if (pairs < static_cast<std::uint64_t>(sms)) {
    splits = std::min<std::uint64_t>({16, sms / pairs, units});
  }
  const std::uint64_t ups = (units + splits - 1) / splits;
  std::uint64_t warps = std::clamp<std::uint64_t>(ups, 1, max_warps);
  if (max_warps == kHackDecodeFp16MaxWarps && warps > kHackDecodeFp16FullWarps &&
      ups < 8 * kHackDecodeFp16MaxWarps) {
    warps = kHackDecodeFp16FullWarps;  // as EnqueueHackDecodeAttention sizes the fp16 kernel
  }
  return std::to_string(pairs * splits) + " CTAs x " + std::to_string(warps) + " warps";
}

// `calls` decode calls per timed rep over rotating KV sets: 1 is one synchronous call (the launch
// counts); more are enqueued back to back (as an engine calls attention layer after layer, so each
// launch overlaps the previous kernel), and the time is reported per call. `graph`: the calls
// (at least kGraphMinCalls, a multiple of the set count, `calls` ignored) are captured into one
// CUDA graph and a rep is one replay of it, reported per call: what engines do.
Result<Row> MeasureDecode(std::uint32_t tokens, std::uint32_t batch, std::uint32_t calls,
                          bool graph, HackDecodeMath math, const DeviceInfo& info,
                          HackAttentionWorkspace& ws, cudaStream_t stream, const Options& opt) {
  const bool fp16 = math == HackDecodeMath::kDequantFp16;
  const HostSeq host = MakeHostSeq(tokens, 1000 + tokens);
  const std::uint64_t per_set_estimate =
      std::uint64_t{batch} * (HackSectionBytesFor(host.lay, DType::kFloat16).codes * 5 / 4);
  const int sets = SetsFor(per_set_estimate, info.l2_bytes);
  KVD_ASSIGN_OR_RETURN(DeviceKv kv, Replicate(host, sets, batch));
  // q and out: fp32 or --decode-io's 16-bit type (q then the random values rounded to it).
  std::vector<float> q = RandomFloats(std::size_t{batch} * kQHeads * kDim, 7 + batch);
  const IoBuffers bufs = IoBuffers::Of(opt.decode_io);
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_q, bufs.Upload(q));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_out, DeviceBuffer::Allocate(q.size() * bufs.elem));
  const HackKvCache cache = Kv();
  auto enqueue = [&](int s0, std::uint32_t n) -> Status {
    for (std::uint32_t c = 0; c < n; ++c) {
      const std::size_t s = (static_cast<std::size_t>(s0) + c) % static_cast<std::size_t>(sets);
      HackDecodeArgs a;
      a.seqs = kv.descs.as<HackAttentionSeq>() + s * batch;
      a.num_seqs = batch;
      a.max_tokens = tokens;
      a.q_heads = kQHeads;
      a.q = d_q.data();
      a.out = d_out.data();
      a.math = math;
      a.io_dtype = opt.decode_io;
      KVD_RETURN_IF_ERROR(EnqueueHackDecodeAttention(cache, a, ws, stream));
    }
    return Status::Ok();
  };
  auto finish = [&]() { return FinishHackAttention(ws, stream); };
  std::vector<double> us;
  bench::Graph captured;
  if (graph) {
    const auto per_set = static_cast<std::uint32_t>(sets);
    calls = (kGraphMinCalls + per_set - 1) / per_set * per_set;
    KVD_RETURN_IF_ERROR(enqueue(0, 1));  // configures the kernel outside the capture
    KVD_RETURN_IF_ERROR(finish());
    KVD_RETURN_IF_ERROR(captured.Capture(stream, [&] { return enqueue(0, calls); }));
    KVD_ASSIGN_OR_RETURN(us, bench::TimeGraph(opt, captured, stream, finish));
  } else {
    auto rep = [&](int s0) { return enqueue(s0, calls); };
    KVD_ASSIGN_OR_RETURN(us, Time(opt, sets, stream, rep, finish));
  }
  if (tokens <= kVerifyMaxTokens) {
    KVD_ASSIGN_OR_RETURN(const std::vector<float> got,
                         bufs.Download(d_out, std::size_t{kQHeads} * kDim));
    const HackChunk chunk = ToChunk(host);
    AttentionOptions ao;
    ao.q_heads = kQHeads;
    const std::span<const float> q0(q.data(), std::size_t{kQHeads} * kDim);
    if (fp16) {
      const KvTensor deq = DequantizeHack(chunk, DType::kFloat32);
      KVD_ASSIGN_OR_RETURN(AttentionResult ref, DecodeAttention(deq.view(), 0, q0, ao));
      KVD_RETURN_IF_ERROR(CheckClose(ref.out, got, "fp16 decode " + std::to_string(tokens),
                                     WithIoRounding(kHackDequantDecodeRelL2Tolerance, bufs.dtype)));
    } else {
      KVD_ASSIGN_OR_RETURN(AttentionResult ref,
                           HackDecodeAttention(HackSequence(&chunk, 1), 0, q0, ao));
      KVD_RETURN_IF_ERROR(CheckClose(ref.out, got, "decode " + std::to_string(tokens),
                                     WithIoRounding(kHackAttentionRelL2Tolerance, bufs.dtype)));
    }
  }
  for (double& u : us) u /= calls;
  Row row;
  row.op = graph ? "decode-graph" : calls > 1 ? "decode-stream" : "decode";
  if (fp16) row.op += "-fp16";
  row.batch = batch;
  row.tokens = tokens;
  row.shape = "q64 kv8 d128";
  row.median_us = Median(us);
  row.min_us = *std::min_element(us.begin(), us.end());
  // read_bytes counts fp32 queries; a 16-bit call reads half of those bytes.
  row.bytes = (kv.read_bytes - std::uint64_t{kQHeads} * kDim * (4 - bufs.elem)) * batch;
  row.gbps = static_cast<double>(row.bytes) / (row.median_us * 1e3);
  row.config =
      DecodeConfig(batch * kKvHeads, tokens, info.sm_count, fp16 ? kHackDecodeFp16MaxWarps : 16) +
      (graph       ? ", graph of " + std::to_string(calls) + " calls"
       : calls > 1 ? ", " + std::to_string(calls) + " calls"
                   : "") +
      (opt.decode_io == DType::kFloat32 ? ""
                                        : ", q / out " + std::string(DTypeName(opt.decode_io)));
  return row;
}

// Causal prefill of `queries` new tokens at positions `prefix` .. over a sequence of prefix +
// queries tokens (prefix 0: a whole prompt), computed with `math`. A rep is one replay of a CUDA
// graph of one call per KV set (at most 8; as torch_sdpa.py --graph times SDPA), reported per
// call. Verified
// on up to 64 queries where the sequence is <= kVerifyMaxTokens: kHomomorphicInt8 against
// HackPrefillAttention (INT8 Q and P), kDequantFp16 against the same with exact Q and P (attention
// over the dequantized KV), each within its tolerance (kvdepot/cuda/hack.h).
// How a prefill row calls: unstaged, staged (the whole call: staging then attention), or only
// the staging kernel (EnqueueHackPrefillStaging).
enum class Staging { kNone, kWhole, kStageOnly };

Result<Row> MeasurePrefill(std::uint32_t queries, std::uint32_t prefix, HackPrefillMath math,
                           Staging staging, const DeviceInfo& info, HackAttentionWorkspace& ws,
                           cudaStream_t stream, const Options& opt) {
  const std::uint32_t tokens = prefix + queries;
  const HostSeq host = MakeHostSeq(tokens, 2000 + tokens);
  const int sets =
      SetsFor(HackSectionBytesFor(host.lay, DType::kFloat16).codes * 5 / 4, info.l2_bytes);
  KVD_ASSIGN_OR_RETURN(DeviceKv kv, Replicate(host, sets, 1));
  std::vector<HackAttentionSeq> descs(static_cast<std::size_t>(sets));
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(descs.data(), kv.descs.data(), descs.size() * sizeof(HackAttentionSeq),
                 cudaMemcpyDeviceToHost),
      "download descriptors");
  const bool fp16 = math == HackPrefillMath::kDequantFp16;
  // q and out: fp32, or --prefill-io's 16-bit type, q then the random values rounded to it.
  const DType io = opt.prefill_io;
  std::vector<float> q = RandomFloats(std::size_t{queries} * kQHeads * kDim, 11);
  const IoBuffers bufs = IoBuffers::Of(io);
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_q, bufs.Upload(q));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_out, DeviceBuffer::Allocate(q.size() * bufs.elem));
  const HackKvCache cache = Kv();
  auto args = [&](std::uint32_t c) {
    HackPrefillArgs a;
    a.seq = descs[c % descs.size()];
    a.queries = queries;
    a.first_position = prefix;
    a.q_heads = kQHeads;
    a.q = d_q.data();
    a.out = d_out.data();
    a.math = math;
    a.io_dtype = io;
    return a;
  };
  // One scratch for every call of the graph (they run one after another on the stream).
  DeviceBuffer scratch;
  const std::uint64_t scratch_bytes = HackPrefillStagingBytes(cache, args(0));
  if (staging != Staging::kNone) {
    if (scratch_bytes == 0) return InvalidArgument("prefill: the call does not stage");
    KVD_ASSIGN_OR_RETURN(scratch, DeviceBuffer::Allocate(scratch_bytes));
  }
  auto enqueue = [&](std::uint32_t calls) -> Status {
    for (std::uint32_t c = 0; c < calls; ++c) {
      HackPrefillArgs a = args(c);
      if (staging != Staging::kNone) {
        a.staging = scratch.data();
        a.staging_bytes = scratch_bytes;
      }
      KVD_RETURN_IF_ERROR(staging == Staging::kStageOnly
                              ? EnqueueHackPrefillStaging(cache, a, ws, stream)
                              : EnqueueHackPrefillAttention(cache, a, ws, stream));
    }
    return Status::Ok();
  };
  auto finish = [&]() { return FinishHackAttention(ws, stream); };
  // At most 8 calls per graph: a call takes milliseconds, and each KV is read by every query tile
  // of its call anyway (L2 residency across calls does not matter for prefill).
  const auto calls = static_cast<std::uint32_t>(std::min(sets, 8));
  KVD_RETURN_IF_ERROR(enqueue(1));  // configures the kernel outside the capture
  KVD_RETURN_IF_ERROR(finish());
  bench::Graph captured;
  KVD_RETURN_IF_ERROR(captured.Capture(stream, [&] { return enqueue(calls); }));
  KVD_ASSIGN_OR_RETURN(std::vector<double> us, bench::TimeGraph(opt, captured, stream, finish));
  for (double& u : us) u /= calls;
  // The last replay's output against an unstaged call's: the staged kernel takes 128 keys per
  // softmax step (the unstaged one 64), so not the same bits; within the fp16 path's tolerance.
  if (staging == Staging::kWhole) {
    const std::uint32_t last = (calls - 1u) % static_cast<std::uint32_t>(descs.size());
    KVD_ASSIGN_OR_RETURN(const std::vector<float> staged, bufs.Download(d_out, q.size()));
    KVD_RETURN_IF_ERROR(EnqueueHackPrefillAttention(cache, args(last), ws, stream));
    KVD_RETURN_IF_ERROR(finish());
    KVD_ASSIGN_OR_RETURN(const std::vector<float> unstaged, bufs.Download(d_out, q.size()));
    KVD_RETURN_IF_ERROR(CheckClose(std::vector<double>(unstaged.begin(), unstaged.end()), staged,
                                   "prefill " + std::to_string(tokens) + " staged against unstaged",
                                   kHackDequantPrefillRelL2Tolerance));
  }
  const bool verify = tokens <= opt.prefill_verify_max && staging != Staging::kStageOnly;
  if (verify) {  // verify the first (up to) 64 queries
    KVD_ASSIGN_OR_RETURN(
        const std::vector<float> got,
        bufs.Download(d_out, std::size_t{std::min(queries, 64u)} * kQHeads * kDim));
    const HackChunk chunk = ToChunk(host);
    AttentionOptions ao;
    ao.q_heads = kQHeads;
    ao.int8_q = ao.int8_p = !fp16;
    KVD_ASSIGN_OR_RETURN(
        AttentionResult ref,
        HackPrefillAttention(HackSequence(&chunk, 1), 0,
                             std::span<const float>(q.data(), got.size()), prefix, ao));
    KVD_RETURN_IF_ERROR(CheckClose(
        ref.out, got, "prefill " + std::to_string(tokens),
        WithIoRounding(fp16 ? kHackDequantPrefillRelL2Tolerance : kHackAttentionRelL2Tolerance,
                       io)));
  }
  Row row;
  row.op = std::string(prefix > 0 ? "prefill-chunked" : "prefill") + (fp16 ? "-fp16" : "") +
           (staging == Staging::kWhole       ? "-staged"
            : staging == Staging::kStageOnly ? "-stage"
                                             : "");
  row.batch = 1;
  row.tokens = tokens;
  row.shape = "q64 kv8 d128 causal";
  row.median_us = Median(us);
  row.min_us = *std::min_element(us.begin(), us.end());
  row.bytes = kv.read_bytes;
  row.gbps = static_cast<double>(row.bytes) / (row.median_us * 1e3);
  // (query, key) pairs under the causal mask: queries x prefix + queries (queries + 1) / 2.
  const double pairs =
      static_cast<double>(queries) * prefix + static_cast<double>(queries) * (queries + 1) / 2;
  row.tops = 4.0 * kQHeads * kDim * pairs / (row.median_us * 1e6);
  row.config =
      std::to_string(queries) + " queries over " + std::to_string(prefix) + " cached" +
      (staging == Staging::kStageOnly ? ", staging kernel only"
       : verify                       ? ""
                                      : ", unverified") +
      (staging == Staging::kNone ? ""
                                 : ", scratch " + std::to_string(scratch_bytes >> 20) + " MiB") +
      (io == DType::kFloat32 ? "" : ", q / out " + std::string(DTypeName(io)));
  return row;
}

// Random fp16 KV [layers, 2, 256, 8, 128], never zero.
KvTensor RandomChunk(std::uint32_t layers, std::uint64_t seed) {
  KvTensor t = KvTensor::Zeros(DType::kFloat16, {layers, 256, kKvHeads, kDim});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto* p = reinterpret_cast<std::uint16_t*>(t.data.data());
  for (std::uint64_t i = 0; i < t.shape.elements(); ++i) {
    float v = nd(rng);
    if (v == 0.0f) v = 0.25f;
    p[i] = FloatToHalfBits(v);
  }
  return t;
}

// `calls` quantize / dequantize calls per timed rep (1: synchronous; more: streamed), over
// rotating inputs, or (`batch`, quantize only) one EnqueueQuantizeHackBatch of `calls` chunks,
// each with its own input and sections; the reported time is per chunk.
Result<Row> MeasureCodec(bool quantize, std::uint32_t layers, bool stochastic, std::uint32_t calls,
                         bool batch, const DeviceInfo& info, cudaStream_t stream,
                         const Options& opt) {
  const KvTensor t = RandomChunk(layers, 31 + layers);
  HackOptions o;
  if (stochastic) {
    o.rounding = HackRounding::kStochastic;
    o.seed = 12345;
  }
  const hack::Layout lay = HackLayoutFor(t.shape, o);
  const HackSectionBytes sb = HackSectionBytesFor(lay, t.dtype);
  const std::uint64_t o1 = Align256(sb.codes), o2 = o1 + Align256(sb.scales),
                      o3 = o2 + Align256(sb.sums), sec_bytes = o3 + Align256(sb.tail) + 256;
  const std::uint64_t in_bytes = t.data.size();
  const int sets = std::max(SetsFor(quantize ? in_bytes : sec_bytes, info.l2_bytes),
                            batch ? static_cast<int>(calls) : 1);
  // quantize: `sets` inputs, one set of sections (a batch: one per chunk); dequantize: `sets`
  // section sets, one output.
  const int out_sets = quantize ? (batch ? static_cast<int>(calls) : 1) : sets;
  KVD_ASSIGN_OR_RETURN(DeviceBuffer tensors,
                       DeviceBuffer::Allocate((quantize ? sets : 1) * in_bytes));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer sections, DeviceBuffer::Allocate(out_sets * sec_bytes));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer err, DeviceBuffer::Allocate(sizeof(unsigned long long)));
  auto sec = [&](int s) {
    std::uint8_t* b = sections.as<std::uint8_t>() + std::uint64_t(s) * sec_bytes;
    return HackDeviceSections{b, b + o1, b + o2, b + o3};
  };
  for (int s = 0; s < (quantize ? sets : 1); ++s) {
    KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(tensors.as<std::uint8_t>() + std::uint64_t(s) * in_bytes,
                                        t.data.data(), in_bytes, cudaMemcpyHostToDevice),
                             "upload");
  }
  auto* e = err.as<unsigned long long>();
  if (!quantize) {  // sections from the GPU quantizer, replicated
    KVD_RETURN_IF_ERROR(
        EnqueueQuantizeHack(t.dtype, t.shape, o, tensors.data(), sec(0), e, stream));
    KVD_RETURN_IF_ERROR(FinishQuantizeHack(t.shape, e, stream));
    for (int s = 1; s < sets; ++s) {
      KVD_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(sec(s).codes, sec(0).codes, sec_bytes - 256, cudaMemcpyDeviceToDevice),
          "replicate");
    }
  }
  KVD_ASSIGN_OR_RETURN(
      std::vector<double> us,
      Time(
          opt, sets, stream,
          [&](int s0) -> Status {
            if (batch) {
              std::vector<HackQuantizeChunk> chunks(calls);
              for (std::uint32_t c = 0; c < calls; ++c) {
                const int s = static_cast<int>((s0 + c) % static_cast<std::uint32_t>(sets));
                chunks[c] = {tensors.as<std::uint8_t>() + std::uint64_t(s) * in_bytes,
                             sec(static_cast<int>(c)), o.seed};
              }
              return EnqueueQuantizeHackBatch(t.dtype, t.shape, o, chunks, e, stream);
            }
            for (std::uint32_t c = 0; c < calls; ++c) {
              const int s = static_cast<int>((s0 + c) % static_cast<std::uint32_t>(sets));
              if (quantize) {
                KVD_RETURN_IF_ERROR(EnqueueQuantizeHack(
                    t.dtype, t.shape, o, tensors.as<std::uint8_t>() + std::uint64_t(s) * in_bytes,
                    sec(0), e, stream));
                continue;
              }
              const HackDeviceSections w = sec(s);
              KVD_RETURN_IF_ERROR(EnqueueDequantizeHack(
                  t.dtype, t.shape, o, HackDeviceSectionsView{w.codes, w.scales, w.sums, w.tail},
                  t.dtype, tensors.data(), stream));
            }
            return Status::Ok();
          },
          [&]() -> Status {
            if (batch) return FinishQuantizeHackBatch(t.shape, e, stream);
            if (quantize) return FinishQuantizeHack(t.shape, e, stream);
            KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "sync");
            return Status::Ok();
          }));
  // Verify against the CPU byte for byte.
  KVD_ASSIGN_OR_RETURN(std::vector<std::byte> cpu, EncodeHack(t.view(), o));
  KVD_ASSIGN_OR_RETURN(ContainerView view, ParseContainer(cpu));
  for (int out = 0; quantize && out < out_sets; ++out) {
    const HackDeviceSections w = sec(out);
    const std::pair<SectionKind, const void*> parts[] = {{SectionKind::kCodes, w.codes},
                                                         {SectionKind::kScales, w.scales},
                                                         {SectionKind::kSums, w.sums}};
    for (const auto& [kind, ptr] : parts) {
      const SectionView* sv = view.Find(kind);
      std::vector<std::byte> got(sv->length);
      KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(got.data(), ptr, got.size(), cudaMemcpyDeviceToHost),
                               "download");
      if (std::memcmp(got.data(), sv->bytes.data(), got.size()) != 0) {
        return Internal(std::string("verify: GPU quantize differs from EncodeHack in section ") +
                        std::string(SectionKindName(static_cast<std::uint32_t>(kind))) +
                        " (output " + std::to_string(out) + ")");
      }
    }
  }
  if (!quantize) {
    KVD_ASSIGN_OR_RETURN(HackChunk chunk, UnpackHack(view));
    const KvTensor want = DequantizeHack(chunk, t.dtype);
    std::vector<std::byte> got(in_bytes);
    KVD_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(got.data(), tensors.data(), in_bytes, cudaMemcpyDeviceToHost), "download");
    if (got != want.data) return Internal("verify: GPU dequantize differs from DequantizeHack");
  }
  for (double& u : us) u /= calls;
  Row row;
  row.op = std::string(quantize ? "quantize" : "dequantize") + (stochastic ? "-stoch" : "") +
           (batch       ? "-batch"
            : calls > 1 ? "-stream"
                        : "");
  row.batch = 1;
  row.tokens = 256;
  row.shape = t.shape.ToString();
  row.median_us = Median(us);
  row.min_us = *std::min_element(us.begin(), us.end());
  row.bytes = in_bytes + sb.codes + sb.scales + sb.sums + sb.tail;
  row.gbps = static_cast<double>(row.bytes) / (row.median_us * 1e3);
  row.config = batch       ? std::to_string(calls) + " chunks, one call"
               : calls > 1 ? std::to_string(calls) + " calls"
                           : "";
  return row;
}

// "4096:0,1024:130048" -> {{4096, 0}, {1024, 130048}}: NEW >= 1, NEW + PREFIX <= 2^20.
bool ParseChunked(const char* value, std::vector<std::pair<std::uint32_t, std::uint32_t>>& out) {
  out.clear();
  std::stringstream ss(value);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const std::size_t colon = part.find(':');
    if (colon == std::string::npos) return false;
    const long queries = std::strtol(part.c_str(), nullptr, 10);
    const long prefix = std::strtol(part.c_str() + colon + 1, nullptr, 10);
    if (queries < 1 || prefix < 0 || queries + prefix > (1L << 20)) return false;
    out.emplace_back(static_cast<std::uint32_t>(queries), static_cast<std::uint32_t>(prefix));
  }
  return !out.empty();
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--json FILE] [--reps N (>= 50, default 100)] [--warmup N (default 5)] "
               "[--device N] [--only decode|prefill|quantize|dequantize] "
               "[--lengths 4096,32768,131072] [--batches 1,16] [--prefill-lengths 1024,4096] "
               "[--chunked NEW:PREFIX,...] [--prefill-verify-max TOKENS (default 32768)] "
               "[--prefill-math int8|fp16|both] [--prefill-staged off|on] "
               "[--prefill-io fp32|fp16|bf16] "
               "[--decode-math int8|fp16|both] [--decode-rows all|graph] "
               "[--decode-io fp32|fp16|bf16] [--codec-layers 32,80]\n",
               argv0);
  return 64;
}

int Main(int argc, char** argv) {
  constexpr const char* kName = "kvdepot_hack_bench";
  Options opt;
  const bool parsed = bench::ParseArgs(argc, argv, opt, [&](std::string_view flag, const char* v) {
    if (v == nullptr) return false;
    if (flag == "--lengths") return bench::ParseUintList(v, opt.lengths, 64, 1 << 20);
    if (flag == "--batches") return bench::ParseUintList(v, opt.batches, 1, 256);
    if (flag == "--prefill-lengths") return bench::ParseUintList(v, opt.prefill_lengths, 64, 65536);
    if (flag == "--codec-layers") return bench::ParseUintList(v, opt.codec_layers, 1, 128);
    if (flag == "--chunked") return ParseChunked(v, opt.chunked);
    if (flag == "--prefill-verify-max") {
      std::vector<std::uint32_t> one;
      if (!bench::ParseUintList(v, one, 0, 1 << 20) || one.size() != 1) return false;
      opt.prefill_verify_max = one[0];
      return true;
    }
    if (flag == "--prefill-math") {
      opt.prefill_math = v;
      return opt.prefill_math == "int8" || opt.prefill_math == "fp16" || opt.prefill_math == "both";
    }
    if (flag == "--prefill-io") {
      const Result<DType> io = ParseDType(v);
      if (!io.ok()) return false;
      opt.prefill_io = *io;
      return true;
    }
    if (flag == "--decode-io") {
      const Result<DType> io = ParseDType(v);
      if (!io.ok()) return false;
      opt.decode_io = *io;
      return true;
    }
    if (flag == "--prefill-staged") {
      opt.prefill_staged = std::string_view(v) == "on";
      return opt.prefill_staged || std::string_view(v) == "off";
    }
    if (flag == "--decode-math") {
      opt.decode_math = v;
      return opt.decode_math == "int8" || opt.decode_math == "fp16" || opt.decode_math == "both";
    }
    if (flag == "--decode-rows") {
      opt.decode_rows = v;
      return opt.decode_rows == "all" || opt.decode_rows == "graph";
    }
    if (flag != "--only") return false;
    opt.only = v;
    return opt.only == "decode" || opt.only == "prefill" || opt.only == "quantize" ||
           opt.only == "dequantize";
  });
  if (!parsed) return Usage(argv[0]);
  bench::BenchStart start;
  if (const int rc = bench::StartBench(kName, opt, start); rc != 0) return rc;
  const DeviceInfo* info = &start.info;
  const Stream* stream = &start.stream;
  std::FILE* json = start.json;
  Result<HackAttentionWorkspace> ws = HackAttentionWorkspace::Create();
  if (!ws.ok()) {
    std::fprintf(stderr, "%s: %s\n", kName, ws.status().ToString().c_str());
    return 1;
  }
  Result<double> d2d = MeasureD2d(stream->get(), opt);
  if (!d2d.ok()) {
    std::fprintf(stderr, "kvdepot_hack_bench: d2d: %s\n", d2d.status().ToString().c_str());
    return 1;
  }
  std::printf("d2d ceiling %.1f GB/s (read + write); %d warm-up + %d timed reps, median\n", *d2d,
              opt.warmup, opt.reps);
  std::printf("%-16s %-28s %5s %7s %11s %11s %13s %9s %7s %7s  %s\n", "op", "shape", "batch",
              "tokens", "median us", "min us", "bytes", "GB/s", "% d2d", "TOPS", "config");
  int rc = 0;
  auto report = [&](Result<Row> row, const std::string& what) {
    if (!row.ok()) {
      std::fprintf(stderr, "kvdepot_hack_bench: %s: %s\n", what.c_str(),
                   row.status().ToString().c_str());
      rc = 1;
      return;
    }
    row->pct_d2d = 100.0 * row->gbps / *d2d;
    std::printf("%-16s %-28s %5u %7u %11.2f %11.2f %13llu %9.1f %6.1f%% %7.1f  %s\n",
                row->op.c_str(), row->shape.c_str(), row->batch, row->tokens, row->median_us,
                row->min_us, static_cast<unsigned long long>(row->bytes), row->gbps, row->pct_d2d,
                row->tops, row->config.c_str());
    std::fflush(stdout);
    if (json != nullptr) {
      std::fprintf(json,
                   "{\"bench\":\"gpu_hack\",\"op\":\"%s\",\"shape\":\"%s\",\"batch\":%u,"
                   "\"tokens\":%u,\"device\":\"%s\",\"median_us\":%.3f,\"min_us\":%.3f,"
                   "\"bytes\":%llu,\"gbps\":%.2f,\"d2d_gbps\":%.2f,\"pct_of_d2d\":%.2f,"
                   "\"tops\":%.2f,\"config\":\"%s\",\"reps\":%d}\n",
                   row->op.c_str(), row->shape.c_str(), row->batch, row->tokens,
                   JsonEscape(info->name).c_str(), row->median_us, row->min_us,
                   static_cast<unsigned long long>(row->bytes), row->gbps, *d2d, row->pct_d2d,
                   row->tops, row->config.c_str(), opt.reps);
    }
  };
  const bool all = opt.only.empty();
  if (all || opt.only == "decode") {
    std::vector<HackDecodeMath> maths;
    if (opt.decode_math != "fp16") maths.push_back(HackDecodeMath::kHomomorphicInt8);
    if (opt.decode_math != "int8") maths.push_back(HackDecodeMath::kDequantFp16);
    std::vector<std::uint32_t> modes = {0u};  // 0: graph replay
    if (opt.decode_rows == "all") modes = {1u, kStreamCalls, 0u};
    for (std::uint32_t calls : modes) {
      for (std::uint32_t batch : opt.batches) {
        for (std::uint32_t tokens : opt.lengths) {
          for (const HackDecodeMath math : maths) {
            const bool fp16 = math == HackDecodeMath::kDequantFp16;
            report(MeasureDecode(tokens, batch, calls, calls == 0, math, *info, *ws, stream->get(),
                                 opt),
                   std::string(fp16 ? "fp16 " : "") + "decode batch " + std::to_string(batch) +
                       " tokens " + std::to_string(tokens) +
                       (calls == 0 ? " graph" : " calls " + std::to_string(calls)));
          }
        }
      }
    }
  }
  if (all || opt.only == "prefill") {
    std::vector<HackPrefillMath> maths;
    if (opt.prefill_math != "fp16") maths.push_back(HackPrefillMath::kHomomorphicInt8);
    if (opt.prefill_math != "int8") maths.push_back(HackPrefillMath::kDequantFp16);
    for (const HackPrefillMath math : maths) {
      const std::string name = math == HackPrefillMath::kDequantFp16 ? " fp16" : " int8";
      std::vector<Staging> stagings = {Staging::kNone};
      if (opt.prefill_staged && math == HackPrefillMath::kDequantFp16) {
        stagings = {Staging::kNone, Staging::kWhole, Staging::kStageOnly};
      }
      std::vector<std::pair<std::uint32_t, std::uint32_t>> shapes;  // {new tokens, cached}
      for (std::uint32_t tokens : opt.prefill_lengths) shapes.emplace_back(tokens, 0u);
      shapes.insert(shapes.end(), opt.chunked.begin(), opt.chunked.end());
      for (const auto& [queries, prefix] : shapes) {
        for (const Staging staging : stagings) {
          report(MeasurePrefill(queries, prefix, math, staging, *info, *ws, stream->get(), opt),
                 "prefill " + std::to_string(queries) + " over " + std::to_string(prefix) + name +
                     (staging == Staging::kWhole       ? " staged"
                      : staging == Staging::kStageOnly ? " staging only"
                                                       : ""));
        }
      }
    }
  }
  for (bool quantize : {true, false}) {
    if (!all && opt.only != (quantize ? "quantize" : "dequantize")) continue;
    for (std::uint32_t calls : {1u, kStreamCalls}) {
      for (std::uint32_t layers : opt.codec_layers) {
        report(MeasureCodec(quantize, layers, false, calls, false, *info, stream->get(), opt),
               std::string(quantize ? "quantize" : "dequantize") + " layers " +
                   std::to_string(layers) + " calls " + std::to_string(calls));
      }
    }
    if (quantize) {
      for (std::uint32_t chunks : {kStreamCalls, kHackQuantizeMaxChunks}) {
        for (std::uint32_t layers : opt.codec_layers) {
          report(
              MeasureCodec(true, layers, false, chunks, true, *info, stream->get(), opt),
              "quantize batch of " + std::to_string(chunks) + " layers " + std::to_string(layers));
        }
      }
      report(MeasureCodec(true, 32, true, 1, false, *info, stream->get(), opt),
             "quantize stochastic");
    }
  }
  return bench::CloseJson(kName, opt, start, rc);
}

}  // namespace
}  // namespace kvdepot::cuda

int main(int argc, char** argv) {
  return kvdepot::cuda::Main(argc, argv);
}
