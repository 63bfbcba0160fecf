// The SSD tier's persistent index: chunk key -> Location, in RocksDB (docs/durability.md).
//
// Every change goes through RocksDB's write-ahead log, so once Apply() returns it survives the
// process being killed (the log is in the kernel's page cache); SyncLog() makes it survive a
// power loss as well.
//
// Thread-safety: every method may be called concurrently (RocksDB serializes them). Apply() only
// appends to the log (no sync): it may run on a network thread. SyncLog(), Flush() and ForEach()
// wait for the disk and are called by the tier's own threads only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvdepot/base/status.h"
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
  // Opens or creates the index in `path`.
  static Result<std::unique_ptr<IndexStore>> Open(const std::string& path);
  ~IndexStore();

  // Every entry, in key order; entries that do not decode are reported as nullopt.
  Status ForEach(
      const std::function<void(std::string_view key, const Result<Location>& location)>& fn) const;
  // One atomic batch, logged (not synced) when this returns.
  Status Apply(const std::vector<IndexChange>& changes);
  Status SyncLog();  // puts every change applied so far on stable storage
  Status Flush();    // writes the memtable to SST files (a shorter log to replay at the next open)

 private:
  explicit IndexStore(std::unique_ptr<rocksdb::DB> db);
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace kvdepot::daemon::ssd
