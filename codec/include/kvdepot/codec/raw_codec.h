// The raw codec: the tensor stored unchanged in its original dtype, as a single `payload` section
// (C order, little-endian). Used for lossless storage and as the transcoding hub.
#pragma once

#include <cstddef>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {

// Validates the tensor and returns a raw container. Deterministic: equal tensors give equal bytes.
Result<std::vector<std::byte>> EncodeRaw(const KvTensorView& tensor);

// A view of the payload inside a parsed raw container (no copy). Errors (kCorruption) when the
// container's sections are not exactly one payload of shape.elements() * dtype bytes.
Result<KvTensorView> RawPayloadView(const ContainerView& view);

// Copies the payload out of a parsed raw container.
Result<KvTensor> DecodeRaw(const ContainerView& view);

}  // namespace kvdepot
