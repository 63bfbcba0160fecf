// CPU benchmarks of the container and the raw codec, each beside its ceiling (memcpy of the same
// bytes): raw encode and decode are one copy plus one XXH3 pass, so they should run at a large
// fraction of memcpy speed.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "kvdepot/base/checksum.h"
#include "kvdepot/codec/cachegen.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/raw_codec.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {
namespace {

// A Llama-3.1-8B-shaped chunk: 32 layers, 8 KV heads, head_dim 128, 256 tokens, fp16 (32 MiB).
constexpr KvShape kLlama8bChunk{32, 256, 8, 128};
// The real KV's chunk shape (TinyStories-656K): 2 layers, 4 heads, head_dim 16, 256 tokens.
constexpr KvShape kTinyChunk{2, 256, 4, 16};

KvTensor RandomFp16(const KvShape& shape) {
  KvTensor t = KvTensor::Zeros(DType::kFloat16, shape);
  std::mt19937_64 rng(1);
  for (std::size_t i = 0; i + 8 <= t.data.size(); i += 8) {
    const std::uint64_t v = rng() & 0x3bff3bff3bff3bffull;  // finite halves
    std::memcpy(t.data.data() + i, &v, 8);
  }
  return t;
}

KvShape ShapeArg(const benchmark::State& state) {
  return state.range(0) == 0 ? kTinyChunk : kLlama8bChunk;
}

void BM_Memcpy(benchmark::State& state) {
  const KvTensor t = RandomFp16(ShapeArg(state));
  std::vector<std::byte> dst(t.data.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), t.data.data(), t.data.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.data.size()));
}
BENCHMARK(BM_Memcpy)->Arg(0)->Arg(1);

void BM_Checksum64(benchmark::State& state) {
  const KvTensor t = RandomFp16(ShapeArg(state));
  for (auto _ : state) benchmark::DoNotOptimize(Checksum64(t.data));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.data.size()));
}
BENCHMARK(BM_Checksum64)->Arg(0)->Arg(1);

void BM_RawEncode(benchmark::State& state) {
  const KvTensor t = RandomFp16(ShapeArg(state));
  for (auto _ : state) {
    auto c = EncodeRaw(t.view());
    benchmark::DoNotOptimize(c->data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.data.size()));
}
BENCHMARK(BM_RawEncode)->Arg(0)->Arg(1);

void BM_RawDecode(benchmark::State& state) {
  const KvTensor t = RandomFp16(ShapeArg(state));
  const std::vector<std::byte> c = *EncodeRaw(t.view());
  for (auto _ : state) {
    auto d = DecodeChunk(c);
    benchmark::DoNotOptimize(d->data.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.data.size()));
}
BENCHMARK(BM_RawDecode)->Arg(0)->Arg(1);

// Parse + verify + zero-copy view: what a server does before sending a stored chunk.
void BM_ParseVerifyView(benchmark::State& state) {
  const KvTensor t = RandomFp16(ShapeArg(state));
  const std::vector<std::byte> c = *EncodeRaw(t.view());
  for (auto _ : state) {
    auto view = ParseContainer(c);
    auto payload = RawPayloadView(*view);
    benchmark::DoNotOptimize(payload->data.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.data.size()));
}
BENCHMARK(BM_ParseVerifyView)->Arg(0)->Arg(1);

void BM_ConvertFp16ToFp32(benchmark::State& state) {
  const KvTensor t = RandomFp16(ShapeArg(state));
  for (auto _ : state) {
    auto out = ConvertDType(t.view(), DType::kFloat32);
    benchmark::DoNotOptimize(out->data.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.data.size()));
}
BENCHMARK(BM_ConvertFp16ToFp32)->Arg(0)->Arg(1);

}  // namespace
}  // namespace kvdepot

namespace kvdepot {
namespace {

// CacheGen CPU reference, one core: throughput in bytes of fp16 KV per second.
KvTensor SynthLlamaChunk() {
  return *SynthesizeKv(SynthOptions{kLlama8bChunk, 1, DType::kFloat16});
}

void BM_CacheGenEncodeCpu(benchmark::State& state) {
  const KvTensor t = SynthLlamaChunk();
  for (auto _ : state) {
    auto c = EncodeCacheGen(t.view());
    benchmark::DoNotOptimize(c->data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.data.size()));
}
BENCHMARK(BM_CacheGenEncodeCpu)->Unit(benchmark::kMillisecond);

void BM_CacheGenDecodeCpu(benchmark::State& state) {
  const KvTensor t = SynthLlamaChunk();
  const std::vector<std::byte> c = *EncodeCacheGen(t.view());
  for (auto _ : state) {
    auto d = DecodeChunk(c);
    benchmark::DoNotOptimize(d->data.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.data.size()));
}
BENCHMARK(BM_CacheGenDecodeCpu)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvdepot
