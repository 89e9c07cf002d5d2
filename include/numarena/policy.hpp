// Placement policies: a value that says where memory goes.
//
// A `Policy` names a kind (bind to a node set, prefer one node, interleave pages over a set,
// interleave in weighted chunks, or the calling thread's local node) and a bind mode:
//   kStrict    the kernel must apply the policy; if it refuses (seccomp, cpuset) the
//              allocation fails with a clear error.
//   kAdvisory  if the kernel refuses, fall back membind -> preferred -> none, record that
//              it did (ArenaStats::fallbacks), and carry on.
// Policies are cheap values: compare, hash and print them. `Validate` checks one against a
// topology (unknown or offline node, node outside the process's cpuset, empty set, zero
// weights) and names the offending node.
//
//   auto policy = numarena::Policy::Bind(1);
//   if (auto s = policy.Validate(*numarena::Topology::system().value()); !s.ok()) ...
//   auto weights = numarena::Policy::WeightedInterleave({{0, 3}, {1, 1}});
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "numarena/memory_target.hpp"
#include "numarena/status.hpp"

namespace numarena {

class Topology;

enum class PolicyKind : unsigned char {
  kBind,                // pages only on these nodes (MPOL_BIND)
  kPreferred,           // pages on the first node while it has memory, then the next listed,
                        // then the nearest others (MPOL_PREFERRED for one node)
  kInterleave,          // pages round-robin over the nodes (MPOL_INTERLEAVE)
  kWeightedInterleave,  // successive chunks bound to nodes in proportion to weights
  kLocal,               // the calling thread's node at allocation time
  kTarget,              // memory chosen by bandwidth, latency or capacity (memory_target.hpp);
                        // Resolve() turns it into kPreferred or kBind before use
};
const char* PolicyKindName(PolicyKind kind);

enum class BindMode : unsigned char { kStrict, kAdvisory };

struct NodeWeight {
  int node = -1;
  unsigned weight = 0;
  friend bool operator==(const NodeWeight&, const NodeWeight&) = default;
};

class Policy {
 public:
  // Chunk size of weighted interleave when none is given: a huge page, so each chunk can
  // be backed by one transparent huge page on its node.
  static constexpr std::size_t kDefaultWeightedChunk = std::size_t{2} << 20;
  // Bounds of weighted interleave, so that no chunk arithmetic can overflow (a period is at
  // most 2^60 bytes): a chunk of at most 1 TiB, weights that add up to at most 2^20.
  static constexpr std::size_t kMaxWeightedChunk = std::size_t{1} << 40;
  static constexpr std::uint64_t kMaxWeightTotal = std::uint64_t{1} << 20;

  static Policy Bind(int node, BindMode mode = BindMode::kStrict);
  static Policy Bind(std::vector<int> nodes, BindMode mode = BindMode::kStrict);
  static Policy Preferred(int node, BindMode mode = BindMode::kAdvisory);
  // An ordered preference: memory on nodes[0] while it has room, then nodes[1], ..., then
  // the remaining nodes by distance from nodes[0] (FallbackOrder). This is numarena's form of
  // MPOL_PREFERRED_MANY, with one difference kept on purpose: the kernel's mode takes a set
  // and picks, at each page fault, the member nearest the faulting CPU, so which node a page
  // lands on (and which node's budget it should be charged to) is known only afterwards.
  // numarena's arenas keep a heap per node and walk the list in order, so every allocation
  // is charged to the node it is on. The kernel's MPOL_PREFERRED_MANY (Linux 5.15+) is used
  // where numarena hands a node set to the kernel without a heap per node: the advisory
  // fallback of a multi-node bind (membind -> preferred-many over the set -> none); kernels
  // without it get MPOL_PREFERRED on the set's first node there.
  //
  //   auto fast_then_big = numarena::Policy::Preferred(std::vector<int>{2, 0});
  static Policy Preferred(std::vector<int> nodes, BindMode mode = BindMode::kAdvisory);
  static Policy Interleave(std::vector<int> nodes, BindMode mode = BindMode::kStrict);
  static Policy WeightedInterleave(std::vector<NodeWeight> weights,
                                   BindMode mode = BindMode::kStrict,
                                   std::size_t chunk_bytes = kDefaultWeightedChunk);
  // "weighted(auto)": weighted interleave over every node the process may allocate on, in
  // the proportions of the kernel's own system-wide weights
  // (/sys/kernel/mm/mempolicy/weighted_interleave/nodeN, Linux 6.9+), through the kernel's
  // MPOL_WEIGHTED_INTERLEAVE. For AllocateInterleaved; arenas refuse it (their heaps bind
  // chunks, which needs weights of their own). On a kernel without weighted interleave the
  // allocation fails with FailedPrecondition saying so.
  static Policy KernelWeightedInterleave(BindMode mode = BindMode::kStrict);
  static Policy Local(BindMode mode = BindMode::kAdvisory);
  // Memory chosen by what it is (numarena/memory_target.hpp). Advisory (the default): prefer
  // the candidates in rank order (Preferred(TargetChoice::ranked): the best node, then the
  // next best, ...), then the other nodes by distance when all of them are full.
  // Strict: bind to every node tied for best. The choice is made when the policy is resolved:
  // `Arena::ForPolicy` (and everything built on it: allocator<T>, memory_resource, the C API,
  // `numarena run`) resolves it once, when it creates the arena, from the creating thread's
  // node for MemoryTarget::kCallingThread; `Arena::policy()` is the resolved policy.
  //
  //   auto fast = numarena::Arena::ForPolicy(numarena::Policy::Target(
  //       {numarena::MemoryAttribute::kBandwidth, numarena::MemoryTarget::kCallingThread}));
  static Policy Target(MemoryTarget target, BindMode mode = BindMode::kAdvisory);

  PolicyKind kind() const { return kind_; }
  BindMode mode() const { return mode_; }
  // Nodes of the policy, ascending and unique (for weighted interleave: the weighted nodes,
  // and for Preferred the preferred nodes, in the order given). Empty for kLocal.
  const std::vector<int>& nodes() const { return nodes_; }
  // Weights for kWeightedInterleave, empty otherwise (and for weighted(auto)).
  const std::vector<NodeWeight>& weights() const { return weights_; }
  // True for weighted(auto) (KernelWeightedInterleave): the kernel's weights, not the policy's.
  bool uses_kernel_weights() const { return kernel_weights_; }
  std::size_t chunk_bytes() const { return chunk_bytes_; }
  // The memory target of a kTarget policy (meaningless for the other kinds).
  const MemoryTarget& target() const { return target_; }

  // The node memory goes to first: the one node of a single-node Bind, the first node of a
  // Preferred policy; else -1.
  int single_node() const;

  // For kPreferred: the order in which nodes are tried, the listed nodes first (in order) and
  // then every other node the process may use, nearest to the first listed node first (ties
  // by id). Listed nodes outside the process's cpuset are left out. Empty for other kinds.
  std::vector<int> FallbackOrder(const Topology& topology) const;

  // OK, or InvalidArgument naming the problem: empty node set, unknown/offline node,
  // node outside the process's allowed memory nodes, a node listed twice in a Preferred
  // list, zero or all-zero weights, weights that
  // add up to more than kMaxWeightTotal, a chunk that is not a multiple of the page size or
  // is larger than kMaxWeightedChunk.
  // For kTarget: `from` is not an online node, kCallingThread or kAnyInitiator.
  [[nodiscard]] Status Validate(const Topology& topology) const;

  // The policy to apply: a kTarget policy resolved on `topology` (see Target()) with
  // `calling_node` standing for the calling thread's node; any other policy unchanged.
  // Errors are ResolveMemoryTarget's.
  [[nodiscard]] StatusOr<Policy> Resolve(const Topology& topology, int calling_node) const;

  // The policy in the syntax Parse reads: "bind(1)", "bind(0,1)/advisory", "preferred(2)",
  // "interleave(0,1,2,3)", "weighted(0:3,1:1)", "weighted(0:1,1:1)/chunk=65536", "local",
  // "target(bandwidth)", "target(latency@1)/strict", "target(capacity@any)".
  // The mode is written only when it is not the kind's default, the chunk only when it is
  // not kDefaultWeightedChunk, so Parse(p.ToString()) == p.
  std::string ToString() const;

  // A policy from text: the one syntax numarena's C API, the CLI and `numarena run` share.
  //
  //   policy  := kind ( "/" option )*
  //   kind    := "bind(" NODES ")" | "preferred(" NODES ")" | "interleave(" NODES ")"
  //            | "weighted(" NODE ":" WEIGHT ( "," NODE ":" WEIGHT )* ")" | "weighted(auto)"
  //            | "local"
  //            | "target(" ATTRIBUTE [ "@" ( NODE | "any" ) ] ")"
  //   ATTRIBUTE := "bandwidth" | "latency" | "capacity"    (no "@": the calling thread's node)
  //   option  := "strict" | "advisory" | "chunk=" SIZE        (chunk: weighted only)
  //   NODES   := the kernel's list syntax, e.g. "0", "0-3", "0,2-3" (for preferred the
  //              order is kept: "preferred(2,0)" tries 2 first)
  //   SIZE    := bytes with an optional K/M/G suffix (numarena::ParseByteSize), e.g. "64K"
  //
  // "membind" is accepted for "bind". No spaces. Modes default as the factories do (Bind,
  // Interleave and WeightedInterleave strict; Preferred, Local and Target advisory).
  // InvalidArgument names what is wrong and where; the result is not validated against a machine
  // (use Validate).
  //
  //   auto policy = numarena::Policy::Parse("interleave(0-3)/advisory");
  //   auto kv = numarena::Policy::Parse("weighted(0:3,2:1)/chunk=2M");
  [[nodiscard]] static StatusOr<Policy> Parse(std::string_view text);

  friend bool operator==(const Policy&, const Policy&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Policy& p) {
    h = H::combine(std::move(h), p.kind_, p.mode_, p.nodes_, p.chunk_bytes_, p.target_,
                   p.kernel_weights_);
    for (const NodeWeight& w : p.weights_) h = H::combine(std::move(h), w.node, w.weight);
    return h;
  }

 private:
  Policy(PolicyKind kind, BindMode mode) : kind_(kind), mode_(mode) {}

  PolicyKind kind_;
  BindMode mode_;
  std::vector<int> nodes_;
  std::vector<NodeWeight> weights_;
  std::size_t chunk_bytes_ = 0;
  MemoryTarget target_;
  bool kernel_weights_ = false;
};

// For weighted interleave: which node owns chunk `index` (0-based) of a span. Chunks are
// assigned in runs: with {0:3, 1:1}, chunks 0,1,2 -> node 0, chunk 3 -> node 1, repeat.
int WeightedChunkNode(const std::vector<NodeWeight>& weights, std::size_t index);

// ---- the vocabulary of arenas, here so that the layers below Arena can name it ----

// `node_of` for a pointer whose pages are spread over several nodes by policy (interleave,
// weighted interleave, bind to more than one node): use page_nodes() to see where they are.
inline constexpr int kNodeMixed = -2;
// `node_of` for a pointer that numarena did not allocate (or nullptr).
inline constexpr int kNodeNone = -1;

// How an arena backs its memory.
struct ArenaOptions {
  // 0 (default): ordinary pages; committed ranges of 2 MiB and more that hold whole huge
  // pages get transparent huge pages (MADV_HUGEPAGE), allocations of 2 MiB and more are
  // 2 MiB aligned. Interleaved arenas never use huge pages (they would defeat per-page
  // interleave).
  // 2 MiB or 1 GiB (`kHugetlb2M`, `kHugetlb1G`): back the arena with hugetlbfs pages of that
  // size. Memory bound to a node takes its huge pages from that node's own pool
  // (/sys/devices/system/node/nodeN/hugepages/hugepages-<size>kB/nr_hugepages; pages reserved
  // on other nodes do not count): creating the arena fails with FailedPrecondition naming the
  // node's pool when it holds none, and an allocation the node's pool cannot back returns
  // nullptr with FailedPrecondition naming it (the pages are faulted in, under the bind, when
  // the range is mapped, so a short pool is an error, never SIGBUS in the caller's first
  // write; kernels before 5.14 cannot do this). Topology::nodes()[i].huge_pages and
  // `numarena topo` show each node's pools. Hugetlb memory is not returned by purge().
  std::size_t hugetlb_page_bytes = 0;

  static constexpr std::size_t kHugetlb2M = std::size_t{2} << 20;
  static constexpr std::size_t kHugetlb1G = std::size_t{1} << 30;

  // With hugetlb_page_bytes 0: true (default) asks for transparent huge pages
  // (MADV_HUGEPAGE) where a commit of 2 MiB or more holds whole huge pages, as above; false
  // asks for none, so every page of the arena is a base page (MADV_NOHUGEPAGE), whatever
  // /sys/kernel/mm/transparent_hugepage/enabled says. Why false: a huge page's fault clears
  // 2 MiB at once and, in a virtual machine whose host takes freed guest memory back (free
  // page reporting, ballooning), first makes the host fault in 512 pages; a loop that frees
  // and allocates large blocks then pays that on every cold block (bench/RESULTS.md). The
  // malloc override (`numarena run`) uses false unless NUMARENA_HUGE_PAGES=1, as glibc,
  // jemalloc, tcmalloc and mimalloc ask for no huge pages by default. Placement is the same
  // either way.
  bool transparent_huge_pages = true;

  // jemalloc arenas ("shards") per heap: threads that use the arena spread over them, a new
  // thread joining the least used, so threads whose requests miss numarena's caches (new
  // memory, objects of 2 MiB and more) do not all wait for one jemalloc arena's lock. Each
  // shard keeps partly used slabs of its own (so more shards keep more memory resident) and
  // commits a 2 MiB metadata block.
  // 0 (default): one per 4 CPUs this process may run on, at least 1; 1 to kMaxShards: that
  // many at most; more is InvalidArgument.
  int shards = 0;
  static constexpr int kMaxShards = 8;

  // Memory return. 0 (default): freed memory stays with the arena for reuse (its caches, then
  // jemalloc's dirty pages) until purge(), a refusal for lack of room, jemalloc's decay at
  // later calls into the arena, or a thread's allocations taking 1 MiB of fresh pages: none of
  // it could serve them, so the depot's classes unused for 50 ms and the dirty pages of the
  // thread's shard go back then, whatever this option says. 1 to kMaxReturnIdleMs: memory
  // nobody reuses for that many milliseconds goes back to the kernel within about 1.25 times
  // that, even if the program makes no more calls: a background thread ("numarena-return"),
  // started at the arena's first cache overflow or 2 MiB+ free, returns the arena's shared
  // caches, each thread's single cached object of 2 MiB to 4 MiB and the dirty pages (a
  // thread's own lists go back at its exit or purge()). Placement is kept: the pages are
  // purged, not unmapped, and come back on the arena's nodes. More is
  // InvalidArgument. `numarena run` uses 1000 (NUMARENA_RETURN_IDLE_MS).
  std::int64_t return_idle_ms = 0;
  static constexpr std::int64_t kMaxReturnIdleMs = 3'600'000;

  friend bool operator==(const ArenaOptions&, const ArenaOptions&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const ArenaOptions& o) {
    return H::combine(std::move(h), o.hugetlb_page_bytes, o.transparent_huge_pages, o.shards,
                      o.return_idle_ms);
  }
};

}  // namespace numarena
