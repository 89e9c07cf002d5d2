// Option parsing shared by the operations subcommands (doctor, advise, stat, report).
//
// Each command declares the flags and valued options it accepts; values come as
// "--opt VALUE" or "--opt=VALUE"; bare words are positional. --sysfs-root/--procfs-root
// follow `numarena topo`: with only --sysfs-root DIR, the proc tree beside it (DIR/../proc)
// is read. Unknown options are an error naming the option and the command's --help.
//
//   OpsArgs args({"--json", "--check"}, {"--gpu", "--pid"});
//   if (Status s = args.Parse("doctor", argv_rest); !s.ok()) return Fail("doctor", ...);
//   if (args.has("--json")) ...;  std::optional<std::string> gpu = args.value("--gpu");
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena::cli {

class OpsArgs {
 public:
  OpsArgs(std::set<std::string> flags, std::set<std::string> valued)
      : flags_(std::move(flags)), valued_(std::move(valued)) {
    flags_.insert("--help");
    valued_.insert("--sysfs-root");
    valued_.insert("--procfs-root");
  }

  [[nodiscard]] Status Parse(const char* command, std::span<const std::string> args) {
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (arg == "-h") {
        present_.insert("--help");
        continue;
      }
      if (arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
        positional_.push_back(arg);
        continue;
      }
      std::string name = arg;
      std::optional<std::string> inline_value;
      if (std::size_t eq = arg.find('='); eq != std::string::npos) {
        name = arg.substr(0, eq);
        inline_value = arg.substr(eq + 1);
      }
      if (flags_.count(name) != 0 && !inline_value) {
        present_.insert(name);
      } else if (valued_.count(name) != 0) {
        if (!inline_value && i + 1 >= args.size()) {
          return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
        }
        std::string value = inline_value ? *inline_value : args[++i];
        if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
        values_[name] = value;
      } else {
        return absl::InvalidArgumentError(absl::StrCat("unknown option '", arg, "' (numarena ",
                                                       command, " --help lists the options)"));
      }
    }
    return absl::OkStatus();
  }

  bool has(const std::string& flag) const { return present_.count(flag) != 0; }
  std::optional<std::string> value(const std::string& option) const {
    auto it = values_.find(option);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  const std::vector<std::string>& positional() const { return positional_; }

  std::string sysfs_root() const { return value("--sysfs-root").value_or("/sys"); }
  std::string procfs_root() const {
    if (auto proc = value("--procfs-root")) return *proc;
    if (auto sys = value("--sysfs-root")) {
      std::string root = (std::filesystem::path(*sys) / ".." / "proc").lexically_normal().string();
      while (root.size() > 1 && root.back() == '/') root.pop_back();
      return root;
    }
    return "/proc";
  }
  std::unique_ptr<SystemReader> reader() const {
    return MakeRootedReader(sysfs_root(), procfs_root());
  }

 private:
  std::set<std::string> flags_;
  std::set<std::string> valued_;
  std::set<std::string> present_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// Appends `text` to `out` wrapped at `width` columns, each line starting with `indent`.
inline void AppendWrapped(std::string& out, const std::string& text, const std::string& indent,
                          std::size_t width = 92) {
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

}  // namespace numarena::cli
