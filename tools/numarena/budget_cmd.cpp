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
#include <CLI/CLI.hpp>

#include "budget_view.hpp"
#include "cli_options.hpp"
#include "command.hpp"
#include "numarena/ops/json.hpp"

namespace numarena::cli {
namespace {

struct BudgetOptions {
  bool json = false;
  MachineRoots roots;
  WatchOptions watch;
};

int BudgetOnce(const BudgetOptions& options) {
  auto reader = options.roots.reader();
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) return Fail("budget", std::string(topology.status().message()));
  auto snapshot = SystemBudgetSnapshot(*topology, *reader);
  if (!snapshot.ok()) return Fail("budget", std::string(snapshot.status().message()));
  if (options.json) {
    JsonWriter writer(std::cout);
    WriteBudgetJson(writer, *snapshot);
    std::cout << "\n";
  } else {
    PrintBudgetView(std::cout, *snapshot);
  }
  return 0;
}

CommandRunner SetupBudget(CLI::App& app) {
  auto options = std::make_shared<BudgetOptions>();
  app.add_flag("--json", options->json,
               "one JSON object (schema numarena.budget/1); with --watch one per line");
  options->roots.AddTo(app);
  options->watch.AddTo(app);
  return [options] {
    if (Status s = options->watch.Check(); !s.ok()) return Fail("budget", std::string(s.message()));
    return Watch(options->watch, options->json, [&] { return BudgetOnce(*options); });
  };
}

}  // namespace

NUMARENA_COMMAND(budget, "per-node memory budget: capacity, usage and state", SetupBudget);

}  // namespace numarena::cli
