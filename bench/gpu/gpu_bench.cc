// kvdepot_gpu_bench: throughput of the GPU dtype conversions against a cudaMemcpy D2D ceiling.
//
// Each variant processes --mib MiB of input (default 256), rotating over kSets independent buffer
// sets (each far larger than L2) so that no rep reads what the previous one left in cache. Times
// are cudaEvent intervals around one operation; the median over --reps timed reps (default 100,
// at least 50) after --warmup reps is reported. Bytes moved = bytes read + bytes written.
//
// Usage: kvdepot_gpu_bench [--json FILE] [--mib N] [--reps N] [--warmup N] [--device N]
// Exit status: 0 ok, 1 error, 2 no GPU, 64 bad usage.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench_util.h"
#include "kvdepot/base/status.h"
#include "kvdepot/codec/numeric.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/cuda/convert.h"
#include "kvdepot/cuda/device.h"
#include "kvdepot/cuda/status.h"

namespace kvdepot::cuda {
namespace {

using bench::EventPair;
using bench::JsonEscape;

constexpr int kSets = 2;

struct Options : bench::CommonOptions {
  std::uint64_t mib = 256;
};

struct Variant {
  std::string name;  // "d2d", "fp16->fp32", ...
  DType from;
  DType to;
  bool memcpy;
};

struct Row {
  std::string name;
  std::uint64_t input_bytes;
  std::uint64_t bytes_moved;
  double median_us;
  double min_us;
  double gbps;
};

// RAII pair of events.
std::vector<std::byte> RandomInput(DType dtype, std::uint64_t bytes, std::uint64_t seed) {
  std::vector<std::byte> out(bytes);
  std::mt19937_64 rng(seed);
  const std::uint64_t n = bytes / DTypeSize(dtype);
  for (std::uint64_t i = 0; i < n; i += 2) {
    const std::uint64_t r = rng();
    for (std::uint64_t k = 0; k < 2 && i + k < n; ++k) {
      const auto bits = static_cast<std::uint32_t>(r >> (32 * k));
      const std::uint32_t exp = 117u + (bits >> 27) % 14u;  // 2^-10 .. 2^3
      const float f = BitsToFloat((bits & 0x80000000u) | (exp << 23) | (bits & 0x007fffffu));
      if (dtype == DType::kFloat32) {
        std::memcpy(out.data() + (i + k) * 4, &f, 4);
      } else {
        const std::uint16_t h = dtype == DType::kFloat16 ? FloatToHalfBits(f) : FloatToBf16Bits(f);
        std::memcpy(out.data() + (i + k) * 2, &h, 2);
      }
    }
  }
  return out;
}

Status RunOnce(const Variant& v, const DeviceBuffer& src, const DeviceBuffer& dst,
               std::uint64_t input_bytes, cudaStream_t stream) {
  if (v.memcpy) {
    KVD_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst.data(), src.data(), input_bytes, cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync D2D");
    return Status::Ok();
  }
  return ConvertOnDevice(v.from, v.to, src.data(), dst.data(), input_bytes / DTypeSize(v.from),
                         stream);
}

// Compares the first elements of the last output with the CPU reference (a guard against timing
// a broken kernel).
Status VerifyPrefix(const Variant& v, const std::vector<std::byte>& host_in,
                    const DeviceBuffer& dst) {
  KvShape shape{1, kMaxTokens, 8, 1};  // 1 Mi elements
  const std::uint64_t n = shape.elements();
  KvTensorView in{v.from, shape, std::span<const std::byte>(host_in.data(), n * DTypeSize(v.from))};
  KVD_ASSIGN_OR_RETURN(KvTensor ref, ConvertDType(in, v.to));
  std::vector<std::byte> got(ref.data.size());
  KVD_CUDA_RETURN_IF_ERROR(cudaMemcpy(got.data(), dst.data(), got.size(), cudaMemcpyDeviceToHost),
                           "verify: download");
  if (got != ref.data) {
    return Internal("verify: " + v.name + " output differs from the CPU reference ConvertDType");
  }
  return Status::Ok();
}

Result<Row> Measure(const Variant& v, const Options& opt, cudaStream_t stream) {
  const std::uint64_t input_bytes = opt.mib << 20;
  const std::uint64_t output_bytes = input_bytes / DTypeSize(v.from) * DTypeSize(v.to);
  std::vector<DeviceBuffer> srcs;
  std::vector<DeviceBuffer> dsts;
  std::vector<std::byte> first_input;
  for (int s = 0; s < kSets; ++s) {
    KVD_ASSIGN_OR_RETURN(DeviceBuffer src, DeviceBuffer::Allocate(input_bytes));
    KVD_ASSIGN_OR_RETURN(DeviceBuffer dst, DeviceBuffer::Allocate(output_bytes));
    std::vector<std::byte> host = RandomInput(v.from, input_bytes, 1000 + 17 * s);
    KVD_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(src.data(), host.data(), input_bytes, cudaMemcpyHostToDevice), "upload");
    KVD_CUDA_RETURN_IF_ERROR(cudaMemset(dst.data(), 0x5a, output_bytes), "cudaMemset");
    if (s == (opt.warmup + opt.reps - 1) % kSets) first_input = std::move(host);
    srcs.push_back(std::move(src));
    dsts.push_back(std::move(dst));
  }
  EventPair events;
  KVD_RETURN_IF_ERROR(events.Init());
  std::vector<double> us;
  for (int rep = 0; rep < opt.warmup + opt.reps; ++rep) {
    const int s = rep % kSets;
    KVD_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.start(), stream), "cudaEventRecord");
    KVD_RETURN_IF_ERROR(RunOnce(v, srcs[s], dsts[s], input_bytes, stream));
    KVD_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.stop(), stream), "cudaEventRecord");
    KVD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(events.stop()), "cudaEventSynchronize");
    float ms = 0;
    KVD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events.start(), events.stop()),
                             "cudaEventElapsedTime");
    if (rep >= opt.warmup) us.push_back(static_cast<double>(ms) * 1000.0);
  }
  if (!v.memcpy) {
    KVD_RETURN_IF_ERROR(VerifyPrefix(v, first_input, dsts[(opt.warmup + opt.reps - 1) % kSets]));
  }
  std::sort(us.begin(), us.end());
  const double median =
      us.size() % 2 == 1 ? us[us.size() / 2] : 0.5 * (us[us.size() / 2 - 1] + us[us.size() / 2]);
  Row row;
  row.name = v.name;
  row.input_bytes = input_bytes;
  row.bytes_moved = input_bytes + output_bytes;
  row.median_us = median;
  row.min_us = us.front();
  row.gbps = static_cast<double>(row.bytes_moved) / (median * 1e3);  // bytes/us/1e3 = GB/s
  return row;
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--json FILE] [--mib N (input MiB, default 256)] [--reps N (>= 50, "
               "default 100)] [--warmup N (default 5)] [--device N]\n",
               argv0);
  return 64;
}

int Main(int argc, char** argv) {
  constexpr const char* kName = "kvdepot_gpu_bench";
  Options opt;
  const bool parsed = bench::ParseArgs(argc, argv, opt, [&](std::string_view flag, const char* v) {
    if (flag != "--mib" || v == nullptr) return false;
    opt.mib = std::strtoull(v, nullptr, 10);
    return true;
  });
  if (!parsed || opt.mib < 8 || opt.mib > 16384) return Usage(argv[0]);
  bench::BenchStart start;
  if (const int rc = bench::StartBench(kName, opt, start); rc != 0) return rc;
  const DeviceInfo* info = &start.info;
  const Stream* stream = &start.stream;
  std::FILE* json = start.json;
  std::printf("input %llu MiB per op, %d buffer sets, %d warm-up + %d timed reps, median\n",
              static_cast<unsigned long long>(opt.mib), kSets, opt.warmup, opt.reps);
  if ((opt.mib << 20) < 2 * info->l2_bytes) {
    std::printf("warning: input is less than 2x L2 (%llu bytes); results include cache hits\n",
                static_cast<unsigned long long>(info->l2_bytes));
  }
  const Variant variants[] = {
      {"d2d", DType::kFloat16, DType::kFloat16, true},
      {"fp16->fp32", DType::kFloat16, DType::kFloat32, false},
      {"fp32->fp16", DType::kFloat32, DType::kFloat16, false},
      {"fp32->bf16", DType::kFloat32, DType::kBFloat16, false},
      {"bf16->fp16", DType::kBFloat16, DType::kFloat16, false},
  };
  std::printf("%-12s %14s %12s %10s %8s\n", "variant", "bytes moved", "median us", "GB/s", "% d2d");
  double ceiling = 0;
  int rc = 0;
  for (const Variant& v : variants) {
    Result<Row> row = Measure(v, opt, stream->get());
    if (!row.ok()) {
      std::fprintf(stderr, "kvdepot_gpu_bench: %s: %s\n", v.name.c_str(),
                   row.status().ToString().c_str());
      rc = 1;
      break;
    }
    if (v.memcpy) ceiling = row->gbps;
    const double pct = ceiling > 0 ? 100.0 * row->gbps / ceiling : 0.0;
    std::printf("%-12s %14llu %12.1f %10.1f %7.1f%%\n", row->name.c_str(),
                static_cast<unsigned long long>(row->bytes_moved), row->median_us, row->gbps, pct);
    std::fflush(stdout);
    if (json != nullptr) {
      std::fprintf(json,
                   "{\"bench\":\"gpu_convert\",\"variant\":\"%s\",\"device\":\"%s\","
                   "\"input_bytes\":%llu,\"bytes_moved\":%llu,\"median_us\":%.3f,"
                   "\"min_us\":%.3f,\"gbps\":%.2f,\"pct_of_d2d\":%.2f,\"reps\":%d,\"sets\":%d}\n",
                   JsonEscape(row->name).c_str(), JsonEscape(info->name).c_str(),
                   static_cast<unsigned long long>(row->input_bytes),
                   static_cast<unsigned long long>(row->bytes_moved), row->median_us, row->min_us,
                   row->gbps, pct, opt.reps, kSets);
    }
  }
  return bench::CloseJson(kName, opt, start, rc);
}

}  // namespace
}  // namespace kvdepot::cuda

int main(int argc, char** argv) {
  return kvdepot::cuda::Main(argc, argv);
}
