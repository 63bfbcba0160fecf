#include "kvdepot/transcode.h"

#include <chrono>

#include "kvdepot/container.h"

namespace kvdepot {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<std::vector<std::byte>> TranscodeChunk(std::span<const std::byte> container, CodecId target,
                                              const EncodeOptions& options,
                                              TranscodeTimings* timings) {
  TranscodeTimings t;
  t.input_bytes = container.size();
  KVD_ASSIGN_OR_RETURN(ContainerView view, ParseContainer(container));
  t.from = view.header.codec;
  if (view.header.codec == target) {
    t.output_bytes = container.size();
    if (timings != nullptr) *timings = t;
    return std::vector<std::byte>(container.begin(), container.end());
  }
  auto start = std::chrono::steady_clock::now();
  KVD_ASSIGN_OR_RETURN(KvTensor tensor, DecodeChunk(view));
  t.decode_seconds = SecondsSince(start);
  t.raw_bytes = tensor.data.size();
  EncodeOptions o = options;
  o.codec = target;
  start = std::chrono::steady_clock::now();
  KVD_ASSIGN_OR_RETURN(std::vector<std::byte> out, EncodeChunk(tensor.view(), o));
  t.encode_seconds = SecondsSince(start);
  t.output_bytes = out.size();
  if (timings != nullptr) *timings = t;
  return out;
}

}  // namespace kvdepot
