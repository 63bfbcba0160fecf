// The native listener's Unix socket file: claimed only when no live process answers on it, given
// the configured mode and group, and removed at exit only while it is still this process's.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "kvdepot/base/status.h"

namespace kvdepot::daemon {

// Makes `path` free for bind(): a socket file nobody answers on (left by a process that died) is
// removed; kAlreadyExists when a process accepts connections on it (e.g. another kvdepotd,
// whose socket must not be taken over). Nothing to do when `path` does not exist; any other file
// is left for bind() to refuse.
Status ClaimUnixSocketPath(const std::string& path);

// Gives the bound socket at `path` permission bits `mode` (e.g. 0660: connecting needs write
// permission) and, when `group` is not empty, that group (this process must be a member, e.g.
// through the systemd unit's SupplementaryGroups=). Errors start with "unix_mode" or
// "unix_group" and name the cause. *inode is set to the socket file's inode first (even when
// setting the mode or group fails), so the caller can remove it.
Status SetUnixSocketAccess(const std::string& path, std::uint32_t mode, const std::string& group,
                           ino_t* inode);

// Removes `path` only when it is still the socket file with `inode` (a later process may have
// replaced it: its socket is not ours to remove).
void RemoveOwnUnixSocket(const std::string& path, ino_t inode);

}  // namespace kvdepot::daemon
