// Kernel family "hack", attention: the host side of kvdepot/cuda/hack.h's attention calls —
// validation (every argument checked before anything is enqueued, errors naming the call, the
// field and the supported range), grid sizing, the choice of kernel (homomorphic, fp16 decode,
// fp16 prefill; staged or not), the workspace, and the error word's messages. The kernels and their
// launchers are in hack_attention.cu, hack_decode_fp16.cu and hack_prefill_fp16.cu; what they and
// this file agree on beyond HackAttentionParams is hack_attention_shared.h.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "hack_attention_shared.h"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/cuda/hack.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {

namespace {

using hack::Layout;
using internal::kCountersOffset;
using internal::kErrArch;
using internal::kErrorOffset;
using internal::kErrPage;
using internal::kErrSection;
using internal::kErrSinks;
using internal::kErrTail;
using internal::kErrTokens;
using internal::kHomomorphicMaxWarps;
using internal::kMaxSplits;
using internal::kP;
using internal::kRows;
using internal::PartialsOffset;

// Target units per warp when sizing a homomorphic CTA. Decode: one, since a warp works through a
// unit latency-bound (~11 us at batch 1 on the H200) and more warps per CTA cost little; prefill:
// four (measured faster at 1K tokens, docs/benchmarks.md).
constexpr std::uint32_t kDecodeUnitsPerWarp = 1;
constexpr std::uint32_t kPrefillUnitsPerWarp = 4;
// Prefill CTAs have at most 8 warps: at 128 registers a thread, two such CTAs fill an SM's
// registers (16 warps), where one CTA of 9..15 warps left the rest idle (a 4K prompt: 9 warps, 14%
// of the SM's warp slots, 44% issue activity; docs/hack-gpu.md, "Prefill attention").
constexpr std::uint32_t kPrefillMaxWarps = 8;

bool Aligned(const void* p, std::uintptr_t n) {
  return (reinterpret_cast<std::uintptr_t>(p) & (n - 1)) == 0;
}

// Checks shared by decode and prefill; fills the KV fields of `params`.
Status CheckKv(const char* fn, const HackKvCache& kv, std::uint32_t q_heads, float softmax_scale,
               HackAttentionParams& params) {
  const std::string f(fn);
  if (kv.dtype != DType::kFloat16 && kv.dtype != DType::kBFloat16) {
    return Unimplemented(f + ": tail dtype must be fp16 or bf16");
  }
  if (kv.layers == 0 || kv.layers > kMaxLayers || kv.layer >= kv.layers) {
    return InvalidArgument(f + ": layer " + std::to_string(kv.layer) + " of " +
                           std::to_string(kv.layers) + " layers is out of range");
  }
  if (kv.kv_heads == 0 || kv.kv_heads > kMaxKvHeads) {
    return InvalidArgument(f + ": kv_heads = " + std::to_string(kv.kv_heads) + " is out of range");
  }
  if (kv.head_dim != 64 && kv.head_dim != 128) {
    return Unimplemented(f + ": head_dim = " + std::to_string(kv.head_dim) +
                         " is not supported by the GPU kernels (64 or 128)");
  }
  if (!hack::IsValidPartition(kv.partition)) {
    return InvalidArgument(f + ": partition = " + std::to_string(kv.partition) +
                           " is invalid (32, 64 or 128)");
  }
  if (kv.partition != kP) {
    return Unimplemented(f + ": partition = " + std::to_string(kv.partition) +
                         " is not supported by the GPU kernels (64)");
  }
  if (q_heads == 0 || q_heads % kv.kv_heads != 0) {
    return InvalidArgument(
        f + ": q_heads = " + std::to_string(q_heads) +
        " is not a positive multiple of kv_heads = " + std::to_string(kv.kv_heads));
  }
  const std::uint32_t group = q_heads / kv.kv_heads;
  if (group > kRows) {
    return Unimplemented(f + ": " + std::to_string(group) +
                         " query heads per KV head; the GPU kernels support 1 to 8");
  }
  if (!std::isfinite(softmax_scale) || softmax_scale < 0) {
    return InvalidArgument(f + ": softmax_scale must be finite and >= 0");
  }
  if (kv.page_blocks != 0) {
    if (kv.num_pages == 0 || kv.page_codes == nullptr || kv.page_scales == nullptr ||
        kv.page_sums == nullptr || kv.block_tables == nullptr || kv.max_pages_per_seq == 0) {
      return InvalidArgument(f + ": paged layout needs pages, page sections and block tables");
    }
    Layout pl;
    pl.layers = kv.layers;
    pl.tokens = kv.page_blocks * kP;
    pl.heads = kv.kv_heads;
    pl.dim = kv.head_dim;
    pl.partition = kP;
    const HackSectionBytes need = HackSectionBytesFor(pl, kv.dtype);
    if (kv.page_codes_bytes < need.codes || kv.page_scales_bytes < need.scales ||
        kv.page_sums_bytes < need.sums || kv.page_codes_bytes % 16 != 0 ||
        kv.page_scales_bytes % 16 != 0 || kv.page_sums_bytes % 16 != 0) {
      return InvalidArgument(f +
                             ": page strides must be multiples of 16 and hold a page's "
                             "sections (codes " +
                             std::to_string(need.codes) + ", scales " +
                             std::to_string(need.scales) + ", sums " + std::to_string(need.sums) +
                             " bytes)");
    }
    if (!Aligned(kv.page_codes, 16) || !Aligned(kv.page_scales, 16) || !Aligned(kv.page_sums, 16) ||
        !Aligned(kv.block_tables, 4)) {
      return InvalidArgument(f + ": page sections must be 16-byte aligned");
    }
  }
  params.layers = kv.layers;
  params.layer = kv.layer;
  params.kv_heads = kv.kv_heads;
  params.q_heads = q_heads;
  params.group = group;
  params.tail_bf16 = kv.dtype == DType::kBFloat16 ? 1u : 0u;
  params.page_blocks = kv.page_blocks;
  params.num_pages = kv.num_pages;
  params.max_pages_per_seq = kv.max_pages_per_seq;
  params.block_tables = kv.block_tables;
  params.page_codes = kv.page_codes;
  params.page_scales = kv.page_scales;
  params.page_sums = kv.page_sums;
  params.page_codes_bytes = kv.page_codes_bytes;
  params.page_scales_bytes = kv.page_scales_bytes;
  params.page_sums_bytes = kv.page_sums_bytes;
  const double scale =
      softmax_scale > 0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(kv.head_dim));
  params.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  return Status::Ok();
}

// q's and out's element type (HackDecodeArgs / HackPrefillArgs::io_dtype): a DType value.
Status CheckIoDtype(const char* fn, DType io_dtype) {
  if (!IsValidDType(static_cast<std::uint8_t>(io_dtype))) {
    return InvalidArgument(std::string(fn) + ": io_dtype " +
                           std::to_string(static_cast<unsigned>(io_dtype)) +
                           " is not fp16, bf16 or fp32");
  }
  return Status::Ok();
}

// Splits, units per split and warps for `tiles` tiles of at most `units` units (64-token blocks
// and runs of up to 64 unquantized tokens) each, on average `mean_units` (warps are sized for the
// average tile). The kernel takes a tile's units [split * units_per_split, + units_per_split), so
// `units` must bound every tile's count.
void SizeGrid(const HackAttentionWorkspace& ws, std::uint64_t units, std::uint64_t mean_units,
              std::uint32_t units_per_warp, std::uint32_t max_warps, HackAttentionParams& params) {
  const std::uint64_t pairs = std::uint64_t{params.tiles} * params.kv_heads;
  const auto sms = static_cast<std::uint64_t>(std::max(ws.sm_count(), 1));
  std::uint64_t splits = 1;
  if (pairs < sms) splits = std::min<std::uint64_t>({kMaxSplits, sms / pairs, units});
  splits = std::max<std::uint64_t>(splits, 1);
  const std::uint64_t ups = (units + splits - 1) / splits;
  const std::uint64_t mean_ups = (mean_units + splits - 1) / splits;
  params.splits = static_cast<std::uint32_t>(splits);
  params.units_per_split = static_cast<std::uint32_t>(ups);
  params.warps = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>((mean_ups + units_per_warp - 1) / units_per_warp, 1, max_warps));
}

Status Launch(const HackAttentionParams& params, std::uint32_t head_dim, cudaStream_t stream,
              const char* fn) {
  const cudaError_t err = head_dim == 64 ? LaunchHackAttention<64>(params, stream)
                                         : LaunchHackAttention<128>(params, stream);
  KVD_CUDA_RETURN_IF_ERROR(err, fn);
  return Status::Ok();
}

std::string ErrorMessage(unsigned long long key) {
  const auto kind = static_cast<std::uint32_t>(key & 0xffu);
  const std::string seq = "sequence " + std::to_string(key >> 8);
  switch (kind) {
    case kErrTokens: return seq + ": tokens is 0 or exceeds max_tokens";
    case kErrSinks: return seq + ": sinks exceeds tokens";
    case kErrSection: return seq + ": codes / scales / sums pointer is null or not 16-byte aligned";
    case kErrTail: return seq + ": tail pointer is null or not 16-byte aligned";
    case kErrPage: return seq + ": block table entry is outside [0, num_pages)";
    case kErrArch:  // not about a sequence: the build lacks the kernel this device runs
      return "the head_dim-128 fp16 prefill kernel needs sm_90a SASS on this compute-capability-"
             "9.0 device, and this build has none: rebuild with CMAKE_CUDA_ARCHITECTURES "
             "including 90a-real (the default, cmake/KvdepotCuda.cmake)";
    default: return seq + ": unknown error " + std::to_string(kind);
  }
}

}  // namespace

Result<HackAttentionWorkspace> HackAttentionWorkspace::Create() {
  int device = 0;
  KVD_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "HackAttentionWorkspace");
  int sms = 0;
  KVD_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                           "HackAttentionWorkspace");
  HackAttentionWorkspace ws;
  ws.sm_count_ = std::max(sms, 1);
  ws.max_counters_ = static_cast<std::uint32_t>(ws.sm_count_);
  const std::size_t partials =
      std::size_t{static_cast<std::uint32_t>(ws.sm_count_)} * kRows * (128 + 2) * sizeof(float);
  const std::size_t partials_offset = PartialsOffset(ws.max_counters_);
  KVD_ASSIGN_OR_RETURN(ws.device_, DeviceBuffer::Allocate(partials_offset + partials));
  KVD_CUDA_RETURN_IF_ERROR(cudaMemset(ws.device_.data(), 0, partials_offset),
                           "HackAttentionWorkspace: clear counters");
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemset(ws.device_.as<std::uint8_t>() + kErrorOffset, 0xff, sizeof(unsigned long long)),
      "HackAttentionWorkspace: clear error word");
  KVD_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "HackAttentionWorkspace");
  return Result<HackAttentionWorkspace>(std::move(ws));
}

namespace internal {

// The attention calls' view of a workspace's device buffer (error word | counters | partials, laid
// out by HackAttentionWorkspace::Create): HackAttentionWorkspace's only friend.
struct HackWorkspaceAccess {
  static bool Created(const HackAttentionWorkspace& ws) { return ws.device_.data() != nullptr; }
  static unsigned long long* ErrorWord(HackAttentionWorkspace& ws) {
    return reinterpret_cast<unsigned long long*>(ws.device_.as<std::uint8_t>() + kErrorOffset);
  }
  // Points params' error word, arrival counters and split partials into `ws`.
  static void Bind(HackAttentionWorkspace& ws, HackAttentionParams& params) {
    auto* base = ws.device_.as<std::uint8_t>();
    params.error = ErrorWord(ws);
    params.counters = reinterpret_cast<unsigned int*>(base + kCountersOffset);
    params.partials = reinterpret_cast<float*>(base + PartialsOffset(ws.max_counters_));
  }
};

}  // namespace internal

using internal::HackWorkspaceAccess;

Status EnqueueHackDecodeAttention(const HackKvCache& kv, const HackDecodeArgs& args,
                                  HackAttentionWorkspace& workspace, cudaStream_t stream) {
  constexpr const char* kFn = "hack GPU decode attention";
  HackAttentionParams params{};
  KVD_RETURN_IF_ERROR(CheckKv(kFn, kv, args.q_heads, args.softmax_scale, params));
  if (!HackWorkspaceAccess::Created(workspace)) {
    return InvalidArgument(std::string(kFn) + ": workspace was not created");
  }
  if (args.num_seqs == 0 || args.seqs == nullptr || args.q == nullptr || args.out == nullptr) {
    return InvalidArgument(std::string(kFn) + ": needs sequences, q and out");
  }
  if (args.max_tokens == 0) {
    return InvalidArgument(std::string(kFn) + ": max_tokens must be >= 1");
  }
  KVD_RETURN_IF_ERROR(CheckIoDtype(kFn, args.io_dtype));
  const std::size_t elem = DTypeSize(args.io_dtype);
  if (!Aligned(args.q, 16) || !Aligned(args.out, elem)) {
    return InvalidArgument(std::string(kFn) + ": q must be 16-byte aligned and out " +
                           std::to_string(elem) + "-byte aligned (" +
                           std::string(DTypeName(args.io_dtype)) + " io_dtype)");
  }
  if (!Aligned(args.seqs, 8)) {
    return InvalidArgument(std::string(kFn) + ": seqs must be 8-byte aligned");
  }
  params.q = args.q;
  params.out = args.out;
  params.io_dtype = static_cast<std::uint32_t>(args.io_dtype);
  params.lse = args.lse;
  params.seqs = args.seqs;
  params.max_tokens = args.max_tokens;
  params.tiles = args.num_seqs;
  params.queries = args.num_seqs;
  params.queries_per_tile = 1;
  params.prefill = 0;
  HackWorkspaceAccess::Bind(workspace, params);
  const bool fp16 = args.math == HackDecodeMath::kDequantFp16;
  if (!fp16 && args.math != HackDecodeMath::kHomomorphicInt8) {
    return InvalidArgument(std::string(kFn) + ": unknown HackDecodeMath " +
                           std::to_string(static_cast<int>(args.math)));
  }
  // A sequence of T tokens has exactly ceil(T / 64) units: its B blocks, then its T - 64 B
  // unquantized tokens (sinks and tail) in runs of up to 64. The grid is sized for that many; one
  // more (as prefill needs) gave 4K tokens 5 units per split where 4 fill the 16 splits, and 32K
  // tokens 33 blocks per 16-warp split, so one warp took a third block (docs/hack-gpu.md).
  const std::uint64_t units = (std::uint64_t{args.max_tokens} + kP - 1) / kP;
  SizeGrid(workspace, units, units, kDecodeUnitsPerWarp,
           fp16 ? kHackDecodeFp16MaxWarps : kHomomorphicMaxWarps, params);
  // The fp16 kernel's ninth to twelfth warps pay only where each warp then has many blocks (a CTA
  // per SM either way). H200, session 23 (one kernel, 8 or 12 warps): splits of 32 and 64 blocks
  // (32K and 64K tokens at batch 1) ran 5-7% faster on 8 warps than on 12, of 128 1% and of 256
  // (16K at batch 16) 5% slower. Since session 27 the 8-warp calls run their own kernel (200
  // registers; it asks L2 for its first blocks before the dependency wait and lets the next call
  // launch early), and on H100s in session 38 it was faster than 12 warps for split sequences of up
  // to 128 blocks per split (128K tokens at batch 1: -3.0 to -4.5% in five calls, each a fresh
  // machine; 96 and 112 blocks -0.4%; 160 +6.6% and 192 level, one call) and for whole sequences of
  // up to 256 blocks (batch 16 at 6K-16K tokens: -6.1 to -10.2%, two calls; 512 level, 1,024 and
  // 2,048 +7.4% and +10.3%). All at head_dim 128 (64 takes the same bound); not measured on the
  // H200 since session 23.
  const std::uint32_t blocks_on_8_warps =
      (params.splits > 1 ? 16u : 32u) * kHackDecodeFp16FullWarps;
  if (fp16 && params.warps > kHackDecodeFp16FullWarps &&
      params.units_per_split <= blocks_on_8_warps) {
    params.warps = kHackDecodeFp16FullWarps;
  }
  // Few blocks per warp (4K tokens at batch 1: one): the call's time is one block's chain of work
  // on one warp, so twin warps split each block (head_dim 128; see Twin in the kernel).
  if (!fp16 && kv.head_dim == 128 && 2 * params.warps <= kHomomorphicMaxWarps) {
    params.twin_warps = 1;
    params.warps *= 2;
  }
  if (std::uint64_t{params.tiles} * params.kv_heads * params.splits > 0x7fffffffu) {
    return InvalidArgument(std::string(kFn) + ": batch too large for one launch");
  }
  if (fp16) {
    const cudaError_t err = kv.head_dim == 64 ? LaunchHackDecodeFp16<64>(params, stream)
                                              : LaunchHackDecodeFp16<128>(params, stream);
    KVD_CUDA_RETURN_IF_ERROR(err, kFn);
    return Status::Ok();
  }
  return Launch(params, kv.head_dim, stream, kFn);
}

namespace {

// Validates and enqueues a prefill call, or with staging_only only its staging kernel
// (EnqueueHackPrefillStaging).
Status EnqueuePrefill(const HackKvCache& kv, const HackPrefillArgs& args,
                      HackAttentionWorkspace& workspace, cudaStream_t stream, bool staging_only) {
  const char* const kFn = staging_only ? "hack GPU prefill staging" : "hack GPU prefill attention";
  HackAttentionParams params{};
  KVD_RETURN_IF_ERROR(CheckKv(kFn, kv, args.q_heads, args.softmax_scale, params));
  if (!HackWorkspaceAccess::Created(workspace)) {
    return InvalidArgument(std::string(kFn) + ": workspace was not created");
  }
  const HackAttentionSeq& seq = args.seq;
  if (seq.tokens == 0 || seq.sinks > seq.tokens) {
    return InvalidArgument(std::string(kFn) +
                           ": the sequence needs tokens >= 1 and sinks <= tokens");
  }
  if (args.queries == 0 || std::uint64_t{args.first_position} + args.queries > seq.tokens) {
    return InvalidArgument(std::string(kFn) + ": " + std::to_string(args.queries) +
                           " queries from position " + std::to_string(args.first_position) +
                           " do not fit a sequence of " + std::to_string(seq.tokens) + " tokens");
  }
  Layout lay;
  lay.layers = kv.layers;
  lay.tokens = seq.tokens;
  lay.heads = kv.kv_heads;
  lay.dim = kv.head_dim;
  lay.partition = kP;
  lay.sinks = seq.sinks;
  if (kv.page_blocks == 0 && lay.blocks() > 0 &&
      (seq.codes == nullptr || seq.scales == nullptr || seq.sums == nullptr ||
       !Aligned(seq.codes, 16) || !Aligned(seq.scales, 16) || !Aligned(seq.sums, 16))) {
    return InvalidArgument(std::string(kFn) +
                           ": codes / scales / sums must be non-null and 16-byte aligned");
  }
  if (lay.unquantized_tokens() > 0 && (seq.tail == nullptr || !Aligned(seq.tail, 16))) {
    return InvalidArgument(std::string(kFn) + ": tail must be non-null and 16-byte aligned");
  }
  if (args.q == nullptr || args.out == nullptr || !Aligned(args.q, 16) || !Aligned(args.out, 16)) {
    return InvalidArgument(std::string(kFn) + ": q and out are needed, both 16-byte aligned");
  }
  KVD_RETURN_IF_ERROR(CheckIoDtype(kFn, args.io_dtype));
  params.q = args.q;
  params.out = args.out;
  params.io_dtype = static_cast<std::uint32_t>(args.io_dtype);
  params.lse = args.lse;
  params.seqs = nullptr;
  params.prefill_seq = seq;
  params.max_tokens = seq.tokens;
  params.queries = args.queries;
  params.queries_per_tile = kRows / params.group;
  params.tiles = (args.queries + params.queries_per_tile - 1) / params.queries_per_tile;
  params.first_position = args.first_position;
  params.prefill = 1;
  HackWorkspaceAccess::Bind(workspace, params);
  const std::uint64_t staging = HackPrefillStagingBytes(kv, args);
  if (args.staging != nullptr && staging > 0) {
    if (args.staging_bytes < staging) {
      return InvalidArgument(std::string(kFn) + ": the staging scratch of " +
                             std::to_string(args.staging_bytes) +
                             " bytes is too small: this call needs " + std::to_string(staging) +
                             " bytes (HackPrefillStagingBytes)");
    }
    if (!Aligned(args.staging, 16)) {
      return InvalidArgument(std::string(kFn) + ": the staging scratch must be 16-byte aligned");
    }
    params.prefill_stages = static_cast<std::uint8_t*>(args.staging);
    params.prefill_stage_tiles =
        static_cast<std::uint32_t>(staging / (std::uint64_t{kv.kv_heads} * kHackPrefillStageBytes));
  }
  if (staging_only) {
    if (params.prefill_stages == nullptr) {
      return InvalidArgument(std::string(kFn) +
                             ": the call does not stage (needs kDequantFp16, head_dim 128 and a "
                             "staging scratch)");
    }
    KVD_CUDA_RETURN_IF_ERROR(LaunchHackPrefillFp16Staging(params, stream), kFn);
    return Status::Ok();
  }
  if (args.math == HackPrefillMath::kDequantFp16) {
    // Grid: ceil(queries / (128 / group)) x kv_heads, within CUDA's limits for any 32-bit count.
    const cudaError_t err = kv.head_dim == 64 ? LaunchHackPrefillFp16<64>(params, stream)
                                              : LaunchHackPrefillFp16<128>(params, stream);
    KVD_CUDA_RETURN_IF_ERROR(err, kFn);
    return Status::Ok();
  }
  if (args.math != HackPrefillMath::kHomomorphicInt8) {
    return InvalidArgument(std::string(kFn) + ": unknown HackPrefillMath " +
                           std::to_string(static_cast<int>(args.math)));
  }
  // A query tile sees at most ceil(positions / 64) + 1 units: the block holding its last visible
  // position may be visible in part, next to a unit of sinks.
  SizeGrid(workspace, (std::uint64_t{args.first_position} + args.queries + kP - 1) / kP + 1,
           (std::uint64_t{args.first_position} + (args.queries + 1) / 2 + kP - 1) / kP + 1,
           kPrefillUnitsPerWarp, kPrefillMaxWarps, params);
  if (std::uint64_t{params.tiles} * params.kv_heads * params.splits > 0x7fffffffu) {
    return InvalidArgument(std::string(kFn) + ": too many queries for one launch");
  }
  return Launch(params, kv.head_dim, stream, kFn);
}

}  // namespace

Status EnqueueHackPrefillStaging(const HackKvCache& kv, const HackPrefillArgs& args,
                                 HackAttentionWorkspace& workspace, cudaStream_t stream) {
  return EnqueuePrefill(kv, args, workspace, stream, true);
}

Status EnqueueHackPrefillAttention(const HackKvCache& kv, const HackPrefillArgs& args,
                                   HackAttentionWorkspace& workspace, cudaStream_t stream) {
  return EnqueuePrefill(kv, args, workspace, stream, false);
}

Status FinishHackAttention(HackAttentionWorkspace& workspace, cudaStream_t stream) {
  if (!HackWorkspaceAccess::Created(workspace)) {
    return InvalidArgument("FinishHackAttention: workspace was not created");
  }
  unsigned long long key = 0;
  unsigned long long* const err = HackWorkspaceAccess::ErrorWord(workspace);
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&key, err, sizeof(key), cudaMemcpyDeviceToHost, stream),
                           "hack GPU attention: read error word");
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "hack GPU attention");
  if (key == ~0ull) return Status::Ok();
  KVD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(err, 0xff, sizeof(key), stream),
                           "hack GPU attention: clear error word");
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "hack GPU attention");
  return InvalidArgument("hack GPU attention: " + ErrorMessage(key));
}

}  // namespace kvdepot::cuda
