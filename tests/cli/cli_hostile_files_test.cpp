// The `numarena` tool on recorded trees in which a kernel file is replaced by something
// hostile (tests/support/hostile_files.hpp): a link to /dev/zero or /dev/urandom, a FIFO, a
// socket, a directory, a dangling or looping link. Every command that reads the tree must
// answer at once, with exit status 2 and one line naming the file and what is wrong with it,
// or (for a dangling link to an optional file) carry on as if the file were absent; never
// abort, never hang, never eat memory.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "hostile_files.hpp"

namespace {

namespace fs = std::filesystem;
using numarena::testing::Hostile;

constexpr int kTimeoutSeconds = 20;

// What the first line of stderr must contain for each kind.
std::string Expected(Hostile kind) {
  switch (kind) {
    case Hostile::kLinkToZero:
    case Hostile::kLinkToUrandom:
      return "a character device, not a regular file";
    case Hostile::kFifo:
      return "a FIFO, not a regular file";
    case Hostile::kSocket:
      return "(errno 6 ENXIO)";
    case Hostile::kDirectory:
      return "Is a directory (errno 21 EISDIR)";
    case Hostile::kDanglingLink:
      return "missing";
    case Hostile::kLoopingLink:
      return "(errno 40 ELOOP)";
  }
  return "?";
}

struct Target {
  std::string file;  // relative to the fixture
  bool required;     // a missing file is an error (else it is read as absent)
};

// Runs `command` on a copy of the laptop-1node fixture whose `target` is a `kind` entry and
// checks the answer.
void Check(const Target& target, Hostile kind, const std::string& command) {
  numarena::testing::TempDir dir;
  fs::copy(fs::path(NUMARENA_FIXTURES) / "laptop-1node", dir.path(), fs::copy_options::recursive);
  const fs::path file = dir.path() / target.file;
  numarena::testing::MakeHostile(file, kind);
  INFO(target.file << " as " << numarena::testing::HostileName(kind) << ", numarena " << command);
  auto run = numarena::testing::RunCli(
      command + " --sysfs-root '" + (dir.path() / "sys").string() + "'", kTimeoutSeconds);
  INFO("stderr: " << run.err);
  REQUIRE(run.exit_code != 124);  // timed out: the command hung
  if (kind == Hostile::kDanglingLink && !target.required) {
    CHECK(run.exit_code == 0);  // an optional file that is not there
    return;
  }
  REQUIRE(run.exit_code == 2);
  const std::string first_line = run.err.substr(0, run.err.find('\n'));
  CHECK(first_line.rfind("numarena ", 0) == 0);
  CHECK(first_line.find(file.string()) != std::string::npos);
  CHECK(first_line.find(Expected(kind)) != std::string::npos);
}

TEST_CASE("cli: hostile machine files give a clear error at once", "[cli]") {
  const Target targets[] = {
      {"sys/devices/system/node/node0/meminfo", true},
      {"sys/devices/system/node/online", true},
      {"sys/bus/pci/devices/0000:00:02.0/numa_node", false},
      {"proc/self/status", false},
  };
  for (Hostile kind : numarena::testing::AllHostile()) {
    for (const Target& target : targets) Check(target, kind, "topo");
    // The other commands that read the tree, on one file: they share the reader.
    for (const char* command : {"doctor", "budget", "report --json"}) {
      Check(targets[0], kind, command);
    }
  }
}

}  // namespace
