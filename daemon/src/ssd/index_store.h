// The SSD tier's persistent index: chunk key -> Location, in RocksDB (docs/durability.md).
//
// Thread-safety: Apply/Sync/Flush/ForEach may be called concurrently (RocksDB serializes them);
// each call blocks on disk, so callers are the tier's own threads, never network threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/status.h"
#include "ssd/record.h"

namespace rocksdb {
class DB;
}

namespace kvdepot::daemon::ssd {

struct IndexChange {
  std::string key;
  std::optional<Location> location;  // nullopt: delete
};

class IndexStore {
 public:
  // Opens or creates the index in `path`. With `log` false writes skip RocksDB's write-ahead log
  // (durability none: only Flush() persists them).
  static Result<std::unique_ptr<IndexStore>> Open(const std::string& path, bool log);
  ~IndexStore();

  // Every entry, in key order; entries that do not decode are reported as nullopt.
  Status ForEach(const std::function<void(std::string_view key,
                                          const Result<Location>& location)>& fn) const;
  // One atomic batch; with `sync` it is on stable storage when this returns.
  Status Apply(const std::vector<IndexChange>& changes, bool sync);
  Status SyncLog();  // makes every logged change durable
  Status Flush();    // writes the memtable to SST files (and so persists unlogged changes)

 private:
  IndexStore(std::unique_ptr<rocksdb::DB> db, bool log);
  std::unique_ptr<rocksdb::DB> db_;
  bool log_;
};

}  // namespace kvdepot::daemon::ssd
