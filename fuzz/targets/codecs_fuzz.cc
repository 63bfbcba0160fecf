// codecs: every decoder (raw, cachegen, hack-int2) through DecodeChunk on a container parsed
// without checksum verification, so that mutations reach the codec's own parsing instead of
// stopping at a checksum mismatch; then, for small tensors, every encoder (what GET_AS's
// transcoding runs) on what was decoded — awkward shapes, NaN/Inf from raw containers, options
// picked from the input's last byte — with a round trip as the oracle: an encoder either refuses
// with a Status or writes a container that parses (checksums verified) and decodes to the same
// shape and dtype (raw: the same bytes).
#include "fuzz_targets.h"
#include "kvdepot/codec/codec.h"
#include "kvdepot/codec/container.h"

namespace kvdepot::fuzz {
namespace {

// Shapes that decode to more than this are skipped: the limits in tensor.h allow 1 GiB, which is
// correct but makes each run too slow to fuzz (the decoders' size checks are exercised anyway
// by smaller shapes).
constexpr std::uint64_t kMaxFuzzDecodedBytes = 16u << 20;
// Tensors re-encoded (three encoders per run).
constexpr std::uint64_t kMaxFuzzEncodedBytes = 1u << 20;

EncodeOptions OptionsFor(CodecId codec, std::uint8_t pick, std::uint32_t layers) {
  EncodeOptions o;
  o.codec = codec;
  const std::uint8_t bins = static_cast<std::uint8_t>(2 + pick % 63);  // [2, 64]
  if ((pick & 0x80u) != 0) {
    o.cachegen.k_bins.assign(layers, bins);
    o.cachegen.v_bins.assign(layers, static_cast<std::uint8_t>(66 - bins));
  }
  o.hack.orientation = (pick & 1u) != 0 ? HackOrientation::kToken : HackOrientation::kChannel;
  o.hack.partition = 32u << ((pick >> 1) % 3);
  o.hack.rounding = (pick & 8u) != 0 ? HackRounding::kStochastic : HackRounding::kNearest;
  o.hack.seed = pick;
  o.hack.sinks = (pick >> 4) % 4 == 3 ? 64u : (pick >> 4) % 4;
  return o;
}

void RoundTrip(const KvTensor& tensor, std::uint8_t pick) {
  for (CodecId codec : {CodecId::kRaw, CodecId::kCacheGen, CodecId::kHackInt2}) {
    auto encoded = EncodeChunk(tensor.view(), OptionsFor(codec, pick, tensor.shape.layers));
    if (!encoded.ok()) continue;  // refused (NaN/Inf, fp32 for hack-int2, ...): fine
    auto back = DecodeChunk(*encoded);
    if (!back.ok() || !(back->shape == tensor.shape) || back->dtype != tensor.dtype) {
      __builtin_trap();  // an encoder wrote what its decoder rejects
    }
    if (codec == CodecId::kRaw && back->data != tensor.data) __builtin_trap();  // raw is lossless
  }
}

}  // namespace

int FuzzCodecs(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  ParseOptions no_checksums;
  no_checksums.verify_checksums = false;
  auto view = ParseContainer(bytes, no_checksums);
  if (!view.ok()) return 0;
  const std::uint64_t decoded_bytes = view->header.shape.elements() * DTypeSize(view->header.dtype);
  if (decoded_bytes > kMaxFuzzDecodedBytes) return 0;
  auto tensor = DecodeChunk(*view);
  if (!tensor.ok()) return 0;
  if (!tensor->view().Validate().ok()) __builtin_trap();  // a decoded tensor is whole
  if (decoded_bytes <= kMaxFuzzEncodedBytes) RoundTrip(*tensor, data[size - 1]);
  return 0;
}

}  // namespace kvdepot::fuzz
