// The conventions every `numarena` command follows (issue 17), one test case per rule, each
// checked on every command it applies to.
#include <catch2/catch.hpp>

#include <regex>
#include <string>
#include <vector>

#include "cli_run.hpp"

namespace {

using numarena::testing::CliRun;
using numarena::testing::RunCli;

const std::string kFixtures = NUMARENA_FIXTURES;
const std::string kEpyc = " --sysfs-root " + kFixtures + "/epyc9654-snc4/sys";
const std::string kOps = " --sysfs-root " + kFixtures + "/ops-good/sys";

const std::vector<std::string> kCommands = {"advise", "bandwidth", "budget", "decode",
                                            "doctor", "exporter",  "report", "run",
                                            "stat",   "topo"};
// Those that read the machine: each takes --sysfs-root and --procfs-root.
const std::vector<std::string> kMachineCommands = {"advise", "bandwidth", "budget", "decode",
                                                   "doctor", "report",    "stat",   "topo"};

void ExpectUsageError(const CliRun& run, const std::string& prefix, const std::string& words) {
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  CHECK(run.exit_code == 2);
  CHECK(run.out.empty());
  CHECK(run.err.rfind(prefix, 0) == 0);
  CHECK(run.err.find(words) != std::string::npos);
  CHECK(run.err.find('\n') == run.err.size() - 1);  // one line
}

TEST_CASE("cli: --version prints the project version on stdout, exit 0", "[cli][conventions]") {
  CliRun run = RunCli("--version");
  INFO("stderr: " << run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out == std::string("numarena ") + NUMARENA_PROJECT_VERSION + "\n");
  CHECK(run.err.empty());
}

TEST_CASE("cli: --help and help CMD print the same help on stdout, exit 0, no source paths",
          "[cli][conventions]") {
  for (const std::string& command : kCommands) {
    INFO(command);
    CliRun help = RunCli(command + " --help");
    CliRun short_help = RunCli(command + " -h");
    CliRun help_command = RunCli("help " + command);
    CHECK(help.exit_code == 0);
    CHECK(help.err.empty());
    CHECK(help.out.rfind("Usage: numarena " + command, std::string::npos) != std::string::npos);
    CHECK(short_help.out == help.out);
    CHECK(help_command.exit_code == 0);
    CHECK(help_command.out == help.out);
    // An installed user has no source tree: the help must not send them into it.
    // (llama.cpp, a server `advise --for` knows, is not a source file.)
    const std::string text = std::regex_replace(help.out, std::regex(R"(llama\.cpp)"), "llama");
    CHECK_FALSE(std::regex_search(text, std::regex(R"((tools|include|lib|tests)/|\w\.[ch]pp\b)")));
    // The common conventions close every command's help, once.
    const std::string conventions = "Options take their value as --opt VALUE or --opt=VALUE";
    const auto first = help.out.find(conventions);
    CHECK(first != std::string::npos);
    CHECK(help.out.find(conventions, first + 1) == std::string::npos);
  }
  CliRun top = RunCli("--help");
  CHECK(top.exit_code == 0);
  for (const std::string& command : kCommands) CHECK(top.out.find("  " + command) != std::string::npos);
  CHECK(RunCli("help").out == top.out);
  ExpectUsageError(RunCli("help nosuch"), "numarena help: ", "unknown command 'nosuch'");
}

TEST_CASE("cli: an unknown option or argument is one line on stderr, exit 2",
          "[cli][conventions]") {
  for (const std::string& command : kCommands) {
    INFO(command);
    ExpectUsageError(RunCli(command + " --frobnicate"), "numarena " + command + ": ",
                     "unknown option '--frobnicate' (numarena help " + command +
                         " lists the options)");
  }
  ExpectUsageError(RunCli("topo extra"), "numarena topo: ", "unexpected argument 'extra'");
  ExpectUsageError(RunCli("frobnicate"), "numarena: ", "unknown command 'frobnicate'");
  // A missing value is named, not a page of usage.
  ExpectUsageError(RunCli("bandwidth --seconds"), "numarena bandwidth: ", "--seconds needs");
  ExpectUsageError(RunCli("budget --sysfs-root"), "numarena budget: ",
                   "--sysfs-root needs a directory");
}

TEST_CASE("cli: --opt value and --opt=value are the same", "[cli][conventions]") {
  const std::string root = kFixtures + "/epyc9654-snc4/sys";
  for (const std::string& command : {std::string("topo --json"), std::string("budget --json"),
                                     std::string("doctor --json"), std::string("advise --node 1")}) {
    INFO(command);
    CliRun spaced = RunCli(command + " --sysfs-root " + root);
    CliRun joined = RunCli(command + " --sysfs-root=" + root);
    CHECK(spaced.exit_code == 0);
    CHECK(joined.exit_code == spaced.exit_code);
    CHECK(joined.out == spaced.out);
  }
  CHECK(RunCli("advise --node=1" + kEpyc).out == RunCli("advise --node 1" + kEpyc).out);
  // Value checks are the command's own whichever form is used.
  ExpectUsageError(RunCli("bandwidth --seconds=0"), "numarena bandwidth: ",
                   "--seconds needs a positive number of seconds");
  ExpectUsageError(RunCli("decode --steps=0"), "numarena decode: ",
                   "--steps needs a positive whole number");
}

TEST_CASE("cli: node lists take ranges", "[cli][conventions]") {
  // The fixture's nodes are not this machine's: a measurement on node 3 fails when the
  // node is looked up, which shows the list was accepted and expanded.
  CliRun range = RunCli("bandwidth --cpu-nodes 0-3 --memory-nodes 0,2-3 --seconds 0.1 "
                        "--no-latency --bytes 1M --json" + kEpyc, 60);
  INFO("stderr: " << range.err);
  CHECK(range.err.find("is not a node list") == std::string::npos);
  CHECK(range.err.find("--cpu-nodes") == std::string::npos);
  ExpectUsageError(RunCli("bandwidth --cpu-nodes 3-1"), "numarena bandwidth: ",
                   "--cpu-nodes: '3-1' is not a node list (a range from high to low");
  ExpectUsageError(RunCli("bandwidth --memory-nodes 0,,1"), "numarena bandwidth: ",
                   "is not a node list (an empty item");
  ExpectUsageError(RunCli("bandwidth --cpu-nodes 1024"), "numarena bandwidth: ", "from 0 to 1023");
  // On this machine node 0 exists: 0-0 measures it.
  CliRun zero = RunCli("bandwidth --cpu-nodes 0-0 --memory-nodes 0 --seconds 0.1 --no-latency "
                       "--bytes 1M --json", 60);
  INFO("stderr: " << zero.err);
  CHECK(zero.exit_code == 0);
  CHECK(zero.out.find("\"cpu_nodes\":[0]") != std::string::npos);
}

TEST_CASE("cli: -- ends the options", "[cli][conventions]") {
  const std::string procfs = " --procfs-root " + kFixtures + "/ops-good/proc";
  CliRun before = RunCli("stat --json" + kOps + procfs + " 4242");
  CliRun after = RunCli("stat --json" + kOps + procfs + " -- 4242");
  CHECK(before.exit_code == 0);
  CHECK(after.exit_code == 0);
  CHECK(after.out == before.out);
  // After --, an option-looking word is an argument, not an option.
  CliRun json = RunCli("topo -- --json");
  CHECK(json.exit_code == 2);
  CHECK(json.out.empty());
#if NUMARENA_HAS_PRELOAD  // sanitizer builds make no libnumarena_preload.so for `run`
  // run: what follows -- is the program's, options included.
  CliRun program = RunCli("run --local -- sh -c 'echo \"$0 $1\"' --json x");
  INFO("stderr: " << program.err);
  CHECK(program.exit_code == 0);
  CHECK(program.out == "--json x\n");
#endif
}

TEST_CASE("cli: every command that reads the machine takes --sysfs-root and --procfs-root",
          "[cli][conventions]") {
  for (const std::string& command : kMachineCommands) {
    INFO(command);
    // A root that does not exist: refused by discovery, naming the file, not by the parser.
    CliRun run = RunCli(command + (command == "stat" ? " self" : "") +
                        " --sysfs-root /nonexistent-numarena --procfs-root=/nonexistent-proc");
    CHECK(run.exit_code == 2);
    CHECK(run.err.find("unknown option") == std::string::npos);
    CHECK(run.err.find("/nonexistent-numarena") != std::string::npos);
  }
}

TEST_CASE("cli: --watch repeats stat and budget", "[cli][conventions]") {
  CliRun budget = RunCli("budget --json --watch 0.1 --count 3" + kEpyc, 30);
  CHECK(budget.exit_code == 0);
  REQUIRE(budget.lines().size() == 3);
  for (const std::string& line : budget.lines()) {
    CHECK(line.rfind("{\"schema\":\"numarena.budget/1\"", 0) == 0);
  }
  const std::string procfs = " --procfs-root " + kFixtures + "/ops-good/proc";
  CliRun stat = RunCli("stat 4242 --watch=0.1 --count=2" + kOps + procfs, 30);
  CHECK(stat.exit_code == 0);
  std::size_t views = 0;
  for (std::size_t at = 0; (at = stat.out.find("Per-node memory of pid 4242", at)) != std::string::npos; ++at) {
    ++views;
  }
  CHECK(views == 2);
  ExpectUsageError(RunCli("budget --watch 0" + kEpyc), "numarena budget: ",
                   "--watch needs a number of seconds from 0.1 to 86400");
  ExpectUsageError(RunCli("stat self --count 2"), "numarena stat: ", "--count needs --watch");
}

}  // namespace
