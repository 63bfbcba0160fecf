#include "ssd/index_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

namespace kvdepot::daemon::ssd {
namespace {

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  const std::string message = "ssd index: " + what + ": " + s.ToString();
  if (s.IsNoSpace()) return ResourceExhausted(message);
  if (s.IsCorruption()) return Corruption(message);
  if (s.IsIOError()) return IOError(message);
  return Internal(message);
}

}  // namespace

IndexStore::IndexStore(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}

IndexStore::~IndexStore() {
  if (db_) (void)db_->Close();
}

Result<std::unique_ptr<IndexStore>> IndexStore::Open(const std::string& path) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 4;
  options.max_log_file_size = 4 << 20;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, path, &raw);
  if (!s.ok()) return FromRocks(s, "opening " + path);
  return std::unique_ptr<IndexStore>(new IndexStore(std::unique_ptr<rocksdb::DB>(raw)));
}

Status IndexStore::ForEach(
    const std::function<void(std::string_view, const Result<Location>&)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key(), v = it->value();
    fn(std::string_view(k.data(), k.size()),
       DecodeIndexEntry(std::string_view(v.data(), v.size())));
  }
  return FromRocks(it->status(), "scanning");
}

Status IndexStore::Apply(const std::vector<IndexChange>& changes) {
  if (changes.empty()) return Status::Ok();
  rocksdb::WriteBatch batch;
  for (const IndexChange& c : changes) {
    if (c.location) {
      batch.Put(c.key, EncodeIndexEntry(*c.location));
    } else {
      batch.Delete(c.key);
    }
  }
  // Never synced here: a synced write would make every concurrent writer (a network thread
  // applying a delete) wait for the fsync. SyncLog() syncs separately.
  rocksdb::WriteOptions wo;
  wo.sync = false;
  return FromRocks(db_->Write(wo, &batch),
                   "writing " + std::to_string(changes.size()) + " entries");
}

Status IndexStore::SyncLog() {
  return FromRocks(db_->SyncWAL(), "syncing the log");
}

Status IndexStore::Flush() {
  return FromRocks(db_->Flush(rocksdb::FlushOptions()), "flushing");
}

}  // namespace kvdepot::daemon::ssd
