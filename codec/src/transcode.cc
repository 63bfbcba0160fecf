#include "kvdepot/codec/transcode.h"

#include <chrono>

#include "kvdepot/codec/container.h"

namespace kvdepot {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<std::vector<std::byte>> TranscodeWith(std::span<const std::byte> container, CodecId target,
                                             const TranscodeDecoder& decode,
                                             const TranscodeEncoder& encode,
                                             TranscodeTimings* timings) {
  TranscodeTimings t;
  t.input_bytes = container.size();
  KVD_ASSIGN_OR_RETURN(ContainerView view, ParseContainer(container));
  t.from = view.header.codec;
  if (t.from == target) {
    t.output_bytes = container.size();
    if (timings != nullptr) *timings = t;
    return std::vector<std::byte>(container.begin(), container.end());
  }
  auto start = std::chrono::steady_clock::now();
  KVD_ASSIGN_OR_RETURN(KvTensor tensor, decode(view, container));
  t.decode_seconds = SecondsSince(start);
  t.raw_bytes = tensor.data.size();
  start = std::chrono::steady_clock::now();
  KVD_ASSIGN_OR_RETURN(std::vector<std::byte> out, encode(tensor.view()));
  t.encode_seconds = SecondsSince(start);
  t.output_bytes = out.size();
  if (timings != nullptr) *timings = t;
  return out;
}

Result<std::vector<std::byte>> TranscodeChunk(std::span<const std::byte> container, CodecId target,
                                              const EncodeOptions& options,
                                              TranscodeTimings* timings) {
  EncodeOptions o = options;
  o.codec = target;
  return TranscodeWith(
      container, target,
      [](const ContainerView& view, std::span<const std::byte>) { return DecodeChunk(view); },
      [&o](const KvTensorView& tensor) { return EncodeChunk(tensor, o); }, timings);
}

}  // namespace kvdepot
