// `numarena run`: starts an unmodified program with numarena as its malloc and operator new
// (libnumarena_preload.so through LD_PRELOAD; lib/preload/preload.cpp), placing its heap by
// one policy, optionally under a per-node budget.
//
//   numarena run [--membind NODES | --preferred NODES | --interleave NODES | --weighted N=W,... |
//                 --local | --policy POLICY] [--budget system|quota:SIZE]
//                [--metrics-port P|P-Q [--metrics-listen ADDR] [--metrics-device BUS_ID ...]]
//                 -- PROGRAM ARGS...
//
// It checks the policy against this machine and the budget spec, finds the preload library
// (NUMARENA_PRELOAD_LIBRARY, else beside this binary, else in ../<libdir>), sets
// LD_PRELOAD (in front of any value already there), NUMARENA_POLICY, NUMARENA_BUDGET and
// NUMARENA_METRICS_{PORT,LISTEN,DEVICES} (lib/preload/preload_metrics.hpp) and, with
// --huge-pages, NUMARENA_HUGE_PAGES=1, and execs the program (searched in PATH), which keeps
// this process's id. Exit status: the program's; 2 for a usage error, a bad policy or budget,
// or no preload library; 127 when the program cannot be executed.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "cli_options.hpp"
#include "command.hpp"
#include "numarena/excerpt.hpp"
#include "numarena/address_space.hpp"
#include "numarena/format.hpp"
#include "numarena/ops/metrics_server.hpp"
#include "numarena/policy.hpp"
#include "numarena/topology.hpp"

#ifndef NUMARENA_INSTALL_LIBDIR
#define NUMARENA_INSTALL_LIBDIR "lib"
#endif

namespace numarena::cli {
namespace {

constexpr const char* kPreloadName = "libnumarena_preload.so";

constexpr const char* kDescription =
    "numarena run POLICY-OPTION [OPTIONS] -- PROGRAM [ARGS...] runs PROGRAM with numarena as its "
    "malloc and operator new (LD_PRELOAD of "
    "libnumarena_preload.so); its heap is placed by one policy option. The program inherits "
    "LD_PRELOAD (prepended), NUMARENA_POLICY and NUMARENA_BUDGET, so what it execs runs under "
    "numarena too. NUMARENA_PRELOAD_LIBRARY names the library if it is not beside this binary "
    "or in ../" NUMARENA_INSTALL_LIBDIR
    ". A block freed twice in a row aborts the program, as under glibc; NUMARENA_CHECK=1 in the "
    "environment turns on checked mode, which also finds other double frees, frees of pointers "
    "numarena never returned and sized frees with the wrong size, at several times the cost "
    "per call. Freed memory nobody reuses for 1 s goes back to the kernel, by a thread of "
    "numarena's, even while the program makes no calls; NUMARENA_RETURN_IDLE_MS=N sets the time "
    "in milliseconds, 0 keeps it for reuse and starts no thread. Exit status: the program's; 2 for a usage error, a bad policy or budget, or an "
    "address-space limit (ulimit -v) too small for numarena's reservations; 127 when PROGRAM "
    "cannot be run.";

struct RunOptions {
  // Each policy option given, in order, with its value: more than one is an error.
  std::vector<std::pair<std::string, std::string>> policies;
  bool local = false;
  std::optional<std::string> budget;  // set when --budget was given, even as ''
  std::string metrics_port, metrics_listen = "127.0.0.1";
  std::vector<std::string> metrics_devices;
  bool huge_pages = false;
};

// The policy option and its value, as a policy string.
std::optional<std::string> PolicyFromOption(const std::string& option, const std::string& value) {
  if (option == "--membind") return absl::StrCat("bind(", value, ")");
  if (option == "--preferred") return absl::StrCat("preferred(", value, ")");
  if (option == "--interleave") return absl::StrCat("interleave(", value, ")");
  if (option == "--weighted") {
    return absl::StrCat("weighted(", absl::StrReplaceAll(value, {{"=", ":"}}), ")");
  }
  if (option == "--policy") return value;
  return std::nullopt;
}

// "P" or "P-Q" with 1 <= P <= Q <= 65535.
bool ParsePortRange(const std::string& text) {
  const auto dash = text.find('-');
  auto first = ParseCount(text.substr(0, dash), 65535);
  auto last = dash == std::string::npos ? first : ParseCount(text.substr(dash + 1), 65535);
  return first && last && *first >= 1 && *first <= *last;
}

// Empty when `spec` is a budget libnumarena_preload.so accepts, else what is wrong.
std::string CheckBudget(const std::string& spec) {
  if (spec == "system") return "";
  if (spec.rfind("quota:", 0) == 0) {
    auto bytes = ParseByteSize(std::string_view(spec).substr(6));
    if (bytes.ok() && *bytes > 0) return "";
    return absl::StrCat("--budget '", Excerpt(spec), "': the quota must be a positive size, e.g. quota:8G",
                        bytes.ok() ? "" : absl::StrCat(" (", bytes.status().message(), ")"));
  }
  return absl::StrCat("--budget '", Excerpt(spec), "': use 'system' or 'quota:SIZE' (e.g. quota:8G)");
}

// The preload library: NUMARENA_PRELOAD_LIBRARY, else beside this binary, else ../<libdir>.
// An absolute path (LD_PRELOAD would resolve a relative one against the program's cwd).
std::optional<std::string> FindPreload(std::string* tried) {
  std::vector<std::filesystem::path> candidates;
  if (const char* named = std::getenv("NUMARENA_PRELOAD_LIBRARY"); named != nullptr && *named) {
    candidates.emplace_back(named);
  } else {
    std::error_code error;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
    if (!error) {
      candidates.push_back(self.parent_path() / kPreloadName);
      candidates.push_back(self.parent_path() / ".." / NUMARENA_INSTALL_LIBDIR / kPreloadName);
    }
  }
  for (const auto& candidate : candidates) {
    if (!tried->empty()) tried->append(", ");
    tried->append(candidate.string());
    std::error_code error;
    if (std::filesystem::is_regular_file(candidate, error)) {
      return std::filesystem::absolute(candidate, error).lexically_normal().string();
    }
  }
  return std::nullopt;
}

int RunRun(const RunOptions& options, const std::vector<std::string>& args) {
  std::optional<std::string> policy_text;
  std::string policy_option;
  std::optional<std::string> budget;
  std::optional<std::string> metrics_port;
  const std::size_t program_at = 0;
  if (!options.metrics_port.empty()) {
    if (!ParsePortRange(options.metrics_port)) {
      return Fail("run", absl::StrCat("--metrics-port '", options.metrics_port,
                                      "': a TCP port number from 1 to 65535, or a range P-Q (P <= Q)"));
    }
    metrics_port = options.metrics_port;
    // The address is checked here as the server would read it, so a typo is a usage error
    // now and not a message from every process of the tree.
    auto probe = MetricsHttpServer::Listen(MetricsListenAddress(options.metrics_listen, 0),
                                           [] { return StatusOr<std::string>(""); });
    if (!probe.ok()) {
      return Fail("run", absl::StrCat("--metrics-listen ", options.metrics_listen, ": ",
                                      probe.status().message()));
    }
  }
  if (options.budget) {
    if (std::string problem = CheckBudget(*options.budget); !problem.empty()) {
      return Fail("run", problem);
    }
    budget = options.budget;
  }
  auto policies = options.policies;
  if (options.local) policies.emplace_back("--local", "");
  if (policies.size() > 1) {
    return Fail("run", absl::StrCat(policies[0].first, " and ", policies[1].first,
                                    ": give one placement policy"));
  }
  if (policies.size() == 1) {
    policy_option = policies[0].first;
    policy_text = policy_option == "--local" ? std::optional<std::string>("local")
                                             : PolicyFromOption(policy_option, policies[0].second);
  }
  if (!policy_text) {
    return Fail("run",
                "no placement policy: give one of --membind, --preferred, --interleave, "
                "--weighted, --local, --policy (numarena help run)");
  }
  if (program_at >= args.size()) {
    return Fail("run", "no program to run: numarena run POLICY -- PROGRAM [ARGS...]");
  }

  auto policy = Policy::Parse(*policy_text);
  if (!policy.ok()) {
    return Fail("run", absl::StrCat(policy_option, ": ", policy.status().message()));
  }
  auto topology = Topology::system();
  if (!topology.ok()) return Fail("run", std::string(topology.status().message()));
  if (Status valid = policy->Validate(**topology); !valid.ok()) {
    return Fail("run", absl::StrCat(policy_option, " ", policy->ToString(), ": ", valid.message()));
  }
  // The program inherits this process's address-space limit: a limit numarena's reservations
  // do not fit under is said now instead of as failed allocations in the program.
  if (Status room = CheckAddressSpaceLimit(
          ReservedAddressSpace(*policy, static_cast<int>((*topology)->node_ids().size())),
          /*in_use=*/0, absl::StrCat(policy_option, " ", policy->ToString()));
      !room.ok()) {
    return Fail("run", std::string(room.message()));
  }

  std::string tried;
  std::optional<std::string> preload = FindPreload(&tried);
  if (!preload) {
    return Fail("run", absl::StrCat("no ", kPreloadName, " (looked for ", tried,
                                    "); install numarena with it, or set "
                                    "NUMARENA_PRELOAD_LIBRARY to its path"));
  }

  std::string ld_preload = *preload;
  if (const char* existing = std::getenv("LD_PRELOAD"); existing != nullptr && *existing) {
    ld_preload = absl::StrCat(*preload, ":", existing);
  }
  if (setenv("LD_PRELOAD", ld_preload.c_str(), 1) != 0 ||
      setenv("NUMARENA_POLICY", policy->ToString().c_str(), 1) != 0 ||
      (budget ? setenv("NUMARENA_BUDGET", budget->c_str(), 1) : unsetenv("NUMARENA_BUDGET")) != 0 ||
      (metrics_port ? setenv("NUMARENA_METRICS_PORT", metrics_port->c_str(), 1)
                    : unsetenv("NUMARENA_METRICS_PORT")) != 0 ||
      (metrics_port ? setenv("NUMARENA_METRICS_LISTEN", options.metrics_listen.c_str(), 1)
                    : unsetenv("NUMARENA_METRICS_LISTEN")) != 0 ||
      (options.metrics_devices.empty()
           ? unsetenv("NUMARENA_METRICS_DEVICES")
           : setenv("NUMARENA_METRICS_DEVICES",
                    absl::StrJoin(options.metrics_devices, ",").c_str(), 1)) != 0 ||
      (options.huge_pages && setenv("NUMARENA_HUGE_PAGES", "1", 1) != 0)) {
    return Fail("run", absl::StrCat("cannot set the environment: ", std::strerror(errno)));
  }

  std::vector<char*> argv;
  for (std::size_t i = program_at; i < args.size(); ++i) {
    argv.push_back(const_cast<char*>(args[i].c_str()));
  }
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int error = errno;
  std::cerr << "numarena run: cannot run '" << args[program_at] << "': " << std::strerror(error)
            << (error == ENOENT && args[program_at].find('/') == std::string::npos
                    ? " (not found in PATH)"
                    : "")
            << "\n";
  return 127;
}

CommandRunner SetupRun(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  app.footer(kDescription);
  // Without "--" the first word that is not an option starts the program.
  app.prefix_command();
  auto policy = [&](const char* flag, const char* type, const char* help) {
    app.add_option_function<std::string>(
           flag, [options, flag](const std::string& v) { options->policies.emplace_back(flag, v); },
           help)
        ->type_name(type);
  };
  policy("--membind", "NODES", "pages only on NODES (e.g. 1, 0-1): bind(NODES)");
  policy("--preferred", "NODES",
         "on the first node while it has memory, then the next listed, then the nearest: "
         "preferred(NODES), e.g. --preferred 2,0");
  policy("--interleave", "NODES", "pages round-robin over NODES: interleave(NODES)");
  policy("--weighted", "N=W,...", "2 MiB chunks in proportion to the weights: weighted(N:W,...)");
  app.add_flag("--local", options->local,
               "each allocation on the node of the CPU the thread runs on");
  app.add_flag("--huge-pages", options->huge_pages,
               "transparent huge pages for blocks of 2 MiB and more (NUMARENA_HUGE_PAGES=1); "
               "without it the program's memory is in base pages, as under glibc, jemalloc, "
               "tcmalloc and mimalloc");
  policy("--policy", "POLICY",
         "any policy string: bind(NODES), preferred(NODES), interleave(NODES), weighted(N:W,...), "
         "target(bandwidth|latency|capacity[@NODE|@any]) (the memory tier the kernel's HMAT "
         "ranks best from the node) or local, optionally followed by /strict, /advisory or "
         "/chunk=SIZE, e.g. 'bind(0-1)/advisory', 'weighted(0:3,1:1)/chunk=64K', "
         "'target(bandwidth)'");
  app.add_option_function<std::string>(
         "--budget", [options](const std::string& spec) { options->budget = spec; },
                 "'system': a full node makes malloc return NULL (errno ENOMEM) and new throw "
                 "std::bad_alloc, instead of an OOM kill; 'quota:SIZE': the same with SIZE bytes "
                 "of numarena memory per node (e.g. quota:8G)")
      ->type_name("system|quota:SIZE");
  app.add_option("--metrics-port", options->metrics_port,
                 "the program serves numarena's metrics (Prometheus text) at "
                 "http://127.0.0.1:P/metrics; with a range P-Q every process of the tree that "
                 "execs (vLLM's and SGLang's workers) takes the first free port of it, so each "
                 "serves its own; a process that finds every port taken serves none")
      ->type_name("P|P-Q");
  app.add_option("--metrics-listen", options->metrics_listen,
                 "the address the metrics are served on: 127.0.0.1 (the default), 0.0.0.0 or :: "
                 "for every interface, or one address of this machine")
      ->type_name("ADDR");
  app.add_option("--metrics-device", options->metrics_devices,
                 "bus id of a GPU or NIC the program uses (repeatable): its metrics add "
                 "numarena_device_distance, which the DeviceOnRemoteNumaNode alert watches")
      ->type_name("BUS_ID")
      ->expected(1, 1 << 20);
  CLI::App* self = &app;
  return [options, self] {
    // The parser stopped at the first word it did not know. Without "--" that word starts
    // the program, unless it looks like an option; with "--" it should not be there.
    std::vector<std::string> rest = self->remaining();
    if (!rest.empty() &&
        ((rest[0].size() > 1 && rest[0][0] == '-') || !ProgramArguments().empty())) {
      bool option = rest[0].size() > 1 && rest[0][0] == '-';
      return Fail("run", absl::StrCat(option ? "unknown option '" : "unexpected argument '",
                                      rest[0], "' (numarena help run lists the options)"));
    }
    return RunRun(*options, ProgramArguments().empty() ? rest : ProgramArguments());
  };
}

}  // namespace

NUMARENA_COMMAND_WITH_PROGRAM(run, "run a program with numarena as its malloc (LD_PRELOAD)",
                              SetupRun);

}  // namespace numarena::cli
