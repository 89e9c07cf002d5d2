// Entry point of the `numarena` tool: dispatches to the registered subcommands.
#include <algorithm>
#include <cstring>
#include <iostream>

#include "command.hpp"

namespace numarena::cli {

std::vector<Command>& Commands() {
  static std::vector<Command> commands;
  return commands;
}

int Fail(const char* command, const std::string& message) {
  std::cerr << "numarena " << command << ": " << message << "\n";
  return 2;
}

namespace {

void PrintUsage(std::ostream& out) {
  auto commands = Commands();
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return std::strcmp(a.name, b.name) < 0; });
  out << "usage: numarena <command> [options]   (numarena <command> --help for its options)\n\n"
         "commands:\n";
  for (const Command& c : commands) {
    out << "  " << c.name << std::string(10 - std::min<std::size_t>(9, std::strlen(c.name)), ' ')
        << c.summary << "\n";
  }
}

}  // namespace
}  // namespace numarena::cli

int main(int argc, char** argv) {
  using namespace numarena::cli;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    PrintUsage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : Commands()) {
    if (std::strcmp(c.name, argv[1]) == 0) {
      std::vector<std::string> args(argv + 2, argv + argc);
      return c.run(args);
    }
  }
  std::cerr << "numarena: unknown command '" << argv[1] << "'\n";
  PrintUsage(std::cerr);
  return 2;
}
