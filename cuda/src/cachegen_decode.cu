// Kernel family "cachegen", decode half (see kvdepot/cuda/cachegen.h, docs/cachegen-gpu.md):
// host-side container validation, params -> kernel -> launcher -> dispatcher. Six instantiations:
// output dtype {fp16, bf16, fp32} x layout {contiguous, paged}. Compiled with -fmad=false.
//
// One warp decodes one group (lane = rANS state). A block decodes warps_per_block groups of one
// (layer, K|V): it builds that table's slot -> (symbol, freq, cum) map in shared memory once, then
// each warp stages its group's word stream in shared memory (or reads global memory when the
// stream exceeds the staging budget) and runs the group's steps: slot lookup, advance, one ballot
// of the lanes that renormalise, each reading the word at pos + popc(ballot & lanemask_lt).
#include "kvdepot/cuda/cachegen.h"
#include "launch.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "kvdepot/base/byte_order.h"
#include "kvdepot/codec/cachegen_format.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {

namespace {

using internal::ConfigureSharedMemory;
using internal::CpAsync16;
using internal::CpAsyncCommit;
using internal::CpAsyncWait;
using internal::CpAsyncWaitAll;
using internal::kMaxDevices;
using internal::SharedAddress;
using internal::Stored;
using internal::ToStored;

using cachegen::kLanes;
using cachegen::kProbScale;
using cachegen::kStateLow;

constexpr std::uint32_t kFullMask = 0xffffffffu;
constexpr std::uint32_t kMaxWarpsPerBlock = 8;
// Groups per block (fewer when the lk has fewer). With 16 KiB of slot table and per warp 11.5 KiB
// of stage + 4 KiB of output table, two 6-warp blocks fit an SM's 227 KiB (fp16/bf16 output).
// A batch with at most 8 groups per SM (one Llama-8B chunk) uses 8-warp blocks instead, one per
// SM, so that every SM runs the same number of groups.
constexpr std::uint32_t kWarpsPerBlock = 6;
constexpr std::uint32_t kWarpsPerBlockSmallBatch = 8;
constexpr std::uint32_t kStageWords = 5888;  // 11.5 KiB per warp: Llama groups are 7-10 KiB
constexpr std::uint32_t kLutMinTokens = 64;  // output tables pay off from this many tokens
using cachegen::kParamsFixedBytes;           // cachegen_format.h
constexpr std::size_t kDescOffset = 64;      // workspace: error word / flag, then descriptors

// Device error codes (low 4 bits of the error key).
enum DecodeError : std::uint32_t {
  kErrIndex = 1,     // index entry out of order or past the codes section
  kErrTable = 2,     // bins out of range / table past the tables section / sum != 4096
  kErrShort = 3,     // group too short for its initial states
  kErrState = 4,     // initial state below 2^16
  kErrEarly = 5,     // stream ends early
  kErrTrailing = 6,  // trailing words
  kErrFinal = 7,     // final state != 2^16
  kErrPage = 8,      // block table entry outside [0, num_pages)
};

__device__ __forceinline__ void ReportError(const CacheGenDecodeParams& p, std::uint32_t chunk,
                                            std::uint32_t group, std::uint32_t code) {
  const unsigned long long key = (static_cast<unsigned long long>(chunk) << 34) |
                                 (static_cast<unsigned long long>(group) << 4) | code;
  atomicMax(p.error, ~key);  // the smallest key (first chunk, first group) wins
  *reinterpret_cast<volatile unsigned int*>(p.error_flag) = 1u;  // host-mapped: no copy back
}

__device__ __forceinline__ cachegen::ChannelScale LoadScale(const CacheGenDecodeChunkDesc& d,
                                                            std::uint64_t i) {
  if (d.scale_fp32 != 0) {
    const float2 s = __ldg(static_cast<const float2*>(d.scales) + i);
    return {s.x, s.y};
  }
  const std::uint32_t s = __ldg(static_cast<const std::uint32_t*>(d.scales) + i);
  return {HalfBitsToFloat(static_cast<std::uint16_t>(s & 0xffffu)),
          HalfBitsToFloat(static_cast<std::uint16_t>(s >> 16))};
}

// Packed slot-table entry of slot s in symbol q's range [cum, cum + freq):
// (s - cum) (12 bits) | q << 12 (6 bits) | freq << 19 (13 bits). RansDecodeAdvance is called with
// (s - cum, freq, 0), which is the same value as with (s, freq, cum), one subtraction shorter.
__device__ __forceinline__ std::uint32_t PackEntry(std::uint32_t rank, std::uint32_t sym,
                                                   std::uint32_t freq) {
  return rank | (sym << 12) | (freq << 19);
}
__device__ __forceinline__ std::uint32_t EntryRank(std::uint32_t e) {
  return e & 0xfffu;
}
__device__ __forceinline__ std::uint32_t EntrySymbol(std::uint32_t e) {
  return (e >> 12) & 0x3fu;
}
__device__ __forceinline__ std::uint32_t EntryFreq(std::uint32_t e) {
  return e >> 19;
}

// Where a group's words come from: its shared-memory stage (word i at byte address
// base + 2 * i, i.e. base = stage address - 2 * a for words [a, end) staged from stage[0]) or
// global memory.
struct SharedWords {
  // Reads may go up to 31 words past the group's end (the warp's stage keeps that slack), so the
  // read index needs no clamp on the per-step chain; the position is clamped once per step.
  static constexpr bool kSlack = true;
  std::uint32_t base;
  __device__ __forceinline__ std::uint32_t operator()(std::uint32_t i) const {
    unsigned short v;
    asm("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(base + 2u * i));
    return v;
  }
};
struct GlobalWords {
  static constexpr bool kSlack = false;  // every read index clamped into the group
  const std::uint16_t* codes;
  __device__ __forceinline__ std::uint32_t operator()(std::uint32_t i) const {
    return __ldg(codes + i);
  }
};

// Decodes group `group` of `lk` (its words [begin, end), begin < end) and stores its elements;
// returns 0 or a DecodeError. Every lane reads a word each step (the renormalising ones use it),
// at an index clamped into the group, so that the step has no divergent branch and no read
// leaves the group; a stream that ends early shows as pos > end after the last step.
// kFast (every lane of the group active in every pass, output table): each pass first writes the
// lane's output element for every symbol into `lut` ([kMaxBins][32] of the output type, this
// warp's) and the steps look their element up there, which takes the dequantize-and-round
// arithmetic and the per-lane activity selects off the per-step path.
template <DType Out, bool Paged, bool kFast, typename Words>
__device__ __forceinline__ std::uint32_t DecodeGroup(
    const CacheGenDecodeParams& p, const CacheGenDecodeChunkDesc& d, const std::uint32_t* table,
    Words word, Stored<Out>* lut, std::uint32_t bins, std::uint32_t lk, std::uint32_t group,
    std::uint32_t begin, std::uint32_t end, cachegen::ChannelScale first_scale) {
  using Elem = Stored<Out>;
  const std::uint32_t lane = threadIdx.x & 31u;
  const std::uint32_t C = p.channels, T = p.tokens, cpl = p.channels_per_lane;
  const std::uint32_t lanemask_lt = (1u << lane) - 1u;
  const bool stateful = cachegen::LaneChannel(group, 0, lane, cpl) < C;
  const std::uint32_t n_state = __popc(__ballot_sync(kFullMask, stateful));
  if (end - begin < 2 * n_state) return kErrShort;
  std::uint32_t x = kStateLow;
  if (stateful) x = word(begin + 2 * lane) | (word(begin + 2 * lane + 1) << 16);
  if (__any_sync(kFullMask, x < kStateLow)) return kErrState;
  std::uint32_t pos = begin + 2 * n_state;
  const std::uint32_t last = end - 1;
  std::uint32_t pos_base = min(pos, end);  // Words::kSlack: reads at pos_base + rank <= end + 31

  Elem* paged_base = nullptr;
  if constexpr (Paged) {
    const std::uint32_t layer = lk >> 1;
    void* base = p.k_cache == nullptr ? p.inline_cache[(lk & 1u) * p.layers + layer]
                                      : ((lk & 1u) ? p.v_cache : p.k_cache)[layer];
    paged_base = static_cast<Elem*>(base);
  }
  cachegen::ChannelScale next_scale = first_scale;  // loaded one pass ahead
  for (std::uint32_t k = 0; k < cpl; ++k) {
    const std::uint32_t c = cachegen::LaneChannel(group, k, lane, cpl);
    const bool active = kFast || c < C;
    if (!kFast && __ballot_sync(kFullMask, active) == 0) break;  // channels grow with k
    const cachegen::ChannelScale sc = next_scale;
    if (k + 1 < cpl) {
      const std::uint32_t c_next = cachegen::LaneChannel(group, k + 1, lane, cpl);
      if (c_next < C) next_scale = LoadScale(d, std::uint64_t{lk} * C + c_next);
    }
    if constexpr (kFast) {
      __syncwarp();
#pragma unroll 4
      for (std::uint32_t q = 0; q < bins; ++q) {
        lut[q * 32 + lane] = ToStored<Out>(cachegen::Dequantize(q, sc));
      }
      __syncwarp();
    }
    // Tokens in runs of consecutive output rows: one run per page (paged) or all of them.
    const std::uint32_t run_len = Paged ? p.page_size : T;
    const std::uint64_t row_stride = Paged ? p.row_stride : C;
    for (std::uint32_t t0 = 0, entry = 0; t0 < T; t0 += run_len, ++entry) {
      Elem* out;
      if constexpr (Paged) {
        const std::int32_t page = __ldg(d.block_table + entry);
        if (page < 0 || static_cast<std::uint32_t>(page) >= p.num_pages) return kErrPage;
        out = paged_base + static_cast<std::uint64_t>(page) * p.page_stride + c;
      } else {
        out = static_cast<Elem*>(d.out) + (std::uint64_t{lk} * T) * C + c;
      }
      const std::uint32_t rows = min(run_len, T - t0);
#pragma unroll 4
      for (std::uint32_t r = 0; r < rows; ++r) {
        const std::uint32_t e = table[cachegen::RansSlot(x)];
        const std::uint32_t q = EntrySymbol(e);
        const std::uint32_t advanced =
            cachegen::RansDecodeAdvance(x, EntryRank(e), EntryFreq(e), 0u);
        const bool need = active && advanced < kStateLow;
        const std::uint32_t ballot = __ballot_sync(kFullMask, need);
        const std::uint32_t rank = __popc(ballot & lanemask_lt);
        const std::uint32_t w = word(Words::kSlack ? pos_base + rank : min(pos + rank, last));
        // (advanced << 16) | w in one byte permute (advanced < 2^16 and w < 2^16 when needed).
        const std::uint32_t renormalised = __byte_perm(w, advanced, 0x5410);
        if constexpr (kFast) {
          x = need ? renormalised : advanced;
        } else {
          x = active ? (need ? renormalised : advanced) : x;
        }
        pos += __popc(ballot);
        if constexpr (Words::kSlack) pos_base = min(pos, end);
        if constexpr (kFast) {
          out[r * row_stride] = lut[q * 32 + lane];
        } else {
          if (active) out[r * row_stride] = ToStored<Out>(cachegen::Dequantize(q, sc));
        }
      }
    }
    if (pos > end) return kErrEarly;
  }
  if (pos != end) return kErrTrailing;
  if (__any_sync(kFullMask, stateful && x != kStateLow)) return kErrFinal;
  return 0;
}

template <DType Out, bool Paged>
__global__ void __launch_bounds__(kMaxWarpsPerBlock * 32, 1)
    CacheGenDecodeKernel(const __grid_constant__ CacheGenDecodeParams p) {
  using Elem = Stored<Out>;
  extern __shared__ uint4 smem[];  // per warp: stage [stage_words] u16, then output tables
  std::uint16_t* stage_all = reinterpret_cast<std::uint16_t*>(smem);
  __shared__ std::uint32_t s_table[kProbScale];  // slot -> PackEntry
  __shared__ std::uint32_t s_freq[cachegen::kMaxBins];
  __shared__ std::uint32_t s_cum[cachegen::kMaxBins];
  __shared__ std::uint32_t s_bins;
  __shared__ std::uint32_t s_ok;

  const std::uint32_t lane = threadIdx.x & 31u;
  const std::uint32_t warp = threadIdx.x >> 5;
  const std::uint32_t lks = p.layers * 2;
  std::uint32_t b = blockIdx.x;
  const std::uint32_t blk = b % p.blocks_per_lk;
  b /= p.blocks_per_lk;
  const std::uint32_t lk = b % lks;
  const std::uint32_t chunk = b / lks;
  const CacheGenDecodeChunkDesc d = p.chunks == nullptr ? p.inline_chunks[chunk] : p.chunks[chunk];
  const std::uint32_t first_group = lk * p.groups_per_lk + blk * p.warps_per_block;

  // This warp's group and its words [begin, end); staging [a, end), a = begin rounded down to
  // 8 words (16 bytes), starts with asynchronous copies that overlap the table construction.
  const std::uint32_t group = blk * p.warps_per_block + warp;  // within the lk
  const bool has_group = group < p.groups_per_lk;
  const std::uint32_t g = lk * p.groups_per_lk + group;  // within the chunk
  std::uint32_t begin = 0, end = 0;
  if (has_group) {
    begin = g == 0 ? 0u : __ldg(d.index + g - 1);
    end = __ldg(d.index + g);
  }
  const bool index_ok = begin <= end && end <= d.codes_words;
  const std::uint32_t a = begin & ~7u;
  const bool staged = has_group && index_ok && end - a + 32 <= p.stage_words;  // + read slack
  std::uint16_t* stage = stage_all + std::size_t{warp} * p.stage_words;
  // The first pass's scale, loaded now so that its latency overlaps the table construction.
  cachegen::ChannelScale first_scale{0.0f, 1.0f};
  if (has_group) {
    const std::uint32_t c0 = cachegen::LaneChannel(group, 0, lane, p.channels_per_lane);
    if (c0 < p.channels) first_scale = LoadScale(d, std::uint64_t{lk} * p.channels + c0);
  }
  if (staged) {
    const std::uint32_t vecs = (end - a) >> 3;
    const uint4* src = reinterpret_cast<const uint4*>(d.codes + a);
    const std::uint32_t dst = SharedAddress(stage);
    for (std::uint32_t i = lane; i < vecs; i += 32) {
      CpAsync16(dst + 16u * i, src + i);
    }
    CpAsyncCommit();
    for (std::uint32_t w = a + (vecs << 3) + lane; w < end; w += 32) stage[w - a] = d.codes[w];
  }

  // Warp 0: this lk's table (validated again: a bad table must not write out of bounds).
  if (warp == 0) {
    std::uint32_t start = 0;
    for (std::uint32_t i = lane; i < lk; i += 32) start += d.bins[i];
    start = __reduce_add_sync(kFullMask, start);
    const std::uint32_t bins = d.bins[lk];
    bool ok = bins >= cachegen::kMinBins && bins <= cachegen::kMaxBins &&
              start + bins <= d.tables_entries;
    std::uint32_t f0 = 0, f1 = 0;
    if (ok) {
      f0 = lane < bins ? d.freq[start + lane] : 0u;
      f1 = lane + 32 < bins ? d.freq[start + lane + 32] : 0u;
    }
    const internal::WarpCumulative64 cum = internal::WarpCumulative(f0, f1);
    ok = ok && cum.total == kProbScale;
    s_freq[lane] = f0;
    s_cum[lane] = cum.cum0;
    s_freq[lane + 32] = f1;
    s_cum[lane + 32] = cum.cum1;
    if (lane == 0) {
      s_bins = ok ? bins : 0u;
      s_ok = ok ? 1u : 0u;
      if (!ok) ReportError(p, chunk, first_group, kErrTable);
    }
  }
  __syncthreads();
  if (s_ok == 0) {
    CpAsyncWaitAll();
    return;
  }
  for (std::uint32_t s = 0; s < s_bins; ++s) {
    const std::uint32_t f = s_freq[s], c0 = s_cum[s];
    for (std::uint32_t i = threadIdx.x; i < f; i += blockDim.x) {
      s_table[c0 + i] = PackEntry(i, s, f);
    }
  }
  __syncthreads();

  if (!has_group) return;
  if (!index_ok) {
    if (lane == 0) ReportError(p, chunk, g, kErrIndex);
    return;
  }
  std::uint32_t code = 0;
  if (staged) {
    CpAsyncWaitAll();
    __syncwarp();
    const SharedWords words{SharedAddress(stage) - 2u * a};
    const bool full = (group + 1) * p.channels_per_lane * 32 <= p.channels;
    if (p.lut_elem_bytes != 0 && full) {
      Elem* lut =
          reinterpret_cast<Elem*>(stage_all + std::size_t{p.warps_per_block} * p.stage_words) +
          std::size_t{warp} * cachegen::kMaxBins * 32;
      code = DecodeGroup<Out, Paged, true>(p, d, s_table, words, lut, s_bins, lk, group, begin, end,
                                           first_scale);
    } else {
      code = DecodeGroup<Out, Paged, false>(p, d, s_table, words, nullptr, s_bins, lk, group, begin,
                                            end, first_scale);
    }
  } else {
    code = DecodeGroup<Out, Paged, false>(p, d, s_table, GlobalWords{d.codes}, nullptr, s_bins, lk,
                                          group, begin, end, first_scale);
  }
  if (code != 0 && lane == 0) ReportError(p, chunk, g, code);
}

// ---- Host-side parsing (mirrors the CPU decoder's ParseSections) ----

std::string DecodeErrorMessage(unsigned long long key) {
  const auto code = static_cast<std::uint32_t>(key & 15u);
  const auto group = static_cast<std::uint32_t>((key >> 4) & ((1ull << 30) - 1));
  const auto chunk = static_cast<std::uint32_t>(key >> 34);
  std::string what;
  switch (code) {
    case kErrIndex: what = "index entry is out of order or past the codes section"; break;
    case kErrTable: what = "frequency table is invalid"; break;
    case kErrShort: what = "is too short for its states"; break;
    case kErrState: what = "has an invalid state"; break;
    case kErrEarly: what = "ends early"; break;
    case kErrTrailing: what = "has trailing words"; break;
    case kErrFinal: what = "does not end in the initial state"; break;
    case kErrPage: what = "block table entry is outside [0, num_pages)"; break;
    default: what = "unknown error " + std::to_string(code); break;
  }
  return "chunk " + std::to_string(chunk) + " group " + std::to_string(group) + ": " + what;
}

bool Aligned(const void* p, std::uintptr_t n) {
  return (reinterpret_cast<std::uintptr_t>(p) & (n - 1)) == 0;
}

}  // namespace

Result<CacheGenContainerInfo> ParseCacheGenContainer(std::span<const std::byte> container,
                                                     const ParseOptions& options) {
  KVD_ASSIGN_OR_RETURN(const ContainerView view, ParseContainer(container, options));
  KVD_ASSIGN_OR_RETURN(const CacheGenSections sections, ValidateCacheGenSections(view));
  CacheGenContainerInfo info;
  info.dtype = view.header.dtype;
  info.shape = view.header.shape;
  info.scale_dtype = sections.scale_dtype;
  info.params_offset = sections.params->offset;
  info.tables_offset = sections.tables->offset;
  info.tables_entries = sections.table_entries;
  info.scales_offset = sections.scales->offset;
  info.index_offset = sections.index->offset;
  info.codes_offset = sections.codes->offset;
  info.codes_words = sections.codes->length / 2;
  info.total_bytes = view.header.total_bytes;
  return info;
}

std::size_t CacheGenDecodeSharedBytes(const CacheGenDecodeParams& params) {
  return std::size_t{params.warps_per_block} *
         (std::size_t{params.stage_words} * 2 +
          std::size_t{params.lut_elem_bytes} * cachegen::kMaxBins * 32);
}

template <DType Out, bool Paged>
cudaError_t LaunchCacheGenDecode(const CacheGenDecodeParams& params, cudaStream_t stream) {
  const std::size_t smem = CacheGenDecodeSharedBytes(params);
  const auto kernel = CacheGenDecodeKernel<Out, Paged>;
  static std::atomic<std::size_t> configured[kMaxDevices] = {};
  const cudaError_t err = ConfigureSharedMemory(kernel, smem, configured);
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(params.num_chunks * params.layers * 2 * params.blocks_per_lk);
  config.blockDim = dim3(params.warps_per_block * 32);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  return cudaLaunchKernelEx(&config, kernel, params);
}

// The closed set of instantiations.
template cudaError_t LaunchCacheGenDecode<DType::kFloat16, false>(const CacheGenDecodeParams&,
                                                                  cudaStream_t);
template cudaError_t LaunchCacheGenDecode<DType::kBFloat16, false>(const CacheGenDecodeParams&,
                                                                   cudaStream_t);
template cudaError_t LaunchCacheGenDecode<DType::kFloat32, false>(const CacheGenDecodeParams&,
                                                                  cudaStream_t);
template cudaError_t LaunchCacheGenDecode<DType::kFloat16, true>(const CacheGenDecodeParams&,
                                                                 cudaStream_t);
template cudaError_t LaunchCacheGenDecode<DType::kBFloat16, true>(const CacheGenDecodeParams&,
                                                                  cudaStream_t);
template cudaError_t LaunchCacheGenDecode<DType::kFloat32, true>(const CacheGenDecodeParams&,
                                                                 cudaStream_t);

Result<CacheGenDecodeWorkspace> CacheGenDecodeWorkspace::Create(std::uint32_t max_chunks,
                                                                std::uint32_t max_layers) {
  if (max_chunks == 0 || max_chunks > (1u << 20) || max_layers == 0 || max_layers > kMaxLayers) {
    return InvalidArgument("CacheGenDecodeWorkspace: max_chunks " + std::to_string(max_chunks) +
                           " / max_layers " + std::to_string(max_layers) +
                           " out of range [1, 2^20] / [1, 1024]");
  }
  // Device: error word | descriptors [max_chunks] | K pointers, V pointers [max_layers each].
  // Pinned host: error flag | staging of the descriptors and pointers at the same offsets.
  const std::size_t bytes = kDescOffset +
                            std::size_t{max_chunks} * sizeof(CacheGenDecodeChunkDesc) +
                            std::size_t{max_layers} * 2 * sizeof(void*);
  CacheGenDecodeWorkspace ws;
  ws.max_chunks_ = max_chunks;
  ws.max_layers_ = max_layers;
  KVD_ASSIGN_OR_RETURN(ws.device_, DeviceBuffer::Allocate(bytes));
  KVD_ASSIGN_OR_RETURN(ws.host_, PinnedHostBuffer::Allocate(bytes));
  // Synchronous copy from (zeroed) pinned memory: complete before any stream uses the word.
  std::memset(ws.host_.data(), 0, kDescOffset);
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(ws.device_.data(), ws.host_.data(), kDescOffset, cudaMemcpyHostToDevice),
      "CacheGenDecodeWorkspace: clear error word");
  void* flag = nullptr;
  KVD_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&flag, ws.host_.data(), 0),
                           "CacheGenDecodeWorkspace: map error flag");
  ws.error_flag_device_ = static_cast<unsigned int*>(flag);
  return Result<CacheGenDecodeWorkspace>(std::move(ws));
}

Status ValidateDecodeTarget(const KvShape& shape, std::size_t chunks,
                            const CacheGenDecodeTarget& target, std::string_view caller) {
  const std::string what(caller);
  if (!IsValidDType(static_cast<std::uint8_t>(target.dtype))) {
    return InvalidArgument(what + ": invalid output dtype");
  }
  const std::uint32_t channels = shape.kv_heads * shape.head_dim;
  const std::uint64_t esize = DTypeSize(target.dtype);
  if (target.contiguous.empty()) {
    if (target.k_cache.size() != shape.layers || target.v_cache.size() != shape.layers ||
        target.block_tables.size() != chunks) {
      return InvalidArgument(what + ": paged target needs " + std::to_string(shape.layers) +
                             " K and V cache pointers and " + std::to_string(chunks) +
                             " block tables");
    }
    if (target.page_size == 0 || target.num_pages == 0 || target.row_stride < channels ||
        target.page_stride < std::uint64_t{target.page_size} * target.row_stride) {
      return InvalidArgument(what +
                             ": paged target needs page_size >= 1, num_pages >= 1, "
                             "row_stride >= channels and page_stride >= page_size * "
                             "row_stride");
    }
    for (std::uint32_t l = 0; l < shape.layers; ++l) {
      if (target.k_cache[l] == nullptr || target.v_cache[l] == nullptr ||
          !Aligned(target.k_cache[l], esize) || !Aligned(target.v_cache[l], esize)) {
        return InvalidArgument(what + ": null or misaligned cache pointer of layer " +
                               std::to_string(l));
      }
    }
    for (std::size_t i = 0; i < chunks; ++i) {
      if (target.block_tables[i] == nullptr || !Aligned(target.block_tables[i], 4)) {
        return InvalidArgument(what + ": block table of chunk " + std::to_string(i) +
                               " is null or misaligned");
      }
    }
    return Status::Ok();
  }
  if (target.contiguous.size() != chunks) {
    return InvalidArgument(what + ": " + std::to_string(target.contiguous.size()) +
                           " contiguous outputs for " + std::to_string(chunks) + " chunks");
  }
  for (std::size_t i = 0; i < chunks; ++i) {
    if (target.contiguous[i] == nullptr || !Aligned(target.contiguous[i], esize)) {
      return InvalidArgument(what + ": output of chunk " + std::to_string(i) +
                             " is null or misaligned");
    }
  }
  return Status::Ok();
}

Status EnqueueDecodeCacheGen(std::span<const CacheGenDecodeChunk> chunks,
                             const CacheGenDecodeTarget& target, CacheGenDecodeWorkspace& ws,
                             cudaStream_t stream) {
  const std::string what = "EnqueueDecodeCacheGen";
  if (ws.pending_chunks_ != 0) {
    return InvalidArgument(what +
                           ": the workspace has a batch in flight (call "
                           "FinishDecodeCacheGen first)");
  }
  if (chunks.empty() || chunks.size() > ws.max_chunks_) {
    return InvalidArgument(what + ": " + std::to_string(chunks.size()) +
                           " chunks, the workspace takes 1 to " + std::to_string(ws.max_chunks_));
  }
  const KvShape shape = chunks[0].info.shape;
  if (ValidateShape(shape, chunks[0].info.dtype).ok() == false || shape.layers > ws.max_layers_) {
    return InvalidArgument(what + ": chunk 0 has an invalid shape " + shape.ToString() +
                           " (or more layers than the workspace's " +
                           std::to_string(ws.max_layers_) + ")");
  }
  KVD_RETURN_IF_ERROR(ValidateDecodeTarget(shape, chunks.size(), target, what));
  const std::uint32_t channels = shape.kv_heads * shape.head_dim;
  const bool paged = target.contiguous.empty();
  // Descriptors go inline in the kernel parameters for small batches, else through the
  // workspace's device array (one upload); the same for paged layer pointers.
  CacheGenDecodeParams params{};
  const bool inline_chunks = chunks.size() <= kCacheGenInlineChunks;
  const bool inline_ptrs = !paged || shape.layers <= kCacheGenInlineLayers;
  auto* host = static_cast<std::byte*>(ws.host_.data());
  auto* dev = static_cast<std::byte*>(ws.device_.data());
  const std::size_t ptr_offset =
      kDescOffset + std::size_t{ws.max_chunks_} * sizeof(CacheGenDecodeChunkDesc);
  auto* descs = inline_chunks ? params.inline_chunks
                              : reinterpret_cast<CacheGenDecodeChunkDesc*>(host + kDescOffset);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const CacheGenDecodeChunk& ch = chunks[i];
    const CacheGenContainerInfo& in = ch.info;
    if (!(in.shape == shape)) {
      return InvalidArgument(what + ": chunk " + std::to_string(i) + " has shape " +
                             in.shape.ToString() + ", chunk 0 " + shape.ToString() +
                             " (one shape per batch)");
    }
    if (ch.container == nullptr || !Aligned(ch.container, 16)) {
      return InvalidArgument(what + ": chunk " + std::to_string(i) +
                             " container is null or not 16-byte aligned");
    }
    if (in.codes_words > UINT32_MAX || in.tables_entries > UINT32_MAX ||
        (in.scale_dtype != cachegen::kScaleFp16 && in.scale_dtype != cachegen::kScaleFp32) ||
        in.codes_offset % 16 != 0 || in.scales_offset % 8 != 0 || in.index_offset % 4 != 0) {
      return InvalidArgument(what + ": chunk " + std::to_string(i) +
                             " info does not come from ParseCacheGenContainer");
    }
    CacheGenDecodeChunkDesc& d = descs[i];
    d = CacheGenDecodeChunkDesc{};
    d.bins =
        reinterpret_cast<const std::uint8_t*>(ch.container + in.params_offset) + kParamsFixedBytes;
    d.freq = reinterpret_cast<const std::uint16_t*>(ch.container + in.tables_offset);
    d.scales = ch.container + in.scales_offset;
    d.index = reinterpret_cast<const std::uint32_t*>(ch.container + in.index_offset);
    d.codes = reinterpret_cast<const std::uint16_t*>(ch.container + in.codes_offset);
    d.tables_entries = static_cast<std::uint32_t>(in.tables_entries);
    d.codes_words = static_cast<std::uint32_t>(in.codes_words);
    d.scale_fp32 = in.scale_dtype == cachegen::kScaleFp32 ? 1u : 0u;
    if (paged) {
      d.block_table = target.block_tables[i];
    } else {
      d.out = target.contiguous[i];
    }
  }
  void** ptrs = inline_ptrs ? params.inline_cache : reinterpret_cast<void**>(host + ptr_offset);
  for (std::uint32_t l = 0; paged && l < shape.layers; ++l) {
    ptrs[l] = target.k_cache[l];
    ptrs[shape.layers + l] = target.v_cache[l];
  }
  if (!inline_chunks) {
    params.chunks = reinterpret_cast<const CacheGenDecodeChunkDesc*>(dev + kDescOffset);
    KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev + kDescOffset, host + kDescOffset,
                                             chunks.size() * sizeof(CacheGenDecodeChunkDesc),
                                             cudaMemcpyHostToDevice, stream),
                             what + ": upload descriptors");
  }
  if (!inline_ptrs) {
    params.k_cache = reinterpret_cast<void* const*>(dev + ptr_offset);
    params.v_cache = params.k_cache + shape.layers;
    KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev + ptr_offset, host + ptr_offset,
                                             std::size_t{shape.layers} * 2 * sizeof(void*),
                                             cudaMemcpyHostToDevice, stream),
                             what + ": upload cache pointers");
  }
  *reinterpret_cast<volatile unsigned int*>(host) = 0u;  // the kernel sets it on error
  params.error = reinterpret_cast<unsigned long long*>(dev);
  params.error_flag = ws.error_flag_device_;
  params.page_stride = target.page_stride;
  params.row_stride = target.row_stride;
  params.num_pages = target.num_pages;
  params.page_size = paged ? target.page_size : 1;
  params.num_chunks = static_cast<std::uint32_t>(chunks.size());
  params.layers = shape.layers;
  params.tokens = shape.tokens;
  params.channels = channels;
  params.channels_per_lane = cachegen::ChannelsPerLane(shape.tokens);
  params.groups_per_lk = cachegen::GroupsPerLayerKv(channels, params.channels_per_lane);
  int device = 0, sm_count = 0;
  KVD_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), what);
  KVD_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), what);
  const std::uint64_t total_groups =
      std::uint64_t{params.num_chunks} * params.layers * 2 * params.groups_per_lk;
  const std::uint32_t warps =
      total_groups <= std::uint64_t{static_cast<std::uint32_t>(sm_count)} * kWarpsPerBlockSmallBatch
          ? kWarpsPerBlockSmallBatch
          : kWarpsPerBlock;
  params.warps_per_block = std::min(warps, params.groups_per_lk);
  params.blocks_per_lk =
      (params.groups_per_lk + params.warps_per_block - 1) / params.warps_per_block;
  params.stage_words = kStageWords;
  params.lut_elem_bytes =
      shape.tokens >= kLutMinTokens ? static_cast<std::uint32_t>(DTypeSize(target.dtype)) : 0u;
  const std::uint64_t blocks =
      std::uint64_t{params.num_chunks} * params.layers * 2 * params.blocks_per_lk;
  if (blocks > INT32_MAX) return InvalidArgument(what + ": batch too large for one launch");

  cudaError_t err = cudaErrorInvalidValue;
  switch (target.dtype) {
    case DType::kFloat16:
      err = paged ? LaunchCacheGenDecode<DType::kFloat16, true>(params, stream)
                  : LaunchCacheGenDecode<DType::kFloat16, false>(params, stream);
      break;
    case DType::kBFloat16:
      err = paged ? LaunchCacheGenDecode<DType::kBFloat16, true>(params, stream)
                  : LaunchCacheGenDecode<DType::kBFloat16, false>(params, stream);
      break;
    case DType::kFloat32:
      err = paged ? LaunchCacheGenDecode<DType::kFloat32, true>(params, stream)
                  : LaunchCacheGenDecode<DType::kFloat32, false>(params, stream);
      break;
    default: return InvalidArgument(what + ": unsupported output dtype");
  }
  KVD_CUDA_RETURN_IF_ERROR(err, what + ": launch");
  ws.pending_chunks_ = params.num_chunks;
  return Status::Ok();
}

Status FinishDecodeCacheGen(CacheGenDecodeWorkspace& ws, cudaStream_t stream) {
  if (ws.pending_chunks_ == 0) {
    return InvalidArgument("FinishDecodeCacheGen: no batch in flight");
  }
  ws.pending_chunks_ = 0;
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "FinishDecodeCacheGen");
  if (*static_cast<volatile const unsigned int*>(ws.host_.data()) == 0) return Status::Ok();
  // Error path: fetch the first error's key, then clear the word for the next batch.
  unsigned long long v = 0;
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(&v, ws.device_.data(), 8, cudaMemcpyDeviceToHost),
                           "FinishDecodeCacheGen: read error");
  KVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(ws.device_.data(), static_cast<const std::byte*>(ws.host_.data()) + 8, 8,
                 cudaMemcpyHostToDevice),
      "FinishDecodeCacheGen: clear error word");  // bytes 8..63 stay 0
  const unsigned long long key = ~v;
  if ((key & 15u) == kErrPage) {
    return InvalidArgument("cachegen decode: " + DecodeErrorMessage(key));
  }
  return Corruption("cachegen decode: " + DecodeErrorMessage(key));
}

Status DecodeCacheGenDevice(std::span<const CacheGenDecodeChunk> chunks,
                            const CacheGenDecodeTarget& target, CacheGenDecodeWorkspace& workspace,
                            cudaStream_t stream) {
  KVD_RETURN_IF_ERROR(EnqueueDecodeCacheGen(chunks, target, workspace, stream));
  return FinishDecodeCacheGen(workspace, stream);
}

Result<KvTensor> DecodeCacheGenGpu(std::span<const std::byte> container, cudaStream_t stream) {
  KVD_ASSIGN_OR_RETURN(const CacheGenContainerInfo info, ParseCacheGenContainer(container));
  KvTensor out = KvTensor::Zeros(info.dtype, info.shape);
  KVD_ASSIGN_OR_RETURN(CacheGenDecodeWorkspace ws,
                       CacheGenDecodeWorkspace::Create(1, info.shape.layers));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_in, DeviceBuffer::Allocate(container.size()));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer d_out, DeviceBuffer::Allocate(out.data.size()));
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_in.data(), container.data(), container.size(),
                                           cudaMemcpyHostToDevice, stream),
                           "DecodeCacheGenGpu: upload");
  const CacheGenDecodeChunk chunk{static_cast<const std::byte*>(d_in.data()), info};
  void* const outs[] = {d_out.data()};
  CacheGenDecodeTarget target;
  target.dtype = info.dtype;
  target.contiguous = outs;
  KVD_RETURN_IF_ERROR(DecodeCacheGenDevice({&chunk, 1}, target, ws, stream));
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data.data(), d_out.data(), out.data.size(),
                                           cudaMemcpyDeviceToHost, stream),
                           "DecodeCacheGenGpu: download");
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "DecodeCacheGenGpu");
  return Result<KvTensor>(std::move(out));
}

}  // namespace kvdepot::cuda
