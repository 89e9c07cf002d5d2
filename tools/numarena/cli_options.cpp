#include "cli_options.hpp"

#include <CLI/CLI.hpp>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace numarena::cli {

void MachineRoots::AddTo(CLI::App& app) {
  app.add_option_function<std::string>(
         "--sysfs-root",
         [this](const std::string& dir) {
           sysfs = dir;
           sysfs_given = true;
         },
         "read a recorded sys tree (or a host's, mounted elsewhere) instead of /sys")
      ->type_name("DIR");
  app.add_option_function<std::string>(
         "--procfs-root", [this](const std::string& dir) { procfs = dir; },
         "read a recorded proc tree instead of /proc (default with --sysfs-root: DIR/../proc)")
      ->type_name("DIR");
}

std::string MachineRoots::procfs_root() const {
  if (procfs) return *procfs;
  if (!sysfs_given) return "/proc";
  std::string root = (std::filesystem::path(sysfs) / ".." / "proc").lexically_normal().string();
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

StatusOr<std::vector<int>> ParseNodeList(const std::string& text) {
  auto bad = [&](absl::string_view part, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a node list (", why, part.empty() ? "" : ": '", part,
        part.empty() ? "" : "'", "); give ids and ranges such as 0-3 or 0,2,4-5, from 0 to ",
        kMaxNodeId));
  };
  auto id = [](absl::string_view digits, int* out) {
    return !digits.empty() && digits.find_first_not_of("0123456789") == absl::string_view::npos &&
           digits.size() <= 4 && absl::SimpleAtoi(digits, out) && *out <= kMaxNodeId;
  };
  std::vector<bool> seen(kMaxNodeId + 1, false);
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    if (part.empty()) return bad(part, "an empty item");
    int first = 0, last = 0;
    if (std::size_t dash = part.find('-'); dash != absl::string_view::npos) {
      if (!id(part.substr(0, dash), &first) || !id(part.substr(dash + 1), &last)) {
        return bad(part, "not a range of node ids");
      }
      if (first > last) return bad(part, "a range from high to low");
    } else {
      if (!id(part, &first)) return bad(part, "not a node id");
      last = first;
    }
    for (int node = first; node <= last; ++node) seen[node] = true;
  }
  std::vector<int> nodes;
  for (int node = 0; node <= kMaxNodeId; ++node) {
    if (seen[node]) nodes.push_back(node);
  }
  return nodes;
}

std::optional<std::uint64_t> ParseCount(const std::string& text, std::uint64_t max) {
  std::uint64_t value = 0;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(text, &value) || value > max) {
    return std::nullopt;
  }
  return value;
}

std::optional<double> ParseSeconds(const std::string& text) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value) || !(value > 0) ||
      value > 86400) {
    return std::nullopt;
  }
  return value;
}

void WatchOptions::AddTo(CLI::App& app) {
  app.add_option("--watch", seconds_text, "print the view again every SECONDS (0.1 to 86400)")
      ->type_name("SECONDS");
  app.add_option("--count", count_text, "with --watch: stop after N views (default: never)")
      ->type_name("N");
}

Status WatchOptions::Check() {
  if (!seconds_text.empty()) {
    auto value = ParseSeconds(seconds_text);
    if (!value || *value < 0.1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--watch needs a number of seconds from 0.1 to 86400, not '", seconds_text, "'"));
    }
    seconds = *value;
  }
  if (!count_text.empty()) {
    if (seconds_text.empty()) return absl::InvalidArgumentError("--count needs --watch SECONDS");
    auto value = ParseCount(count_text, 1u << 30);
    if (!value || *value == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--count needs a number of views from 1 to 1073741824, not '", count_text,
                       "'"));
    }
    count = *value;
  }
  return absl::OkStatus();
}

int Watch(const WatchOptions& watch, bool json, const std::function<int()>& once) {
  if (watch.seconds == 0) return once();
  auto next = std::chrono::steady_clock::now();
  for (std::uint64_t view = 0; watch.count == 0 || view < watch.count; ++view) {
    if (view > 0) {
      next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(watch.seconds));
      std::this_thread::sleep_until(next);
      if (!json) std::cout << "\n";
    }
    if (int status = once(); status != 0) return status;
    // A watcher reads the output as it comes (a pipe to grep, a file tailed).
    std::cout.flush();
  }
  return 0;
}

void AppendWrapped(std::string& out, const std::string& text, const std::string& indent,
                   std::size_t width) {
  std::size_t column = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(start, end - start);
    start = end + 1;
    if (word.empty()) continue;
    if (column == 0) {
      out += indent;
      column = indent.size();
    } else if (column + 1 + word.size() > width) {
      out += "\n" + indent;
      column = indent.size();
    } else {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
  }
  if (column > 0) out += '\n';
}

ProgressLine::ProgressLine(std::string command)
    : command_(std::move(command)), enabled_(::isatty(STDERR_FILENO) == 1) {
  winsize size{};
  if (enabled_ && ::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1) {
    width_ = size.ws_col;
  }
}

void ProgressLine::Show(const std::string& text) {
  if (!enabled_) return;
  std::string line = absl::StrCat("numarena ", command_, ": ", text);
  // One column short of the width: a line that fills the last column wraps on some terminals.
  if (line.size() >= width_) line.resize(width_ - 1);
  std::cerr << "\r" << line << "\x1b[K" << std::flush;
  shown_ = true;
}

void ProgressLine::Clear() {
  if (!shown_) return;
  std::cerr << "\r\x1b[K" << std::flush;
  shown_ = false;
}

}  // namespace numarena::cli
