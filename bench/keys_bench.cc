// Cost of chunk-key derivation: SHA-256 throughput (OpenSSL's libcrypto) and the keys of a
// 128K-token prompt. Google Benchmark functions only; linked with benchmark_main.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvdepot/protocol/chunk_key.h"
#include "kvdepot/protocol/sha256.h"

namespace kvdepot {
namespace {

void BM_Sha256(benchmark::State& state) {
  std::vector<std::byte> data(static_cast<std::size_t>(state.range(0)));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 131 + 7);
  for (auto _ : state) {
    Sha256Digest digest = Sha256Of(data);
    benchmark::DoNotOptimize(digest);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(data.size()));
}
BENCHMARK(BM_Sha256)->Arg(1024)->Arg(1 << 20);

// Keys of a 128K-token prompt (512 chunks of 256 tokens, 1 KiB of token ids each). Bytes are the
// token ids' bytes; items are tokens.
void BM_ChunkKeysForTokens(benchmark::State& state) {
  Namespace ns;
  ns.model = "meta-llama/Llama-3.1-8B-Instruct";
  ns.tenant = "bench";
  std::vector<std::uint32_t> tokens(static_cast<std::size_t>(state.range(0)));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::uint32_t>((i * 2654435761u) % 128256);
  }
  for (auto _ : state) {
    Result<std::vector<ChunkKey>> keys = ChunkKeysForTokens(ns, tokens);
    if (!keys.ok()) {
      state.SkipWithError(keys.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(keys->data());
  }
  const auto n = static_cast<std::int64_t>(tokens.size());
  state.SetBytesProcessed(state.iterations() * n * 4);
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_ChunkKeysForTokens)->Arg(128 * 1024);

}  // namespace
}  // namespace kvdepot
