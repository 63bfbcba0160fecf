// The GPU tier's core: pool capacity, CUDA IPC between two processes, transcoding on the GPU
// against the CPU references, and a killed importer leaking nothing. Needs a GPU (label `gpu`);
// NoDevice* tests run anywhere.
#include "kvdepot/cuda/gpu_tier.h"
#include "kvdepot/cuda/leased.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "../common/random_bytes.h"
#include "gpu_test_util.h"
#include "kvdepot/codec/synth.h"

namespace kvdepot::cuda {
namespace {

using test::RandomBytes;

TEST(NoDeviceGpuTierTest, TranscodeGpuRejectsBadInputBeforeTouchingTheDevice) {
  const auto junk = RandomBytes(100, 1);
  EXPECT_EQ(TranscodeGpu(junk, CodecId::kRaw).status().code(), StatusCode::kCorruption);
}

TEST(GpuTierTest, CapacityHoldsAndLeasedBlocksAreNotReused) {
  KVD_REQUIRE_GPU();
  GpuTierOptions o;
  o.capacity = 8ull << 20;
  auto tier = GpuTier::Create(o);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  GpuTier& t = **tier;
  std::vector<std::string> evicted;
  auto on_evict = [&](std::string_view k, GpuBlockRef) { evicted.emplace_back(k); };
  ASSERT_TRUE(t.Insert("leased", RandomBytes(1 << 20, 1), on_evict).ok());
  GpuBlockRef lease = t.Get("leased");
  ASSERT_TRUE(lease);
  for (int i = 0; i < 40; ++i) {
    std::string key = "k";  // (not "k" + to_string: GCC 12 -O3 -Wrestrict false positive)
    key += std::to_string(i);
    ASSERT_TRUE(t.Insert(key, RandomBytes(1 << 20, 100 + i), on_evict).ok());
    EXPECT_LE(t.stats().bytes, t.stats().capacity);
  }
  EXPECT_FALSE(t.Contains("leased"));  // evicted from the index ...
  std::vector<std::byte> back(1 << 20);
  ASSERT_TRUE(t.CopyToHost(*lease, back).ok());
  EXPECT_EQ(back, RandomBytes(1 << 20, 1));  // ... but its range was never reused
  EXPECT_EQ(t.Insert("huge", RandomBytes(9 << 20, 3), on_evict).code(), StatusCode::kOutOfRange);
  const std::uint64_t before = t.stats().bytes;
  lease.reset();
  EXPECT_EQ(t.stats().bytes, before - (1u << 20));
  EXPECT_GE(evicted.size(), 33u);
}

TEST(GpuTierTest, SecondHostHitPromotes) {
  KVD_REQUIRE_GPU();
  auto tier = GpuTier::Create(GpuTierOptions{0, 4ull << 20, 2});
  ASSERT_TRUE(tier.ok());
  EXPECT_FALSE((*tier)->RecordHostHit("a"));
  EXPECT_TRUE((*tier)->RecordHostHit("a"));
  EXPECT_FALSE((*tier)->RecordHostHit("a"));
}

TEST(GpuTierTest, TranscodeOnGpuMatchesTheCpuReference) {
  KVD_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const KvTensor t = *SynthesizeKv(SynthOptions{KvShape{3, 256, 4, 128}, 11, dtype});
    for (CodecId from : {CodecId::kRaw, CodecId::kCacheGen, CodecId::kHackInt2}) {
      EncodeOptions o;
      o.codec = from;
      const auto stored = *EncodeChunk(t.view(), o);
      for (CodecId to : {CodecId::kRaw, CodecId::kCacheGen, CodecId::kHackInt2}) {
        auto gpu = TranscodeGpu(stored, to);
        auto cpu = TranscodeChunk(stored, to);
        ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
        ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
        EXPECT_EQ(*gpu, *cpu) << CodecName(from) << " -> " << CodecName(to);
      }
    }
  }
}

// A child process for the IPC tests. CUDA cannot be used in a forked child of a process that
// has initialised it, so the child re-executes this binary (a fresh process) to run the
// IpcChildProcess.Main test below, which reads its pipes and mode from KVD_IPC_CHILD.
struct Child {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
};

Child Spawn(bool spin) {
  int down[2], up[2];
  if (::pipe(down) != 0 || ::pipe(up) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    const std::string env =
        std::to_string(down[0]) + "," + std::to_string(up[1]) + "," + (spin ? "1" : "0");
    ::setenv("KVD_IPC_CHILD", env.c_str(), 1);
    char filter[] = "--gtest_filter=IpcChildProcess.Main";
    char self[] = "/proc/self/exe";
    char* argv[] = {self, filter, nullptr};
    ::execv(self, argv);
    ::_exit(127);
  }
  ::close(down[0]);
  ::close(up[1]);
  return {pid, down[1], up[0]};
}

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

// The child's side: reads the handle, offset and length, opens the pool, copies the bytes out
// and writes them back up the pipe (byte-exact check in the parent); or, with `spin`, decodes
// forever so that it can be killed mid-read.
int ImportChild(int in, int out, bool spin) {
  IpcHandle h;
  std::uint64_t meta[3];  // offset, length, out_bytes
  if (!ReadAll(in, h.data(), h.size()) || !ReadAll(in, meta, sizeof(meta))) return 10;
  auto m = IpcMapping::Open(0, h);
  if (!m.ok()) return 11;
  std::vector<std::byte> host(meta[1]);
  void* d_out = nullptr;
  if (cudaMalloc(&d_out, meta[2]) != cudaSuccess) return 12;
  do {
    if (!DecodeLeasedChunk(m->base() + meta[0], meta[1], d_out, meta[2], nullptr).ok()) return 13;
    if (!spin) break;
  } while (true);
  std::vector<std::byte> decoded(meta[2]);
  if (cudaMemcpy(decoded.data(), d_out, meta[2], cudaMemcpyDeviceToHost) != cudaSuccess) return 14;
  if (cudaMemcpy(host.data(), m->base() + meta[0], meta[1], cudaMemcpyDeviceToHost) != cudaSuccess)
    return 15;
  if (::write(out, host.data(), host.size()) != static_cast<ssize_t>(host.size())) return 16;
  if (::write(out, decoded.data(), decoded.size()) != static_cast<ssize_t>(decoded.size()))
    return 17;
  cudaFree(d_out);
  return 0;
}

// Not a test of its own: the body of the child process of the two IPC tests.
TEST(IpcChildProcess, Main) {
  const char* env = std::getenv("KVD_IPC_CHILD");
  if (env == nullptr) GTEST_SKIP() << "helper process of the IPC tests (runs only as their child)";
  int in = -1, out = -1, spin = 0;
  if (std::sscanf(env, "%d,%d,%d", &in, &out, &spin) != 3) ::_exit(20);
  ::_exit(ImportChild(in, out, spin != 0));
}

TEST(GpuTierTest, IpcFetchBetweenTwoProcessesIsByteExact) {
  KVD_REQUIRE_GPU();
  const KvTensor t = *SynthesizeKv(SynthOptions{KvShape{2, 256, 4, 128}, 5, DType::kFloat16});
  EncodeOptions o;
  o.codec = CodecId::kCacheGen;
  const auto container = *EncodeChunk(t.view(), o);
  auto tier = GpuTier::Create(GpuTierOptions{0, 16ull << 20, 2});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  ASSERT_TRUE((*tier)->Insert("c", container, nullptr).ok());
  GpuBlockRef lease = (*tier)->Get("c");
  Child child = Spawn(/*spin=*/false);
  ASSERT_GT(child.pid, 0);
  const std::uint64_t meta[3] = {lease->offset(), lease->length(), t.data.size()};
  ASSERT_EQ(::write(child.to_child, (*tier)->pool().ipc_handle().data(), 64), 64);
  ASSERT_EQ(::write(child.to_child, meta, sizeof(meta)), static_cast<ssize_t>(sizeof(meta)));
  std::vector<std::byte> raw(container.size()), decoded(t.data.size());
  const bool got = ReadAll(child.from_child, raw.data(), raw.size()) &&
                   ReadAll(child.from_child, decoded.data(), decoded.size());
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ASSERT_TRUE(got);
  EXPECT_EQ(raw, container);
  EXPECT_EQ(decoded, DecodeChunk(container)->data);
}

TEST(GpuTierTest, AnImporterKilledMidReadLeaksNothing) {
  KVD_REQUIRE_GPU();
  const KvTensor t = *SynthesizeKv(SynthOptions{KvShape{4, 256, 8, 128}, 6, DType::kFloat16});
  EncodeOptions o;
  o.codec = CodecId::kCacheGen;
  const auto container = *EncodeChunk(t.view(), o);
  auto tier = GpuTier::Create(GpuTierOptions{0, 16ull << 20, 2});
  ASSERT_TRUE(tier.ok());
  ASSERT_TRUE((*tier)->Insert("c", container, nullptr).ok());
  // The lease the daemon would hold for the child's connection.
  GpuBlockRef lease = (*tier)->Get("c");
  Child child = Spawn(/*spin=*/true);
  ASSERT_GT(child.pid, 0);
  const std::uint64_t meta[3] = {lease->offset(), lease->length(), t.data.size()};
  ASSERT_EQ(::write(child.to_child, (*tier)->pool().ipc_handle().data(), 64), 64);
  ASSERT_EQ(::write(child.to_child, meta, sizeof(meta)), static_cast<ssize_t>(sizeof(meta)));
  ::usleep(300 * 1000);  // decoding in a loop by now
  ASSERT_TRUE((*tier)->Erase("c"));
  EXPECT_GT((*tier)->stats().bytes, 0u);  // still leased
  ASSERT_EQ(::kill(child.pid, SIGKILL), 0);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  lease.reset();  // the connection closed: its leases go
  EXPECT_EQ((*tier)->stats().bytes, 0u);
  // The pool is intact and reusable after the importer died.
  const auto again = RandomBytes(1 << 20, 9);
  ASSERT_TRUE((*tier)->Insert("d", again, nullptr).ok());
  std::vector<std::byte> back(again.size());
  ASSERT_TRUE((*tier)->CopyToHost(*(*tier)->Get("d"), back).ok());
  EXPECT_EQ(back, again);
}

}  // namespace
}  // namespace kvdepot::cuda
