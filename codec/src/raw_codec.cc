#include "kvdepot/codec/raw_codec.h"

#include <cstring>
#include <string>

namespace kvdepot {

Result<std::vector<std::byte>> EncodeRaw(const KvTensorView& tensor) {
  KVD_RETURN_IF_ERROR(tensor.Validate().WithContext("raw encode"));
  const ContainerWriter::SectionPlan plan[] = {{SectionKind::kPayload, tensor.data.size()}};
  KVD_ASSIGN_OR_RETURN(ContainerWriter writer,
                       ContainerWriter::Create(CodecId::kRaw, tensor.dtype, tensor.shape, plan));
  std::memcpy(writer.section(0).data(), tensor.data.data(), tensor.data.size());
  return std::move(writer).Finish();
}

Result<KvTensorView> RawPayloadView(const ContainerView& view) {
  if (view.header.codec != CodecId::kRaw) {
    return InvalidArgument("raw decode: container codec is '" +
                           std::string(CodecName(view.header.codec)) + "', not 'raw'");
  }
  const SectionView* payload = nullptr;
  for (const SectionView& s : view.sections) {
    if (s.kind == static_cast<std::uint32_t>(SectionKind::kPayload)) {
      if (payload != nullptr) return Corruption("raw decode: more than one payload section");
      payload = &s;
    } else if ((s.flags & kSectionFlagOptional) == 0) {
      return Corruption("raw decode: unexpected section kind " + std::to_string(s.kind) + " (" +
                        std::string(SectionKindName(s.kind)) + ")");
    }
  }
  if (payload == nullptr) return Corruption("raw decode: no payload section");
  const std::uint64_t want = view.header.shape.elements() * DTypeSize(view.header.dtype);
  if (payload->length != want) {
    return Corruption("raw decode: payload is " + std::to_string(payload->length) +
                      " bytes, shape " + view.header.shape.ToString() + " in " +
                      std::string(DTypeName(view.header.dtype)) + " needs " + std::to_string(want));
  }
  return KvTensorView{view.header.dtype, view.header.shape, payload->bytes};
}

Result<KvTensor> DecodeRaw(const ContainerView& view) {
  KVD_ASSIGN_OR_RETURN(KvTensorView payload, RawPayloadView(view));
  KvTensor out;
  out.dtype = payload.dtype;
  out.shape = payload.shape;
  out.data.assign(payload.data.begin(), payload.data.end());
  return out;
}

}  // namespace kvdepot
