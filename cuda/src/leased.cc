// Host side of the "leased" family (kvdepot/cuda/leased.h): metadata copies and checks, batch
// planning over the codec kernels, the scatter's descriptors.
#include "kvdepot/cuda/leased.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "hack_scales_check.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/container_layout.h"
#include "kvdepot/codec/hack_format.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {

namespace {

constexpr std::uint64_t kPrefixBytes = kContainerHeaderBytes + kMaxSections * kSectionEntryBytes;

bool Aligned(const void* p, std::uintptr_t n) {
  return (reinterpret_cast<std::uintptr_t>(p) & (n - 1)) == 0;
}

std::string ContainerLabel(std::size_t i) {
  return "leased container " + std::to_string(i);
}

Status Prefixed(const Status& s, const std::string& label) {
  return Status(s.code(), label + ": " + s.message());
}

// Pinned host memory that only grows (one per thread: InspectLeasedChunks is stateless for its
// callers but reuses these between calls).
Result<std::byte*> Grow(PinnedHostBuffer& buffer, std::size_t bytes) {
  if (buffer.size() < bytes) {
    const std::size_t size = std::max(bytes, 2 * buffer.size());
    buffer = PinnedHostBuffer();  // free first: pinned memory is scarce
    KVD_ASSIGN_OR_RETURN(buffer, PinnedHostBuffer::Allocate(size));
  }
  return buffer.as<std::byte>();
}

// The byte ranges of a container past its first `prefix` bytes that the host checks need: all
// but the bulk sections (codes, payload, sums; a hack-int2 chunk's scales too, which the device
// checks), which stay on the device.
struct CopyPlan {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // [begin, end), ascending
  std::uint64_t bytes = 0;
};

CopyPlan PlanCopies(const std::vector<SectionView>& table, std::uint64_t prefix,
                    std::uint64_t bytes, bool scales_on_device) {
  const std::uint64_t table_end = kContainerHeaderBytes + table.size() * kSectionEntryBytes;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> bulk;
  for (const SectionView& sv : table) {
    const bool bulky =
        sv.kind == static_cast<std::uint32_t>(SectionKind::kCodes) ||
        sv.kind == static_cast<std::uint32_t>(SectionKind::kPayload) ||
        sv.kind == static_cast<std::uint32_t>(SectionKind::kSums) ||
        (scales_on_device && sv.kind == static_cast<std::uint32_t>(SectionKind::kScales));
    // Sections out of bounds are left to ParseContainer to reject; they are simply not skipped.
    if (bulky && sv.offset >= table_end && sv.offset <= bytes && sv.length <= bytes - sv.offset) {
      bulk.emplace_back(sv.offset, sv.offset + sv.length);
    }
  }
  std::sort(bulk.begin(), bulk.end());
  CopyPlan plan;
  std::uint64_t at = prefix;
  auto add = [&](std::uint64_t begin, std::uint64_t end) {
    plan.ranges.emplace_back(begin, end);
    plan.bytes += end - begin;
  };
  for (const auto& [begin, end] : bulk) {
    if (begin > at) add(at, begin);
    at = std::max(at, end);
  }
  if (at < bytes) add(at, bytes);
  return plan;
}

// What the host learned from one container's non-bulk bytes (`host` holds the whole container's
// extent; the bulk ranges hold stale bytes that no check reads). A hack-int2 chunk's scales are
// still to be checked on the device (CheckLeasedHackScales).
// `scales_bytes` receives the length of a hack-int2 chunk's scales section.
Result<LeasedChunk> Check(const DeviceContainer& c, std::span<const std::byte> host,
                          std::uint64_t& scales_bytes) {
  ParseOptions no_checksums;
  no_checksums.verify_checksums = false;  // they cover the bulk, which stays on the device
  KVD_ASSIGN_OR_RETURN(const ContainerView view, ParseContainer(host, no_checksums));
  LeasedChunk out;
  out.container = c;
  out.codec = view.header.codec;
  out.dtype = view.header.dtype;
  out.shape = view.header.shape;
  switch (view.header.codec) {
    case CodecId::kRaw: {
      const std::uint64_t need = out.shape.elements() * DTypeSize(out.dtype);
      const SectionView* payload = view.Find(SectionKind::kPayload);
      if (payload == nullptr || payload->length != need || payload->offset % 16 != 0) {
        return Corruption("raw payload is " +
                          std::to_string(payload == nullptr ? 0 : payload->length) +
                          " bytes (or misaligned), expected " + std::to_string(need));
      }
      out.raw_payload_offset = payload->offset;
      return out;
    }
    case CodecId::kCacheGen: {
      KVD_ASSIGN_OR_RETURN(out.cachegen, ParseCacheGenContainer(host, no_checksums));
      return out;
    }
    case CodecId::kHackInt2: {
      KVD_ASSIGN_OR_RETURN(const HackStructure st, InspectHackExceptScales(view));
      out.hack_options = st.options;
      auto at = [&](const SectionView& s) -> const std::uint8_t* {
        return s.length == 0 ? nullptr : reinterpret_cast<const std::uint8_t*>(c.data + s.offset);
      };
      out.hack_sections = {at(st.codes), at(st.scales), at(st.sums), at(st.tail)};
      scales_bytes = st.scales.length;
      return out;
    }
  }
  return InvalidArgument("unknown codec");
}

bool IsHackInt2(std::span<const std::byte> prefix) {
  return prefix.size() > container_layout::kOffCodec &&
         std::to_integer<std::uint8_t>(prefix[container_layout::kOffCodec]) ==
             static_cast<std::uint8_t>(CodecId::kHackInt2);
}

// The scales sections of a batch's hack-int2 chunks, checked on the device in one launch: OK, or
// the first bad entry of the first chunk that has one (owner[span] goes to `failed_index`) in
// InspectHack's words. Blocks on `stream`.
Status CheckLeasedHackScales(std::span<const internal::HackScalesSpan> spans,
                             std::span<const std::size_t> owner, cudaStream_t stream,
                             std::size_t& failed_index) {
  if (spans.empty()) return Status::Ok();
  std::uint64_t max_count = 0;
  for (const internal::HackScalesSpan& span : spans) max_count = std::max(max_count, span.count);
  const std::string what = "InspectLeasedChunks: scales check";
  // Stream-ordered scratch: the result word, then the spans (no per-thread device state, so any
  // thread may call with a stream of any device).
  const std::size_t bytes = sizeof(unsigned long long) + spans.size() * sizeof(spans[0]);
  thread_local PinnedHostBuffer stage;
  KVD_ASSIGN_OR_RETURN(std::byte* const host, Grow(stage, bytes));
  const unsigned long long all_valid = ~0ull;
  std::memcpy(host, &all_valid, sizeof(all_valid));
  std::memcpy(host + sizeof(all_valid), spans.data(), spans.size() * sizeof(spans[0]));
  void* device = nullptr;
  KVD_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&device, bytes, stream), what);
  auto* first_bad = static_cast<unsigned long long*>(device);
  const auto* device_spans = reinterpret_cast<const internal::HackScalesSpan*>(
      static_cast<std::byte*>(device) + sizeof(all_valid));
  cudaError_t err = cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream);
  if (err == cudaSuccess) {
    err = internal::LaunchCheckHackScales(device_spans, static_cast<std::uint32_t>(spans.size()),
                                          max_count, first_bad, stream);
  }
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(host, first_bad, sizeof(all_valid), cudaMemcpyDeviceToHost, stream);
  }
  const cudaError_t freed = cudaFreeAsync(device, stream);
  KVD_CUDA_RETURN_IF_ERROR(err, what);
  KVD_CUDA_RETURN_IF_ERROR(freed, what);
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), what);
  unsigned long long result = 0;
  std::memcpy(&result, host, sizeof(result));
  if (result == all_valid) return Status::Ok();
  failed_index = owner[result >> 32];
  return Prefixed(HackScalesEntryError(result & 0xffffffffull), ContainerLabel(failed_index));
}

}  // namespace

Result<std::vector<LeasedChunk>> InspectLeasedChunks(std::span<const DeviceContainer> containers,
                                                     cudaStream_t stream, std::size_t* failed) {
  const std::string what = "InspectLeasedChunks";
  std::size_t ignored = 0;
  std::size_t& failed_index = failed != nullptr ? *failed : ignored;
  for (std::size_t i = 0; i < containers.size(); ++i) {
    failed_index = i;
    if (containers[i].data == nullptr || !Aligned(containers[i].data, 16)) {
      return InvalidArgument(what + ": " + ContainerLabel(i) + " is null or not 16-byte aligned");
    }
    if (containers[i].bytes < kContainerHeaderBytes) {
      return Corruption(ContainerLabel(i) + ": " + std::to_string(containers[i].bytes) +
                        " bytes, shorter than a container header");
    }
  }
  thread_local PinnedHostBuffer prefix_stage, section_stage;
  thread_local std::vector<std::byte> host;

  // Round 1: every container's header and section table.
  KVD_ASSIGN_OR_RETURN(
      std::byte* const prefixes,
      Grow(prefix_stage, std::max<std::size_t>(1, containers.size()) * kPrefixBytes));
  for (std::size_t i = 0; i < containers.size(); ++i) {
    KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(prefixes + i * kPrefixBytes, containers[i].data,
                                             std::min(containers[i].bytes, kPrefixBytes),
                                             cudaMemcpyDeviceToHost, stream),
                             what + ": header copy");
  }
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), what);

  // Round 2: everything past the table but the bulk sections, packed.
  std::vector<CopyPlan> plans(containers.size());
  std::vector<std::uint64_t> packed_at(containers.size() + 1, 0);
  for (std::size_t i = 0; i < containers.size(); ++i) {
    const std::uint64_t bytes = containers[i].bytes;
    const std::uint64_t prefix = std::min(bytes, kPrefixBytes);
    auto table = PeekSectionTable(std::span(prefixes + i * kPrefixBytes, prefix));
    failed_index = i;
    if (!table.ok()) return Prefixed(table.status(), ContainerLabel(i));
    plans[i] = PlanCopies(*table, prefix, bytes,
                          IsHackInt2(std::span(prefixes + i * kPrefixBytes, prefix)));
    packed_at[i + 1] = packed_at[i] + plans[i].bytes;
  }
  KVD_ASSIGN_OR_RETURN(std::byte* const packed,
                       Grow(section_stage, std::max<std::uint64_t>(1, packed_at.back())));
  for (std::size_t i = 0; i < containers.size(); ++i) {
    std::uint64_t at = packed_at[i];
    for (const auto& [begin, end] : plans[i].ranges) {
      KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(packed + at, containers[i].data + begin, end - begin,
                                               cudaMemcpyDeviceToHost, stream),
                               what + ": section copy");
      at += end - begin;
    }
  }
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), what);

  // The checks, one container at a time over a host image of its extent.
  std::vector<LeasedChunk> out;
  out.reserve(containers.size());
  std::vector<internal::HackScalesSpan> scales;  // left to the device
  std::vector<std::size_t> scales_owner;
  for (std::size_t i = 0; i < containers.size(); ++i) {
    const std::uint64_t bytes = containers[i].bytes;
    if (host.size() < bytes) host.resize(bytes);
    std::memcpy(host.data(), prefixes + i * kPrefixBytes, std::min(bytes, kPrefixBytes));
    std::uint64_t at = packed_at[i];
    for (const auto& [begin, end] : plans[i].ranges) {
      std::memcpy(host.data() + begin, packed + at, end - begin);
      at += end - begin;
    }
    std::uint64_t scales_bytes = 0;
    auto chunk = Check(containers[i], std::span(host.data(), bytes), scales_bytes);
    failed_index = i;
    if (!chunk.ok()) return Prefixed(chunk.status(), ContainerLabel(i));
    if (scales_bytes > 0) {
      scales.push_back({reinterpret_cast<const std::uint32_t*>(chunk->hack_sections.scales),
                        scales_bytes / hack::kPartitionEntryBytes});
      scales_owner.push_back(i);
    }
    out.push_back(*chunk);
  }
  KVD_RETURN_IF_ERROR(CheckLeasedHackScales(scales, scales_owner, stream, failed_index));
  return out;
}

// ---- LeasedDecoder ------------------------------------------------------------------------------

namespace {

// Layout of the scatter's descriptor region (device and pinned staging alike).
struct ScatterLayout {
  std::size_t sources, tables, caches, total;
  ScatterLayout(std::uint32_t max_chunks, std::uint32_t max_layers)
      : sources(16),
        tables(sources + std::size_t{max_chunks} * sizeof(void*)),
        caches(tables + std::size_t{max_chunks} * sizeof(void*)),
        total(caches + std::size_t{max_layers} * 2 * sizeof(void*)) {}
};

}  // namespace

Result<LeasedDecoder> LeasedDecoder::Create(std::uint32_t max_chunks, std::uint32_t max_layers) {
  if (max_chunks == 0 || max_layers == 0) {
    return InvalidArgument("LeasedDecoder: max_chunks and max_layers must be at least 1");
  }
  LeasedDecoder d;
  d.max_chunks_ = max_chunks;
  d.max_layers_ = max_layers;
  KVD_ASSIGN_OR_RETURN(d.cachegen_, CacheGenDecodeWorkspace::Create(max_chunks, max_layers));
  const ScatterLayout lay(max_chunks, max_layers);
  KVD_ASSIGN_OR_RETURN(d.scatter_device_, DeviceBuffer::Allocate(lay.total));
  KVD_ASSIGN_OR_RETURN(d.scatter_host_, PinnedHostBuffer::Allocate(lay.total));
  return d;
}

Status LeasedDecoder::EnqueueScatter(std::span<const std::byte* const> sources,
                                     std::span<const std::int32_t* const> block_tables,
                                     const KvShape& shape, const CacheGenDecodeTarget& target,
                                     cudaStream_t stream) {
  const ScatterLayout lay(max_chunks_, max_layers_);
  auto* host = scatter_host_.as<std::byte>();
  auto* dev = scatter_device_.as<std::byte>();
  bool aligned16 = true;
  auto* host_sources = reinterpret_cast<const std::byte**>(host + lay.sources);
  auto* host_tables = reinterpret_cast<const std::int32_t**>(host + lay.tables);
  auto* host_caches = reinterpret_cast<std::byte**>(host + lay.caches);
  for (std::size_t i = 0; i < sources.size(); ++i) {
    host_sources[i] = sources[i];
    host_tables[i] = block_tables[i];
    aligned16 = aligned16 && Aligned(sources[i], 16);
  }
  for (std::uint32_t l = 0; l < shape.layers; ++l) {
    host_caches[l] = static_cast<std::byte*>(target.k_cache[l]);
    host_caches[shape.layers + l] = static_cast<std::byte*>(target.v_cache[l]);
    aligned16 = aligned16 && Aligned(target.k_cache[l], 16) && Aligned(target.v_cache[l], 16);
  }
  std::memset(host, 0, lay.sources);  // the error word starts clear
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, host, lay.total, cudaMemcpyHostToDevice, stream),
                           "LeasedDecoder: upload scatter descriptors");
  const std::uint64_t esize = DTypeSize(target.dtype);
  ScatterRowsParams p{};
  p.sources = reinterpret_cast<const std::byte* const*>(dev + lay.sources);
  p.block_tables = reinterpret_cast<const std::int32_t* const*>(dev + lay.tables);
  p.caches = reinterpret_cast<std::byte* const*>(dev + lay.caches);
  p.error = reinterpret_cast<unsigned int*>(dev);
  p.page_stride = target.page_stride * esize;
  p.row_stride = target.row_stride * esize;
  p.row_bytes = static_cast<std::uint32_t>(std::uint64_t{shape.kv_heads} * shape.head_dim * esize);
  p.page_size = target.page_size;
  p.num_pages = target.num_pages;
  p.layers = shape.layers;
  p.tokens = shape.tokens;
  p.chunks = static_cast<std::uint32_t>(sources.size());
  p.aligned16 = aligned16 ? 1u : 0u;
  KVD_CUDA_RETURN_IF_ERROR(LaunchScatterRows(p, stream), "LeasedDecoder: scatter launch");
  scatter_pending_ = true;
  return Status::Ok();
}

Status LeasedDecoder::Enqueue(std::span<const LeasedChunk> chunks,
                              const CacheGenDecodeTarget& target, cudaStream_t stream) {
  if (max_chunks_ == 0) return InvalidArgument("LeasedDecoder: not created (use Create)");
  if (batch_pending_) {
    return InvalidArgument("LeasedDecoder: a batch is in flight (call Finish first)");
  }
  Status s = EnqueueBatch(chunks, target, stream);
  if (!s.ok() && batch_pending_) (void)Finish(stream);  // what was enqueued completes first
  return s;
}

Status LeasedDecoder::EnqueueBatch(std::span<const LeasedChunk> chunks,
                                   const CacheGenDecodeTarget& target, cudaStream_t stream) {
  const std::string what = "LeasedDecoder";
  if (chunks.empty() || chunks.size() > max_chunks_) {
    return InvalidArgument(what + ": " + std::to_string(chunks.size()) +
                           " chunks, the decoder takes 1 to " + std::to_string(max_chunks_));
  }
  const KvShape shape = chunks[0].shape;
  if (shape.layers > max_layers_) {
    return InvalidArgument(what + ": " + std::to_string(shape.layers) +
                           " layers, the decoder takes up to " + std::to_string(max_layers_));
  }
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (!(chunks[i].shape == shape) || chunks[i].container.data == nullptr) {
      return InvalidArgument(what + ": chunk " + std::to_string(i) + " has shape " +
                             chunks[i].shape.ToString() + ", chunk 0 " + shape.ToString() +
                             " (one shape per batch, chunks from InspectLeasedChunks)");
    }
    if (chunks[i].codec == CodecId::kRaw && chunks[i].dtype != target.dtype) {
      return InvalidArgument(what + ": chunk " + std::to_string(i) + " is raw " +
                             std::string(DTypeName(chunks[i].dtype)) + ", the target " +
                             std::string(DTypeName(target.dtype)) + " (raw chunks are copied)");
    }
  }
  KVD_RETURN_IF_ERROR(ValidateDecodeTarget(shape, chunks.size(), target, what));
  const bool paged = target.contiguous.empty();
  const std::uint64_t decoded_bytes = shape.elements() * DTypeSize(target.dtype);

  // CacheGen: one launch for all of them.
  std::vector<CacheGenDecodeChunk> cachegen;
  std::vector<void*> cachegen_out;
  std::vector<const std::int32_t*> cachegen_tables;
  // Scatter sources: raw payloads, and dequantized HACK chunks of a paged target.
  std::vector<const std::byte*> sources;
  std::vector<const std::int32_t*> source_tables;
  std::uint32_t hack_staged = 0;
  for (const LeasedChunk& c : chunks) hack_staged += paged && c.codec == CodecId::kHackInt2;
  if (hack_staged > 0 && staging_.size() < hack_staged * decoded_bytes) {
    staging_ = DeviceBuffer();
    KVD_ASSIGN_OR_RETURN(staging_, DeviceBuffer::Allocate(hack_staged * decoded_bytes));
  }
  std::uint32_t staged = 0;
  batch_pending_ = true;  // from the first enqueued operation on
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const LeasedChunk& c = chunks[i];
    switch (c.codec) {
      case CodecId::kCacheGen:
        cachegen.push_back({c.container.data, c.cachegen});
        (paged ? static_cast<void>(cachegen_tables.push_back(target.block_tables[i]))
               : static_cast<void>(cachegen_out.push_back(target.contiguous[i])));
        break;
      case CodecId::kRaw:
        if (paged) {
          sources.push_back(c.container.data + c.raw_payload_offset);
          source_tables.push_back(target.block_tables[i]);
        } else {
          KVD_CUDA_RETURN_IF_ERROR(
              cudaMemcpyAsync(target.contiguous[i], c.container.data + c.raw_payload_offset,
                              decoded_bytes, cudaMemcpyDeviceToDevice, stream),
              what + ": raw chunk " + std::to_string(i));
        }
        break;
      case CodecId::kHackInt2: {
        void* out = paged ? staging_.as<std::byte>() + std::uint64_t{staged++} * decoded_bytes
                          : target.contiguous[i];
        Status s = EnqueueDequantizeHack(c.dtype, shape, c.hack_options, c.hack_sections,
                                         target.dtype, out, stream);
        if (!s.ok()) return Prefixed(s, what + ": hack-int2 chunk " + std::to_string(i));
        if (paged) {
          sources.push_back(static_cast<const std::byte*>(out));
          source_tables.push_back(target.block_tables[i]);
        }
        break;
      }
      default:
        return InvalidArgument(what + ": chunk " + std::to_string(i) + " has an unknown codec");
    }
  }
  if (!cachegen.empty()) {
    CacheGenDecodeTarget sub = target;
    sub.contiguous = cachegen_out;
    sub.block_tables = cachegen_tables;
    KVD_RETURN_IF_ERROR(EnqueueDecodeCacheGen(cachegen, sub, cachegen_, stream));
    cachegen_pending_ = true;
  }
  if (!sources.empty()) {
    KVD_RETURN_IF_ERROR(EnqueueScatter(sources, source_tables, shape, target, stream));
  }
  return Status::Ok();
}

Status LeasedDecoder::Finish(cudaStream_t stream) {
  batch_pending_ = false;
  const bool cachegen = std::exchange(cachegen_pending_, false);
  const bool scatter = std::exchange(scatter_pending_, false);
  auto* error_word = scatter_host_.as<unsigned int>();
  if (scatter) {
    KVD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(error_word, scatter_device_.data(),
                                             sizeof(unsigned int), cudaMemcpyDeviceToHost, stream),
                             "LeasedDecoder: error word");
  }
  KVD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "LeasedDecoder");
  if (cachegen) {
    Status s = FinishDecodeCacheGen(cachegen_, stream);
    if (!s.ok()) {
      return Prefixed(s,
                      "LeasedDecoder (cachegen chunks numbered among the batch's cachegen "
                      "chunks)");
    }
  }
  if (scatter && *error_word != 0) {
    return InvalidArgument("LeasedDecoder: a block table entry is outside [0, num_pages)");
  }
  return Status::Ok();
}

Status LeasedDecoder::Decode(std::span<const LeasedChunk> chunks,
                             const CacheGenDecodeTarget& target, cudaStream_t stream) {
  KVD_RETURN_IF_ERROR(Enqueue(chunks, target, stream));
  return Finish(stream);
}

Result<HackAttentionSeq> LeasedHackSequence(const LeasedChunk& chunk) {
  if (chunk.codec != CodecId::kHackInt2) {
    return InvalidArgument("LeasedHackSequence: the chunk is " +
                           std::string(CodecName(chunk.codec)) + ", not hack-int2");
  }
  HackAttentionSeq seq;
  seq.codes = chunk.hack_sections.codes;
  seq.scales = chunk.hack_sections.scales;
  seq.sums = chunk.hack_sections.sums;
  seq.tail = chunk.hack_sections.tail;
  seq.tokens = chunk.shape.tokens;
  seq.sinks = std::min(chunk.hack_options.sinks, chunk.shape.tokens);
  return seq;
}

// ---- DecodeLeasedChunk --------------------------------------------------------------------------

namespace {

// One single-chunk decoder per thread and device, grown to the most layers seen.
Result<LeasedDecoder*> ThreadDecoder(std::uint32_t layers) {
  int device = 0;
  KVD_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "DecodeLeasedChunk");
  thread_local std::vector<std::pair<int, std::pair<std::uint32_t, LeasedDecoder>>> cache;
  for (auto& [d, entry] : cache) {
    if (d != device) continue;
    if (entry.first < layers) {
      KVD_ASSIGN_OR_RETURN(entry.second, LeasedDecoder::Create(1, layers));
      entry.first = layers;
    }
    return &entry.second;
  }
  KVD_ASSIGN_OR_RETURN(LeasedDecoder decoder, LeasedDecoder::Create(1, layers));
  cache.emplace_back(device, std::make_pair(layers, std::move(decoder)));
  return &cache.back().second.second;
}

}  // namespace

Status DecodeLeasedChunk(const std::byte* d_container, std::uint64_t bytes, void* d_out,
                         std::uint64_t out_bytes, cudaStream_t stream) {
  if (d_container == nullptr || d_out == nullptr) {
    return InvalidArgument("DecodeLeasedChunk: null pointer");
  }
  const DeviceContainer container{d_container, bytes};
  KVD_ASSIGN_OR_RETURN(const std::vector<LeasedChunk> chunks,
                       InspectLeasedChunks(std::span(&container, 1), stream));
  const LeasedChunk& c = chunks[0];
  const std::uint64_t need = c.shape.elements() * DTypeSize(c.dtype);
  if (out_bytes < need) {
    return InvalidArgument("DecodeLeasedChunk: output of " + std::to_string(out_bytes) +
                           " bytes is smaller than the chunk's " + std::to_string(need));
  }
  KVD_ASSIGN_OR_RETURN(LeasedDecoder * decoder, ThreadDecoder(c.shape.layers));
  void* const outs[] = {d_out};
  CacheGenDecodeTarget target;
  target.dtype = c.dtype;
  target.contiguous = outs;
  return decoder->Decode(chunks, target, stream);
}

}  // namespace kvdepot::cuda
