// kvdepot_gpu_fetch: end-to-end check and benchmark of the same-host GPU fetch against a running
// kvdepotd with a GPU tier (scripts/gpu-daemon-check.sh runs it on the GPU machine).
//
// PUTs --chunks chunks of each codec (cachegen, hack-int2, raw) of one synthetic [layers, 2, 256,
// heads, dim] fp16 tensor, GETs each twice so the daemon promotes them to its GPU tier, waits until
// LOOKUP reports them there, then through client::GpuFetcher: leases them, decodes them into a
// contiguous and a paged (vLLM) layout and compares every byte with the CPU decode. Times, per
// codec: the fetch of leases held (decode only), a whole fetch (lease + checks + decode +
// release), and the socket path (GET of the container over the Unix socket + upload + decode);
// against a device-to-device copy of the decoded bytes. Prints a table. Exit 0 ok, 1 mismatch or
// error, 2 no GPU.
//
//   kvdepot_gpu_fetch --addr unix:PATH [--chunks 16] [--reps 5] [--layers 32] [--heads 8]
//                     [--head-dim 128]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kvdepot/client/gpu_fetch.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/paged_layout.h"

using namespace kvdepot;

namespace {

constexpr CodecId kCodecs[] = {CodecId::kCacheGen, CodecId::kHackInt2, CodecId::kRaw};

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "kvdepot_gpu_fetch: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  client::ClientOptions options;
  std::uint32_t chunks = 16, reps = 5;
  KvShape shape{32, 256, 8, 128};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const auto v = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    if (a == "--addr")
      options.address = argv[i + 1];
    else if (a == "--chunks")
      chunks = v;
    else if (a == "--reps")
      reps = v;
    else if (a == "--layers")
      shape.layers = v;
    else if (a == "--heads")
      shape.kv_heads = v;
    else if (a == "--head-dim")
      shape.head_dim = v;
    else {
      std::fprintf(stderr, "kvdepot_gpu_fetch: unknown argument %s\n", a.c_str());
      return 1;
    }
  }
  if (Status s = cuda::GpuAvailable(); !s.ok()) {
    std::fprintf(stderr, "no GPU: %s\n", s.message().c_str());
    return 2;
  }
  auto conn = client::Connection::Connect(options);
  if (!conn.ok()) return Fail("connect " + options.address, conn.status());
  const KvTensor t = *SynthesizeKv(SynthOptions{shape, 3, DType::kFloat16});
  const std::uint64_t decoded = t.data.size();

  // Store and promote.
  std::vector<std::vector<std::string>> keys(std::size(kCodecs));
  std::vector<std::vector<std::byte>> containers;
  for (std::size_t k = 0; k < std::size(kCodecs); ++k) {
    EncodeOptions o;
    o.codec = kCodecs[k];
    containers.push_back(*EncodeChunk(t.view(), o));
    for (std::uint32_t c = 0; c < chunks; ++c) {
      keys[k].push_back("gpufetch/" + std::string(CodecName(kCodecs[k])) + "/" + std::to_string(c));
      if (Status s = (*conn)->Put(keys[k].back(), containers[k]); !s.ok()) return Fail("put", s);
    }
  }
  for (int hit = 0; hit < 2; ++hit) {
    for (const auto& ks : keys) {
      for (const auto& key : ks) {
        if (auto g = (*conn)->Get(key); !g.ok() || !*g) return Fail("get " + key, g.status());
      }
    }
  }
  for (const auto& ks : keys) {
    bool all_gpu = false;
    for (int wait = 0; wait < 100 && !all_gpu; ++wait) {
      auto l = (*conn)->Lookup(ks);
      if (!l.ok()) return Fail("lookup", l.status());
      all_gpu = true;
      for (protocol::Tier tier : l->tiers) all_gpu = all_gpu && tier == protocol::Tier::kGpu;
      if (!all_gpu) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!all_gpu) std::printf("note: not every %s chunk reached the GPU tier\n", ks[0].c_str());
  }

  auto fetcher = client::GpuFetcher::Open(**conn, chunks, shape.layers);
  if (!fetcher.ok()) return Fail("open", fetcher.status());
  auto stream = cuda::Stream::Create();
  auto out = cuda::DeviceBuffer::Allocate(decoded * chunks);
  auto src = cuda::DeviceBuffer::Allocate(decoded * chunks);
  const std::uint64_t slot = (containers[2].size() + 4095) / 4096 * 4096;  // raw is the largest
  auto upload = cuda::DeviceBuffer::Allocate(slot * chunks);
  auto decoder = cuda::LeasedDecoder::Create(chunks, shape.layers);
  if (!stream.ok() || !out.ok() || !src.ok() || !upload.ok() || !decoder.ok()) {
    return Fail("alloc", Status(StatusCode::kResourceExhausted, "device buffers"));
  }
  const cudaStream_t s = stream->get();
  std::vector<void*> outs;
  for (std::uint32_t c = 0; c < chunks; ++c) outs.push_back(out->as<std::byte>() + c * decoded);
  cuda::CacheGenDecodeTarget contiguous;
  contiguous.contiguous = outs;
  cuda::PagedLayout layout;  // pages of 16 tokens, shuffled, carved out of the same buffer
  if (Status st = layout.Init(out->as<std::byte>(), shape, chunks); !st.ok()) {
    return Fail("paged layout", st);
  }
  const cuda::CacheGenDecodeTarget& paged = layout.target;
  const std::uint64_t row = std::uint64_t{shape.kv_heads} * shape.head_dim;

  auto seconds_of = [&](auto fn) {
    fn();  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (std::uint32_t r = 0; r < reps; ++r) fn();
    cudaStreamSynchronize(s);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
  };
  auto gbs = [&](double sec) { return static_cast<double>(decoded) * chunks / sec / 1e9; };
  const double d2d = gbs(seconds_of([&] {
    cudaMemcpyAsync(out->data(), src->data(), decoded * chunks, cudaMemcpyDeviceToDevice, s);
  }));
  std::printf("%u chunks of [%u, 2, %u, %u, %u] fp16 (%llu B decoded each) through kvdepotd\n",
              chunks, shape.layers, shape.tokens, shape.kv_heads, shape.head_dim,
              static_cast<unsigned long long>(decoded));
  std::printf("%-46s %10s %8s\n", "variant", "GB/s", "of d2d");
  std::printf("%-46s %10.2f %7.0f%%\n", "d2d copy of the decoded bytes (ceiling)", d2d, 100.0);
  auto print = [&](const std::string& name, double g) {
    std::printf("%-46s %10.2f %7.0f%%\n", name.c_str(), g, 100 * g / d2d);
  };

  Status failure;
  auto check = [&](const Status& st) {
    if (!st.ok() && failure.ok()) failure = st;
  };
  int mismatches = 0;
  for (std::size_t k = 0; k < std::size(kCodecs); ++k) {
    const std::string codec(CodecName(kCodecs[k]));
    const KvTensor ref = *DecodeChunk(containers[k]);
    auto held = (*fetcher)->Lease(keys[k], s);
    if (!held.ok()) return Fail("lease " + codec, held.status());
    if (held->chunks.size() != chunks) {
      std::printf("%s: %zu of %u keys leased\n", codec.c_str(), held->chunks.size(), chunks);
      return 1;
    }
    // Byte-exact, contiguous then paged.
    for (const bool into_pages : {false, true}) {
      cudaMemsetAsync(out->data(), 0xee, decoded * chunks, s);
      if (Status st = (*fetcher)->Decode(*held, into_pages ? paged : contiguous, s); !st.ok()) {
        return Fail("decode " + codec, st);
      }
      std::vector<std::byte> host(decoded * chunks);
      cudaMemcpy(host.data(), out->data(), host.size(), cudaMemcpyDeviceToHost);
      const std::uint64_t lk_bytes = shape.tokens * row * 2;
      for (std::uint32_t c = 0; c < chunks; ++c) {
        for (std::uint32_t lk = 0; lk < shape.layers * 2; ++lk) {
          for (std::uint32_t tok = 0; tok < shape.tokens; ++tok) {
            const std::byte* want = ref.data.data() + lk * lk_bytes + tok * row * 2;
            const std::byte* got = into_pages
                                       ? host.data() + layout.RowOffset(c, lk, tok)
                                       : host.data() + c * decoded + lk * lk_bytes + tok * row * 2;
            mismatches += std::memcmp(want, got, row * 2) != 0;
          }
        }
      }
    }
    print(codec + ": held leases, decode",
          gbs(seconds_of([&] { check((*fetcher)->Decode(*held, contiguous, s)); })));
    print(codec + ": held leases, decode paged",
          gbs(seconds_of([&] { check((*fetcher)->Decode(*held, paged, s)); })));
    check((*fetcher)->Release(*held));
    print(codec + ": lease + checks + decode + release", gbs(seconds_of([&] {
            auto h = (*fetcher)->Lease(keys[k], s);
            check(h.status());
            if (!h.ok()) return;
            check((*fetcher)->Decode(*h, contiguous, s));
            check((*fetcher)->Release(*h));
          })));
    print(codec + ": GET over the socket + upload + decode", gbs(seconds_of([&] {
            std::vector<cuda::DeviceContainer> uploaded;
            for (std::uint32_t c = 0; c < chunks; ++c) {
              auto g = (*conn)->Get(keys[k][c]);
              check(g.status());
              if (!g.ok() || !*g) return;
              std::byte* dst = upload->as<std::byte>() + c * slot;
              cudaMemcpyAsync(dst, (*g)->data(), (*g)->size(), cudaMemcpyHostToDevice, s);
              uploaded.push_back({dst, (*g)->size()});
            }
            auto inspected = cuda::InspectLeasedChunks(uploaded, s);
            check(inspected.status());
            if (!inspected.ok()) return;
            check(decoder->Decode(*inspected, contiguous, s));
          })));
  }
  const client::GpuFetchStats st = (*fetcher)->stats();
  std::printf("leased from the GPU tier %llu, from the host arena %llu; rows mismatching: %d\n",
              static_cast<unsigned long long>(st.leased_gpu),
              static_cast<unsigned long long>(st.leased_host), mismatches);
  if (!failure.ok()) return Fail("timed fetch", failure);
  return mismatches == 0 ? 0 : 1;
}
