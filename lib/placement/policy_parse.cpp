// Policy::Parse: the policy syntax shared by the C API, the CLI and `numarena run` (grammar
// in numarena/policy.hpp). Pure text to value; whether the nodes exist is Validate's job.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "numarena/format.hpp"
#include "numarena/policy.hpp"
#include "numarena/excerpt.hpp"
#include "topology/topology_parse.hpp"

namespace numarena {
namespace {

constexpr const char* kSyntax =
    "expected bind(NODES), preferred(NODE), interleave(NODES), weighted(NODE:WEIGHT,...), "
    "target(bandwidth|latency|capacity[@NODE|@any]) or local, optionally followed by /strict, "
    "/advisory or (weighted) /chunk=SIZE; NODES as "
    "in 0-3,5";

absl::string_view Abs(std::string_view s) { return absl::string_view(s.data(), s.size()); }

Status Invalid(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("policy '", Excerpt(text), "': ", Excerpt(why, 240), " (", kSyntax, ")"));
}

StatusOr<int> ParseNode(std::string_view text, std::string_view field) {
  int node = -1;
  if (field.empty() || field.find_first_not_of("0123456789") != std::string_view::npos ||
      !absl::SimpleAtoi(Abs(field), &node) || node > parse::kMaxListId) {
    return Invalid(text, absl::StrCat("'", Excerpt(field, 24), "' is not a node id"));
  }
  return node;
}

StatusOr<std::vector<NodeWeight>> ParseWeights(std::string_view text, std::string_view body) {
  std::vector<NodeWeight> weights;
  for (absl::string_view item : absl::StrSplit(Abs(body), ',')) {
    std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(item, ':');
    if (std::count(item.begin(), item.end(), ':') != 1) {
      return Invalid(text, absl::StrCat("weight '", item, "' is not NODE:WEIGHT"));
    }
    auto node = ParseNode(text, std::string_view(parts.first.data(), parts.first.size()));
    if (!node.ok()) return node.status();
    unsigned weight = 0;
    if (parts.second.empty() ||
        parts.second.find_first_not_of("0123456789") != absl::string_view::npos ||
        !absl::SimpleAtoi(parts.second, &weight)) {
      return Invalid(text, absl::StrCat("weight '", parts.second, "' of node ", *node,
                                        " is not a whole number below 2^32"));
    }
    weights.push_back({*node, weight});
  }
  return weights;
}

}  // namespace

StatusOr<Policy> Policy::Parse(std::string_view text) {
  if (text.empty()) return Invalid(text, "empty");
  std::vector<std::string_view> parts;
  for (absl::string_view part : absl::StrSplit(Abs(text), '/')) {
    parts.emplace_back(part.data(), part.size());
  }
  std::string_view head = parts.front();

  std::string_view kind = head, body;
  bool has_body = false;
  if (std::size_t open = head.find('('); open != std::string_view::npos) {
    if (head.back() != ')') return Invalid(text, "a '(' without its closing ')' at the end");
    kind = head.substr(0, open);
    body = head.substr(open + 1, head.size() - open - 2);
    has_body = true;
    if (body.find_first_of("()") != std::string_view::npos) {
      return Invalid(text, "nested parentheses");
    }
  }

  std::optional<BindMode> mode;
  std::optional<std::size_t> chunk;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    std::string_view option = parts[i];
    if (option == "strict" || option == "advisory") {
      if (mode) return Invalid(text, "the mode is given twice");
      mode = option == "strict" ? BindMode::kStrict : BindMode::kAdvisory;
    } else if (option.substr(0, 6) == "chunk=") {
      if (chunk) return Invalid(text, "the chunk is given twice");
      auto bytes = ParseByteSize(option.substr(6));
      if (!bytes.ok()) return Invalid(text, std::string(bytes.status().message()));
      if (*bytes == 0 || *bytes > SIZE_MAX) {
        return Invalid(text, "the chunk must be at least 1 byte");
      }
      chunk = static_cast<std::size_t>(*bytes);
    } else {
      return Invalid(text, absl::StrCat("unknown option '/", Excerpt(option, 24), "'"));
    }
  }

  auto nodes = [&]() -> StatusOr<std::vector<int>> {
    if (!has_body || body.empty()) {
      return Invalid(text, absl::StrCat(Excerpt(kind, 24), " needs a node list in parentheses"));
    }
    auto list = parse::ParseNodeList(body);
    if (!list.ok()) return Invalid(text, std::string(list.status().message()));
    // The kernel-file parser takes an empty list (a memory-only node's cpulist is "\n"); a
    // policy needs at least one node.
    if (list->empty()) {
      return Invalid(text, absl::StrCat(Excerpt(kind, 24), " needs at least one node in parentheses"));
    }
    return list;
  };

  if (chunk && kind != "weighted") return Invalid(text, "/chunk= applies to weighted only");
  if (kind == "bind" || kind == "membind") {
    auto list = nodes();
    if (!list.ok()) return list.status();
    return Policy::Bind(*std::move(list), mode.value_or(BindMode::kStrict));
  }
  if (kind == "interleave") {
    auto list = nodes();
    if (!list.ok()) return list.status();
    return Policy::Interleave(*std::move(list), mode.value_or(BindMode::kStrict));
  }
  if (kind == "preferred") {
    if (!has_body || body.empty()) {
      return Invalid(text, "preferred needs nodes in parentheses, most preferred first");
    }
    // Order matters here, so each comma-separated piece (a node or a range) is parsed on
    // its own: "preferred(2,0-1)" is 2, then 0, then 1.
    std::vector<int> ordered;
    for (absl::string_view piece :
         absl::StrSplit(absl::string_view(body.data(), body.size()), ',')) {
      auto list = parse::ParseNodeList(std::string_view(piece.data(), piece.size()));
      if (!list.ok()) return Invalid(text, std::string(list.status().message()));
      if (list->empty()) return Invalid(text, "preferred has an empty entry in its node list");
      ordered.insert(ordered.end(), list->begin(), list->end());
    }
    return Policy::Preferred(std::move(ordered), mode.value_or(BindMode::kAdvisory));
  }
  if (kind == "weighted") {
    if (!has_body || body.empty()) {
      return Invalid(text, "weighted needs NODE:WEIGHT pairs, or auto for the kernel's weights");
    }
    if (body == "auto") {
      if (chunk) {
        return Invalid(text, "weighted(auto) has no chunk: the kernel interleaves page by page");
      }
      return Policy::KernelWeightedInterleave(mode.value_or(BindMode::kStrict));
    }
    auto weights = ParseWeights(text, body);
    if (!weights.ok()) return weights.status();
    return Policy::WeightedInterleave(*std::move(weights), mode.value_or(BindMode::kStrict),
                                      chunk.value_or(kDefaultWeightedChunk));
  }
  if (kind == "target") {
    if (!has_body || body.empty()) {
      return Invalid(text, "target needs bandwidth, latency or capacity in parentheses");
    }
    std::string_view name = body, from;
    bool has_from = false;
    if (std::size_t at = body.find('@'); at != std::string_view::npos) {
      name = body.substr(0, at);
      from = body.substr(at + 1);
      has_from = true;
    }
    auto attribute = ParseMemoryAttribute(name);
    if (!attribute.ok()) return Invalid(text, std::string(attribute.status().message()));
    MemoryTarget target{*attribute, MemoryTarget::kCallingThread};
    if (has_from) {
      if (from == "any") {
        target.from = MemoryTarget::kAnyInitiator;
      } else {
        auto node = ParseNode(text, from);
        if (!node.ok()) return node.status();
        target.from = *node;
      }
    }
    return Policy::Target(target, mode.value_or(BindMode::kAdvisory));
  }
  if (kind == "local") {
    if (has_body) return Invalid(text, "local takes no nodes");
    return Policy::Local(mode.value_or(BindMode::kAdvisory));
  }
  return Invalid(text, absl::StrCat("unknown kind '", Excerpt(kind, 24), "'"));
}

}  // namespace numarena
