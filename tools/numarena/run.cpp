// `numarena run`: starts an unmodified program with numarena as its malloc and operator new
// (libnumarena_preload.so through LD_PRELOAD; lib/preload/preload.cpp), placing its heap by
// one policy, optionally under a per-node budget.
//
//   numarena run [--membind NODES | --preferred N | --interleave NODES | --weighted N=W,... |
//                 --local | --policy POLICY] [--budget system|quota:SIZE] [--metrics-port P]
//                 -- PROGRAM ARGS...
//
// It checks the policy against this machine and the budget spec, finds the preload library
// (NUMARENA_PRELOAD_LIBRARY, else beside this binary, else in ../<libdir>), sets
// LD_PRELOAD (in front of any value already there), NUMARENA_POLICY, NUMARENA_BUDGET and
// NUMARENA_METRICS_PORT,
// and execs the program (searched in PATH), which keeps this process's id. Exit status: the
// program's; 2 for a usage error, a bad policy or budget, or no preload library; 127 when the
// program cannot be executed.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "command.hpp"
#include "numarena/format.hpp"
#include "numarena/policy.hpp"
#include "numarena/topology.hpp"

#ifndef NUMARENA_INSTALL_LIBDIR
#define NUMARENA_INSTALL_LIBDIR "lib"
#endif

namespace numarena::cli {
namespace {

constexpr const char* kPreloadName = "libnumarena_preload.so";

constexpr const char* kUsage =
    "usage: numarena run POLICY [--budget system|quota:SIZE] [--metrics-port P] -- PROGRAM ARGS\n"
    "Runs PROGRAM with numarena as its malloc and operator new (LD_PRELOAD of\n"
    "libnumarena_preload.so); its heap is placed by POLICY, one of:\n"
    "  --membind NODES       pages only on NODES (e.g. 1, 0-1): bind(NODES)\n"
    "  --preferred N         on node N while it has memory, then the nearest: preferred(N)\n"
    "  --interleave NODES    pages round-robin over NODES: interleave(NODES)\n"
    "  --weighted N=W,...    2 MiB chunks in proportion to the weights: weighted(N:W,...)\n"
    "  --local               each allocation on the node of the CPU the thread runs on\n"
    "  --policy POLICY       any policy string (syntax: include/numarena/policy.hpp), e.g.\n"
    "                        'bind(0-1)/advisory', 'weighted(0:3,1:1)/chunk=64K'\n"
    "  --budget system       a full node makes malloc return NULL (errno ENOMEM) and new\n"
    "                        throw std::bad_alloc, instead of an OOM kill; capacity = the\n"
    "                        node's memory, usage = what the kernel says is used\n"
    "  --budget quota:SIZE   the same, with SIZE bytes of numarena memory per node (e.g. 8G)\n"
    "  --metrics-port P      the program serves numarena's metrics (Prometheus text) at\n"
    "                        http://HOST:P/metrics: node and process memory per node, the\n"
    "                        arena, the budget (a child process that finds P taken serves none)\n"
    "The program inherits LD_PRELOAD (prepended), NUMARENA_POLICY and NUMARENA_BUDGET, so\n"
    "what it execs runs under numarena too. NUMARENA_PRELOAD_LIBRARY names the library if it\n"
    "is not beside this binary or in ../" NUMARENA_INSTALL_LIBDIR
    ".\n"
    "Exit status: the program's; 2 for a usage error; 127 when PROGRAM cannot be run.\n";

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

// Empty when `spec` is a budget libnumarena_preload.so accepts, else what is wrong.
std::string CheckBudget(const std::string& spec) {
  if (spec == "system") return "";
  if (spec.rfind("quota:", 0) == 0) {
    auto bytes = ParseByteSize(std::string_view(spec).substr(6));
    if (bytes.ok() && *bytes > 0) return "";
    return absl::StrCat("--budget '", spec, "': the quota must be a positive size, e.g. quota:8G",
                        bytes.ok() ? "" : absl::StrCat(" (", bytes.status().message(), ")"));
  }
  return absl::StrCat("--budget '", spec, "': use 'system' or 'quota:SIZE' (e.g. quota:8G)");
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

int RunRun(std::span<const std::string> args) {
  std::optional<std::string> policy_text;
  std::string policy_option;
  std::optional<std::string> budget;
  std::optional<std::string> metrics_port;
  std::size_t program_at = args.size();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      program_at = i + 1;
      break;
    }
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (arg.empty() || arg[0] != '-') {  // the program, without "--"
      program_at = i;
      break;
    }
    std::string option = arg, value;
    bool has_value = false;
    if (const auto eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
      option = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const bool takes_value = option == "--membind" || option == "--preferred" ||
                             option == "--interleave" || option == "--weighted" ||
                             option == "--policy" || option == "--budget" ||
                             option == "--metrics-port";
    if (takes_value && !has_value) {
      if (i + 1 >= args.size() || args[i + 1] == "--") {
        return Fail("run", absl::StrCat(option, " needs a value (numarena run --help)"));
      }
      value = args[++i];
    }
    if (option == "--metrics-port") {
      char* end = nullptr;
      const long port = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || port < 1 || port > 65535) {
        return Fail(
            "run", absl::StrCat("--metrics-port '", value, "': a TCP port number from 1 to 65535"));
      }
      metrics_port = std::to_string(port);
      continue;
    }
    if (option == "--budget") {
      if (std::string problem = CheckBudget(value); !problem.empty()) return Fail("run", problem);
      budget = value;
      continue;
    }
    std::optional<std::string> text = option == "--local" && !has_value
                                          ? std::optional<std::string>("local")
                                      : takes_value ? PolicyFromOption(option, value)
                                                    : std::nullopt;
    if (!text) {
      return Fail("run", absl::StrCat("unknown option '", arg,
                                      "' (numarena run --help lists the options)"));
    }
    if (policy_text) {
      return Fail("run",
                  absl::StrCat(policy_option, " and ", option, ": give one placement policy"));
    }
    policy_text = *text;
    policy_option = option;
  }
  if (!policy_text) {
    return Fail("run",
                "no placement policy: give one of --membind, --preferred, --interleave, "
                "--weighted, --local, --policy (numarena run --help)");
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
                    : unsetenv("NUMARENA_METRICS_PORT")) != 0) {
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

}  // namespace

NUMARENA_COMMAND(run, "run a program with numarena as its malloc (LD_PRELOAD)", RunRun);

}  // namespace numarena::cli
