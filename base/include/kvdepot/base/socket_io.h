// Blocking socket writes, shared by the client library and the CLI's Redis load generator.
#pragma once

#include <sys/uio.h>

#include <vector>

#include "kvdepot/base/status.h"

namespace kvdepot {

// Writes every byte of `iov` (modified in place) to the socket `fd` with sendmsg (no SIGPIPE),
// retrying partial writes and EINTR. Errors name `what`.
Status SendAllIov(int fd, std::vector<iovec>& iov, const char* what);

}  // namespace kvdepot
