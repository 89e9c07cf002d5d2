// `numarena budget`: what a System-mode memory budget with the default thresholds makes of
// this machine now: per node the capacity (MemTotal, or the cgroup's memory.max when
// lower), the used memory, the state (normal / warn / admission-closed / tripped) and the
// byte values of the thresholds. See include/numarena/budget.hpp for the model.
//
//   numarena budget [--json] [--sysfs-root DIR] [--procfs-root DIR]
//
// --sysfs-root reads a recorded sys tree (tests/fixtures/<machine>/sys); without
// --procfs-root the proc tree beside it (DIR/../proc) is used. --json prints one object of
// schema "numarena.budget/1" (tools/numarena/budget_view.hpp). Exit status: 0, or 2 with one
// line on stderr naming the file that is missing or malformed.
#include <filesystem>
#include <iostream>
#include <optional>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "budget_view.hpp"
#include "command.hpp"
#include "numarena/ops/json.hpp"

namespace numarena::cli {
namespace {

constexpr const char* kUsage =
    "usage: numarena budget [--json] [--sysfs-root DIR] [--procfs-root DIR]\n"
    "  --json              one JSON object (schema: tools/numarena/budget_view.hpp)\n"
    "  --sysfs-root DIR    read a recorded sys tree instead of /sys\n"
    "  --procfs-root DIR   read a recorded proc tree instead of /proc\n"
    "                      (default with --sysfs-root: DIR/../proc)\n";

int RunBudget(std::span<const std::string> args) {
  bool json = false;
  std::string sysfs_root = "/sys", procfs_root = "/proc";
  bool sysfs_given = false, procfs_given = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--json") {
      json = true;
      continue;
    }
    bool matched = false;
    for (auto [option, target, given] : {std::tuple{"--sysfs-root", &sysfs_root, &sysfs_given},
                                         {"--procfs-root", &procfs_root, &procfs_given}}) {
      const std::string name = option;
      std::optional<std::string> value;
      if (arg == name) {
        if (i + 1 < args.size()) value = args[++i];
        matched = true;
      } else if (arg.rfind(name + "=", 0) == 0) {
        value = arg.substr(name.size() + 1);
        matched = true;
      }
      if (!matched) continue;
      if (!value || value->empty()) return Fail("budget", absl::StrCat(name, " needs a directory"));
      *target = *value;
      *given = true;
      break;
    }
    if (!matched) {
      return Fail("budget", absl::StrCat("unknown option '", arg,
                                         "' (numarena budget --help lists the options)"));
    }
  }
  if (sysfs_given && !procfs_given) {
    procfs_root = (std::filesystem::path(sysfs_root) / ".." / "proc").lexically_normal().string();
    while (procfs_root.size() > 1 && procfs_root.back() == '/') procfs_root.pop_back();
  }
  auto reader = MakeRootedReader(sysfs_root, procfs_root);
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) return Fail("budget", std::string(topology.status().message()));
  auto snapshot = SystemBudgetSnapshot(*topology, *reader);
  if (!snapshot.ok()) return Fail("budget", std::string(snapshot.status().message()));
  if (json) {
    JsonWriter writer(std::cout);
    WriteBudgetJson(writer, *snapshot);
    std::cout << "\n";
  } else {
    PrintBudgetView(std::cout, *snapshot);
  }
  return 0;
}

}  // namespace

NUMARENA_COMMAND(budget, "per-node memory budget: capacity, usage and state", RunBudget);

}  // namespace numarena::cli
