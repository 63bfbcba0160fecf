// config: the configuration loader as kvdepotd runs it at start and on SIGHUP (LoadConfig: the
// YAML file, then ValidateConfig), on a path whose file-system shape the first input byte picks:
// a regular file holding the rest of the input (most values), a symlink to that file, or a path
// that is no readable file (a directory, a dangling symlink, a FIFO, a path through a regular
// file, an over-long name). Contracts: errors carry a message; a path that is no readable file
// fails with "--config PATH: ..." (and never blocks: the FIFO has no writer); whatever
// configuration results, every effective value ConfigEntries reports is accepted back by
// ApplyConfigFlag and gives the same configuration.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz_targets.h"
#include "kvdepot/daemon/config.h"

namespace kvdepot::fuzz {
namespace {

namespace fs = std::filesystem;

// The paths each shape loads from, made once per process under a private temporary directory.
struct Paths {
  std::string root;      // the directory holding the others, removed at exit
  std::string file;      // a regular file, rewritten with the input
  std::string symlink;   // -> file
  std::string dir;       // a directory
  std::string dangling;  // a symlink to nothing
  std::string fifo;      // a FIFO nobody writes
  std::string not_dir;   // file/config.yaml: ENOTDIR
  std::string too_long;  // a 300-byte name: ENAMETOOLONG
};

// Never destroyed, so that the exit handler can still read it.
const Paths& MakePaths() {
  static const Paths& paths = *new Paths([] {
    const fs::path root =
        fs::temp_directory_path() / ("kvdepot-fuzz-config-" + std::to_string(::getpid()));
    std::error_code ec;
    fs::remove_all(root, ec);
    fs::create_directories(root / "dir", ec);
    Paths p;
    p.file = (root / "config.yaml").string();
    p.symlink = (root / "link.yaml").string();
    p.dir = (root / "dir").string();
    p.dangling = (root / "dangling.yaml").string();
    p.fifo = (root / "fifo.yaml").string();
    p.not_dir = p.file + "/config.yaml";
    p.too_long = (root / std::string(300, 'n')).string();
    fs::create_symlink(p.file, p.symlink, ec);
    fs::create_symlink(root / "nothing.yaml", p.dangling, ec);
    ::mkfifo(p.fifo.c_str(), 0600);
    p.root = root.string();
    std::atexit([] {
      std::error_code ignored;
      fs::remove_all(MakePaths().root, ignored);
    });
    return p;
  }());
  return paths;
}

}  // namespace

int FuzzConfig(const std::uint8_t* data, std::size_t size) {
  const Paths& paths = MakePaths();
  const std::uint8_t shape = size > 0 ? data[0] % 16 : 0;
  if (size > 0) {
    ++data;
    --size;
  }
  std::FILE* f = std::fopen(paths.file.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  const std::string* path = &paths.file;  // shapes 0-9
  bool readable = true;
  switch (shape) {
    case 10: path = &paths.symlink; break;
    case 11: path = &paths.dir, readable = false; break;
    case 12: path = &paths.dangling, readable = false; break;
    case 13: path = &paths.fifo, readable = false; break;
    case 14: path = &paths.not_dir, readable = false; break;
    case 15: path = &paths.too_long, readable = false; break;
    default: break;
  }
  daemon::Config config;
  const Status s = daemon::LoadConfig(*path, {}, config);
  if (!s.ok() && s.message().empty()) __builtin_trap();  // errors must say what is wrong
  if (!readable) {
    if (s.ok() || s.message().rfind("--config " + *path + ": ", 0) != 0) __builtin_trap();
    return 0;
  }
  // Whatever the loader applied before an error holds values its setters accepted.
  daemon::Config again;
  for (const auto& [key, value] : daemon::ConfigEntries(config)) {
    if (key.rfind("host.quotas.", 0) == 0) {
      if (!daemon::ApplyConfigFlag("host-quota", key.substr(12) + "=" + value, again).ok()) {
        __builtin_trap();
      }
      continue;
    }
    if (!daemon::ApplyConfigFlag(daemon::FlagOf(key).substr(2), value, again).ok()) {
      __builtin_trap();
    }
  }
  if (!daemon::ChangedKeys(config, again).empty()) __builtin_trap();
  return 0;
}

}  // namespace kvdepot::fuzz
