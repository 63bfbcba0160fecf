// Codec dispatch: tensor -> container and container -> tensor for every codec in the closed set
// of CodecId. Codec-specific entry points (EncodeRaw, ...) live in their own headers.
//
// Thread-safety: stateless; safe to call concurrently.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/cachegen.h"
#include "kvdepot/codec/codec_id.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {

struct EncodeOptions {
  CodecId codec = CodecId::kRaw;
  CacheGenOptions cachegen;  // used when codec == kCacheGen
  HackOptions hack;          // used when codec == kHackInt2
};

// Encodes one chunk. kUnimplemented for a codec this build does not provide.
Result<std::vector<std::byte>> EncodeChunk(const KvTensorView& tensor,
                                           const EncodeOptions& options);

// Parses (verifying every checksum) and decodes a container into a tensor of the container's
// original dtype. Never returns partial data: on any error nothing is returned.
Result<KvTensor> DecodeChunk(std::span<const std::byte> container);

// Decodes an already parsed container.
Result<KvTensor> DecodeChunk(const ContainerView& view);

}  // namespace kvdepot
