// One kvdepotd per state directory: an exclusive flock on DIR/kvdepotd.pid, which holds the pid
// of the daemon that has it, for as long as the daemon runs. A second daemon on the same
// directory is refused with that pid instead of RocksDB's LOCK error.
#pragma once

#include <memory>
#include <string>

#include "kvdepot/base/status.h"

namespace kvdepot::daemon {

class DirectoryLock {
 public:
  // Locks `dir` (an existing directory) and writes this process's pid into its pid file.
  // kAlreadyExists when another process holds it: "another kvdepotd (pid N) uses this directory"
  // (the pid as the file holds it, when it can be read); kIOError when the file cannot be opened.
  static Result<std::unique_ptr<DirectoryLock>> Acquire(const std::string& dir);
  ~DirectoryLock();  // releases the lock (the file stays; its content is stale from then on)
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  static constexpr const char* kFileName = "kvdepotd.pid";

 private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace kvdepot::daemon
