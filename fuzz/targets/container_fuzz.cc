// container: ParseContainer (checksums verified, then not) and VerifyChecksums.
#include <vector>

#include "fuzz_targets.h"
#include "kvdepot/codec/container.h"

namespace kvdepot::fuzz {

int FuzzContainer(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  (void)ParseContainer(bytes);
  ParseOptions no_checksums;
  no_checksums.verify_checksums = false;
  auto view = ParseContainer(bytes, no_checksums);
  if (!view.ok()) return 0;
  // Every span must lie inside the input (ASan checks the reads).
  for (const SectionView& s : view->sections) {
    volatile std::byte sink{};
    for (std::byte b : s.bytes) sink = sink ^ b;
  }
  const ChecksumReport report = VerifyChecksums(*view, bytes);
  if (report.section_ok.size() != view->sections.size()) __builtin_trap();
  return 0;
}

}  // namespace kvdepot::fuzz
