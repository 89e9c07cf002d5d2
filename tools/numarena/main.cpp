// Entry point of the `numarena` tool: one CLI11 parser for every registered subcommand.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>

#include "absl/strings/str_cat.h"
#include "cli_options.hpp"
#include "command.hpp"
#include "numarena/version.h"

namespace numarena::cli {

std::vector<Command>& Commands() {
  static std::vector<Command> commands;
  return commands;
}

std::vector<std::string>& ProgramArguments() {
  static std::vector<std::string> words;
  return words;
}

int Fail(const char* command, const std::string& message) {
  std::cerr << "numarena " << command << ": " << message << "\n";
  return 2;
}

namespace {

constexpr const char* kFooter =
    "Options take their value as --opt VALUE or --opt=VALUE; -- ends the options. Node lists\n"
    "take ids and ranges (0-3, 0,2,4-5). Exit status: 0 success, 1 problems found (doctor\n"
    "--check), 2 a usage or runtime error, said in one line on stderr.";

// The one-line message for a CLI11 parse error of `command` ("" for the top level).
std::string Explain(const CLI::ParseError& error, const std::string& command) {
  const std::string help =
      command.empty() ? "numarena --help lists the commands"
                      : absl::StrCat("numarena help ", command, " lists the options");
  std::string what = error.what();
  // ExtrasError: "The following argument(s) was/were not expected: A B".
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    std::string first = what.substr(what.find(": ") + 2);
    first = first.substr(0, first.find(' '));
    if (command.empty() && !first.empty() && first[0] != '-') {
      return absl::StrCat("unknown command '", first, "' (", help, ")");
    }
    bool option = first.size() > 1 && first[0] == '-';
    return absl::StrCat(option ? "unknown option '" : "unexpected argument '", first, "' (", help,
                        ")");
  }
  // ArgumentMismatch for a missing value: "--opt: 1 required TYPE missing".
  if (std::size_t at = what.find(": 1 required "); at != std::string::npos) {
    std::string type = what.substr(at + 13);
    type = type.substr(0, type.rfind(" missing"));
    const char* kind = type == "DIR"     ? "a directory"
                       : type == "N"     ? "a number"
                                         : nullptr;
    return kind != nullptr ? absl::StrCat(what.substr(0, at), " needs ", kind)
                           : absl::StrCat(what.substr(0, at), " needs a value (", type, ")");
  }
  return absl::StrCat(what, " (", help, ")");
}

}  // namespace
}  // namespace numarena::cli

int main(int argc, char** argv) {
  using namespace numarena::cli;
  CLI::App app("numarena: NUMA placement, audit and measurement for inference servers", "numarena");
  app.require_subcommand(0, 1);
  app.fallthrough(false);
  bool version = false;
  app.add_flag("--version", version, "print the version and exit");

  auto commands = Commands();
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return std::strcmp(a.name, b.name) < 0; });
  std::map<std::string, std::pair<CLI::App*, CommandRunner>> runners;
  for (const Command& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    runners[c.name] = {sub, c.setup(*sub)};
    // A command's own description (set as its footer) comes before the common conventions.
    std::string footer;
    AppendWrapped(footer, sub->get_footer(), "", 92);
    sub->footer(footer.empty() ? std::string(kFooter) : absl::StrCat(footer, "\n", kFooter));
  }
  // After the commands: CLI11 copies a parent's footer into the subcommands it adds, and a
  // command without a description of its own would print the conventions twice.
  app.footer(kFooter);
  std::string help_topic;
  CLI::App* help = app.add_subcommand("help", "print the help of a command: numarena help CMD");
  help->add_option("command", help_topic, "the command")->type_name("CMD");

  if (argc < 2) {
    std::cerr << app.help();
    return 2;
  }
  // A command that runs a program: the parser sees only what comes before the first "--".
  for (const Command& c : commands) {
    if (!c.takes_program || std::strcmp(argv[1], c.name) != 0) continue;
    for (int i = 2; i < argc; ++i) {
      if (std::strcmp(argv[i], "--") != 0) continue;
      ProgramArguments().assign(argv + i + 1, argv + argc);
      argc = i;
      break;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    // --help of the top level or of the command it followed.
    for (auto& [name, entry] : runners) {
      if (entry.first->parsed()) {
        std::cout << entry.first->help("numarena");
        return 0;
      }
    }
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& error) {
    std::string command;
    for (auto& [name, entry] : runners) {
      if (entry.first->parsed()) command = name;
    }
    if (help->parsed()) command = "help";
    std::cerr << "numarena" << (command.empty() ? "" : " " + command) << ": "
              << Explain(error, command) << "\n";
    return 2;
  }
  if (version) {
    std::cout << "numarena " << numarena::version() << "\n";
    return 0;
  }
  if (help->parsed()) {
    if (help_topic.empty()) {
      // app.help() would print the help of the selected subcommand, `help` itself.
      std::cout << app.get_formatter()->make_help(&app, "numarena", CLI::AppFormatMode::Normal);
      return 0;
    }
    auto it = runners.find(help_topic);
    if (it == runners.end()) {
      return Fail("help", absl::StrCat("unknown command '", help_topic,
                                       "' (numarena --help lists the commands)"));
    }
    std::cout << it->second.first->help("numarena");
    return 0;
  }
  for (auto& [name, entry] : runners) {
    if (entry.first->parsed()) return entry.second();
  }
  std::cerr << app.help();
  return 2;
}
