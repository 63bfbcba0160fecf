#include "kvdepot/codec/codec.h"

#include <string>

#include "kvdepot/codec/cachegen.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/raw_codec.h"

namespace kvdepot {

Result<std::vector<std::byte>> EncodeChunk(const KvTensorView& tensor,
                                           const EncodeOptions& options) {
  switch (options.codec) {
    case CodecId::kRaw: return EncodeRaw(tensor);
    case CodecId::kCacheGen: return EncodeCacheGen(tensor, options.cachegen);
    case CodecId::kHackInt2: return EncodeHack(tensor, options.hack);
  }
  return InvalidArgument("encode: invalid codec id");
}

Result<KvTensor> DecodeChunk(const ContainerView& view) {
  switch (view.header.codec) {
    case CodecId::kRaw: return DecodeRaw(view);
    case CodecId::kCacheGen: return DecodeCacheGen(view);
    case CodecId::kHackInt2: return DecodeHack(view);
  }
  return Internal("decode: invalid codec id in a parsed container");
}

Result<KvTensor> DecodeChunk(std::span<const std::byte> container) {
  KVD_ASSIGN_OR_RETURN(ContainerView view, ParseContainer(container));
  return DecodeChunk(view);
}

}  // namespace kvdepot
