#include "unix_socket.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace kvdepot::daemon {

Status ClaimUnixSocketPath(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return Status::Ok();
  sockaddr_un sa{};
  if (path.size() >= sizeof(sa.sun_path)) return Status::Ok();  // bind() reports it
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return StatusFromErrno(errno, "socket");
  const bool answered = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  const int err = errno;
  ::close(fd);
  if (answered) {
    return Status(
        StatusCode::kAlreadyExists,
        "a running process accepts connections on this socket (another kvdepotd?); stop it, "
        "or give this daemon another socket path");
  }
  // ECONNREFUSED: nobody listens (a stale socket). Any other error (e.g. EACCES) is left for
  // bind() to report with its own cause.
  if (err == ECONNREFUSED) ::unlink(path.c_str());
  return Status::Ok();
}

Status SetUnixSocketAccess(const std::string& path, std::uint32_t mode, const std::string& group,
                           ino_t* inode) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return StatusFromErrno(errno, path);
  *inode = st.st_ino;  // first: a failure below still leaves the file to remove at Stop
  if (!group.empty()) {
    struct group entry {};
    struct group* found = nullptr;
    std::vector<char> buffer(16384);
    const int rc = ::getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (found == nullptr) {
      return Unavailable(
          "unix_group " + group + ": " +
          (rc != 0 ? std::string(std::strerror(rc)) : std::string("no such group on this host")));
    }
    if (::chown(path.c_str(), static_cast<uid_t>(-1), entry.gr_gid) != 0) {
      return Unavailable(
          "unix_group " + group + ": cannot give the socket this group: " + std::strerror(errno) +
          " (kvdepotd must be a member of it: under systemd add SupplementaryGroups=" + group +
          " to the unit, docs/operations.md)");
    }
  }
  if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0) {
    return Unavailable("unix_mode: cannot set the socket's mode: " +
                       std::string(std::strerror(errno)));
  }
  return Status::Ok();
}

void RemoveOwnUnixSocket(const std::string& path, ino_t inode) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == inode) {
    ::unlink(path.c_str());
  }
}

}  // namespace kvdepot::daemon
