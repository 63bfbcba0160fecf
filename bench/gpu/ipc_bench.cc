// kvdepot_ipc_bench: the GPU tier's same-host fetch. A parent process plays the daemon (a GpuTier
// pool holding --chunks CacheGen chunks); a child (this binary re-executed, a fresh CUDA process)
// imports the pool with CUDA IPC and decodes each chunk from the parent's memory into an
// engine-layout buffer (DecodeLeasedChunk), against a plain device-to-device copy of the same
// decoded bytes (the ceiling). GB/s = decoded bytes / time. Exit: 0 ok, 1 error, 2 no GPU.
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

#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/gpu_tier.h"
#include "kvdepot/synth.h"

using namespace kvdepot;

namespace {

struct Meta {
  std::uint64_t chunks, reps, decoded_bytes;
  std::uint64_t offsets[256], lengths[256];
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
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return static_cast<double>(m.decoded_bytes * m.chunks * m.reps) / sec / 1e9;
  };
  bool ok = true;
  const double ipc = time([&] {
    for (std::uint64_t c = 0; c < m.chunks; ++c) {
      ok = ok && cuda::DecodeLeasedChunk(map->base() + m.offsets[c], m.lengths[c],
                                         static_cast<std::byte*>(d_out) + c * m.decoded_bytes,
                                         m.decoded_bytes, s)
                     .ok();
    }
  });
  const double d2d = time([&] {
    cudaMemcpyAsync(d_out, d_src, m.decoded_bytes * m.chunks, cudaMemcpyDeviceToDevice, s);
  });
  if (!ok) return 1;
  std::printf("%-36s %10s %8s\n", "variant", "GB/s", "of d2d");
  std::printf("%-36s %10.2f %7.0f%%\n", "d2d copy of decoded bytes (ceiling)", d2d, 100.0);
  std::printf("%-36s %10.2f %7.0f%%\n", "IPC lease + cachegen decode", ipc, 100 * ipc / d2d);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* fd = std::getenv("KVD_IPC_BENCH_CHILD")) return Child(std::atoi(fd));
  std::uint64_t chunks = 32, reps = 5;
  KvShape shape{32, 256, 8, 128};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const auto v = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    if (a == "--chunks") chunks = std::min<std::uint64_t>(v, 256);
    else if (a == "--reps") reps = v;
    else if (a == "--layers") shape.layers = v;
    else if (a == "--heads") shape.kv_heads = v;
    else if (a == "--head-dim") shape.head_dim = v;
    else return 64;
  }
  if (Status s = cuda::GpuAvailable(); !s.ok()) {
    std::fprintf(stderr, "no GPU: %s\n", s.message().c_str());
    return 2;
  }
  const KvTensor t = *SynthesizeKv(SynthOptions{shape, 1, DType::kFloat16});
  EncodeOptions o;
  o.codec = CodecId::kCacheGen;
  const auto container = *EncodeChunk(t.view(), o);
  auto tier = cuda::GpuTier::Create({0, container.size() * chunks + (64u << 20), 2});
  if (!tier.ok()) {
    std::fprintf(stderr, "%s\n", tier.status().ToString().c_str());
    return 1;
  }
  Meta m{};
  m.chunks = chunks;
  m.reps = reps;
  m.decoded_bytes = t.data.size();
  std::vector<cuda::GpuBlockRef> leases;
  for (std::uint64_t c = 0; c < chunks; ++c) {
    std::string key = "c";  // (not "c" + to_string: GCC 12 -O3 -Wrestrict false positive)
    key += std::to_string(c);
    if (!(*tier)->Insert(key, container, nullptr).ok()) return 1;
    leases.push_back((*tier)->Get(key));
    m.offsets[c] = leases.back()->offset();
    m.lengths[c] = leases.back()->length();
  }
  std::printf("%llu chunks of [%u, 2, %u, %u, %u] fp16: %llu B decoded, %zu B cachegen each\n",
              static_cast<unsigned long long>(chunks), shape.layers, shape.tokens, shape.kv_heads,
              shape.head_dim, static_cast<unsigned long long>(m.decoded_bytes), container.size());
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
