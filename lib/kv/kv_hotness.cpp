// KV hotness: the intrusive hot list and the LRU, CLOCK and 2Q victim policies
// (see kv_hotness.hpp).
#include "kv/kv_hotness.hpp"

#include <algorithm>
#include <utility>

namespace numarena {

const char* KvHotnessPolicyName(KvHotnessPolicy policy) {
  switch (policy) {
    case KvHotnessPolicy::kLru:
      return "lru";
    case KvHotnessPolicy::kClock:
      return "clock";
    case KvHotnessPolicy::kTwoQueue:
      return "2q";
  }
  return "unknown";
}

namespace kv {

void HotList::PushBack(std::uint32_t id) {
  HotMeta& m = meta_(id);
  m.prev = tail_;
  m.next = kNil;
  if (tail_ != kNil) {
    meta_(tail_).next = id;
  } else {
    head_ = id;
  }
  tail_ = id;
  ++size_;
}

void HotList::Remove(std::uint32_t id) {
  HotMeta& m = meta_(id);
  if (m.prev != kNil) {
    meta_(m.prev).next = m.next;
  } else {
    head_ = m.next;
  }
  if (m.next != kNil) {
    meta_(m.next).prev = m.prev;
  } else {
    tail_ = m.prev;
  }
  m.prev = m.next = kNil;
  --size_;
}

namespace {

// Looks at successive windows of up to ScanWindow(count) members from the front, each moved
// to the back afterwards, and lets `pick(window, wanted, chosen)` append victims from each,
// until `count` are chosen or every member was looked at once. One window when it holds
// enough eligible blocks; more only when, say, a run of pinned blocks fills the first (a
// search that came back short would tell the caller there is nothing to demote).
template <typename Pick>
void SearchWindows(HotList& list, std::size_t count, Pick pick, std::vector<std::uint32_t>& out) {
  const std::size_t total = list.size();
  std::vector<std::uint32_t> chosen, window;
  for (std::size_t seen = 0; chosen.size() < count && seen < total; seen += window.size()) {
    window.clear();
    const std::size_t limit = std::min(ScanWindow(count), total - seen);
    for (std::uint32_t id = list.front(); id != kNil && window.size() < limit; id = list.next(id))
      window.push_back(id);
    if (window.empty()) break;
    pick(window, count - chosen.size(), chosen);
    for (std::uint32_t id : window) list.MoveToBack(id);
  }
  out.insert(out.end(), chosen.begin(), chosen.end());
}

// Picks the `count` eligible members of `ids` with the smallest key, ties in `ids` order.
template <typename Key>
void SmallestKeys(const HotList& list, const std::vector<std::uint32_t>& ids, std::size_t count,
                  const std::function<bool(std::uint32_t)>& eligible, Key key,
                  std::vector<std::uint32_t>& out) {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> candidates;  // (key, position in ids)
  for (std::uint32_t i = 0; i < ids.size(); ++i)
    if (eligible(ids[i])) candidates.emplace_back(key(list.meta(ids[i])), i);
  const std::size_t n = std::min(count, candidates.size());
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(n),
                    candidates.end());
  for (std::size_t i = 0; i < n; ++i) out.push_back(ids[candidates[i].second]);
}

class LruPolicy final : public HotnessPolicy {
 public:
  void OnInsert(const HotList&, std::uint32_t) override {}
  void OnRemove(const HotList&, std::uint32_t, bool) override {}
  void SelectVictims(HotList& list, std::size_t count,
                     const std::function<bool(std::uint32_t)>& eligible,
                     std::vector<std::uint32_t>& out) override {
    SearchWindows(
        list, count,
        [&](const std::vector<std::uint32_t>& window, std::size_t wanted,
            std::vector<std::uint32_t>& chosen) {
          SmallestKeys(
              list, window, wanted, eligible,
              [](const HotMeta& m) { return m.last_access.load(std::memory_order_relaxed); },
              chosen);
        },
        out);
  }
};

class ClockPolicy final : public HotnessPolicy {
 public:
  void OnInsert(const HotList&, std::uint32_t) override {}
  void OnRemove(const HotList& list, std::uint32_t id, bool) override {
    if (hand_ == id) hand_ = list.next(id);
  }
  void SelectVictims(HotList& list, std::size_t count,
                     const std::function<bool(std::uint32_t)>& eligible,
                     std::vector<std::uint32_t>& out) override {
    if (list.size() == 0) return;
    absl::flat_hash_set<std::uint32_t> chosen;
    // Two full sweeps: the first may only clear reference bits.
    std::size_t steps = 2 * list.size() + 1;
    if (hand_ == kNil) hand_ = list.front();
    while (chosen.size() < count && steps-- > 0) {
      const std::uint32_t id = hand_;
      hand_ = list.next(id);
      if (hand_ == kNil) hand_ = list.front();
      if (chosen.contains(id) || !eligible(id)) continue;
      HotMeta& m = list.meta(id);
      if (m.referenced.load(std::memory_order_relaxed)) {
        m.referenced.store(false, std::memory_order_relaxed);
        continue;
      }
      chosen.insert(id);
      out.push_back(id);
    }
  }

 private:
  std::uint32_t hand_ = kNil;
};

class TwoQueuePolicy final : public HotnessPolicy {
 public:
  void OnInsert(const HotList& list, std::uint32_t id) override {
    HotMeta& m = list.meta(id);
    m.frequent = ghosts_.erase(id) > 0;  // came back soon after being demoted from A1in
  }
  void OnRemove(const HotList& list, std::uint32_t id, bool demoted) override {
    HotMeta& m = list.meta(id);
    if (!demoted || IsFrequent(m)) return;
    if (ghosts_.insert(id).second) ghost_order_.push_back(id);
    const std::size_t limit = std::max<std::size_t>(16, list.size() / 2);
    while (ghost_order_.size() > limit) {
      ghosts_.erase(ghost_order_.front());
      ghost_order_.pop_front();
    }
  }
  void SelectVictims(HotList& list, std::size_t count,
                     const std::function<bool(std::uint32_t)>& eligible,
                     std::vector<std::uint32_t>& out) override {
    SearchWindows(
        list, count,
        [&](const std::vector<std::uint32_t>& window, std::size_t wanted,
            std::vector<std::uint32_t>& chosen) {
          PickFromWindow(list, window, wanted, eligible, chosen);
        },
        out);
  }

 private:
  // A1in's share of the list is estimated from the window (exact when it is the whole list).
  void PickFromWindow(const HotList& list, const std::vector<std::uint32_t>& window,
                      std::size_t wanted, const std::function<bool(std::uint32_t)>& eligible,
                      std::vector<std::uint32_t>& chosen) {
    std::size_t in_window = 0;
    for (std::uint32_t id : window)
      if (!IsFrequent(list.meta(id))) ++in_window;
    std::size_t in_count = in_window * list.size() / window.size();
    const std::size_t kin = std::max<std::size_t>(1, list.size() / 4);
    std::vector<std::uint32_t> a1in, am;
    SmallestKeys(
        list, window, wanted,
        [&](std::uint32_t id) { return eligible(id) && !IsFrequent(list.meta(id)); },
        [](const HotMeta& m) { return m.entered.load(std::memory_order_relaxed); }, a1in);
    SmallestKeys(
        list, window, wanted,
        [&](std::uint32_t id) { return eligible(id) && IsFrequent(list.meta(id)); },
        [](const HotMeta& m) { return m.last_access.load(std::memory_order_relaxed); }, am);
    std::size_t i = 0, j = 0, taken = 0;
    while (taken < wanted && (i < a1in.size() || j < am.size())) {
      const bool take_in = j == am.size() || (i < a1in.size() && in_count > kin);
      if (take_in) {
        chosen.push_back(a1in[i++]);
        if (in_count > 0) --in_count;
      } else {
        chosen.push_back(am[j++]);
      }
      ++taken;
    }
  }

  static bool IsFrequent(const HotMeta& m) {
    return m.frequent || m.accesses.load(std::memory_order_relaxed) >= 2;
  }
  absl::flat_hash_set<std::uint32_t> ghosts_;
  std::deque<std::uint32_t> ghost_order_;
};

}  // namespace

std::unique_ptr<HotnessPolicy> MakeHotnessPolicy(KvHotnessPolicy kind) {
  switch (kind) {
    case KvHotnessPolicy::kClock:
      return std::make_unique<ClockPolicy>();
    case KvHotnessPolicy::kTwoQueue:
      return std::make_unique<TwoQueuePolicy>();
    case KvHotnessPolicy::kLru:
      break;
  }
  return std::make_unique<LruPolicy>();
}

}  // namespace kv
}  // namespace numarena
