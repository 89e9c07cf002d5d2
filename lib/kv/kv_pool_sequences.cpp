// KV pool sequences: sequence slots, prefix sharing, appending (with copy-on-write) and
// publishing computed spans, and KvPool's sequence functions. The top of lib/kv's inner
// order (kv_pool_state.hpp): below it pins, tiering and the span store.
#include <algorithm>
#include <cstring>
#include <new>

#include "kv/kv_pool_pins.hpp"
#include "numarena/kv_pool.hpp"

namespace numarena {

using kv::kNil;
using kv::PoolState;
using kv::Sequence;
using kv::SpanList;
using kv::SpanMeta;

namespace kv {
namespace {

// A sequence slot: a retired one from this thread's list (or another's), else a new one.
// Lock order: a sequence's lock may be held when taking a list's lock (RetireSequence),
// never the reverse, so the new sequence is locked only after the list is let go.
StatusOr<KvSequenceId> NewSequence(PoolState& p) {
  std::uint32_t index = p.free_sequences.Pop();
  if (index == kNil) {
    std::lock_guard lock(p.seq_grow_mu);
    index = p.seq_created;
    if (index / kSpansPerChunk >= kMaxChunks) {
      return absl::ResourceExhaustedError("KV pool: too many live sequences");
    }
    if (index % kSpansPerChunk == 0) {
      auto* chunk = new (std::nothrow) SequenceChunk;
      if (chunk == nullptr) {
        return absl::ResourceExhaustedError("KV pool: no heap for more sequence slots");
      }
      p.seq_chunks[index / kSpansPerChunk].store(chunk, std::memory_order_release);
    }
    ++p.seq_created;
  }
  Sequence* s = &p.seq_chunks[index / kSpansPerChunk]
                     .load(std::memory_order_acquire)
                     ->sequences[index % kSpansPerChunk];
  std::lock_guard seq_lock(s->mu);
  s->live = true;
  s->spans.clear();
  s->tokens = 0;
  s->computed = 0;
  p.stripe().sequences_created.fetch_add(1, std::memory_order_relaxed);
  return (static_cast<KvSequenceId>(s->generation.load()) << 32) | index;
}

inline void RetireSequence(PoolState& p, KvSequenceId id, Sequence* s) {  // s->mu held
  s->live = false;
  s->spans.clear();
  s->tokens = 0;
  s->computed = 0;
  s->generation.fetch_add(1, std::memory_order_release);
  p.stripe().sequences_freed.fetch_add(1, std::memory_order_relaxed);
  p.free_sequences.Push(static_cast<std::uint32_t>(id & 0xffffffffu));
}

// Room for `count` span ids in `spans` before anything changes, so that a heap that cannot
// grow a long sequence's list refuses (ResourceExhausted) instead of throwing halfway.
template <typename List>
Status ReserveSpans(List& spans, std::size_t count) {
  if (count <= spans.capacity()) return absl::OkStatus();
  try {
    spans.reserve(count);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pool: no heap for a list of ", count, " spans"));
  }
  return absl::OkStatus();
}

// Copies a span's data and first `tokens` token ids into exclusive span `to`
// (copy-on-write).
void CopySpan(PoolState& p, std::uint32_t from, std::uint32_t to, int tokens) {
  for (std::size_t i = 0; i < p.bps; ++i) {
    const BlockSlot src = p.block_id(from, static_cast<int>(i));
    const BlockSlot dst = p.block_id(to, static_cast<int>(i));
    PinRaw(p, src, /*promote=*/false);
    PinRaw(p, dst, /*promote=*/true);
    std::memcpy(p.block(dst).data.load(std::memory_order_relaxed),
                p.block(src).data.load(std::memory_order_relaxed), p.layout.block_bytes);
    UnpinRaw(p, dst);
    UnpinRaw(p, src);
  }
  std::copy_n(p.span_tokens(from), tokens, p.span_tokens(to));
  p.span(to).tokens = tokens;
  p.copy_on_writes.fetch_add(1, std::memory_order_relaxed);
}


// Appends with `s->mu` held. Either everything or nothing happens.
Status AppendLocked(PoolState& p, Sequence* s, std::span<const std::int32_t> tokens) {
  if (tokens.empty()) return absl::OkStatus();
  const std::size_t tpb = p.tpb;
  const std::size_t pos = s->tokens;
  const std::size_t spans_before = (pos + tpb - 1) / tpb;
  const std::size_t spans_after = (pos + tokens.size() + tpb - 1) / tpb;
  const std::size_t offset = pos % tpb;
  bool cow = false;
  if (offset != 0) {
    SpanMeta& last = p.span(s->spans.back());
    // Shared, or in the prefix index (after a truncation): never write into it. Holders and
    // the indexed bit are one word, read at once.
    const std::uint32_t refs = last.refs.load(std::memory_order_acquire);
    cow = Holders(refs) > 1 || (refs & kIndexedBit);
  }
  // Get every span first so a refusal leaves the sequence as it was.
  absl::InlinedVector<std::uint32_t, 4> fresh;
  const std::size_t needed = spans_after - spans_before + (cow ? 1 : 0);
  if (Status st = ReserveSpans(fresh, needed); !st.ok()) return st;
  if (Status st = ReserveSpans(s->spans, s->spans.size() + (spans_after - spans_before)); !st.ok())
    return st;
  for (std::size_t i = 0; i < needed; ++i) {
    auto got = AllocateSpan(p);
    if (!got.ok()) {
      for (std::uint32_t f : fresh) ReleaseSpan(p, f);
      return got.status();
    }
    fresh.push_back(*got);
  }
  std::size_t next_fresh = 0;
  if (cow) {
    const std::uint32_t old = s->spans.back();
    const std::uint32_t copy = fresh[next_fresh++];
    CopySpan(p, old, copy, static_cast<int>(offset));
    p.span(copy).parent_hash = p.span(old).parent_hash;
    s->spans.back() = copy;
    ReleaseSpan(p, old);
  }
  std::size_t done = 0;
  std::size_t at = pos;
  while (done < tokens.size()) {
    const std::size_t off = at % tpb;
    if (off == 0) {
      const std::uint32_t ns = fresh[next_fresh++];
      p.span(ns).parent_hash = s->spans.empty() ? kRootPrefixHash : p.span(s->spans.back()).hash;
      s->spans.push_back(ns);
    }
    const std::uint32_t cur = s->spans.back();
    SpanMeta& m = p.span(cur);
    const std::size_t n = std::min(tpb - off, tokens.size() - done);
    std::copy_n(tokens.data() + done, n, p.span_tokens(cur) + off);
    m.tokens = static_cast<std::int32_t>(off + n);
    if (off + n == tpb) {  // full: hashed now, indexed once computed (MarkComputed)
      m.hash = HashSpan(m.parent_hash, std::span<const std::int32_t>(p.span_tokens(cur), tpb));
      m.hashed = true;
    }
    done += n;
    at += n;
  }
  s->tokens = at;
  return absl::OkStatus();
}

// Enters the full spans of the sequence's first `upto` tokens in the prefix index and
// raises its computed count, with `s->mu` held. Only spans past the old count can be new;
// ones already indexed (reused, or marked by a sharer) are skipped.
inline void PublishComputedLocked(PoolState& p, Sequence* s, std::size_t upto) {
  if (upto <= s->computed) return;
  for (std::size_t i = s->computed / p.tpb; i < upto / p.tpb; ++i) {
    const std::uint32_t sp = s->spans[i];
    SpanMeta& m = p.span(sp);
    // Spans inside the first `upto` <= length tokens are full, so they are hashed. The hash
    // stays put: only an exclusive owner refills a span (a sharer copies it first).
    std::lock_guard lock(p.prefix.mutex_for(m.hash));
    if (m.refs.load(std::memory_order_relaxed) & kIndexedBit) continue;
    // The release (and the mutex's) publishes the rows written before this call to whoever
    // shares the span: with an acquire CAS on the word, or under the same mutex.
    if (p.prefix.InsertLocked(m.hash, sp)) m.refs.fetch_or(kIndexedBit, std::memory_order_release);
  }
  s->computed = upto;
}

}  // namespace
}  // namespace kv

// ---- KvPool: sequences ---------------------------------------------------------------

StatusOr<KvSequenceId> KvPool::CreateSequence(std::span<const std::int32_t> prompt,
                                              std::size_t* reused_tokens) {
  PoolState& p = *impl_;
  auto id = kv::NewSequence(p);
  if (!id.ok()) return id.status();
  Sequence* s = p.sequence(*id);
  std::lock_guard lock(s->mu);
  if (Status st = kv::ReserveSpans(s->spans, (prompt.size() + p.tpb - 1) / p.tpb); !st.ok()) {
    kv::RetireSequence(p, *id, s);
    return st;
  }
  std::uint64_t parent = kv::kRootPrefixHash;
  std::size_t reused = 0;
  std::uint64_t lookups = 0;
  while (reused + p.tpb <= prompt.size()) {
    const auto chunk = prompt.subspan(reused, p.tpb);
    const std::uint64_t hash = kv::HashSpan(parent, chunk);
    ++lookups;
    const std::uint32_t found = kv::AcquireCached(p, parent, chunk, hash);
    if (found == kNil) break;
    s->spans.push_back(found);
    parent = hash;
    reused += p.tpb;
  }
  if (lookups > 0) {
    kv::StatStripe& stripe = p.stripe();
    stripe.prefix_lookups.fetch_add(lookups, std::memory_order_relaxed);
    stripe.prefix_hits.fetch_add(reused / p.tpb, std::memory_order_relaxed);
  }
  s->tokens = reused;
  s->computed = reused;  // indexed spans are computed
  if (Status st = kv::AppendLocked(p, s, prompt.subspan(reused)); !st.ok()) {
    for (std::uint32_t sp : s->spans) kv::ReleaseSpan(p, sp);
    kv::RetireSequence(p, *id, s);
    return st;
  }
  if (reused_tokens != nullptr) *reused_tokens = reused;
  return *id;
}

Status KvPool::Append(KvSequenceId sequence, std::span<const std::int32_t> tokens) {
  auto locked = kv::LockLive(*impl_, sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  return kv::AppendLocked(*impl_, s, tokens);
}

Status KvPool::MarkComputed(KvSequenceId sequence, std::size_t tokens) {
  PoolState& p = *impl_;
  auto locked = kv::LockLive(p, sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  if (tokens > s->tokens) {
    return absl::OutOfRangeError(absl::StrCat("KV pool: cannot mark ", tokens,
                                              " tokens computed in sequence ", sequence, " of ",
                                              s->tokens, " tokens"));
  }
  kv::PublishComputedLocked(p, s, tokens);
  return absl::OkStatus();
}

Status KvPool::Truncate(KvSequenceId sequence, std::size_t tokens) {
  PoolState& p = *impl_;
  auto locked = kv::LockLive(p, sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  if (tokens > s->tokens) {
    return absl::InvalidArgumentError(absl::StrCat("KV pool: cannot truncate sequence ", sequence,
                                                   " of ", s->tokens, " tokens to ", tokens,
                                                   "; truncation only shortens"));
  }
  const std::size_t keep = (tokens + p.tpb - 1) / p.tpb;
  while (s->spans.size() > keep) {
    kv::ReleaseSpan(p, s->spans.back());
    s->spans.pop_back();
  }
  s->tokens = tokens;
  s->computed = std::min(s->computed, tokens);
  return absl::OkStatus();
}

StatusOr<KvSequenceId> KvPool::Fork(KvSequenceId parent) {
  PoolState& p = *impl_;
  Sequence* s = p.sequence(parent);
  if (s == nullptr) return kv::NoSequence(parent);
  SpanList spans;
  std::size_t tokens = 0, computed = 0;
  {
    // Take the references under the parent's lock, then let it go: two sequences' locks
    // are never held together.
    std::lock_guard lock(s->mu);
    if (!s->live || p.sequence(parent) != s) return kv::NoSequence(parent);
    for (std::uint32_t sp : s->spans) p.span(sp).refs.fetch_add(1, std::memory_order_relaxed);
    spans = s->spans;
    tokens = s->tokens;
    computed = s->computed;
  }
  auto child_id = kv::NewSequence(p);
  if (!child_id.ok()) {
    for (std::uint32_t sp : spans) kv::ReleaseSpan(p, sp);
    return child_id.status();
  }
  Sequence* child = p.sequence(*child_id);
  std::lock_guard child_lock(child->mu);
  child->spans = std::move(spans);
  child->tokens = tokens;
  child->computed = computed;
  return *child_id;
}

Status KvPool::FreeSequence(KvSequenceId sequence) {
  PoolState& p = *impl_;
  auto locked = kv::LockLive(p, sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  for (std::uint32_t sp : s->spans) kv::ReleaseSpan(p, sp);
  kv::RetireSequence(p, sequence, s);
  return absl::OkStatus();
}

StatusOr<std::size_t> KvPool::Length(KvSequenceId sequence) const {
  auto locked = kv::LockLive(*impl_, sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  return s->tokens;
}

std::size_t KvPool::CachedPrefixTokens(std::span<const std::int32_t> tokens) const {
  const PoolState& p = *impl_;
  std::uint64_t parent = kv::kRootPrefixHash;
  std::size_t covered = 0;
  while (covered + p.tpb <= tokens.size()) {
    const std::uint64_t hash = kv::HashSpan(parent, tokens.subspan(covered, p.tpb));
    // No token comparison here: reading an indexed span's token ids without the shard lock
    // would race with its eviction and reuse.
    if (p.prefix.Find(hash) == kv::PrefixIndex::kNone) break;
    parent = hash;
    covered += p.tpb;
  }
  return covered;
}

}  // namespace numarena
