// The real KV the quality studies read (kvdepot_cachegen_rd, kvdepot_hack_accuracy,
// kvdepot_hack_quality): a .npy of a small model's prefill, docs/npy.md.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "kvdepot/codec/npy.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot::bench {

inline constexpr const char* kDefaultRealKv = "../shared/data/tinystories656k-kv-768tok.npy";

// The tensor at argv[1] (default kDefaultRealKv), or nothing after printing why it was skipped
// (the studies then report synthetic KV only). `path` receives the path read.
inline std::optional<KvTensor> LoadRealKv(int argc, char** argv, std::string* path = nullptr) {
  const std::string real = argc > 1 ? argv[1] : kDefaultRealKv;
  if (path != nullptr) *path = real;
  auto t = ReadKvNpy(real);
  if (!t.ok()) {
    std::printf("real KV skipped: %s\n\n", t.status().ToString().c_str());
    return std::nullopt;
  }
  return std::move(*t);
}

}  // namespace kvdepot::bench
