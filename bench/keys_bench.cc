// Cost of chunk-key derivation: SHA-256 throughput (portable and SHA-NI) and the keys of a
// 128K-token prompt. Google Benchmark functions only; linked with benchmark_main.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvdepot/chunk_key.h"
#include "kvdepot/sha256.h"

namespace kvdepot {
namespace {

using internal::Sha256Impl;

// Selects `impl` for the Sha256 objects the benchmark creates; false (benchmark skipped) when the
// CPU lacks it.
bool SelectImpl(benchmark::State& state, Sha256Impl impl) {
  if (internal::SetSha256ImplForTesting(impl)) return true;
  state.SkipWithError("SHA-NI is not available on this CPU");
  return false;
}

void BM_Sha256(benchmark::State& state, Sha256Impl impl) {
  const bool selected = SelectImpl(state, impl);
  std::vector<std::byte> data(static_cast<std::size_t>(state.range(0)));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 131 + 7);
  for (auto _ : state) {  // not entered when skipped
    Sha256Digest digest = Sha256Of(data);
    benchmark::DoNotOptimize(digest);
  }
  if (selected) {
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(data.size()));
  }
  (void)internal::SetSha256ImplForTesting(Sha256Impl::kAuto);
}
BENCHMARK_CAPTURE(BM_Sha256, portable, Sha256Impl::kPortable)->Arg(1024)->Arg(1 << 20);
BENCHMARK_CAPTURE(BM_Sha256, sha_ni, Sha256Impl::kShaNi)->Arg(1024)->Arg(1 << 20);

// Keys of a 128K-token prompt (512 chunks of 256 tokens, 1 KiB of token ids each). Bytes are the
// token ids' bytes; items are tokens.
void BM_ChunkKeysForTokens(benchmark::State& state, Sha256Impl impl) {
  const bool selected = SelectImpl(state, impl);
  Namespace ns;
  ns.model = "meta-llama/Llama-3.1-8B-Instruct";
  ns.tenant = "bench";
  std::vector<std::uint32_t> tokens(static_cast<std::size_t>(state.range(0)));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::uint32_t>((i * 2654435761u) % 128256);
  }
  for (auto _ : state) {  // not entered when skipped
    Result<std::vector<ChunkKey>> keys = ChunkKeysForTokens(ns, tokens);
    if (!keys.ok()) {
      state.SkipWithError(keys.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(keys->data());
  }
  if (selected) {
    const auto n = static_cast<std::int64_t>(tokens.size());
    state.SetBytesProcessed(state.iterations() * n * 4);
    state.SetItemsProcessed(state.iterations() * n);
  }
  (void)internal::SetSha256ImplForTesting(Sha256Impl::kAuto);
}
BENCHMARK_CAPTURE(BM_ChunkKeysForTokens, portable, Sha256Impl::kPortable)->Arg(128 * 1024);
BENCHMARK_CAPTURE(BM_ChunkKeysForTokens, sha_ni, Sha256Impl::kShaNi)->Arg(128 * 1024);

}  // namespace
}  // namespace kvdepot
