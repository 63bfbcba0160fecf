// Transcoding: a stored chunk container re-encoded into another codec (protocol GET_AS, the
// daemon's transcoding workers). The CPU reference of the GPU path (kvdepot::cuda::TranscodeGpu),
// which must return the same bytes.
//
// Thread-safety: stateless; safe to call concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kvdepot/codec/codec.h"

namespace kvdepot {

// What a transcode cost, for Metrics::ObserveCodec. decode_seconds is 0 when nothing was decoded
// (same codec), encode_seconds 0 when nothing was encoded.
struct TranscodeTimings {
  CodecId from = CodecId::kRaw;
  double decode_seconds = 0;
  double encode_seconds = 0;
  std::uint64_t raw_bytes = 0;     // the decoded tensor's bytes
  std::uint64_t input_bytes = 0;   // the stored container
  std::uint64_t output_bytes = 0;  // the returned container
};

// Decodes `container` (verifying every checksum) and encodes the tensor with `target` and the
// codec options in `options` (options.codec is ignored). A container already in `target` is
// validated (ParseContainer) and returned as a copy. The tensor keeps its dtype. Errors: those of
// DecodeChunk and EncodeChunk; nothing partial is returned.
Result<std::vector<std::byte>> TranscodeChunk(std::span<const std::byte> container, CodecId target,
                                              const EncodeOptions& options = {},
                                              TranscodeTimings* timings = nullptr);

// The skeleton TranscodeChunk and the GPU path share: parse `container` (checksums verified),
// return a copy when it is already in `target`, else `decode` it and `encode` the tensor, timing
// both into `timings`. `decode` gets the parsed view and the bytes it views.
using TranscodeDecoder =
    std::function<Result<KvTensor>(const ContainerView& view, std::span<const std::byte> bytes)>;
using TranscodeEncoder = std::function<Result<std::vector<std::byte>>(const KvTensorView& tensor)>;
Result<std::vector<std::byte>> TranscodeWith(std::span<const std::byte> container, CodecId target,
                                             const TranscodeDecoder& decode,
                                             const TranscodeEncoder& encode,
                                             TranscodeTimings* timings);

}  // namespace kvdepot
