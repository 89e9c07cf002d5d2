// Runs the built `numarena` tool (NUMARENA_CLI) from a test, capturing exit status, stdout
// and stderr, for the CLI tests (cli_topo_test, cli_doctor_test, cli_ops_test).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace numarena::testing {

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;

  std::vector<std::string> lines() const {
    std::vector<std::string> result;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) result.push_back(line);
    return result;
  }
};

// `numarena <args>`; args are passed through /bin/sh, so quote what needs quoting. With
// `timeout_seconds` > 0 the run is killed after that long and exit_code is 124 (timeout(1)),
// so a test of something that could hang fails instead of hanging. `shell_setup` runs in
// the same shell first, e.g. "ulimit -s 1048576" to set a limit for the tool alone.
inline CliRun RunCli(const std::string& args, int timeout_seconds = 0,
                     const std::string& shell_setup = "") {
  static int counter = 0;
  std::string base =
      (std::filesystem::temp_directory_path() /
       ("numarena_cli_ops." + std::to_string(::getpid()) + "." + std::to_string(++counter)))
          .string();
  std::string out_file = base + ".out", err_file = base + ".err";
  std::string command =
      (shell_setup.empty() ? "" : shell_setup + "; ") +
      (timeout_seconds > 0 ? "timeout -k 5 " + std::to_string(timeout_seconds) + " " : "") + "'" +
      NUMARENA_CLI + "' " + args + " >'" + out_file + "' 2>'" + err_file + "'";
  int status = std::system(command.c_str());
  auto slurp = [](const std::string& path) {
    std::string text;
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      char buffer[4096];
      std::size_t n;
      while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) text.append(buffer, n);
      std::fclose(f);
    }
    std::remove(path.c_str());
    return text;
  };
  CliRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = slurp(out_file);
  run.err = slurp(err_file);
  return run;
}

// "--sysfs-root <fixtures>/<name>/sys" (the proc tree beside it is read too).
inline std::string FixtureRoot(const std::string& name) {
  return std::string("--sysfs-root '") + NUMARENA_FIXTURES + "/" + name + "/sys'";
}

}  // namespace numarena::testing
