// `kvdepot bench`: PUT / GET / LOOKUP load against kvdepotd and, with --redis, the same workload
// against Redis in the same run, so the two are compared side by side; with --lm, the same PUT or
// GET workload over kvdepotd's lm:// listener (LMCache's protocol). With --daemon-pid, the minor
// page faults the daemon took during each timed run (docs/benchmarks.md). Its keys live under a
// throwaway prefix and are deleted after each run, in Redis too.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <latch>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_args.h"
#include "cli_commands.h"
#include "cli_internal.h"
#include "cli_json.h"
#include "kvdepot/base/byte_order.h"
#include "kvdepot/base/socket_io.h"
#include "kvdepot/client/client.h"
#include "kvdepot/protocol/lm_value.h"
#include "kvdepot/protocol/lm_wire.h"

namespace kvdepot::cli {
namespace {

using Clock = std::chrono::steady_clock;

// kMixed: each batch is a PUT (20%), GET (50%) or LOOKUP (30%), drawn at random.
enum class BenchOp { kPut, kGet, kLookup, kMixed };

struct BenchConfig {
  BenchOp op = BenchOp::kGet;
  std::uint32_t connections = 1;
  std::uint64_t value_size = 1 << 20;
  std::uint32_t keys = 64;
  double duration_s = 5;
  std::uint32_t pipeline = 1;
  bool progress = true;
  bool huge_pages = true;     // the PUT value and the receive buffers advised for huge pages
  bool chunk_keys = false;    // 48-byte chunk-shaped keys instead of PREFIX/N
  bool progress_tty = false;  // stderr is a terminal: draw the progress bar there
  // The run's throwaway key prefix: "kvdepot-bench-PID-RANDOM/", or with chunk_keys a 16-byte
  // namespace "kvbench-RANDOM".
  std::string key_prefix;
};

struct BenchResult {
  std::string target;
  std::uint64_t ops = 0;
  double seconds = 0;
  std::vector<std::uint64_t> latencies_ns;  // per request, sorted
  std::string error;
  // Minor page faults during the timed run: the daemon's (with --daemon-pid) and this process's.
  std::optional<std::uint64_t> daemon_minor_faults;
  std::uint64_t client_minor_faults = 0;
  // Cleanup: keys deleted after the run, and why some were left (empty when none were).
  std::uint64_t keys_removed = 0;
  std::string cleanup_error;

  double ops_per_s() const { return seconds > 0 ? ops / seconds : 0; }
  std::uint64_t Percentile(double p) const {
    if (latencies_ns.empty()) return 0;
    const std::size_t i =
        std::min(latencies_ns.size() - 1, static_cast<std::size_t>(p * latencies_ns.size()));
    return latencies_ns[i];
  }
};

// A backend driven by one benchmark thread: kvdepot or Redis, over one connection.
class Backend {
 public:
  virtual ~Backend() = default;
  // Sends `n` requests for keys[i] (PUT: value), then reads their n responses.
  virtual Status Batch(BenchOp op, const std::vector<const std::string*>& keys,
                       std::span<const std::byte> value) = 0;
  // Sizes and touches the buffer GET responses are received into, before the timed run (as an
  // application reuses one buffer): the run measures transfers, not first-touch page faults.
  virtual void PrepareReceive(std::size_t value_size, bool huge_pages) = 0;
};

// Deletes `keys` over kvdepotd's native protocol in batches; how many were present.
Result<std::uint64_t> DeleteNative(client::Connection& c, const std::vector<std::string>& keys) {
  constexpr std::size_t kBatch = 1000;  // under limits.max_batch
  std::uint64_t removed = 0;
  for (std::size_t i = 0; i < keys.size(); i += kBatch) {
    const std::span<const std::string> batch(keys.data() + i, std::min(kBatch, keys.size() - i));
    KVD_ASSIGN_OR_RETURN(auto codes, c.Delete(batch));
    for (StatusCode code : codes) removed += code == StatusCode::kOk;
  }
  return removed;
}

// Sizes `buffer` to `bytes` and touches it; with `huge_pages`, backed by transparent huge pages
// where the kernel offers them for madvise'd memory (fewer TLB misses for the copy into it).
void PrepareBuffer(std::vector<std::byte>& buffer, std::size_t bytes, bool huge_pages) {
  buffer.reserve(bytes);
  constexpr std::uintptr_t kHuge = 2 << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(buffer.data()) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(buffer.data()) + bytes) & ~(kHuge - 1);
  if (huge_pages && end > begin) {
    (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
  buffer.resize(bytes);
  std::memset(buffer.data(), 0, bytes);
}

class KvdepotBackend : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> Connect(const client::ClientOptions& o) {
    KVD_ASSIGN_OR_RETURN(auto c, client::Connection::Connect(o));
    auto b = std::make_unique<KvdepotBackend>();
    b->conn_ = std::move(c);
    return std::unique_ptr<Backend>(std::move(b));
  }
  void PrepareReceive(std::size_t value_size, bool huge_pages) override {
    PrepareBuffer(response_, protocol::kGetItemPrefixBytes + value_size, huge_pages);
  }
  Status Batch(BenchOp op, const std::vector<const std::string*>& keys,
               std::span<const std::byte> value) override {
    for (const std::string* key : keys) {
      if (op == BenchOp::kPut) {
        KVD_RETURN_IF_ERROR(conn_->SendPut(*key, value).status());
      } else {
        const std::string one[] = {*key};
        KVD_ASSIGN_OR_RETURN(body_, protocol::EncodeKeyList(one));
        KVD_RETURN_IF_ERROR(
            conn_
                ->SendRequest(op == BenchOp::kGet ? protocol::Op::kGet : protocol::Op::kLookup,
                              body_)
                .status());
      }
    }
    for (std::size_t i = 0; i < keys.size(); ++i) {
      KVD_ASSIGN_OR_RETURN(protocol::FrameHeader h, conn_->ReadResponse(response_));
      if (h.status != 0) {
        return Status(
            static_cast<StatusCode>(h.status),
            "kvdepot answered " + std::string(StatusCodeName(static_cast<StatusCode>(h.status))));
      }
      if (op == BenchOp::kGet && response_.size() != protocol::kGetItemPrefixBytes + value.size()) {
        return Corruption("kvdepot returned " + std::to_string(response_.size()) + " bytes");
      }
    }
    return Status::Ok();
  }

 private:
  std::unique_ptr<client::Connection> conn_;
  std::vector<std::byte> body_, response_;
};

// A TCP connection (TCP_NODELAY) to `addr` (HOST:PORT) for the Redis and lm:// backends;
// errors name `flag`.
Result<int> ConnectTcp(const std::string& addr, const std::string& flag) {
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos) return InvalidArgument(flag + " expects HOST:PORT");
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc =
          getaddrinfo(addr.substr(0, colon).c_str(), addr.substr(colon + 1).c_str(), &hints, &res);
      rc != 0) {
    return Unavailable(flag + " " + addr + ": " + gai_strerror(rc));
  }
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
  const int err = errno;
  freeaddrinfo(res);
  if (rc != 0) {
    if (fd >= 0) ::close(fd);
    return Status(StatusCode::kUnavailable, StatusFromErrno(err, flag + " " + addr).message());
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Reads exactly `n` bytes from `fd`.
Status RecvExact(int fd, std::byte* out, std::size_t n, const char* what) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, out, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Unavailable(std::string(what) + ": connection closed");
    out += r;
    n -= static_cast<std::size_t>(r);
  }
  return Status::Ok();
}

// Minimal RESP client: SET / GET / EXISTS.
class RedisBackend : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> Connect(const std::string& addr) {
    KVD_ASSIGN_OR_RETURN(int fd, ConnectTcp(addr, "--redis"));
    auto b = std::make_unique<RedisBackend>();
    b->fd_ = fd;
    return std::unique_ptr<Backend>(std::move(b));
  }
  ~RedisBackend() override {
    if (fd_ >= 0) ::close(fd_);
  }
  // Takes over a connected socket (closed by the destructor).
  void Adopt(int fd) { fd_ = fd; }
  void PrepareReceive(std::size_t, bool) override {}  // values are read through a 1 MiB buffer
  // DEL of `keys` in batches; how many existed.
  Result<std::uint64_t> Delete(const std::vector<std::string>& keys) {
    constexpr std::size_t kBatch = 512;
    std::uint64_t removed = 0;
    for (std::size_t i = 0; i < keys.size(); i += kBatch) {
      const std::size_t n = std::min(kBatch, keys.size() - i);
      std::string cmd = "*" + std::to_string(n + 1) + "\r\n$3\r\nDEL\r\n";
      for (std::size_t j = i; j < i + n; ++j) {
        cmd += "$" + std::to_string(keys[j].size()) + "\r\n" + keys[j] + "\r\n";
      }
      iovec iov{cmd.data(), cmd.size()};
      KVD_RETURN_IF_ERROR(WriteV(std::span(&iov, 1)));
      KVD_ASSIGN_OR_RETURN(std::string line, ReadLine());
      if (line.empty() || line[0] != ':') return Unavailable("redis DEL answered " + line);
      removed += std::strtoull(line.c_str() + 1, nullptr, 10);
    }
    return removed;
  }
  Status Batch(BenchOp op, const std::vector<const std::string*>& keys,
               std::span<const std::byte> value) override {
    for (const std::string* key : keys) {
      std::string head;
      if (op == BenchOp::kPut) {
        head = "*3\r\n$3\r\nSET\r\n$" + std::to_string(key->size()) + "\r\n" + *key + "\r\n$" +
               std::to_string(value.size()) + "\r\n";
      } else {
        const char* cmd = op == BenchOp::kGet ? "$3\r\nGET\r\n" : "$6\r\nEXISTS\r\n";
        head = std::string("*2\r\n") + cmd + "$" + std::to_string(key->size()) + "\r\n" + *key +
               "\r\n";
      }
      iovec iov[3] = {{head.data(), head.size()},
                      {const_cast<std::byte*>(value.data()), value.size()},
                      {const_cast<char*>("\r\n"), 2}};
      KVD_RETURN_IF_ERROR(WriteV(op == BenchOp::kPut ? std::span(iov, 3) : std::span(iov, 1)));
    }
    for (std::size_t i = 0; i < keys.size(); ++i) {
      KVD_ASSIGN_OR_RETURN(std::string line, ReadLine());
      if (line.empty() || line[0] == '-') return Unavailable("redis error: " + line);
      if (line[0] == '$') {
        const long long n = std::stoll(line.substr(1));
        if (n >= 0) {
          KVD_RETURN_IF_ERROR(Skip(static_cast<std::size_t>(n) + 2));
          if (static_cast<std::uint64_t>(n) != value.size()) return Corruption("redis value size");
        }
      }
    }
    return Status::Ok();
  }

 private:
  Status WriteV(std::span<iovec> iov) {
    std::vector<iovec> v(iov.begin(), iov.end());
    return SendAllIov(fd_, v, "redis write");
  }
  Status Fill() {
    if (pos_ == len_) pos_ = len_ = 0;
    if (len_ == buf_.size()) {
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
      len_ -= pos_;
      pos_ = 0;
    }
    const ssize_t n = ::read(fd_, buf_.data() + len_, buf_.size() - len_);
    if (n <= 0) return Unavailable("redis connection closed");
    len_ += static_cast<std::size_t>(n);
    return Status::Ok();
  }
  Result<std::string> ReadLine() {
    while (true) {
      for (std::size_t i = pos_; i + 1 < len_; ++i) {
        if (buf_[i] == '\r' && buf_[i + 1] == '\n') {
          std::string line(buf_.data() + pos_, i - pos_);
          pos_ = i + 2;
          return line;
        }
      }
      KVD_RETURN_IF_ERROR(Fill());
    }
  }
  Status Skip(std::size_t n) {
    while (n > 0) {
      if (pos_ == len_) {
        KVD_RETURN_IF_ERROR(Fill());
        continue;
      }
      const std::size_t take = std::min(n, len_ - pos_);
      pos_ += take;
      n -= take;
    }
    return Status::Ok();
  }
  int fd_ = -1;
  std::vector<char> buf_ = std::vector<char>(1 << 20);
  std::size_t pos_ = 0, len_ = 0;
};

// LMCache's remote-server protocol (kvdepotd's lm:// listener,
// protocol/include/kvdepot/protocol/lm_wire.h), as LMCache's client drives it: PUT is the 186-byte
// header and the payload, with no reply (a batch ends with a HEALTH whose reply says the PUTs
// before it were handled); GET reads the 36-byte reply and the payload into a buffer the connection
// reuses.
class LmBackend : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> Connect(const std::string& addr) {
    KVD_ASSIGN_OR_RETURN(int fd, ConnectTcp(addr, "--lm"));
    auto b = std::make_unique<LmBackend>();
    b->fd_ = fd;
    return std::unique_ptr<Backend>(std::move(b));
  }
  ~LmBackend() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void PrepareReceive(std::size_t value_size, bool huge_pages) override {
    PrepareBuffer(buffer_, value_size, huge_pages);
  }
  Status Batch(BenchOp op, const std::vector<const std::string*>& keys,
               std::span<const std::byte> value) override {
    if (op != BenchOp::kPut && op != BenchOp::kGet) return UsageError("--lm runs put or get");
    std::vector<std::array<std::byte, lm::kRequestHeaderBytes>> heads;
    heads.reserve(keys.size() + 1);
    std::vector<iovec> iov;
    for (const std::string* key : keys) {
      heads.push_back(Header(op == BenchOp::kPut ? lm::kCommandPut : lm::kCommandGet, *key,
                             op == BenchOp::kPut ? value.size() : 0));
      iov.push_back({heads.back().data(), heads.back().size()});
      if (op == BenchOp::kPut) iov.push_back({const_cast<std::byte*>(value.data()), value.size()});
    }
    if (op == BenchOp::kPut) {
      heads.push_back(Header(lm::kCommandHealth, "", 0));
      iov.push_back({heads.back().data(), heads.back().size()});
    }
    KVD_RETURN_IF_ERROR(SendAllIov(fd_, iov, "lm write"));
    const std::size_t replies = op == BenchOp::kPut ? 1 : keys.size();
    for (std::size_t i = 0; i < replies; ++i) {
      std::byte reply[lm::kReplyHeaderBytes];
      KVD_RETURN_IF_ERROR(RecvExact(fd_, reply, sizeof(reply), "lm read"));
      const auto code = static_cast<std::int32_t>(LoadLE<std::uint32_t>(reply));
      const auto length = static_cast<std::int32_t>(LoadLE<std::uint32_t>(reply + 4));
      if (code != lm::kReplySuccess) return Unavailable("lm:// answered " + std::to_string(code));
      if (op != BenchOp::kGet) continue;
      if (length < 0 || static_cast<std::size_t>(length) != value.size()) {
        return Corruption("lm:// returned " + std::to_string(length) + " bytes");
      }
      if (buffer_.size() != value.size()) buffer_.resize(value.size());
      KVD_RETURN_IF_ERROR(RecvExact(fd_, buffer_.data(), buffer_.size(), "lm read"));
    }
    return Status::Ok();
  }

 private:
  static std::array<std::byte, lm::kRequestHeaderBytes> Header(std::int32_t command,
                                                               const std::string& key,
                                                               std::size_t length) {
    // command, length, fmt, dtype, location, shape[4], then the key padded with spaces; the
    // metadata is what LMCache sends for a float16 KV chunk.
    const std::int32_t fields[9] = {
        command, static_cast<std::int32_t>(length),        1, 3, 0, 2, 32,
        256,     static_cast<std::int32_t>(length / 32768)};
    std::array<std::byte, lm::kRequestHeaderBytes> h;
    for (std::size_t i = 0; i < 9; ++i) {
      StoreLE<std::uint32_t>(h.data() + 4 * i, static_cast<std::uint32_t>(fields[i]));
    }
    std::memset(h.data() + 36, ' ', lm::kWireKeyBytes);
    std::memcpy(h.data() + 36, key.data(), std::min(key.size(), lm::kWireKeyBytes));
    return h;
  }
  int fd_ = -1;
  std::vector<std::byte> buffer_;
};

using Connector = std::function<Result<std::unique_ptr<Backend>>(const std::string&)>;

// Minor page faults of process `pid` so far (field 10 of /proc/PID/stat), or nullopt.
std::optional<std::uint64_t> MinorFaultsOf(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos || close + 2 > stat.size()) return std::nullopt;
  std::istringstream fields(stat.substr(close + 2));  // from field 3, the state
  std::string field;
  for (int i = 3; i <= 10 && fields >> field; ++i) {
    if (i == 10) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return std::nullopt;
}

std::uint64_t OwnMinorFaults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_minflt);
}

// The run's keys under cfg.key_prefix.
std::vector<std::string> BenchKeys(const BenchConfig& cfg) {
  std::vector<std::string> keys;
  for (std::uint32_t i = 0; i < cfg.keys; ++i) {
    // Chunk-shaped: the 16-byte namespace, then the index in a 32-byte "chain value".
    keys.push_back(cfg.chunk_keys ? cfg.key_prefix + std::to_string(i) +
                                        std::string(32 - std::to_string(i).size(), '.')
                                  : cfg.key_prefix + std::to_string(i));
  }
  return keys;
}

// A fresh throwaway prefix, so that a run never touches keys it did not write.
std::string ThrowawayPrefix(bool chunk_keys) {
  std::random_device rd;
  char random[9];
  std::snprintf(random, sizeof(random), "%08x", static_cast<unsigned>(rd()));
  if (chunk_keys) return std::string("kvbench-") + random;  // 16 bytes: a namespace id
  return "kvdepot-bench-" + std::to_string(::getpid()) + "-" + random + "/";
}

// Deletes a run's keys from where it wrote them; how many were there.
using Cleanup = std::function<Result<std::uint64_t>(const std::vector<std::string>& keys)>;

BenchResult RunTimed(const std::string& target, const std::string& addr, Connector connect,
                     const BenchConfig& cfg, std::optional<int> daemon_pid,
                     const std::vector<std::string>& keys) {
  BenchResult result;
  result.target = target;
  // The value PUT by every connection (and compared with GET's size): like the receive buffers,
  // on huge pages unless --no-huge-pages.
  std::vector<std::byte> value;
  PrepareBuffer(value, cfg.value_size, cfg.huge_pages);
  std::mt19937_64 fill(1);
  for (auto& b : value) b = static_cast<std::byte>(fill());
  {  // preload every key (GET and LOOKUP hit)
    auto b = connect(addr);
    if (!b.ok()) {
      result.error = b.status().message();
      return result;
    }
    for (const auto& k : keys) {
      if (Status s = (*b)->Batch(BenchOp::kPut, {&k}, value); !s.ok()) {
        result.error = "preload: " + s.message();
        return result;
      }
    }
  }
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> ops{0};
  std::mutex mu;
  std::string first_error;
  std::vector<std::uint64_t> all_latencies;
  // Every connection is opened and its receive buffer prepared before the clock starts.
  std::latch ready(cfg.connections), go(1);
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < cfg.connections; ++t) {
    threads.emplace_back([&, t] {
      auto backend = connect(addr);
      if (backend.ok()) (*backend)->PrepareReceive(cfg.value_size, cfg.huge_pages);
      ready.count_down();
      go.wait();
      std::vector<std::uint64_t> lat;
      std::mt19937 rng(t + 1);
      std::vector<const std::string*> batch(cfg.pipeline);
      Status status = backend.status();
      while (status.ok() && !stop.load(std::memory_order_relaxed)) {
        for (auto& k : batch) k = &keys[rng() % keys.size()];
        BenchOp op = cfg.op;
        if (op == BenchOp::kMixed) {
          const unsigned draw = rng() % 10;
          op = draw < 2 ? BenchOp::kPut : draw < 7 ? BenchOp::kGet : BenchOp::kLookup;
        }
        const auto t0 = Clock::now();
        status = (*backend)->Batch(op, batch, value);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0);
        for (std::size_t i = 0; i < batch.size(); ++i)
          lat.push_back(static_cast<std::uint64_t>(ns.count()));
        ops += batch.size();
      }
      std::lock_guard lock(mu);
      if (!status.ok() && first_error.empty()) first_error = status.message();
      all_latencies.insert(all_latencies.end(), lat.begin(), lat.end());
    });
  }
  ready.wait();
  const std::optional<std::uint64_t> daemon_faults_before =
      daemon_pid ? MinorFaultsOf(*daemon_pid) : std::nullopt;
  const std::uint64_t own_faults_before = OwnMinorFaults();
  const auto start = Clock::now();
  go.count_down();
  const bool tty = cfg.progress && cfg.progress_tty;
  while (true) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (elapsed >= cfg.duration_s) break;
    {
      std::lock_guard lock(mu);
      if (!first_error.empty()) break;
    }
    if (tty) {
      const int width = 30;
      const int done = static_cast<int>(width * elapsed / cfg.duration_s);
      std::fprintf(stderr, "\r%-8s [%s%s] %4.1f/%.1f s  %llu ops  %.2f GB/s ", target.c_str(),
                   std::string(done, '=').c_str(), std::string(width - done, ' ').c_str(), elapsed,
                   cfg.duration_s, static_cast<unsigned long long>(ops.load()),
                   ops.load() * static_cast<double>(cfg.value_size) / elapsed / 1e9);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  stop = true;
  for (auto& th : threads) th.join();
  if (tty) std::fprintf(stderr, "\r%*s\r", 90, "");
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.client_minor_faults = OwnMinorFaults() - own_faults_before;
  if (daemon_faults_before) {
    if (const auto after = MinorFaultsOf(*daemon_pid)) {
      result.daemon_minor_faults = *after - *daemon_faults_before;
    }
  }
  result.ops = ops.load();
  result.error = first_error;
  std::sort(all_latencies.begin(), all_latencies.end());
  result.latencies_ns = std::move(all_latencies);
  return result;
}

// One target's run, then its keys deleted (also after a failed run: the preload may have
// stored some).
BenchResult RunOne(const std::string& target, const std::string& addr, Connector connect,
                   const Cleanup& cleanup, const BenchConfig& cfg, std::optional<int> daemon_pid) {
  const std::vector<std::string> keys = BenchKeys(cfg);
  BenchResult result = RunTimed(target, addr, std::move(connect), cfg, daemon_pid, keys);
  auto removed = cleanup(keys);
  if (removed.ok()) {
    result.keys_removed = *removed;
  } else {
    result.cleanup_error = removed.status().message();
  }
  return result;
}

// The daemon's minor page faults per GiB of values moved in the timed run.
double FaultsPerGiB(const BenchResult& r, const BenchConfig& cfg) {
  const double gib = static_cast<double>(r.ops) * static_cast<double>(cfg.value_size) /
                     static_cast<double>(1ull << 30);
  return gib > 0 ? static_cast<double>(r.daemon_minor_faults.value_or(0)) / gib : 0;
}

// Each connection is a descriptor (and a thread): raise the soft open-file limit to the hard one.
static void RaiseFileLimit(Io io, std::uint32_t connections) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur < connections + 64) {
    io.err << "kvdepot bench: open file limit " << lim.rlim_cur << " is low for " << connections
           << " connections\n";
  }
}

}  // namespace

Status RunBench(const client::ClientOptions& remote, std::span<const char* const> argv, Io io,
                const Terminals& terminals) {
  KVD_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, FlagsOf("bench")));
  KVD_RETURN_IF_ERROR(args.ExpectPositional({}));
  BenchConfig cfg;
  const std::string op = args.Get("--op").value_or("get");
  if (op == "get")
    cfg.op = BenchOp::kGet;
  else if (op == "put")
    cfg.op = BenchOp::kPut;
  else if (op == "lookup")
    cfg.op = BenchOp::kLookup;
  else if (op == "mixed")
    cfg.op = BenchOp::kMixed;
  else
    return UsageError("--op must be get, put, lookup or mixed");
  KVD_ASSIGN_OR_RETURN(std::uint64_t conns, args.GetUint("--connections", 1, 1, 8192));
  cfg.connections = static_cast<std::uint32_t>(conns);
  RaiseFileLimit(io, cfg.connections);
  if (const auto size = args.Get("--value-size")) {
    std::uint64_t mul = 1;
    std::string digits = *size;
    for (const auto& [suffix, m] : {std::pair<const char*, std::uint64_t>{"MiB", 1 << 20},
                                    {"KiB", 1 << 10},
                                    {"M", 1 << 20},
                                    {"K", 1 << 10}}) {
      const std::string sfx = suffix;
      if (digits.size() > sfx.size() &&
          digits.compare(digits.size() - sfx.size(), sfx.size(), sfx) == 0) {
        digits.resize(digits.size() - sfx.size());
        mul = m;
        break;
      }
    }
    char* end = nullptr;
    const unsigned long long n = std::strtoull(digits.c_str(), &end, 10);
    if (digits.empty() || *end != '\0' || n == 0 || n * mul > (1ull << 30)) {
      return UsageError("--value-size expects e.g. 4096, 64KiB or 8MiB (at most 1024MiB)");
    }
    cfg.value_size = n * mul;
  }
  KVD_ASSIGN_OR_RETURN(std::uint64_t keys, args.GetUint("--keys", 64, 1, 1000000));
  cfg.keys = static_cast<std::uint32_t>(keys);
  KVD_ASSIGN_OR_RETURN(std::uint64_t duration, args.GetUint("--duration", 5, 1, 3600));
  cfg.duration_s = static_cast<double>(duration);
  KVD_ASSIGN_OR_RETURN(std::uint64_t depth, args.GetUint("--pipeline", 1, 1, 1024));
  cfg.pipeline = static_cast<std::uint32_t>(depth);
  cfg.progress = !args.Has("--no-progress");
  cfg.progress_tty = terminals.stderr_is_terminal;
  cfg.huge_pages = !args.Has("--no-huge-pages");
  cfg.chunk_keys = args.Has("--chunk-keys");
  cfg.key_prefix = ThrowawayPrefix(cfg.chunk_keys);
  std::optional<int> daemon_pid;
  if (args.Get("--daemon-pid")) {
    KVD_ASSIGN_OR_RETURN(std::uint64_t pid, args.GetUint("--daemon-pid", 0, 1, 1u << 30));
    if (!MinorFaultsOf(static_cast<int>(pid))) {
      return UsageError("--daemon-pid " + std::to_string(pid) + ": cannot read /proc/" +
                        std::to_string(pid) + "/stat (is kvdepotd running on this host?)");
    }
    daemon_pid = static_cast<int>(pid);
  }
  const auto lm = args.Get("--lm");
  if (args.Has("--no-native") && !lm && !args.Get("--redis")) {
    return UsageError("--no-native leaves nothing to run: add --lm or --redis");
  }
  if (lm && cfg.op != BenchOp::kPut && cfg.op != BenchOp::kGet) {
    return UsageError("--lm runs --op put or --op get only");
  }

  // kvdepotd's keys (and lm://'s, stored under LMCache's default namespace id) are deleted
  // over the native protocol at ADDR; Redis's with DEL.
  const Cleanup native_cleanup =
      [&remote](const std::vector<std::string>& run_keys) -> Result<std::uint64_t> {
    KVD_ASSIGN_OR_RETURN(auto c, client::Connection::Connect(remote));
    return DeleteNative(*c, run_keys);
  };
  std::vector<BenchResult> results;
  if (!args.Has("--no-native")) {
    results.push_back(RunOne(
        "kvdepot", remote.address,
        [&remote](const std::string&) { return KvdepotBackend::Connect(remote); }, native_cleanup,
        cfg, daemon_pid));
  }
  if (lm) {
    const Cleanup lm_cleanup =
        [&](const std::vector<std::string>& run_keys) -> Result<std::uint64_t> {
      KVD_ASSIGN_OR_RETURN(const std::string ns, lm::NamespaceId(lm::kDefaultNamespace));
      std::vector<std::string> stored;
      for (const auto& k : run_keys) stored.push_back(ns + k);
      return native_cleanup(stored);
    };
    results.push_back(RunOne("lm", *lm, &LmBackend::Connect, lm_cleanup, cfg, daemon_pid));
  }
  if (const auto redis = args.Get("--redis")) {
    const Cleanup redis_cleanup =
        [&](const std::vector<std::string>& run_keys) -> Result<std::uint64_t> {
      KVD_ASSIGN_OR_RETURN(int fd, ConnectTcp(*redis, "--redis"));
      RedisBackend b;
      b.Adopt(fd);
      return b.Delete(run_keys);
    };
    results.push_back(
        RunOne("redis", *redis, &RedisBackend::Connect, redis_cleanup, cfg, std::nullopt));
  }
  // What a run could not delete, said where it cannot be missed.
  for (const auto& r : results) {
    if (r.cleanup_error.empty()) continue;
    io.err << "kvdepot bench: " << r.target << ": could not delete the run's keys under '"
           << KeyForDisplay(cfg.key_prefix) << "': " << r.cleanup_error
           << " (delete them with 'kvdepot del --prefix " << KeyForDisplay(cfg.key_prefix)
           << " --yes')\n";
  }
  if (args.Has("--json")) {
    Json json = Json::array();
    for (const auto& r : results) {
      Json one = {{"target", r.target},
                  {"op", op},
                  {"connections", cfg.connections},
                  {"pipeline", cfg.pipeline},
                  {"value_bytes", cfg.value_size},
                  {"ops", r.ops},
                  {"seconds", r.seconds},
                  {"ops_per_s", r.ops_per_s()},
                  {"gb_per_s", op == "lookup" ? 0 : r.ops_per_s() * cfg.value_size / 1e9},
                  {"p50_us", r.Percentile(0.5) / 1e3},
                  {"p99_us", r.Percentile(0.99) / 1e3},
                  {"p999_us", r.Percentile(0.999) / 1e3},
                  {"client_minor_faults", r.client_minor_faults}};
      if (r.daemon_minor_faults) {
        one["daemon_minor_faults"] = *r.daemon_minor_faults;
        one["daemon_minor_faults_per_gib"] = FaultsPerGiB(r, cfg);
      }
      one["key_prefix"] = KeyForDisplay(cfg.key_prefix);
      one["keys_removed"] = r.keys_removed;
      if (!r.cleanup_error.empty()) one["cleanup_error"] = r.cleanup_error;
      if (!r.error.empty()) one["error"] = r.error;
      json.push_back(std::move(one));
    }
    PrintJson(json, io.out);
  } else {
    io.out << op << ", " << cfg.connections << " connection(s), pipeline " << cfg.pipeline
           << ", values of " << cfg.value_size << " bytes, " << cfg.keys << " keys, "
           << cfg.duration_s << " s, key prefix " << KeyForDisplay(cfg.key_prefix)
           << " (deleted afterwards)\n";
    // Before the table, so that its rows stay the last lines (scripts take them with tail).
    io.out << "keys deleted afterwards:";
    for (const auto& r : results) io.out << " " << r.target << " " << r.keys_removed;
    io.out << "\n";
    io.out << std::left << std::setw(9) << "target" << std::right << std::setw(12) << "ops/s"
           << std::setw(10) << "GB/s" << std::setw(11) << "p50 us" << std::setw(11) << "p99 us"
           << std::setw(11) << "p999 us" << (daemon_pid ? "  daemon faults/GiB" : "") << "\n";
    for (const auto& r : results) {
      io.out << std::left << std::setw(9) << r.target << std::right << std::fixed
             << std::setprecision(0) << std::setw(12) << r.ops_per_s() << std::setprecision(3)
             << std::setw(10) << (op == "lookup" ? 0.0 : r.ops_per_s() * cfg.value_size / 1e9)
             << std::setprecision(1) << std::setw(11) << r.Percentile(0.5) / 1e3 << std::setw(11)
             << r.Percentile(0.99) / 1e3 << std::setw(11) << r.Percentile(0.999) / 1e3;
      if (r.daemon_minor_faults) io.out << std::setw(20) << FaultsPerGiB(r, cfg);
      io.out << "\n";
      if (!r.error.empty()) io.out << "  " << r.target << " error: " << r.error << "\n";
    }
  }
  for (const auto& r : results) {
    if (!r.error.empty()) return Unavailable(r.target + ": " + r.error);
  }
  return Status::Ok();
}

}  // namespace kvdepot::cli
