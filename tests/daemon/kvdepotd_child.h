// kvdepotd as a child process, for the SSD tier's crash, restart and resurrection tests: started
// on a Unix socket only (no TCP, no metrics port), logging to DIR/daemon.log, stopped with SIGKILL
// or SIGTERM. KVDEPOTD_PATH is defined by tests/daemon/CMakeLists.txt.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../common/random_bytes.h"
#include "kvdepot/client/client.h"

namespace kvdepot::test {

// A value that is a pure function of its key (and a version), 4 KiB to `max_bytes` long, so that
// any value served can be checked without remembering it.
inline std::vector<std::byte> ValueFor(const std::string& key, std::size_t max_bytes,
                                       std::uint32_t version = 0) {
  const std::uint64_t seed = std::hash<std::string>{}(key)*31 + version;
  return RandomBytes(4096 + seed % (max_bytes - 4096 + 1), seed);
}

// The number after "field": in the "ssd" object of a STATS document; 0 when absent.
inline std::uint64_t SsdStat(const std::string& stats_json, std::string_view field) {
  const std::size_t ssd = stats_json.find("\"ssd\":{");
  if (ssd == std::string::npos) return 0;
  const std::string needle = "\"" + std::string(field) + "\":";
  const std::size_t at = stats_json.find(needle, ssd);
  if (at == std::string::npos) return 0;
  return std::strtoull(stats_json.c_str() + at + needle.size(), nullptr, 10);
}

// Sum of the sizes of the segment files in an SSD tier directory.
inline std::uint64_t SegmentBytesOnDisk(const std::filesystem::path& ssd_dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(ssd_dir / "segments", ec)) {
    total += std::filesystem::file_size(f.path(), ec);
  }
  return total;
}

class KvdepotdChild {
 public:
  // Starts kvdepotd with `args` after the listener flags.
  KvdepotdChild(const std::filesystem::path& dir, std::string socket,
                const std::vector<std::string>& args)
      : socket_(std::move(socket)) {
    // Everything the child needs is built before fork(): the test process may have threads.
    std::vector<std::string> argv_s = {"kvdepotd", "--listen", "",           "--metrics-listen", "",
                                       "--unix",   socket_,    "--data-dir", dir.string()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int log =
        ::open((dir / "daemon.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {
      if (log >= 0) ::dup2(log, STDERR_FILENO);
      ::execv(KVDEPOTD_PATH, argv.data());
      _exit(127);
    }
    if (log >= 0) ::close(log);
  }
  ~KvdepotdChild() { Kill(); }
  KvdepotdChild(const KvdepotdChild&) = delete;
  KvdepotdChild& operator=(const KvdepotdChild&) = delete;

  client::ClientOptions Options(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const {
    client::ClientOptions o;
    o.address = "unix:" + socket_;
    o.timeout = timeout;
    o.token = token_;
    return o;
  }
  // The AUTH token Options() carries (a daemon started with auth.token_file); "" = none.
  void set_token(std::string token) { token_ = std::move(token); }

  // Waits (at most 5 s) until the daemon answers PING; false when it exited or did not answer.
  bool WaitReady() {
    for (int i = 0; i < 500; ++i) {
      if (auto c = client::Connection::Connect(Options(std::chrono::milliseconds(2000)));
          c.ok() && (*c)->Ping().ok()) {
        return true;
      }
      if (Exited()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  pid_t pid() const { return pid_; }  // -1 once it has been waited for

  // Waits (at most `limit`) for the daemon to exit on its own; its exit status (-1 when a signal
  // ended it), or nullopt when it still runs.
  std::optional<int> WaitExit(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (pid_ > 0) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      if (std::chrono::steady_clock::now() > end) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // SIGTERM, then waits (at most 20 s) for the daemon to exit; true when it exited with status 0.
  // A daemon that does not exit in time is killed.
  bool Stop() {
    if (pid_ <= 0) return false;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 2000; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Kill();
    return false;
  }

 private:
  bool Exited() {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = -1;
    return true;
  }

  std::string socket_;
  pid_t pid_ = -1;
  std::string token_;
};

// A fresh directory under the system's temporary directory, removed at the end.
class TempTestDir {
 public:
  explicit TempTestDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              (name + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempTestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace kvdepot::test
