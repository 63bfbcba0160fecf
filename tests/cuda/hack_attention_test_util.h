// Helpers shared by the HACK attention GPU tests (hack_attention_gpu_test.cc,
// hack_decode_fp16_gpu_test.cc, hack_prefill_fp16_gpu_test.cc, hack_io_gpu_test.cc): device
// uploads, one sequence encoded as a hack-int2 chunk on the device, one decode call run to
// completion with its outputs read back, and one prefill call alike; the two paths' tolerance
// checks; a page's groups copied from a contiguous container.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/hack.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {

inline std::vector<float> RandomQueries(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(n);
  for (float& x : q) x = nd(rng);
  return q;
}

template <typename T>
Result<DeviceBuffer> Upload(const T* data, std::size_t count) {
  KVD_ASSIGN_OR_RETURN(DeviceBuffer b,
                       DeviceBuffer::Allocate(std::max<std::size_t>(count * sizeof(T), 16)));
  if (count > 0) {
    KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.data(), data, count * sizeof(T), cudaMemcpyHostToDevice),
                             "upload");
  }
  return Result<DeviceBuffer>(std::move(b));
}

template <typename T>
DeviceBuffer Dev(const T* data, std::size_t count) {
  Result<DeviceBuffer> r = Upload(data, count);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

inline DeviceBuffer DevAlloc(std::size_t bytes) {
  Result<DeviceBuffer> r = DeviceBuffer::Allocate(std::max<std::size_t>(bytes, 16));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

// x as `dtype`'s bits (fp16 / bf16: rounded to nearest even) and back.
inline std::uint16_t To16(float x, DType dtype) {
  return dtype == DType::kBFloat16 ? FloatToBf16Bits(x) : FloatToHalfBits(x);
}
inline float From16(std::uint16_t bits, DType dtype) {
  return dtype == DType::kBFloat16 ? Bf16BitsToFloat(bits) : HalfBitsToFloat(bits);
}

// How far a call with 16-bit out `got` (as floats) is from the fp32 call's `wide` rounded to io:
// the number of outputs that are not `wide` rounded, bit for bit. With `per_row`, the number of
// (query, head) rows of `dim` outputs further from `wide` than io's unit roundoff (+ 1e-5) in
// relative L2 instead: the homomorphic kernels deal blocks to warps at run time (docs/hack-gpu.md),
// so any two of their calls can differ in the last bits of the fp32 sums (an output with
// cancellation by more than one io ulp), and only the dequantize-on-load kernels are compared bit
// for bit.
inline std::size_t NotTheFp32OutputsRounded(const std::vector<float>& got,
                                            const std::vector<float>& wide, DType io,
                                            std::uint32_t dim, bool per_row) {
  std::size_t differ = 0;
  if (!per_row) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (To16(got[i], io) != To16(wide[i], io)) ++differ;
    }
    return differ;
  }
  const double u = io == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
  for (std::size_t row = 0; row * dim < got.size(); ++row) {
    double e = 0, n = 0;
    for (std::size_t i = row * dim; i < (row + 1) * dim; ++i) {
      e += (static_cast<double>(got[i]) - wide[i]) * (static_cast<double>(got[i]) - wide[i]);
      n += static_cast<double>(wide[i]) * wide[i];
    }
    if (!(std::sqrt(e) <= (u + 1e-5) * std::sqrt(n))) ++differ;
  }
  return differ;
}

// lse values of the two calls that differ: in any bit, or with `per_row` by more than 1e-6
// relative (see NotTheFp32OutputsRounded).
inline std::size_t LseDiffer(const std::vector<float>& got, const std::vector<float>& wide,
                             bool per_row) {
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &wide[i], sizeof(float)) == 0) continue;
    if (!per_row || !(std::abs(got[i] - wide[i]) <= 1e-6f * std::max(1.0f, std::abs(wide[i])))) {
      ++differ;
    }
  }
  return differ;
}

// `values` on the device as `io` elements (fp32 as they are; fp16 / bf16 rounded to nearest even).
inline DeviceBuffer DevIo(const std::vector<float>& values, DType io) {
  if (io == DType::kFloat32) return Dev(values.data(), values.size());
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = To16(values[i], io);
  return Dev(bits.data(), bits.size());
}

// `count` `io` elements at device address `src`, as floats.
inline std::vector<float> ReadIo(const void* src, std::size_t count, DType io) {
  std::vector<float> out(count);
  if (io == DType::kFloat32) {
    EXPECT_EQ(cudaMemcpy(out.data(), src, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  std::vector<std::uint16_t> bits(count);
  EXPECT_EQ(cudaMemcpy(bits.data(), src, count * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::size_t i = 0; i < count; ++i) out[i] = From16(bits[i], io);
  return out;
}

// A sequence encoded as one hack-int2 chunk, its container on the device.
struct GpuSeq {
  HackChunk chunk;  // for the CPU reference
  DeviceBuffer container;
  HackAttentionSeq desc;
};

inline GpuSeq MakeSeq(const KvTensor& t, const HackOptions& o) {
  GpuSeq s;
  const std::vector<std::byte> c = *EncodeHack(t.view(), o);
  const ContainerView view = *ParseContainer(c);
  s.chunk = *UnpackHack(view);
  s.container = Dev(c.data(), c.size());
  const auto* base = s.container.as<std::uint8_t>();
  s.desc.codes = base + view.Find(SectionKind::kCodes)->offset;
  s.desc.scales = base + view.Find(SectionKind::kScales)->offset;
  s.desc.sums = base + view.Find(SectionKind::kSums)->offset;
  s.desc.tail = s.chunk.layout.unquantized_tokens() > 0
                    ? base + view.Find(SectionKind::kTail)->offset
                    : nullptr;
  s.desc.tokens = t.shape.tokens;
  s.desc.sinks = s.chunk.layout.sinks;
  return s;
}

inline HackKvCache KvFor(const KvTensor& t, DType dtype, std::uint32_t layer) {
  HackKvCache kv;
  kv.dtype = dtype;
  kv.layers = t.shape.layers;
  kv.layer = layer;
  kv.kv_heads = t.shape.kv_heads;
  kv.head_dim = t.shape.head_dim;
  return kv;
}

struct GpuResult {
  Status status;
  std::vector<float> out;
  std::vector<float> lse;
};

// One decode call over `seqs` with the queries `q` (fp32 values, [num_seqs][q_heads][head_dim]),
// run to completion; out as floats and lse. With io fp16 / bf16, q is uploaded rounded to io and
// out read back as io's values (HackDecodeArgs::io_dtype). out is written `out_offset` bytes past
// a 256-byte-aligned address (only the element's alignment is required).
inline GpuResult RunDecode(const HackKvCache& kv, const std::vector<HackAttentionSeq>& seqs,
                           std::uint32_t max_tokens, const std::vector<float>& q,
                           std::uint32_t q_heads,
                           HackDecodeMath math = HackDecodeMath::kHomomorphicInt8,
                           DType io = DType::kFloat32, std::size_t out_offset = 0) {
  GpuResult r;
  auto ws = HackAttentionWorkspace::Create();
  EXPECT_TRUE(ws.ok()) << ws.status().ToString();
  DeviceBuffer d_seqs = Dev(seqs.data(), seqs.size());
  DeviceBuffer d_q = DevIo(q, io);
  DeviceBuffer d_out = DevAlloc(q.size() * DTypeSize(io) + out_offset);
  DeviceBuffer d_lse = DevAlloc(seqs.size() * q_heads * sizeof(float));
  void* out = d_out.as<std::uint8_t>() + out_offset;
  HackDecodeArgs a;
  a.seqs = d_seqs.as<HackAttentionSeq>();
  a.num_seqs = static_cast<std::uint32_t>(seqs.size());
  a.max_tokens = max_tokens;
  a.q_heads = q_heads;
  a.q = d_q.data();
  a.out = out;
  a.lse = d_lse.as<float>();
  a.math = math;
  a.io_dtype = io;
  r.status = EnqueueHackDecodeAttention(kv, a, *ws, nullptr);
  if (r.status.ok()) r.status = FinishHackAttention(*ws, nullptr);
  r.out = ReadIo(out, q.size(), io);
  r.lse.resize(seqs.size() * q_heads);
  EXPECT_EQ(cudaMemcpy(r.lse.data(), d_lse.data(), r.lse.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  return r;
}

// Runs the prefill of `queries` (fp32 [n][q_heads][dim]) from `first_position` with `math`
// (HackPrefillArgs::math; the fp16 path unless said); out and lse (without `with_lse`, lse is
// null in the call and empty here). With `staged`, through a staging scratch of
// HackPrefillStagingBytes (+ 16) bytes. With io fp16 / bf16, q is uploaded rounded to io and out
// read back as io's values (HackPrefillArgs::io_dtype).
inline GpuResult RunPrefill(const HackKvCache& kv, const HackAttentionSeq& seq,
                            std::uint32_t first_position, const std::vector<float>& q,
                            std::uint32_t q_heads, HackAttentionWorkspace& ws, bool staged = false,
                            DType io = DType::kFloat32,
                            HackPrefillMath math = HackPrefillMath::kDequantFp16,
                            bool with_lse = true) {
  GpuResult r;
  const std::size_t n = q.size() / (std::size_t{q_heads} * kv.head_dim);
  DeviceBuffer d_q = DevIo(q, io);
  DeviceBuffer d_out = DevAlloc(q.size() * DTypeSize(io));
  DeviceBuffer d_lse = DevAlloc(n * q_heads * 4);
  HackPrefillArgs a;
  a.seq = seq;
  a.queries = static_cast<std::uint32_t>(n);
  a.first_position = first_position;
  a.q_heads = q_heads;
  a.q = d_q.data();
  a.out = d_out.data();
  a.lse = with_lse ? d_lse.as<float>() : nullptr;
  a.math = math;
  a.io_dtype = io;
  DeviceBuffer scratch;
  if (staged) {
    a.staging_bytes = HackPrefillStagingBytes(kv, a) + 16;
    scratch = DevAlloc(a.staging_bytes);
    a.staging = scratch.data();
  }
  r.status = EnqueueHackPrefillAttention(kv, a, ws, nullptr);
  if (r.status.ok()) r.status = FinishHackAttention(ws, nullptr);
  r.out = ReadIo(d_out.data(), q.size(), io);
  if (!with_lse) return r;
  r.lse.resize(n * q_heads);
  EXPECT_EQ(cudaMemcpy(r.lse.data(), d_lse.data(), r.lse.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  return r;
}

// The error of `gpu` against `ref` by rows of `dim` outputs (one (query, head) each): relative L2
// over all the rows compared, the worst row's, and that row. Rows flagged in `skip` are left out.
struct RowErrors {
  double rel = 0, worst = 0;
  std::size_t worst_row = 0;
};
inline RowErrors RelativeL2ByRow(const std::vector<double>& ref, const std::vector<float>& gpu,
                                 std::uint32_t dim, const std::vector<bool>& skip = {}) {
  RowErrors r;
  double num = 0, den = 0;
  for (std::size_t row = 0; row * dim < ref.size(); ++row) {
    if (!skip.empty() && skip[row]) continue;
    double n = 0, d = 0;
    for (std::uint32_t i = 0; i < dim; ++i) {
      const double e = static_cast<double>(gpu[row * dim + i]) - ref[row * dim + i];
      n += e * e;
      d += ref[row * dim + i] * ref[row * dim + i];
    }
    num += n;
    den += d;
    const double rel = std::sqrt(n / std::max(d, 1e-300));
    if (!(rel <= r.worst)) {
      r.worst = rel;
      r.worst_row = row;
    }
  }
  r.rel = std::sqrt(num / std::max(den, 1e-300));
  return r;
}

// RelativeL2ByRow within `rel_tolerance` over all rows and `row_tolerance` for each; prints both.
inline void ExpectRowsClose(const std::vector<double>& ref, const std::vector<float>& gpu,
                            std::uint32_t dim, const std::string& label, double rel_tolerance,
                            double row_tolerance, const std::vector<bool>& skip = {}) {
  ASSERT_EQ(ref.size(), gpu.size()) << label;
  const RowErrors e = RelativeL2ByRow(ref, gpu, dim, skip);
  EXPECT_LE(e.rel, rel_tolerance) << label;
  EXPECT_LE(e.worst, row_tolerance) << label << " (query-head row " << e.worst_row << ")";
  std::printf("[ info ] %s: rel L2 %.3g, worst (query, head) %.3g\n", label.c_str(), e.rel,
              e.worst);
}

// The homomorphic kernel against its float64 reference (kHackAttention*Tolerance).
inline void ExpectClose(const std::vector<double>& ref, const std::vector<float>& gpu,
                        std::uint32_t dim, const std::string& label,
                        const std::vector<bool>& skip = {}) {
  ExpectRowsClose(ref, gpu, dim, label, kHackAttentionRelL2Tolerance, kHackAttentionHeadTolerance,
                  skip);
}

// Copies group (layer, kv, head, block b) of `src` (layout `sl`, sections of `c`) into slot `slot`
// of a page (layout `pl`) whose sections start at codes / scales / sums.
inline void CopyGroup(const std::vector<std::byte>& c, const hack::Layout& sl, std::uint32_t b,
                      const hack::Layout& pl, std::uint32_t slot, std::uint8_t* codes,
                      std::uint8_t* scales, std::uint8_t* sums) {
  const ContainerView v = *ParseContainer(c);
  const std::byte* sc = v.Find(SectionKind::kCodes)->bytes.data();
  const std::byte* ss = v.Find(SectionKind::kScales)->bytes.data();
  const std::byte* su = v.Find(SectionKind::kSums)->bytes.data();
  for (std::uint32_t l = 0; l < sl.layers; ++l) {
    for (std::uint32_t kv = 0; kv < 2; ++kv) {
      for (std::uint32_t h = 0; h < sl.heads; ++h) {
        std::memcpy(codes + pl.code_base(pl.group(l, kv, h, slot)) / 4,
                    sc + sl.code_base(sl.group(l, kv, h, b)) / 4, sl.codes_per_group() / 4);
        std::memcpy(scales + pl.partition_base(l, kv, h, slot) * 4,
                    ss + sl.partition_base(l, kv, h, b) * 4, sl.partitions_per_group(kv) * 4);
        std::memcpy(sums + pl.sum_base(l, kv, h, slot), su + sl.sum_base(l, kv, h, b),
                    sl.sums_per_group(kv));
      }
    }
  }
}

// The quantized blocks of `tensors` (each encoded with the default options: no sinks, so a page
// holds blocks only) copied into a pool of pages of `page_blocks` blocks, `spare` pages unused, at
// page positions shuffled by std::mt19937(shuffle_seed), with each sequence's block table; pool
// and tables on the device, as an engine's paged KV cache holds them.
struct PagePool {
  std::uint32_t page_blocks = 0, num_pages = 0, max_pages = 0;
  HackSectionBytes page_bytes;
  std::vector<std::int32_t> table;  // [sequence][max_pages]: the page of each, -1 past its pages
  DeviceBuffer codes, scales, sums, d_table;

  // Points kv's paged fields at the pool (the sequences' descriptors then need no sections).
  void Attach(HackKvCache& kv) const {
    kv.page_blocks = page_blocks;
    kv.num_pages = num_pages;
    kv.page_codes = codes.as<std::uint8_t>();
    kv.page_scales = scales.as<std::uint8_t>();
    kv.page_sums = sums.as<std::uint8_t>();
    kv.page_codes_bytes = page_bytes.codes;
    kv.page_scales_bytes = page_bytes.scales;
    kv.page_sums_bytes = page_bytes.sums;
    kv.block_tables = d_table.as<std::int32_t>();
    kv.max_pages_per_seq = max_pages;
  }
};

inline PagePool MakePagePool(std::span<const KvTensor> tensors, std::uint32_t page_blocks,
                             std::uint32_t spare, std::uint32_t shuffle_seed) {
  PagePool pool;
  pool.page_blocks = page_blocks;
  const KvShape& shape = tensors.front().shape;
  const hack::Layout pl =
      HackLayoutFor({shape.layers, page_blocks * 64, shape.kv_heads, shape.head_dim}, {});
  pool.page_bytes = HackSectionBytesFor(pl, DType::kFloat16);
  std::uint32_t total_pages = 0;
  for (const KvTensor& t : tensors) {
    const std::uint32_t pages = (t.shape.tokens / 64 + page_blocks - 1) / page_blocks;
    pool.max_pages = std::max(pool.max_pages, std::max(pages, 1u));
    total_pages += pages;
  }
  pool.num_pages = total_pages + spare;
  std::vector<std::uint32_t> perm(pool.num_pages);
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(shuffle_seed));
  const HackSectionBytes& pb = pool.page_bytes;
  std::vector<std::uint8_t> codes(pool.num_pages * pb.codes), scales(pool.num_pages * pb.scales),
      sums(pool.num_pages * pb.sums);
  pool.table.assign(tensors.size() * pool.max_pages, -1);
  std::uint32_t next = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::vector<std::byte> c = *EncodeHack(tensors[i].view(), {});
    const hack::Layout sl = UnpackHack(*ParseContainer(c))->layout;
    std::int32_t* row = pool.table.data() + i * pool.max_pages;
    for (std::uint32_t b = 0; b < sl.blocks(); ++b) {
      if (b % page_blocks == 0) row[b / page_blocks] = static_cast<std::int32_t>(perm[next++]);
      const auto page = static_cast<std::uint32_t>(row[b / page_blocks]);
      CopyGroup(c, sl, b, pl, b % page_blocks, codes.data() + page * pb.codes,
                scales.data() + page * pb.scales, sums.data() + page * pb.sums);
    }
  }
  pool.codes = Dev(codes.data(), codes.size());
  pool.scales = Dev(scales.data(), scales.size());
  pool.sums = Dev(sums.data(), sums.size());
  pool.d_table = Dev(pool.table.data(), pool.table.size());
  return pool;
}

// The fp16 prefill path against attention over the dequantized KV (kHackDequantPrefill*Tolerance).
inline void ExpectCloseFp16(const std::vector<double>& ref, const std::vector<float>& gpu,
                            std::uint32_t dim, const std::string& label) {
  ExpectRowsClose(ref, gpu, dim, label, kHackDequantPrefillRelL2Tolerance,
                  kHackDequantPrefillHeadTolerance);
}

}  // namespace kvdepot::cuda
