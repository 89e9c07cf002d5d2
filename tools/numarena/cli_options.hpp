// Options and value parsers shared by the `numarena` commands (on top of CLI11).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace CLI {
class App;
}

namespace numarena::cli {

// --sysfs-root DIR / --procfs-root DIR, which every command that reads the machine takes.
// With only --sysfs-root DIR, the proc tree beside it (DIR/../proc) is read; when that does
// not exist the process may use everything the recorded tree shows.
struct MachineRoots {
  std::string sysfs = "/sys";
  std::optional<std::string> procfs;
  bool sysfs_given = false;

  void AddTo(CLI::App& app);
  std::string sysfs_root() const { return sysfs; }
  std::string procfs_root() const;
  std::unique_ptr<SystemReader> reader() const {
    return MakeRootedReader(sysfs_root(), procfs_root());
  }
};

// A node list as numactl takes it: ids and ranges separated by commas ("0-3", "0,2,4-5").
// Ascending, without duplicates. Node ids are 0..kMaxNodeId (the kernel's largest
// MAX_NUMNODES is 1024). InvalidArgument names the part that is wrong.
inline constexpr int kMaxNodeId = 1023;
[[nodiscard]] StatusOr<std::vector<int>> ParseNodeList(const std::string& text);

// A non-negative whole number no larger than `max`.
[[nodiscard]] std::optional<std::uint64_t> ParseCount(const std::string& text, std::uint64_t max);

// Seconds for --watch: a positive finite number, at most one day.
[[nodiscard]] std::optional<double> ParseSeconds(const std::string& text);

// --watch SECONDS [--count N] of `stat` and `budget`: run `once` (which prints one view),
// then again every SECONDS, N times in all (0: until interrupted). Each view after the
// first is preceded by a blank line in text mode. Returns the first non-zero status of
// `once`, or 0.
struct WatchOptions {
  std::string seconds_text;
  std::string count_text;
  void AddTo(CLI::App& app);
  // Validates the texts and sets `seconds` and `count`.
  [[nodiscard]] Status Check();
  double seconds = 0;   // 0: no --watch
  std::uint64_t count = 0;
};
int Watch(const WatchOptions& watch, bool json, const std::function<int()>& once);

// Progress of a long command on stderr, only when stderr is a terminal: one line
// "numarena CMD: TEXT", rewritten in place (carriage return, erase to end of line) and cut
// to the terminal's width so it never wraps; Clear() erases it before the result is printed.
// When stderr is not a terminal (a log file, a pipe, CI) enabled() is false and Show() and
// Clear() write nothing, so logs get no control characters.
class ProgressLine {
 public:
  explicit ProgressLine(std::string command);
  ~ProgressLine() { Clear(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  bool enabled() const { return enabled_; }
  void Show(const std::string& text);
  void Clear();

 private:
  std::string command_;
  bool enabled_ = false;
  bool shown_ = false;
  std::size_t width_ = 80;
};

// Appends `text` to `out` wrapped at `width` columns, each line starting with `indent`.
void AppendWrapped(std::string& out, const std::string& text, const std::string& indent,
                   std::size_t width = 92);

}  // namespace numarena::cli
