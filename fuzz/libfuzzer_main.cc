// The libFuzzer entry point of one target, chosen at compile time by KVD_FUZZ_TARGET (its name in
// AllTargets()). Built only with KVDEPOT_FUZZ=ON (clang, -fsanitize=fuzzer).
#include <cstdlib>
#include <string_view>

#include "fuzz_targets.h"

namespace {

kvdepot::fuzz::TargetFn Find(std::string_view name) {
  for (const auto& t : kvdepot::fuzz::AllTargets()) {
    if (t.name == name) return t.fn;
  }
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const kvdepot::fuzz::TargetFn fn = Find(KVD_FUZZ_TARGET);
  return fn(data, size);
}
