// A real etcd (/usr/bin/etcd, Debian's etcd-server 3.4) for the cluster tests: started on free
// loopback ports with a temporary data directory, stoppable and restartable on the same ports and
// data (an etcd outage), killed and removed at the end. Output goes to DIR/etcd.log.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kvdepot/cluster/etcd_client.h"

namespace kvdepot::test {

inline constexpr const char* kEtcdBinary = "/usr/bin/etcd";

inline bool EtcdInstalled() {
  return ::access(kEtcdBinary, X_OK) == 0;
}

// A loopback port that was free a moment ago (bound to port 0, then closed).
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class EtcdProcess {
 public:
  EtcdProcess() {
    char pattern[] = "/tmp/kvdepot-etcd-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    client_port_ = FreeLoopbackPort();
    peer_port_ = FreeLoopbackPort();
  }
  ~EtcdProcess() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(client_port_); }
  const std::filesystem::path& dir() const { return dir_; }

  // Starts etcd and waits (up to 10 s) until it answers a read; false when it does not.
  bool Start() {
    const std::string client = endpoint();
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    std::vector<std::string> args = {kEtcdBinary,
                                     "--name",
                                     "test",
                                     "--data-dir",
                                     (dir_ / "data").string(),
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     "test=" + peer,
                                     "--log-level",
                                     "warn",
                                     "--logger",
                                     "zap"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int log =
        ::open((dir_ / "etcd.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {
      if (log >= 0) {
        ::dup2(log, STDOUT_FILENO);
        ::dup2(log, STDERR_FILENO);
      }
      ::execv(kEtcdBinary, argv.data());
      _exit(127);
    }
    if (log >= 0) ::close(log);
    auto probe = cluster::EtcdClient::Create(client, std::chrono::milliseconds(200));
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      if (probe->Get("/probe").ok()) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Stops etcd (SIGTERM, then SIGKILL after 5 s) and waits for it.
  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
  }

  bool running() const { return pid_ > 0; }

 private:
  std::filesystem::path dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvdepot::test
