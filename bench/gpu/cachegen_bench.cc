// kvdepot_cachegen_bench: GPU CacheGen encode and decode throughput on Llama-3.1-8B-shaped chunks
// [32, 2, 256, 8, 128] fp16 (32 MiB each), batches of 1, 8 and 32 chunks per launch, against a
// cudaMemcpy D2D ceiling.
//
// Inputs are SynthesizeKv chunks (kDistinct seeds, replicated on the device); each variant rotates
// over enough buffer sets that every set is far larger than L2 and no rep reads what the previous
// one left in cache. Times are cudaEvent intervals around one Enqueue (descriptor upload, kernels,
// status download) — or, for "calls", around `batch` single-chunk Enqueues back to back on one
// stream, each with its own workspace (an engine streaming chunks one by one: each call's host
// launch cost overlaps the previous call's kernel) — the median over --reps timed reps (>= 50)
// after --warmup reps is reported.
// GB/s = fp16 KV bytes (32 MiB per chunk) / time. "min bytes" = what the operation must move at
// least (fp16 KV + the container), and "% ceil" compares min bytes / time with the D2D rate.
// After timing, the last rep's chunk 0 is compared byte for byte with the CPU reference.
//
// Usage: kvdepot_cachegen_bench [--json FILE] [--reps N] [--warmup N] [--device N]
//                               [--batches 1,8,32] [--only encode|decode|paged|calls]
// Exit status: 0 ok, 1 error, 2 no GPU, 64 bad usage.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench_util.h"
#include "kvdepot/base/status.h"
#include "kvdepot/codec/cachegen.h"
#include "kvdepot/codec/synth.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/cuda/cachegen.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {
namespace {

using bench::JsonEscape;
using bench::MeasureD2d;
using bench::Median;
using bench::SetsFor;
using bench::Time;

constexpr KvShape kShape{32, 256, 8, 128};
constexpr int kDistinct = 4;  // distinct synthetic chunks, replicated over the buffers
constexpr std::uint32_t kPageSize = 16;

struct Options : bench::CommonOptions {
  std::vector<std::uint32_t> batches = {1, 8, 32};
  std::string only;
};

struct Row {
  std::string op;  // encode, decode, decode-paged, decode-calls
  std::uint32_t batch = 0;
  double median_us = 0;
  double min_us = 0;
  double us_per_chunk = 0;
  double gbps = 0;              // fp16 KV bytes / time
  std::uint64_t min_bytes = 0;  // per chunk
  double pct_ceiling = 0;
};

struct Fixture {
  std::vector<KvTensor> host;               // kDistinct chunks
  std::vector<std::vector<std::byte>> cpu;  // their CPU containers
  std::uint64_t container_bytes_avg = 0;
};

Result<Row> MeasureEncode(const Fixture& fx, std::uint32_t batch, std::uint64_t l2,
                          cudaStream_t stream, const Options& opt) {
  const std::uint64_t in_bytes = fx.host[0].data.size();
  const std::uint64_t out_cap = CacheGenMaxContainerBytes(kShape);
  const int sets = SetsFor(batch * in_bytes, l2);
  KVD_ASSIGN_OR_RETURN(CacheGenEncodeWorkspace ws, CacheGenEncodeWorkspace::Create(kShape, batch));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer ins, DeviceBuffer::Allocate(sets * batch * in_bytes));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer outs, DeviceBuffer::Allocate(batch * out_cap));
  std::vector<std::vector<const void*>> in_ptrs(sets);
  std::vector<std::byte*> out_ptrs;
  std::vector<int> which(sets * batch);
  for (int s = 0; s < sets; ++s) {
    for (std::uint32_t i = 0; i < batch; ++i) {
      const std::size_t k = std::size_t{static_cast<std::uint32_t>(s)} * batch + i;
      which[k] = static_cast<int>((k * 7 + 3) % kDistinct);
      std::byte* p = ins.as<std::byte>() + k * in_bytes;
      KVD_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(p, fx.host[which[k]].data.data(), in_bytes, cudaMemcpyHostToDevice), "upload");
      in_ptrs[s].push_back(p);
    }
  }
  // Outputs are written, not read: one set is enough.
  for (std::uint32_t i = 0; i < batch; ++i) out_ptrs.push_back(outs.as<std::byte>() + i * out_cap);
  std::vector<std::uint64_t> sizes;
  KVD_ASSIGN_OR_RETURN(std::vector<double> us,
                       Time(
                           opt, sets, stream,
                           [&](int s) {
                             return EnqueueEncodeCacheGen(DType::kFloat16, kShape, in_ptrs[s],
                                                          out_ptrs, {}, ws, stream);
                           },
                           [&]() -> Status {
                             KVD_ASSIGN_OR_RETURN(sizes, FinishEncodeCacheGen(ws, stream));
                             return Status::Ok();
                           }));
  // Verify chunk 0 of the last rep.
  const int last_set = (opt.warmup + opt.reps - 1) % sets;
  std::vector<std::byte> got(sizes[0]);
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(got.data(), out_ptrs[0], got.size(), cudaMemcpyDeviceToHost),
                           "download");
  KVD_RETURN_IF_ERROR(SealCacheGenContainer(got));
  if (got != fx.cpu[which[static_cast<std::size_t>(last_set) * batch]]) {
    return Internal("verify: GPU encode differs from EncodeCacheGen");
  }
  Row row;
  row.op = "encode";
  row.batch = batch;
  row.median_us = Median(us);
  row.min_us = *std::min_element(us.begin(), us.end());
  row.us_per_chunk = row.median_us / batch;
  row.gbps = static_cast<double>(in_bytes) * batch / (row.median_us * 1e3);
  row.min_bytes = in_bytes + fx.container_bytes_avg;
  return row;
}

// How a decode batch is issued: one call into contiguous outputs, one call into a paged cache, or
// `batch` single-chunk calls enqueued back to back on one stream (each with its own workspace,
// all finished after the last), the way an engine streams chunks one by one.
enum class DecodeMode { kContiguous, kPaged, kCalls };

Result<Row> MeasureDecode(const Fixture& fx, std::uint32_t batch, DecodeMode mode, std::uint64_t l2,
                          cudaStream_t stream, const Options& opt) {
  const bool paged = mode == DecodeMode::kPaged;
  const bool calls = mode == DecodeMode::kCalls;
  const std::uint64_t out_bytes = fx.host[0].data.size();
  std::uint64_t max_container = 0;
  for (const auto& c : fx.cpu) max_container = std::max<std::uint64_t>(max_container, c.size());
  const std::uint64_t slot = (max_container + 255) & ~std::uint64_t{255};
  const int sets = SetsFor(batch * (slot + out_bytes), l2);
  std::vector<CacheGenDecodeWorkspace> workspaces;
  for (std::uint32_t i = 0; i < (calls ? batch : 1); ++i) {
    KVD_ASSIGN_OR_RETURN(CacheGenDecodeWorkspace w,
                         CacheGenDecodeWorkspace::Create(calls ? 1 : batch, kShape.layers));
    workspaces.push_back(std::move(w));
  }
  CacheGenDecodeWorkspace& ws = workspaces[0];
  KVD_ASSIGN_OR_RETURN(DeviceBuffer ins, DeviceBuffer::Allocate(sets * batch * slot));
  KVD_ASSIGN_OR_RETURN(DeviceBuffer outs, DeviceBuffer::Allocate(sets * batch * out_bytes));
  std::vector<std::vector<CacheGenDecodeChunk>> chunks(sets);
  std::vector<int> which(sets * batch);
  for (int s = 0; s < sets; ++s) {
    for (std::uint32_t i = 0; i < batch; ++i) {
      const std::size_t k = std::size_t{static_cast<std::uint32_t>(s)} * batch + i;
      which[k] = static_cast<int>((k * 5 + 1) % kDistinct);
      const std::vector<std::byte>& c = fx.cpu[which[k]];
      std::byte* p = ins.as<std::byte>() + k * slot;
      KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(p, c.data(), c.size(), cudaMemcpyHostToDevice), "upload");
      KVD_ASSIGN_OR_RETURN(CacheGenContainerInfo info, ParseCacheGenContainer(c));
      chunks[s].push_back({p, info});
    }
  }
  const std::uint32_t channels = kShape.kv_heads * kShape.head_dim;
  const std::uint32_t pages_per_chunk = kShape.tokens / kPageSize;
  // Contiguous: set s chunk i at outs + (s * batch + i) * out_bytes. Paged: per set, per layer a
  // K and a V cache of batch * pages_per_chunk pages (the same bytes in total), shuffled tables.
  std::vector<std::vector<void*>> contiguous(sets), k_cache(sets), v_cache(sets);
  std::vector<std::vector<const std::int32_t*>> tables(sets);
  const std::uint64_t layer_cache_bytes =
      std::uint64_t{batch} * pages_per_chunk * kPageSize * channels * 2;
  const std::uint32_t num_pages = batch * pages_per_chunk;
  KVD_ASSIGN_OR_RETURN(
      DeviceBuffer d_tables,
      DeviceBuffer::Allocate(std::size_t{static_cast<std::uint32_t>(sets)} * num_pages * 4));
  std::mt19937 rng(42);
  for (int s = 0; s < sets; ++s) {
    std::byte* set_base =
        outs.as<std::byte>() + std::size_t{static_cast<std::uint32_t>(s)} * batch * out_bytes;
    for (std::uint32_t i = 0; i < batch; ++i) contiguous[s].push_back(set_base + i * out_bytes);
    for (std::uint32_t l = 0; l < kShape.layers; ++l) {
      k_cache[s].push_back(set_base + (2 * l) * layer_cache_bytes);
      v_cache[s].push_back(set_base + (2 * l + 1) * layer_cache_bytes);
    }
    std::vector<std::int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::int32_t* dt =
        d_tables.as<std::int32_t>() + std::size_t{static_cast<std::uint32_t>(s)} * num_pages;
    KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(dt, perm.data(), num_pages * 4, cudaMemcpyHostToDevice),
                             "upload tables");
    for (std::uint32_t i = 0; i < batch; ++i) tables[s].push_back(dt + i * pages_per_chunk);
  }
  auto target_for = [&](int s) {
    CacheGenDecodeTarget t;
    t.dtype = DType::kFloat16;
    if (paged) {
      t.k_cache = k_cache[s];
      t.v_cache = v_cache[s];
      t.block_tables = tables[s];
      t.page_size = kPageSize;
      t.num_pages = num_pages;
      t.row_stride = channels;
      t.page_stride = std::uint64_t{kPageSize} * channels;
    } else {
      t.contiguous = contiguous[s];
    }
    return t;
  };
  KVD_ASSIGN_OR_RETURN(std::vector<double> us,
                       Time(
                           opt, sets, stream,
                           [&](int s) -> Status {
                             if (!calls)
                               return EnqueueDecodeCacheGen(chunks[s], target_for(s), ws, stream);
                             for (std::uint32_t i = 0; i < batch; ++i) {
                               CacheGenDecodeTarget one;
                               one.dtype = DType::kFloat16;
                               one.contiguous = std::span<void* const>(&contiguous[s][i], 1);
                               KVD_RETURN_IF_ERROR(EnqueueDecodeCacheGen(
                                   std::span(chunks[s]).subspan(i, 1), one, workspaces[i], stream));
                             }
                             return Status::Ok();
                           },
                           [&]() -> Status {
                             for (CacheGenDecodeWorkspace& w : workspaces) {
                               KVD_RETURN_IF_ERROR(FinishDecodeCacheGen(w, stream));
                             }
                             return Status::Ok();
                           }));
  if (!paged) {
    const int last_set = (opt.warmup + opt.reps - 1) % sets;
    KvTensor got = KvTensor::Zeros(DType::kFloat16, kShape);
    KVD_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(got.data.data(), contiguous[last_set][0], out_bytes, cudaMemcpyDeviceToHost),
        "download");
    KVD_ASSIGN_OR_RETURN(ContainerView view,
                         ParseContainer(fx.cpu[which[static_cast<std::size_t>(last_set) * batch]]));
    KVD_ASSIGN_OR_RETURN(KvTensor ref, DecodeCacheGen(view));
    if (got.data != ref.data) return Internal("verify: GPU decode differs from DecodeCacheGen");
  }
  Row row;
  row.op = paged ? "decode-paged" : calls ? "decode-calls" : "decode";
  row.batch = batch;
  row.median_us = Median(us);
  row.min_us = *std::min_element(us.begin(), us.end());
  row.us_per_chunk = row.median_us / batch;
  row.gbps = static_cast<double>(out_bytes) * batch / (row.median_us * 1e3);
  row.min_bytes = out_bytes + fx.container_bytes_avg;
  return row;
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--json FILE] [--reps N (>= 50, default 100)] [--warmup N (default 5)] "
               "[--device N] [--batches 1,8,32] [--only encode|decode|paged|calls]\n",
               argv0);
  return 64;
}

int Main(int argc, char** argv) {
  constexpr const char* kName = "kvdepot_cachegen_bench";
  Options opt;
  const bool parsed = bench::ParseArgs(argc, argv, opt, [&](std::string_view flag, const char* v) {
    if (v == nullptr) return false;
    if (flag == "--batches") return bench::ParseUintList(v, opt.batches, 1, 64);
    if (flag != "--only") return false;
    opt.only = v;
    return opt.only == "encode" || opt.only == "decode" || opt.only == "paged" ||
           opt.only == "calls";
  });
  if (!parsed) return Usage(argv[0]);
  bench::BenchStart start;
  if (const int rc = bench::StartBench(kName, opt, start); rc != 0) return rc;
  const DeviceInfo* info = &start.info;
  const Stream* stream = &start.stream;
  std::FILE* json = start.json;

  Fixture fx;
  for (int s = 0; s < kDistinct; ++s) {
    Result<KvTensor> t = SynthesizeKv(SynthOptions{kShape, 1000u + 17u * s, DType::kFloat16});
    Result<std::vector<std::byte>> c =
        t.ok() ? EncodeCacheGen(t->view()) : Result<std::vector<std::byte>>(t.status());
    if (!c.ok()) {
      std::fprintf(stderr, "kvdepot_cachegen_bench: %s\n", c.status().ToString().c_str());
      return 1;
    }
    fx.container_bytes_avg += c->size() / kDistinct;
    fx.host.push_back(std::move(t).value());
    fx.cpu.push_back(std::move(c).value());
  }
  Result<double> d2d = MeasureD2d(stream->get(), opt);
  if (!d2d.ok()) {
    std::fprintf(stderr, "kvdepot_cachegen_bench: d2d: %s\n", d2d.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "chunk %s fp16 = %llu bytes, container %llu bytes (ratio %.2f); d2d ceiling %.1f "
      "GB/s (read + write); %d warm-up + %d timed reps, median\n",
      kShape.ToString().c_str(), static_cast<unsigned long long>(fx.host[0].data.size()),
      static_cast<unsigned long long>(fx.container_bytes_avg),
      static_cast<double>(fx.host[0].data.size()) / fx.container_bytes_avg, *d2d, opt.warmup,
      opt.reps);
  std::printf("%-13s %5s %12s %12s %10s %12s %8s\n", "op", "batch", "median us", "us/chunk", "GB/s",
              "min bytes", "% ceil");
  int rc = 0;
  for (const char* op : {"encode", "decode", "paged", "calls"}) {
    if (!opt.only.empty() && opt.only != op) continue;
    const std::string_view o = op;
    for (std::uint32_t batch : opt.batches) {
      if (o == "calls" && batch == 1) continue;  // the same as decode, batch 1
      const DecodeMode mode = o == "paged"   ? DecodeMode::kPaged
                              : o == "calls" ? DecodeMode::kCalls
                                             : DecodeMode::kContiguous;
      Result<Row> row = o == "encode"
                            ? MeasureEncode(fx, batch, info->l2_bytes, stream->get(), opt)
                            : MeasureDecode(fx, batch, mode, info->l2_bytes, stream->get(), opt);
      if (!row.ok()) {
        std::fprintf(stderr, "kvdepot_cachegen_bench: %s batch %u: %s\n", op, batch,
                     row.status().ToString().c_str());
        rc = 1;
        continue;
      }
      row->pct_ceiling =
          100.0 * (static_cast<double>(row->min_bytes) / (row->us_per_chunk * 1e3)) / *d2d;
      std::printf("%-13s %5u %12.1f %12.1f %10.1f %12llu %7.1f%%\n", row->op.c_str(), batch,
                  row->median_us, row->us_per_chunk, row->gbps,
                  static_cast<unsigned long long>(row->min_bytes), row->pct_ceiling);
      std::fflush(stdout);
      if (json != nullptr) {
        std::fprintf(json,
                     "{\"bench\":\"gpu_cachegen\",\"op\":\"%s\",\"batch\":%u,\"device\":\"%s\","
                     "\"shape\":\"%s\",\"median_us\":%.3f,\"min_us\":%.3f,\"us_per_chunk\":%.3f,"
                     "\"gbps_fp16\":%.2f,\"min_bytes_per_chunk\":%llu,\"d2d_gbps\":%.2f,"
                     "\"pct_of_d2d\":%.2f,\"reps\":%d}\n",
                     row->op.c_str(), batch, JsonEscape(info->name).c_str(),
                     kShape.ToString().c_str(), row->median_us, row->min_us, row->us_per_chunk,
                     row->gbps, static_cast<unsigned long long>(row->min_bytes), *d2d,
                     row->pct_ceiling, opt.reps);
      }
    }
  }
  return bench::CloseJson(kName, opt, start, rc);
}

}  // namespace
}  // namespace kvdepot::cuda

int main(int argc, char** argv) {
  return kvdepot::cuda::Main(argc, argv);
}
