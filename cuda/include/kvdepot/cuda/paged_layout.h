// A vLLM-style paged KV layout carved out of one device buffer, used by the GPU fetch
// benchmark and end-to-end check (kvdepot_ipc_bench, kvdepot_gpu_fetch): pages of 16 tokens, rows
// of kv_heads * head_dim elements, K and V of each layer in their own region, chunk c owning
// ceil(tokens / 16) pages of a fixed permutation. The buffer must hold chunks x one chunk's
// decoded bytes (the pages exactly fill it when tokens is a multiple of 16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvdepot/base/status.h"
#include "kvdepot/cuda/cachegen.h"
#include "kvdepot/cuda/device.h"

namespace kvdepot::cuda {

struct PagedLayout {
  static constexpr std::uint32_t kPage = 16;
  KvShape shape;
  std::uint32_t per_chunk = 0;      // pages per chunk
  std::uint64_t row_bytes = 0;      // one token's row of one layer's K or V
  std::uint64_t region_bytes = 0;   // one layer's K (or V) pages
  std::vector<std::int32_t> table;  // [chunks][per_chunk] page numbers
  cuda::DeviceBuffer d_table;
  std::vector<const std::int32_t*> tables;
  std::vector<void*> k_cache, v_cache;
  cuda::CacheGenDecodeTarget target;  // dtype fp16; spans point into this object: do not move it

  // Offset in the buffer of token `token` of chunk `chunk`, layer/KV row `lk` (= 2 * layer + kv).
  std::uint64_t RowOffset(std::uint32_t chunk, std::uint32_t lk, std::uint32_t token) const {
    const auto page = static_cast<std::uint64_t>(table[chunk * per_chunk + token / kPage]);
    return lk * region_bytes + (page * kPage + token % kPage) * row_bytes;
  }

  Status Init(std::byte* base, const KvShape& s, std::uint32_t chunks) {
    shape = s;
    per_chunk = (s.tokens + kPage - 1) / kPage;
    const std::uint32_t pages = per_chunk * chunks;
    const std::uint64_t row = std::uint64_t{s.kv_heads} * s.head_dim;
    row_bytes = row * 2;
    region_bytes = std::uint64_t{pages} * kPage * row_bytes;
    table.resize(pages);
    for (std::uint32_t p = 0; p < pages; ++p) {
      table[p] = static_cast<std::int32_t>((std::uint64_t{p} * 7919u) % pages);
    }
    KVD_ASSIGN_OR_RETURN(d_table, cuda::DeviceBuffer::Allocate(pages * 4ull));
    if (cudaMemcpy(d_table.data(), table.data(), pages * 4ull, cudaMemcpyHostToDevice) !=
        cudaSuccess) {
      return Status(StatusCode::kDeviceError, "paged layout: block table upload");
    }
    for (std::uint32_t c = 0; c < chunks; ++c) {
      tables.push_back(d_table.as<std::int32_t>() + std::uint64_t{c} * per_chunk);
    }
    for (std::uint32_t l = 0; l < s.layers; ++l) {
      k_cache.push_back(base + (2ull * l) * region_bytes);
      v_cache.push_back(base + (2ull * l + 1) * region_bytes);
    }
    target.dtype = DType::kFloat16;
    target.k_cache = k_cache;
    target.v_cache = v_cache;
    target.block_tables = tables;
    target.page_size = kPage;
    target.num_pages = pages;
    target.row_stride = row;
    target.page_stride = kPage * row;
    return Status::Ok();
  }
};

}  // namespace kvdepot::cuda
