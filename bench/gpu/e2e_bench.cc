// kvdepot_e2e_bench: the attention step an engine runs after a prefix hit, end to end from a
// running kvdepotd on the same host (issue 24 §4; docs/hack-gpu.md, "End to end from kvdepotd").
//
// Stores --max-prefix tokens of synthetic bf16 KV ([layers, 2, 256, kv_heads, head_dim] chunks) in
// the daemon twice, as hack-int2 and as raw chunks, GETs each twice so the daemon promotes them to
// its GPU tier, then for each prefix length P (--prefixes, multiples of 256):
//  * HACK: lease the P/256 hack-int2 chunks (client::GpuFetcher: LEASE_GET + CUDA IPC + the
//    metadata checks), copy their codes / scales / sums device-to-device from the daemon's pool
//    into the engine's page pool (one copy per chunk: the attention kernels address pages as one
//    base plus a page stride, which separate leased containers and the engine's own new pages do
//    not share), release; quantize the --new new tokens' KV into the next pages (the kernel's
//    contract: full 64-token blocks are quantized, only an unfinished last block stays in the tail;
//    --new is a multiple of 256, so there is none); prefill them over the whole sequence with
//    HackPrefillMath::kDequantFp16 for every layer, with a staging scratch (the staged path: each
//    layer's KV tiles unpacked once per call, docs/hack-gpu.md) unless --prefill-staged off. Time
//    to first token = all of that.
//  * then --decode decode steps, each over every layer with --decode-math (int8: the default,
//    HackDecodeMath::kHomomorphicInt8; fp16: kDequantFp16): step s
//    attends to P + new + s + 1 tokens (its unfinished block in the tail; at s = 63 the block is
//    complete and quantized into a page); the steps' launches are captured into one CUDA graph
//    and replayed, per token = replay / steps.
//  * bf16 baseline, fetch part: lease the P/256 raw chunks and decode (copy) them into a device
//    buffer, release. Its attention part is torch SDPA, timed by bench/gpu/torch_sdpa.py in the
//    same device call (scripts/e2e-gpu.sh).
// Checks: the prefill output of the first and last layer, and decode step 0 and 63 of the first
// layer, over the leased pages equal the same kernels over one contiguous chunk of the same KV
// quantized locally (max |diff| <= 1e-5 relative to max |out|); the raw chunks fetched equal their
// source bytes. One JSON line per prefix on stdout. Exit 0 ok, 1 error or mismatch, 2 no GPU.
//
//   kvdepot_e2e_bench --addr unix:PATH [--prefixes 8192,32768] [--new 1024] [--decode 64]
//                     [--layers 32] [--q-heads 32] [--kv-heads 8] [--head-dim 128] [--reps 5]
//                     [--prefill-staged on|off] [--decode-math int8|fp16] [--io fp32|bf16]
//
// --io: the queries' and outputs' element type of every attention call (HackPrefillArgs /
// HackDecodeArgs::io_dtype; default fp32); bf16 is what an engine's activations are, and what the
// SDPA bf16 baseline takes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kvdepot/client/gpu_fetch.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/hack.h"
#include "kvdepot/cuda/status.h"

using namespace kvdepot;

namespace {

constexpr std::uint32_t kChunkTokens = 256;
constexpr std::uint32_t kDistinctChunks = 8;  // distinct synthetic tensors, reused cyclically

struct Options {
  std::string addr;
  std::vector<std::uint32_t> prefixes{8192, 32768};
  std::uint32_t new_tokens = 1024, decode = 64, q_heads = 32, reps = 5;
  bool prefill_staged = true;  // pass HackPrefillArgs::staging (one scratch for every layer)
  cuda::HackDecodeMath decode_math = cuda::HackDecodeMath::kHomomorphicInt8;  // --decode-math
  DType io = DType::kFloat32;                                                 // --io
  KvShape shape{32, kChunkTokens, 8, 128};
};

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "kvdepot_e2e_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of fn() (which ends by synchronising), median over reps after one warm-up.
template <typename Fn>
double TimeMedian(std::uint32_t reps, Fn fn) {
  fn();
  std::vector<double> s;
  for (std::uint32_t r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return Median(s);
}

// Largest |a - b| over max |b| (0 when b is all zeros and a equals it).
double RelMaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, mag = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
    mag = std::max(mag, std::fabs(double{b[i]}));
  }
  return mag > 0 ? diff / mag : diff;
}

// n elements of `io` (fp32 or bf16) at device address d, as floats.
std::vector<float> Download(const void* d, std::size_t n, DType io) {
  std::vector<float> h(n);
  if (io == DType::kFloat32) {
    cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
  }
  std::vector<std::uint16_t> bits(n);
  cudaMemcpy(bits.data(), d, n * 2, cudaMemcpyDeviceToHost);
  for (std::size_t i = 0; i < n; ++i) h[i] = Bf16BitsToFloat(bits[i]);
  return h;
}

bool ParseList(const char* v, std::vector<std::uint32_t>& out) {
  out.clear();
  for (const char* p = v; *p != '\0';) {
    char* end = nullptr;
    const unsigned long x = std::strtoul(p, &end, 10);
    if (end == p || x == 0 || x % kChunkTokens != 0) return false;
    out.push_back(static_cast<std::uint32_t>(x));
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') return false;
  }
  return !out.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const auto v = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    if (a == "--addr") {
      o.addr = argv[i + 1];
    } else if (a == "--prefixes") {
      if (!ParseList(argv[i + 1], o.prefixes)) {
        std::fprintf(stderr, "--prefixes: positive multiples of 256, comma-separated\n");
        return 1;
      }
    } else if (a == "--new") {
      o.new_tokens = v;
    } else if (a == "--decode") {
      o.decode = v;
    } else if (a == "--layers") {
      o.shape.layers = v;
    } else if (a == "--q-heads") {
      o.q_heads = v;
    } else if (a == "--kv-heads") {
      o.shape.kv_heads = v;
    } else if (a == "--head-dim") {
      o.shape.head_dim = v;
    } else if (a == "--reps") {
      o.reps = v;
    } else if (a == "--decode-math") {
      const std::string m = argv[i + 1];
      if (m != "int8" && m != "fp16") {
        std::fprintf(stderr, "--decode-math: int8 (kHomomorphicInt8) or fp16 (kDequantFp16)\n");
        return 1;
      }
      o.decode_math =
          m == "fp16" ? cuda::HackDecodeMath::kDequantFp16 : cuda::HackDecodeMath::kHomomorphicInt8;
    } else if (a == "--io") {
      const std::string t = argv[i + 1];
      if (t != "fp32" && t != "bf16") {
        std::fprintf(stderr, "--io: fp32 or bf16 (the attention calls' q and out)\n");
        return 1;
      }
      o.io = t == "bf16" ? DType::kBFloat16 : DType::kFloat32;
    } else if (a == "--prefill-staged") {
      const std::string on = argv[i + 1];
      if (on != "on" && on != "off") {
        std::fprintf(stderr, "--prefill-staged: on or off\n");
        return 1;
      }
      o.prefill_staged = on == "on";
    } else {
      std::fprintf(stderr, "kvdepot_e2e_bench: unknown argument %s\n", a.c_str());
      return 1;
    }
  }
  if (o.new_tokens == 0 || o.new_tokens % kChunkTokens != 0 || o.decode == 0 || o.decode > 64 ||
      o.reps == 0) {
    std::fprintf(stderr, "--new: a positive multiple of 256; --decode: 1..64; --reps >= 1\n");
    return 1;
  }
  if (Status s = cuda::GpuAvailable(); !s.ok()) {
    std::fprintf(stderr, "no GPU: %s\n", s.message().c_str());
    return 2;
  }
  client::ClientOptions copt;
  copt.address = o.addr;
  auto conn = client::Connection::Connect(copt);
  if (!conn.ok()) return Fail("connect " + o.addr, conn.status());
  const KvShape& shape = o.shape;
  const std::uint32_t max_prefix = *std::max_element(o.prefixes.begin(), o.prefixes.end());
  const std::uint32_t max_chunks = max_prefix / kChunkTokens;
  const std::uint64_t row = std::uint64_t{shape.kv_heads} * shape.head_dim;  // elements
  const std::uint64_t chunk_bytes = std::uint64_t{shape.layers} * 2 * kChunkTokens * row * 2;

  // ---- store and promote -------------------------------------------------------------------
  std::vector<KvTensor> tensors;
  std::vector<std::vector<std::byte>> hack_containers, raw_containers;
  for (std::uint32_t c = 0; c < kDistinctChunks; ++c) {
    tensors.push_back(*SynthesizeKv(SynthOptions{shape, c + 1, DType::kBFloat16}));
    auto h = cuda::EncodeHackGpu(tensors.back().view());
    if (!h.ok()) return Fail("encode hack", h.status());
    hack_containers.push_back(std::move(*h));
    EncodeOptions raw;
    raw.codec = CodecId::kRaw;
    raw_containers.push_back(*EncodeChunk(tensors.back().view(), raw));
  }
  std::vector<std::string> hack_keys, raw_keys;
  for (std::uint32_t c = 0; c < max_chunks; ++c) {
    hack_keys.push_back("e2e/hack/" + std::to_string(c));
    raw_keys.push_back("e2e/raw/" + std::to_string(c));
    if (Status s = (*conn)->Put(hack_keys[c], hack_containers[c % kDistinctChunks]); !s.ok()) {
      return Fail("put " + hack_keys[c], s);
    }
    if (Status s = (*conn)->Put(raw_keys[c], raw_containers[c % kDistinctChunks]); !s.ok()) {
      return Fail("put " + raw_keys[c], s);
    }
  }
  for (const auto* keys : {&hack_keys, &raw_keys}) {
    for (int hit = 0; hit < 2; ++hit) {
      for (const auto& key : *keys) {
        if (auto g = (*conn)->Get(key); !g.ok() || !*g) return Fail("get " + key, g.status());
      }
    }
    bool all_gpu = false;
    for (int wait = 0; wait < 100 && !all_gpu; ++wait) {
      auto l = (*conn)->Lookup(*keys);
      if (!l.ok()) return Fail("lookup", l.status());
      all_gpu = std::all_of(l->tiers.begin(), l->tiers.end(),
                            [](protocol::Tier t) { return t == protocol::Tier::kGpu; });
      if (!all_gpu) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!all_gpu)
      std::fprintf(stderr, "note: not every %s chunk is in the GPU tier\n", (*keys)[0].c_str());
  }
  auto fetcher = client::GpuFetcher::Open(**conn, max_chunks, shape.layers);
  if (!fetcher.ok()) return Fail("open fetcher", fetcher.status());
  auto stream_r = cuda::Stream::Create();
  auto ws = cuda::HackAttentionWorkspace::Create();
  if (!stream_r.ok() || !ws.ok()) return Fail("stream/workspace", ws.status());
  const cudaStream_t stream = stream_r->get();

  // ---- page pool layout: one page = one 256-token chunk's sections ------------------------
  const hack::Layout page_layout = HackLayoutFor(shape, HackOptions{});
  const HackSectionBytes sec = HackSectionBytesFor(page_layout, DType::kBFloat16);
  auto round16 = [](std::uint64_t b) { return (b + 15) / 16 * 16; };
  const std::uint64_t codes_stride = round16(sec.codes), scales_stride = round16(sec.scales),
                      sums_stride = round16(sec.sums);
  const std::uint32_t decode_pages = 1;  // the decode tokens' first block (step 63)
  const std::uint32_t max_pages = max_chunks + o.new_tokens / kChunkTokens + decode_pages;
  auto pool_codes = cuda::DeviceBuffer::Allocate(codes_stride * max_pages);
  auto pool_scales = cuda::DeviceBuffer::Allocate(scales_stride * max_pages);
  auto pool_sums = cuda::DeviceBuffer::Allocate(sums_stride * max_pages);
  auto tables = cuda::DeviceBuffer::Allocate(sizeof(std::int32_t) * max_pages);
  auto error = cuda::DeviceBuffer::Allocate(8);
  // New and decode tokens' KV (bf16, [layers, 2, 256, kv_heads, head_dim] per page).
  const std::uint32_t new_pages = o.new_tokens / kChunkTokens + decode_pages;
  auto new_kv = cuda::DeviceBuffer::Allocate(chunk_bytes * new_pages);
  // Decode tails: step s keeps its (s + 1) % 64 unfinished tokens, [layers, 2, U, heads, dim].
  auto tails = cuda::DeviceBuffer::Allocate(std::uint64_t{shape.layers} * 2 * 64 * row * 2 * 64);
  auto seqs = cuda::DeviceBuffer::Allocate(sizeof(cuda::HackAttentionSeq) * o.decode);
  const std::uint64_t max_queries = o.new_tokens;
  const std::uint64_t q_elems = max_queries * o.q_heads * shape.head_dim;
  auto q = cuda::DeviceBuffer::Allocate(q_elems * 4);
  auto out = cuda::DeviceBuffer::Allocate(q_elems * 4 * shape.layers);
  auto raw_out = cuda::DeviceBuffer::Allocate(chunk_bytes * max_chunks);
  auto distinct = cuda::DeviceBuffer::Allocate(chunk_bytes * kDistinctChunks);  // for the checks
  if (!pool_codes.ok() || !pool_scales.ok() || !pool_sums.ok() || !tables.ok() || !error.ok() ||
      !new_kv.ok() || !tails.ok() || !seqs.ok() || !q.ok() || !out.ok() || !raw_out.ok() ||
      !distinct.ok()) {
    return Fail("alloc", Status(StatusCode::kResourceExhausted, "device buffers"));
  }
  {
    std::vector<std::int32_t> identity(max_pages);
    for (std::uint32_t i = 0; i < max_pages; ++i) identity[i] = static_cast<std::int32_t>(i);
    cudaMemcpy(tables->data(), identity.data(), identity.size() * 4, cudaMemcpyHostToDevice);
    for (std::uint32_t c = 0; c < kDistinctChunks; ++c) {
      cudaMemcpy(distinct->as<std::byte>() + c * chunk_bytes, tensors[c].data.data(), chunk_bytes,
                 cudaMemcpyHostToDevice);
    }
    for (std::uint32_t p = 0; p < new_pages; ++p) {
      const KvTensor& t = tensors[(p + 3) % kDistinctChunks];
      cudaMemcpy(new_kv->as<std::byte>() + p * chunk_bytes, t.data.data(), chunk_bytes,
                 cudaMemcpyHostToDevice);
    }
    std::vector<float> hq(q_elems);
    std::uint64_t x = 88172645463325252ull;
    for (float& v : hq) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      v = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    }
    if (o.io == DType::kFloat32) {
      cudaMemcpy(q->data(), hq.data(), hq.size() * 4, cudaMemcpyHostToDevice);
    } else {
      std::vector<std::uint16_t> bits(hq.size());
      for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = FloatToBf16Bits(hq[i]);
      cudaMemcpy(q->data(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice);
    }
  }
  // Layer l's attention output ([queries][q_heads][head_dim] of o.io).
  auto out_at = [&](std::uint32_t layer) -> void* {
    return out->as<std::byte>() + std::uint64_t{layer} * q_elems * DTypeSize(o.io);
  };
  cuda::HackKvCache kv;
  kv.dtype = DType::kBFloat16;
  kv.layers = shape.layers;
  kv.kv_heads = shape.kv_heads;
  kv.head_dim = shape.head_dim;
  kv.page_blocks = kChunkTokens / 64;
  kv.num_pages = max_pages;
  kv.page_codes = pool_codes->as<std::uint8_t>();
  kv.page_scales = pool_scales->as<std::uint8_t>();
  kv.page_sums = pool_sums->as<std::uint8_t>();
  kv.page_codes_bytes = codes_stride;
  kv.page_scales_bytes = scales_stride;
  kv.page_sums_bytes = sums_stride;
  kv.block_tables = tables->as<std::int32_t>();
  kv.max_pages_per_seq = max_pages;
  auto page_sections = [&](std::uint32_t page) {
    cuda::HackDeviceSections s;
    s.codes = pool_codes->as<std::uint8_t>() + page * codes_stride;
    s.scales = pool_scales->as<std::uint8_t>() + page * scales_stride;
    s.sums = pool_sums->as<std::uint8_t>() + page * sums_stride;
    return s;
  };
  auto* err = error->as<unsigned long long>();

  int failures = 0;
  for (const std::uint32_t prefix : o.prefixes) {
    const std::uint32_t chunks = prefix / kChunkTokens;
    const std::uint32_t total = prefix + o.new_tokens;
    const std::span<const std::string> hkeys(hack_keys.data(), chunks);
    const std::span<const std::string> rkeys(raw_keys.data(), chunks);
    Status failure;
    auto check = [&](const Status& st) {
      if (!st.ok() && failure.ok()) failure = st;
    };

    // -- HACK: fetch (lease + D2D copy of the sections into the page pool + release) ----------
    double lease_s = 0;
    auto fetch_hack = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      auto held = (*fetcher)->Lease(hkeys, stream);
      lease_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      check(held.status());
      if (!held.ok()) return;
      if (held->chunks.size() != chunks) {
        check(Status(StatusCode::kNotFound, "not every hack-int2 chunk was leased"));
        return;
      }
      for (std::uint32_t c = 0; c < chunks; ++c) {
        const cuda::HackDeviceSectionsView& v = held->chunks[c].hack_sections;
        const cuda::HackDeviceSections d = page_sections(c);
        cudaMemcpyAsync(d.codes, v.codes, sec.codes, cudaMemcpyDeviceToDevice, stream);
        cudaMemcpyAsync(d.scales, v.scales, sec.scales, cudaMemcpyDeviceToDevice, stream);
        cudaMemcpyAsync(d.sums, v.sums, sec.sums, cudaMemcpyDeviceToDevice, stream);
      }
      check(cuda::StatusFromCuda(cudaStreamSynchronize(stream), "copy of the leased sections"));
      check((*fetcher)->Release(*held));
    };
    // -- quantize the new tokens (and the decode tokens' first block) into the next pages --------
    auto quantize_new = [&](std::uint32_t pages) {
      std::vector<cuda::HackQuantizeChunk> qc;
      for (std::uint32_t p = 0; p < pages; ++p) {
        cuda::HackQuantizeChunk c;
        c.input = new_kv->as<std::byte>() + p * chunk_bytes;
        c.out = page_sections(chunks + p);
        qc.push_back(c);
      }
      for (std::size_t first = 0; first < qc.size(); first += cuda::kHackQuantizeMaxChunks) {
        const std::size_t n =
            std::min<std::size_t>(cuda::kHackQuantizeMaxChunks, qc.size() - first);
        check(cuda::EnqueueQuantizeHackBatch(DType::kBFloat16, shape, HackOptions{},
                                             std::span(qc).subspan(first, n), err, stream));
        check(cuda::FinishQuantizeHackBatch(shape, err, stream));
      }
    };
    // One staging scratch serves every layer's prefill (the calls run one after another on
    // `stream`); sized for this prefix, as an engine sizes one for its longest call.
    cuda::DeviceBuffer staging;
    auto prefill_args = [&](std::uint32_t layer) {
      cuda::HackPrefillArgs a;
      a.seq.tokens = total;
      a.queries = o.new_tokens;
      a.first_position = prefix;
      a.q_heads = o.q_heads;
      a.q = q->data();
      a.out = out_at(layer);
      a.io_dtype = o.io;
      a.math = cuda::HackPrefillMath::kDequantFp16;
      a.staging = staging.data();
      a.staging_bytes = staging.size();
      return a;
    };
    const std::uint64_t staging_bytes =
        o.prefill_staged ? cuda::HackPrefillStagingBytes(kv, prefill_args(0)) : 0;
    if (staging_bytes > 0) {
      auto buffer = cuda::DeviceBuffer::Allocate(staging_bytes);
      if (!buffer.ok()) return Fail("alloc staging scratch", buffer.status());
      staging = std::move(*buffer);
    }
    auto prefill_all = [&] {
      for (std::uint32_t l = 0; l < shape.layers; ++l) {
        kv.layer = l;
        check(cuda::EnqueueHackPrefillAttention(kv, prefill_args(l), *ws, stream));
      }
      check(cuda::FinishHackAttention(*ws, stream));
    };
    double fetch_s = 0, quant_s = 0, prefill_s = 0;
    std::vector<double> f, qz, pf, ttft;
    for (std::uint32_t r = 0; r <= o.reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      fetch_hack();
      const auto t1 = std::chrono::steady_clock::now();
      quantize_new(o.new_tokens / kChunkTokens);
      const auto t2 = std::chrono::steady_clock::now();
      prefill_all();
      const auto t3 = std::chrono::steady_clock::now();
      if (r == 0) continue;  // warm-up
      f.push_back(std::chrono::duration<double>(t1 - t0).count());
      qz.push_back(std::chrono::duration<double>(t2 - t1).count());
      pf.push_back(std::chrono::duration<double>(t3 - t2).count());
      ttft.push_back(std::chrono::duration<double>(t3 - t0).count());
    }
    fetch_s = Median(f), quant_s = Median(qz), prefill_s = Median(pf);
    const double ttft_s = Median(ttft);
    quantize_new(new_pages);  // the decode tokens' block too

    // -- decode: tails and descriptors of the steps -------------------------------------------
    std::vector<cuda::HackAttentionSeq> hseqs(o.decode);
    const std::byte* decode_kv = new_kv->as<std::byte>() + (new_pages - 1) * chunk_bytes;
    std::uint64_t tail_off = 0;
    for (std::uint32_t s = 0; s < o.decode; ++s) {
      const std::uint32_t u = (s + 1) % 64;
      hseqs[s].tokens = total + s + 1;
      if (u == 0) continue;
      std::byte* tail = tails->as<std::byte>() + tail_off;
      hseqs[s].tail = tail;
      for (std::uint32_t lk = 0; lk < shape.layers * 2; ++lk) {
        cudaMemcpyAsync(tail + lk * u * row * 2, decode_kv + lk * kChunkTokens * row * 2,
                        u * row * 2, cudaMemcpyDeviceToDevice, stream);
      }
      tail_off += std::uint64_t{shape.layers} * 2 * u * row * 2;
    }
    cudaMemcpyAsync(seqs->data(), hseqs.data(), hseqs.size() * sizeof(hseqs[0]),
                    cudaMemcpyHostToDevice, stream);
    auto decode_step = [&](std::uint32_t s, std::uint32_t layer) {
      cuda::HackDecodeArgs a;
      a.seqs = seqs->as<cuda::HackAttentionSeq>() + s;
      a.num_seqs = 1;
      a.max_tokens = total + o.decode;
      a.q_heads = o.q_heads;
      a.q = q->data();
      a.out = out_at(layer);
      a.io_dtype = o.io;
      a.math = o.decode_math;
      kv.layer = layer;
      return cuda::EnqueueHackDecodeAttention(kv, a, *ws, stream);
    };
    auto decode_all = [&]() -> Status {
      for (std::uint32_t s = 0; s < o.decode; ++s) {
        for (std::uint32_t l = 0; l < shape.layers; ++l) KVD_RETURN_IF_ERROR(decode_step(s, l));
      }
      return Status();
    };
    check(decode_all());
    check(cuda::FinishHackAttention(*ws, stream));
    const double decode_stream_s = TimeMedian(o.reps, [&] {
      check(decode_all());
      check(cuda::FinishHackAttention(*ws, stream));
    });
    // The same launches captured into one CUDA graph, as engines decode (a capture that fails
    // leaves decode_graph_s at -1 and the stream-launched time stands).
    double decode_graph_s = -1;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
      const Status captured = decode_all();
      if (!captured.ok())
        std::fprintf(stderr, "note: decode capture: %s\n", captured.ToString().c_str());
      if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && captured.ok() &&
          cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
        decode_graph_s = TimeMedian(o.reps, [&] {
          cudaGraphLaunch(exec, stream);
          cudaStreamSynchronize(stream);
        });
        check(cuda::FinishHackAttention(*ws, stream));
      }
    }
    cudaGetLastError();  // a failed capture leaves its error here; the stream time stands
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);

    // -- checks: leased pages vs one contiguous chunk of the same KV quantized locally ---------
    // A contiguous sequence of T tokens is a chunk of exactly T tokens (its layout depends on T),
    // so each check quantizes its own, of the one layer checked (the quantizer takes at most 1 GiB
    // of input): blocks are quantized independently (round to nearest), so its codes equal the
    // pages' and its tail holds the unfinished block.
    double max_rel = 0;
    {
      fetch_hack();
      quantize_new(new_pages);
      const std::uint32_t max_t = total + o.decode;
      const std::uint64_t tok_bytes = row * 2;
      auto seq_kv = cuda::DeviceBuffer::Allocate(std::uint64_t{max_t} * tok_bytes * 2);
      const HackSectionBytes ssec = HackSectionBytesFor(
          HackLayoutFor(KvShape{1, max_t, shape.kv_heads, shape.head_dim}, HackOptions{}),
          DType::kBFloat16);
      auto sc = cuda::DeviceBuffer::Allocate(round16(ssec.codes));
      auto ss = cuda::DeviceBuffer::Allocate(round16(ssec.scales));
      auto su = cuda::DeviceBuffer::Allocate(round16(ssec.sums));
      auto stail = cuda::DeviceBuffer::Allocate(std::uint64_t{2} * 64 * tok_bytes);
      auto ref = cuda::DeviceBuffer::Allocate(q_elems * 4);
      if (!seq_kv.ok() || !sc.ok() || !ss.ok() || !su.ok() || !stail.ok() || !ref.ok()) {
        return Fail("alloc check", Status(StatusCode::kResourceExhausted, "check buffers"));
      }
      // The first `tokens` tokens (prefix chunks, then the new and decode pages) as one chunk.
      auto local_chunk = [&](std::uint32_t tokens, std::uint32_t layer) {
        const KvShape cs{1, tokens, shape.kv_heads, shape.head_dim};
        const std::uint64_t lk_bytes = std::uint64_t{tokens} * tok_bytes;
        for (std::uint32_t p = 0; p * kChunkTokens < tokens; ++p) {
          const std::uint32_t n = std::min(kChunkTokens, tokens - p * kChunkTokens);
          for (std::uint32_t kv_half = 0; kv_half < 2; ++kv_half) {
            const std::uint32_t lk = layer * 2 + kv_half;
            std::byte* dst = seq_kv->as<std::byte>() + kv_half * lk_bytes +
                             std::uint64_t{p} * kChunkTokens * tok_bytes;
            const std::uint64_t src_off = std::uint64_t{lk} * kChunkTokens * tok_bytes;
            if (p < chunks) {
              cudaMemcpyAsync(
                  dst, distinct->as<std::byte>() + (p % kDistinctChunks) * chunk_bytes + src_off,
                  n * tok_bytes, cudaMemcpyDeviceToDevice, stream);
            } else {
              cudaMemcpyAsync(dst, new_kv->as<std::byte>() + (p - chunks) * chunk_bytes + src_off,
                              n * tok_bytes, cudaMemcpyDeviceToDevice, stream);
            }
          }
        }
        cuda::HackDeviceSections d{sc->as<std::uint8_t>(), ss->as<std::uint8_t>(),
                                   su->as<std::uint8_t>(), stail->data()};
        check(cuda::EnqueueQuantizeHack(DType::kBFloat16, cs, HackOptions{}, seq_kv->data(), d, err,
                                        stream));
        check(cuda::FinishQuantizeHack(cs, err, stream));
        cuda::HackAttentionSeq seq;
        seq.codes = d.codes, seq.scales = d.scales, seq.sums = d.sums;
        seq.tail = tokens % 64 == 0 ? nullptr : d.tail;
        seq.tokens = tokens;
        return seq;
      };
      cuda::HackKvCache ckv;
      ckv.dtype = kv.dtype, ckv.layers = 1, ckv.kv_heads = kv.kv_heads;
      ckv.head_dim = kv.head_dim;
      for (const std::uint32_t layer : {0u, shape.layers - 1}) {
        const cuda::HackAttentionSeq whole = local_chunk(total, layer);
        kv.layer = layer;
        cuda::HackPrefillArgs a = prefill_args(layer);
        check(cuda::EnqueueHackPrefillAttention(kv, a, *ws, stream));
        a.out = ref->data();
        a.seq = whole;
        check(cuda::EnqueueHackPrefillAttention(ckv, a, *ws, stream));
        check(cuda::FinishHackAttention(*ws, stream));
        max_rel = std::max(max_rel, RelMaxDiff(Download(out_at(layer), q_elems, o.io),
                                               Download(ref->data(), q_elems, o.io)));
      }
      for (const std::uint32_t s : {0u, o.decode - 1}) {
        check(decode_step(s, 0));
        const cuda::HackAttentionSeq cs = local_chunk(total + s + 1, 0);
        auto dseq = cuda::DeviceBuffer::Allocate(sizeof(cs));
        if (!dseq.ok()) return Fail("alloc seq", dseq.status());
        cudaMemcpy(dseq->data(), &cs, sizeof(cs), cudaMemcpyHostToDevice);
        cuda::HackDecodeArgs a;
        a.seqs = dseq->as<cuda::HackAttentionSeq>();
        a.num_seqs = 1;
        a.max_tokens = total + o.decode;
        a.q_heads = o.q_heads;
        a.q = q->data();
        a.out = ref->data();
        a.io_dtype = o.io;
        a.math = o.decode_math;
        check(cuda::EnqueueHackDecodeAttention(ckv, a, *ws, stream));
        check(cuda::FinishHackAttention(*ws, stream));
        const std::size_t n = std::size_t{o.q_heads} * shape.head_dim;
        max_rel = std::max(
            max_rel, RelMaxDiff(Download(out->data(), n, o.io), Download(ref->data(), n, o.io)));
      }
    }

    // -- bf16 baseline fetch: lease raw chunks + decode (copy) into a device buffer + release --
    std::vector<void*> outs;
    for (std::uint32_t c = 0; c < chunks; ++c) {
      outs.push_back(raw_out->as<std::byte>() + c * chunk_bytes);
    }
    cuda::CacheGenDecodeTarget target;
    target.contiguous = outs;
    target.dtype = DType::kBFloat16;  // raw chunks are copied in their own dtype
    std::uint64_t raw_leased_gpu_before = (*fetcher)->stats().leased_gpu;
    const double raw_fetch_s = TimeMedian(o.reps, [&] {
      auto held = (*fetcher)->Lease(rkeys, stream);
      check(held.status());
      if (!held.ok()) return;
      check((*fetcher)->Decode(*held, target, stream));
      check((*fetcher)->Release(*held));
    });
    int raw_mismatch = 0;
    for (std::uint32_t c : {0u, chunks - 1}) {
      std::vector<std::byte> h(chunk_bytes);
      cudaMemcpy(h.data(), outs[c], chunk_bytes, cudaMemcpyDeviceToHost);
      raw_mismatch +=
          std::memcmp(h.data(), tensors[c % kDistinctChunks].data.data(), chunk_bytes) != 0;
    }
    const std::uint64_t raw_from_gpu = (*fetcher)->stats().leased_gpu - raw_leased_gpu_before;
    if (!failure.ok()) return Fail("prefix " + std::to_string(prefix), failure);
    const bool ok = max_rel <= 1e-5 && raw_mismatch == 0;
    failures += ok ? 0 : 1;
    const client::GpuFetchStats st = (*fetcher)->stats();
    std::printf(
        "{\"bench\": \"kvdepot_e2e\", \"prefix\": %u, \"new\": %u, \"decode_steps\": %u, "
        "\"layers\": %u, \"q_heads\": %u, \"kv_heads\": %u, \"head_dim\": %u, "
        "\"hack_chunk_bytes\": %zu, \"raw_chunk_bytes\": %zu, "
        "\"hack_fetch_ms\": %.3f, \"hack_lease_ms\": %.3f, \"hack_quantize_new_ms\": %.3f, "
        "\"hack_prefill_ms\": %.3f, \"hack_prefill_staging_bytes\": %llu, \"hack_ttft_ms\": %.3f, "
        "\"decode_math\": \"%s\", \"io\": \"%s\", \"hack_decode_token_us_graph\": %.1f, "
        "\"hack_decode_token_us_stream\": %.1f, \"bf16_fetch_ms\": %.3f, "
        "\"check_max_rel_diff\": %.3g, \"raw_chunks_mismatching\": %d, "
        "\"leased_gpu_total\": %llu, \"leased_host_total\": %llu, \"raw_leased_gpu\": %llu, "
        "\"ok\": %s}\n",
        prefix, o.new_tokens, o.decode, shape.layers, o.q_heads, shape.kv_heads, shape.head_dim,
        hack_containers[0].size(), raw_containers[0].size(), fetch_s * 1e3, lease_s * 1e3,
        quant_s * 1e3, prefill_s * 1e3, static_cast<unsigned long long>(staging_bytes),
        ttft_s * 1e3, o.decode_math == cuda::HackDecodeMath::kDequantFp16 ? "fp16" : "int8",
        o.io == DType::kBFloat16 ? "bf16" : "fp32", decode_graph_s * 1e6 / o.decode,
        decode_stream_s * 1e6 / o.decode, raw_fetch_s * 1e3, max_rel, raw_mismatch,
        static_cast<unsigned long long>(st.leased_gpu),
        static_cast<unsigned long long>(st.leased_host),
        static_cast<unsigned long long>(raw_from_gpu), ok ? "true" : "false");
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}
