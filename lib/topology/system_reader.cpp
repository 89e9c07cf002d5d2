// The rooted SystemReader: kernel paths ("/sys/...", "/proc/...") mapped onto two directory
// trees. With the real roots it is how discovery sees the live machine; with a fixture's
// roots it is how tests and `numarena topo --sysfs-root` see a recorded one. All file
// access goes through the OS layer (os::ReadFile / os::ListDirectory), and the live
// process's affinity through os::ProcessAffinity.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

// Strips trailing slashes so "fixture/sys/" and "fixture/sys" map alike ("/" stays "/").
std::string NormalizeRoot(std::string root) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

class RootedReader final : public SystemReader {
 public:
  RootedReader(std::string sysfs_root, std::string procfs_root)
      : sysfs_root_(NormalizeRoot(std::move(sysfs_root))),
        procfs_root_(NormalizeRoot(std::move(procfs_root))),
        live_(sysfs_root_ == "/sys" && procfs_root_ == "/proc") {}

  StatusOr<std::string> Read(const std::string& path) const override {
    auto mapped = Map(path);
    if (!mapped.ok()) return mapped.status();
    return os::ReadFile(*mapped);
  }

  StatusOr<std::vector<std::string>> List(const std::string& path) const override {
    auto mapped = Map(path);
    if (!mapped.ok()) return mapped.status();
    return os::ListDirectory(*mapped);
  }

  bool is_live_system() const override { return live_; }

  StatusOr<std::vector<int>> CpuAffinity() const override {
    if (!live_) return SystemReader::CpuAffinity();
    // The process's CPUs, not the calling thread's: Topology::system() is discovered once,
    // by whichever thread asks first, which may be a worker pinned to one node.
    return os::ProcessAffinity();
  }

  std::string DisplayPath(const std::string& path) const override {
    auto mapped = Map(path);
    return mapped.ok() ? *mapped : path;
  }

 private:
  // "/sys" + rest -> sysfs_root + rest; the prefix must end at a path separator so that
  // "/system" is not read as "/sys" + "tem".
  static bool HasRoot(const std::string& path, std::string_view root) {
    return path.compare(0, root.size(), root) == 0 &&
           (path.size() == root.size() || path[root.size()] == '/');
  }

  StatusOr<std::string> Map(const std::string& path) const {
    if (HasRoot(path, "/sys")) return sysfs_root_ + path.substr(4);
    if (HasRoot(path, "/proc")) return procfs_root_ + path.substr(5);
    return absl::InvalidArgumentError(
        absl::StrCat("SystemReader: '", path, "' is outside /sys and /proc"));
  }

  std::string sysfs_root_;
  std::string procfs_root_;
  bool live_;
};

}  // namespace

std::unique_ptr<SystemReader> MakeRootedReader(std::string sysfs_root, std::string procfs_root) {
  return std::make_unique<RootedReader>(std::move(sysfs_root), std::move(procfs_root));
}

}  // namespace numarena
