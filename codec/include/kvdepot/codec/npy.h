// Reading and writing KV tensors as NumPy .npy files (docs/npy.md).
//
// Read: format versions 1.0, 2.0 and 3.0; a C-order array of shape [layers, 2, tokens, kv_heads,
// head_dim] with descr '<f2'/'>f2' (fp16), '<f4'/'>f4' (fp32) or, when declared, '<u2'/'>u2'
// (bfloat16 bit patterns). Big-endian data is byte-swapped, so a returned tensor is always
// little-endian C order. The header parser is total: any byte string yields a tensor or a Status,
// never an out-of-bounds read, and every allocation is bounded by ValidateShape (kMaxDecodedBytes).
//
// Write: format 1.0, byte-identical to numpy 1.24's np.save of the same array: '<f2' for fp16,
// '<f4' for fp32, '<u2' for bf16 (raw bfloat16 bits; numpy has no bfloat16), header padded with
// spaces and a final '\n' so that the data starts at a multiple of 64 bytes.
//
// Errors (all messages start with "npy: ", or with the path for the file functions):
//   kInvalidArgument  not an .npy file, an unsupported version, a header syntax error, an unknown,
//                     duplicate or missing key, an unsupported 'descr', 'fortran_order' True, a
//                     shape that is not 5-D or whose axis 1 is not 2, uint16 data without
//                     NpyReadOptions::uint16_as_bf16; on write, a tensor failing Validate().
//   kOutOfRange       a header longer than kMaxNpyHeaderBytes, a dimension outside the bounds of
//                     ValidateShape (including negative and overflowing numbers), data over
//                     kMaxDecodedBytes.
//   kCorruption       a header length reaching beyond the end of the file, data shorter than the
//                     shape needs ("truncated") or longer ("trailing bytes").
//   ReadFile / WriteFileAtomic codes for the file functions.
//
// Thread-safety: stateless functions; safe to call concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/codec/tensor.h"

namespace kvdepot {

// The largest header (the dict text, padding included) ParseKvNpy accepts.
inline constexpr std::uint32_t kMaxNpyHeaderBytes = 64 * 1024;

struct NpyReadOptions {
  // A '<u2' (uint16) array is accepted only when true, and is then taken to hold bfloat16 bit
  // patterns (numpy has no bfloat16; this is how kvdepot carries bf16 in .npy files).
  bool uint16_as_bf16 = false;
};

// Parses a whole .npy file image holding a C-order array of shape [L, 2, T, H, D]. The result owns
// a copy of the data, converted to little-endian. `file` need not be aligned.
Result<KvTensor> ParseKvNpy(std::span<const std::byte> file, const NpyReadOptions& options = {});

// Reads and parses `path`; errors are prefixed with the path ("x.npy: npy: ..."). The read is
// bounded by ReadFile(path, kMaxDecodedBytes + 1 MiB).
Result<KvTensor> ReadKvNpy(const std::string& path, const NpyReadOptions& options = {});

// Serializes as .npy format 1.0 (header padded so data starts at a multiple of 64 bytes):
// fp16 -> '<f2', fp32 -> '<f4', bf16 -> '<u2' (raw bfloat16 bits). Precondition:
// tensor.Validate().ok(); when it is violated the result is empty (never a valid .npy image).
std::vector<std::byte> SerializeKvNpy(const KvTensorView& tensor);

// Writes SerializeKvNpy(tensor) to `path` atomically (WriteFileAtomic). A tensor failing
// Validate() returns kInvalidArgument/kOutOfRange prefixed with the path, and `path` is untouched.
Status WriteKvNpy(const std::string& path, const KvTensorView& tensor);

}  // namespace kvdepot
