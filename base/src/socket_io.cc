#include "kvdepot/base/socket_io.h"

#include <limits.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace kvdepot {

Status SendAllIov(int fd, std::vector<iovec>& iov, const char* what) {
  std::size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<std::size_t>(iov.size() - first, IOV_MAX);
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return StatusFromErrno(errno, what);
    }
    std::size_t left = static_cast<std::size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return Status::Ok();
}

}  // namespace kvdepot
