// kvdepot_ipc_bench: the GPU tier's same-host fetch. A parent process plays the daemon (a GpuTier
// pool holding --chunks chunks of each codec: cachegen, hack-int2, raw); a child (this binary
// re-executed, a fresh CUDA process) imports the pool with CUDA IPC and decodes the chunks from
// the parent's memory into engine-layout buffers (cuda/leased.h), against a plain device-to-device
// copy of the same decoded bytes (the ceiling). Variants: one chunk per call (DecodeLeasedChunk),
// a batch inspected on every fetch, a batch inspected once (repeat fetches of held leases), the
// same into a paged (vLLM) layout. GB/s = decoded bytes / time. Exit: 0 ok, 1 error, 2 no GPU.
//
//   kvdepot_ipc_bench [--chunks 32] [--reps 5] [--layers 32] [--heads 8] [--head-dim 128]
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvdepot/codec/synth.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/gpu_tier.h"
#include "kvdepot/cuda/leased.h"
#include "kvdepot/cuda/paged_layout.h"

using namespace kvdepot;

namespace {

constexpr int kCodecs = 3;
constexpr CodecId kCodecOrder[kCodecs] = {CodecId::kCacheGen, CodecId::kHackInt2, CodecId::kRaw};

struct Meta {
  std::uint64_t chunks, reps, decoded_bytes;
  std::uint32_t layers, tokens, kv_heads, head_dim;
  std::uint64_t offsets[kCodecs][256], lengths[kCodecs][256];
};

bool ReadAll(int fd, void* p, std::size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

int Child(int in) {
  cuda::IpcHandle h;
  Meta m;
  if (!ReadAll(in, h.data(), h.size()) || !ReadAll(in, &m, sizeof(m))) return 1;
  auto map = cuda::IpcMapping::Open(0, h);
  if (!map.ok()) {
    std::fprintf(stderr, "%s\n", map.status().ToString().c_str());
    return 1;
  }
  void* d_out = nullptr;
  void* d_src = nullptr;
  if (cudaMalloc(&d_out, m.decoded_bytes * m.chunks) != cudaSuccess) return 1;
  if (cudaMalloc(&d_src, m.decoded_bytes * m.chunks) != cudaSuccess) return 1;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  auto time = [&](auto fn) {
    fn();  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t r = 0; r < m.reps; ++r) fn();
    cudaStreamSynchronize(s);
    const double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return static_cast<double>(m.decoded_bytes * m.chunks * m.reps) / sec / 1e9;
  };
  const double d2d = time([&] {
    cudaMemcpyAsync(d_out, d_src, m.decoded_bytes * m.chunks, cudaMemcpyDeviceToDevice, s);
  });
  std::printf("%-44s %10s %8s\n", "variant", "GB/s", "of d2d");
  std::printf("%-44s %10.2f %7.0f%%\n", "d2d copy of decoded bytes (ceiling)", d2d, 100.0);
  auto row = [&](const std::string& name, double gbs) {
    std::printf("%-44s %10.2f %7.0f%%\n", name.c_str(), gbs, 100 * gbs / d2d);
  };

  // Engine layouts: contiguous [layers][2][tokens][heads][dim] per chunk, or vLLM pages of 16.
  std::vector<void*> outs;
  for (std::uint64_t c = 0; c < m.chunks; ++c) {
    outs.push_back(static_cast<std::byte*>(d_out) + c * m.decoded_bytes);
  }
  cuda::PagedLayout paged_layout;
  if (!paged_layout
           .Init(static_cast<std::byte*>(d_out), {m.layers, m.tokens, m.kv_heads, m.head_dim},
                 static_cast<std::uint32_t>(m.chunks))
           .ok()) {
    return 1;
  }
  cuda::CacheGenDecodeTarget contiguous;
  contiguous.contiguous = outs;
  const cuda::CacheGenDecodeTarget& paged = paged_layout.target;

  auto decoder = cuda::LeasedDecoder::Create(static_cast<std::uint32_t>(m.chunks), m.layers);
  if (!decoder.ok()) return 1;
  bool ok = true;
  auto check = [&](const Status& st) {
    if (!st.ok() && ok) std::fprintf(stderr, "%s\n", st.ToString().c_str());
    ok = ok && st.ok();
  };
  for (int k = 0; k < kCodecs; ++k) {
    const std::string codec(CodecName(kCodecOrder[k]));
    std::vector<cuda::DeviceContainer> leased;
    for (std::uint64_t c = 0; c < m.chunks; ++c) {
      leased.push_back({map->base() + m.offsets[k][c], m.lengths[k][c]});
    }
    row(codec + ": one chunk per call", time([&] {
          for (const auto& c : leased) {
            check(cuda::DecodeLeasedChunk(c.data, c.bytes, outs[&c - leased.data()],
                                          m.decoded_bytes, s));
          }
        }));
    row(codec + ": batch, inspected every fetch", time([&] {
          auto chunks = cuda::InspectLeasedChunks(leased, s);
          check(chunks.status());
          if (chunks.ok()) check(decoder->Decode(*chunks, contiguous, s));
        }));
    auto inspected = cuda::InspectLeasedChunks(leased, s);
    check(inspected.status());
    if (!inspected.ok()) return 1;
    row(codec + ": batch, inspected once",
        time([&] { check(decoder->Decode(*inspected, contiguous, s)); }));
    row(codec + ": batch, inspected once, paged",
        time([&] { check(decoder->Decode(*inspected, paged, s)); }));
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* fd = std::getenv("KVD_IPC_BENCH_CHILD")) return Child(std::atoi(fd));
  std::uint64_t chunks = 32, reps = 5;
  KvShape shape{32, 256, 8, 128};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const auto v = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    if (a == "--chunks")
      chunks = std::min<std::uint64_t>(v, 256);
    else if (a == "--reps")
      reps = v;
    else if (a == "--layers")
      shape.layers = v;
    else if (a == "--heads")
      shape.kv_heads = v;
    else if (a == "--head-dim")
      shape.head_dim = v;
    else
      return 64;
  }
  if (Status s = cuda::GpuAvailable(); !s.ok()) {
    std::fprintf(stderr, "no GPU: %s\n", s.message().c_str());
    return 2;
  }
  const KvTensor t = *SynthesizeKv(SynthOptions{shape, 1, DType::kFloat16});
  std::vector<std::vector<std::byte>> containers;
  std::uint64_t pool_bytes = 64u << 20;
  for (CodecId codec : kCodecOrder) {
    EncodeOptions o;
    o.codec = codec;
    containers.push_back(*EncodeChunk(t.view(), o));
    pool_bytes += (containers.back().size() + 4096) * chunks;
  }
  auto tier = cuda::GpuTier::Create({0, pool_bytes, 2});
  if (!tier.ok()) {
    std::fprintf(stderr, "%s\n", tier.status().ToString().c_str());
    return 1;
  }
  Meta m{};
  m.chunks = chunks;
  m.reps = reps;
  m.decoded_bytes = t.data.size();
  m.layers = shape.layers;
  m.tokens = shape.tokens;
  m.kv_heads = shape.kv_heads;
  m.head_dim = shape.head_dim;
  std::vector<cuda::GpuBlockRef> leases;
  for (int k = 0; k < kCodecs; ++k) {
    for (std::uint64_t c = 0; c < chunks; ++c) {
      std::string key(CodecName(kCodecOrder[k]));  // (not + to_string: GCC 12 -Wrestrict)
      key += std::to_string(c);
      if (!(*tier)->Insert(key, containers[k], nullptr).ok()) return 1;
      leases.push_back((*tier)->Get(key));
      m.offsets[k][c] = leases.back()->offset();
      m.lengths[k][c] = leases.back()->length();
    }
  }
  std::printf(
      "%llu chunks of [%u, 2, %u, %u, %u] fp16: %llu B decoded; cachegen %zu B, "
      "hack-int2 %zu B, raw %zu B each\n",
      static_cast<unsigned long long>(chunks), shape.layers, shape.tokens, shape.kv_heads,
      shape.head_dim, static_cast<unsigned long long>(m.decoded_bytes), containers[0].size(),
      containers[1].size(), containers[2].size());
  std::fflush(stdout);
  int p[2];
  if (::pipe(p) != 0) return 1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[1]);
    ::setenv("KVD_IPC_BENCH_CHILD", std::to_string(p[0]).c_str(), 1);
    char self[] = "/proc/self/exe";
    char* args[] = {self, nullptr};
    ::execv(self, args);
    ::_exit(127);
  }
  ::close(p[0]);
  if (::write(p[1], (*tier)->pool().ipc_handle().data(), 64) != 64) return 1;
  if (::write(p[1], &m, sizeof(m)) != static_cast<ssize_t>(sizeof(m))) return 1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
