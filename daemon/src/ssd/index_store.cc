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

IndexStore::IndexStore(std::unique_ptr<rocksdb::DB> db, bool log)
    : db_(std::move(db)), log_(log) {}

IndexStore::~IndexStore() {
  if (db_) (void)db_->Close();
}

Result<std::unique_ptr<IndexStore>> IndexStore::Open(const std::string& path, bool log) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 4;
  options.max_log_file_size = 4 << 20;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, path, &raw);
  if (!s.ok()) return FromRocks(s, "opening " + path);
  return std::unique_ptr<IndexStore>(new IndexStore(std::unique_ptr<rocksdb::DB>(raw), log));
}

Status IndexStore::ForEach(
    const std::function<void(std::string_view, const Result<Location>&)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key(), v = it->value();
    fn(std::string_view(k.data(), k.size()), DecodeIndexEntry(std::string_view(v.data(),
                                                                               v.size())));
  }
  return FromRocks(it->status(), "scanning");
}

Status IndexStore::Apply(const std::vector<IndexChange>& changes, bool sync) {
  if (changes.empty()) return Status::Ok();
  rocksdb::WriteBatch batch;
  for (const IndexChange& c : changes) {
    if (c.location) {
      batch.Put(c.key, EncodeIndexEntry(*c.location));
    } else {
      batch.Delete(c.key);
    }
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync && log_;
  wo.disableWAL = !log_;
  return FromRocks(db_->Write(wo, &batch), "writing " + std::to_string(changes.size()) +
                                               " entries");
}

Status IndexStore::SyncLog() { return log_ ? FromRocks(db_->SyncWAL(), "syncing the log") : Status::Ok(); }

Status IndexStore::Flush() { return FromRocks(db_->Flush(rocksdb::FlushOptions()), "flushing"); }

}  // namespace kvdepot::daemon::ssd
