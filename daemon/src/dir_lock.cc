#include "dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace kvdepot::daemon {
namespace {

// The pid the file holds (at most a line), or "" when it cannot be read.
std::string ReadPid(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return "";
  std::string pid(text, static_cast<std::size_t>(n));
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.find_first_not_of("0123456789") == std::string::npos ? pid : "";
}

}  // namespace

Result<std::unique_ptr<DirectoryLock>> DirectoryLock::Acquire(const std::string& dir) {
  const std::string path = dir + "/" + kFileName;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return StatusFromErrno(errno, "cannot open " + path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = ReadPid(fd);
    ::close(fd);
    if (err != EWOULDBLOCK) return StatusFromErrno(err, "cannot lock " + path);
    return Status(StatusCode::kAlreadyExists,
                  "another kvdepotd" + (pid.empty() ? std::string() : " (pid " + pid + ")") +
                      " uses this directory (it holds the lock on " + path +
                      "); stop it, or give this daemon another directory");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    const int err = errno;
    ::close(fd);
    return StatusFromErrno(err, "cannot write " + path);
  }
  return std::unique_ptr<DirectoryLock>(new DirectoryLock(fd));
}

DirectoryLock::~DirectoryLock() {
  ::close(fd_);
}

}  // namespace kvdepot::daemon
