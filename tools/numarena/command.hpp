// Subcommands of the `numarena` tool register themselves here, so each lives in one file.
//
//   int RunTopo(std::span<const std::string> args);  // args exclude "numarena topo"
//   NUMARENA_COMMAND(topo, "print NUMA topology, devices and limits", RunTopo);
//
// Exit status convention: 0 success, 1 "problems found" (doctor --check), 2 usage or
// runtime error, printed as one line on stderr: "numarena <cmd>: <message>".
#pragma once

#include <span>
#include <string>
#include <vector>

namespace numarena::cli {

using CommandFunction = int (*)(std::span<const std::string> args);

struct Command {
  const char* name;
  const char* summary;
  CommandFunction run;
};

std::vector<Command>& Commands();

struct CommandRegistrar {
  explicit CommandRegistrar(Command command) { Commands().push_back(command); }
};

// Prints "numarena <command>: <message>" on stderr and returns 2.
int Fail(const char* command, const std::string& message);

}  // namespace numarena::cli

#define NUMARENA_COMMAND(name, summary, function) \
  static ::numarena::cli::CommandRegistrar numarena_command_##name({#name, summary, function})
