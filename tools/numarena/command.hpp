// Subcommands of the `numarena` tool register themselves here, so each lives in one file.
// One parser serves every command: CLI11 (Debian's libcli11-dev), set up in main.cpp.
//
//   CommandRunner SetupTopo(CLI::App& app);       // adds topo's options to its subcommand
//   NUMARENA_COMMAND(topo, "print NUMA topology, devices and limits", SetupTopo);
//
// A setup function declares the command's options on `app` (bound to state it owns, e.g. a
// shared_ptr captured by the runner) and returns the function main() calls once the command
// line parsed. Conventions, the same for every command (tests/cli/cli_conventions_test.cpp):
// "--opt value" and "--opt=value"; "--" ends the options; --help/-h prints the help on stdout,
// exit 0; `numarena help CMD` the same; node lists take ranges (ParseNodeList).
//
// Exit status: 0 success, 1 "problems found" (doctor --check), 2 usage or runtime error,
// printed as one line on stderr: "numarena <cmd>: <message>".
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace numarena::cli {

using CommandRunner = std::function<int()>;
using CommandSetup = CommandRunner (*)(CLI::App& app);

struct Command {
  const char* name;
  const char* summary;
  CommandSetup setup;
  // `run`: everything after the first "--" is a program and its arguments, which main()
  // keeps from the parser and hands over in ProgramArguments().
  bool takes_program = false;
};

std::vector<Command>& Commands();

// For a command with takes_program: the words after its first "--" (empty when none).
std::vector<std::string>& ProgramArguments();

struct CommandRegistrar {
  explicit CommandRegistrar(Command command) { Commands().push_back(command); }
};

// Prints "numarena <command>: <message>" on stderr and returns 2.
int Fail(const char* command, const std::string& message);

}  // namespace numarena::cli

#define NUMARENA_COMMAND(name, summary, setup) \
  static ::numarena::cli::CommandRegistrar numarena_command_##name({#name, summary, setup})
#define NUMARENA_COMMAND_WITH_PROGRAM(name, summary, setup) \
  static ::numarena::cli::CommandRegistrar numarena_command_##name({#name, summary, setup, true})
