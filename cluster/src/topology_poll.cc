// Reading the members back from etcd into the views the node publishes (Current, Previous),
// skipping unreadable records (etcd_membership_impl.h).
#include <algorithm>

#include "etcd_membership_impl.h"

namespace kvdepot::cluster {
namespace {

constexpr auto kWarnEvery = std::chrono::minutes(1);

// The member fields whose change makes a new topology (`used` is not one).
bool SameMemberSet(const std::vector<Member>& a, const std::vector<Member>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    Member x = a[i];
    Member y = b[i];
    x.used_bytes = y.used_bytes = 0;
    if (!(x == y)) return false;
  }
  return true;
}

std::string IdList(const std::vector<std::string>& ids) {
  std::string out;
  for (const std::string& id : ids) out += (out.empty() ? "" : ",") + id;
  return out.empty() ? "-" : out;
}

}  // namespace

void EtcdMembership::Impl::Poll() {
  auto range = client_.RangePrefix(prefix_);
  NoteEtcd(range.status());
  if (!range.ok()) return;
  const Clock::time_point now = Clock::now();
  std::vector<Member> members;
  std::uint64_t corrupt = 0;
  std::uint64_t mismatched = 0;
  for (const EtcdKeyValue& kv : range->kvs) {
    auto record = DecodeMemberRecord(kv.key, kv.value);
    if (!record.ok()) {
      ++corrupt;
      if (WarnAllowed(kv.key, now)) {
        Log(MembershipLogLevel::kWarn, "skipping a member record that cannot be read",
            {{"key", kv.key}, {"error", record.status().message()}});
      }
      continue;
    }
    if (!(record->placement == options_.placement)) {
      ++mismatched;
      if (WarnAllowed("placement:" + kv.key, now)) {
        Log(MembershipLogLevel::kError,
            "a member advertises other placement options than this node: requests may miss "
            "until cluster.replicas and cluster.group_chunks agree on every node",
            {{"key", kv.key},
             {"its_replicas", std::to_string(record->placement.replicas)},
             {"its_group_chunks", std::to_string(record->placement.group_chunks)},
             {"our_replicas", std::to_string(options_.placement.replicas)},
             {"our_group_chunks", std::to_string(options_.placement.group_chunks)}});
      }
    }
    members.push_back(std::move(record->member));
  }
  std::sort(members.begin(), members.end(),
            [](const Member& a, const Member& b) { return a.id < b.id; });
  std::vector<std::string> joined;
  std::vector<std::string> left;
  std::int64_t revision = 0;
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    stats_.corrupt_records += corrupt;
    stats_.placement_mismatches += mismatched;
    polled_ = members;
    changed = !have_view_ || !SameMemberSet(members, current_->members());
    if (changed) {
      for (const Member& m : members) {
        if (current_->Find(m.id) == nullptr) joined.push_back(m.id);
      }
      for (const Member& m : current_->members()) {
        if (!std::binary_search(members.begin(), members.end(), m,
                                [](const Member& a, const Member& b) { return a.id < b.id; })) {
          left.push_back(m.id);
        }
      }
      if (have_view_) {
        previous_ = current_;
        previous_until_ = now + options_.handoff_grace;
        ++stats_.membership_changes;
      } else if (auto before = ViewBeforeJoining(members, range->revision); !before->empty()) {
        // This node's first view: until it joined, the others owned its keys, so a miss here
        // asks them during the grace period, as after any membership change (hand-off).
        previous_ = std::move(before);
        previous_until_ = now + options_.handoff_grace;
      }
      have_view_ = true;
      current_ =
          std::make_shared<const Topology>(range->revision, std::move(members), options_.placement);
      revision = range->revision;
    }
  }
  if (changed) {
    Log(MembershipLogLevel::kInfo, "cluster topology",
        {{"revision", std::to_string(revision)},
         {"members", std::to_string(Current()->members().size())},
         {"joined", IdList(joined)},
         {"left", IdList(left)}});
  }
}

std::shared_ptr<const Topology> EtcdMembership::Impl::ViewBeforeJoining(
    const std::vector<Member>& members, std::int64_t revision) const {
  std::vector<Member> others;
  for (const Member& m : members) {
    if (m.id != options_.self.id) others.push_back(m);
  }
  return std::make_shared<const Topology>(revision, std::move(others), options_.placement);
}

bool EtcdMembership::Impl::WarnAllowed(const std::string& what, Clock::time_point now) {
  auto [it, inserted] = warned_.try_emplace(what, now);
  if (inserted) return true;
  if (now - it->second < kWarnEvery) return false;
  it->second = now;
  return true;
}

}  // namespace kvdepot::cluster
