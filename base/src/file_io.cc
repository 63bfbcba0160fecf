#include "kvdepot/base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

namespace kvdepot {
namespace {

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace

Result<std::vector<std::byte>> ReadFile(const std::string& path, std::uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return StatusFromErrno(errno, path);
  FdCloser closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return StatusFromErrno(errno, path);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes) {
    return OutOfRange(path + ": file is " + std::to_string(size) + " bytes, over the limit of " +
                      std::to_string(max_bytes));
  }
  std::vector<std::byte> bytes(size);
  std::uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, bytes.data() + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return StatusFromErrno(errno, path);
    }
    if (n == 0) return IOError(path + ": file shrank while being read");
    done += static_cast<std::uint64_t>(n);
  }
  return bytes;
}

Status WriteFileAtomic(const std::string& path, std::span<const std::byte> bytes) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return StatusFromErrno(errno, path + ": cannot create a temporary file");
  FdCloser closer(fd);
  auto fail = [&](int err, const char* what) {
    ::unlink(tmp.c_str());
    return StatusFromErrno(err, path + ": " + what);
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno, "write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) return fail(errno, "chmod");
  if (::fsync(fd) != 0) return fail(errno, "fsync");
  if (::close(closer.release()) != 0) return fail(errno, "close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(errno, "rename");
  return Status::Ok();
}

}  // namespace kvdepot
