// Reading the kernel's description of the machine for discovery: the files a SystemReader
// gives, with errors that name the file as the user can open it.
//
// A file discovery cannot do without is read with ReadRequired (NotFound says what it was
// needed for); an optional one with ReadOptional (absent is not an error); a file that is
// present but says something unexpected is DataLoss naming it (Parse, Malformed), because
// the model of the machine would otherwise be wrong.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena::topology_internal {

class KernelFiles {
 public:
  explicit KernelFiles(const SystemReader& reader) : reader_(reader) {}

  const SystemReader& reader() const { return reader_; }

  std::string Display(const std::string& path) const { return reader_.DisplayPath(path); }

  // The reader's error with the file named (a reader's own message may already do so).
  Status WithPath(const Status& status, const std::string& path) const {
    std::string shown = Display(path);
    std::string message(status.message());
    if (message.find(shown) != std::string::npos) return status;
    return Status(status.code(), absl::StrCat(shown, ": ", message));
  }

  // A file discovery cannot do without; `why` tells the user what it is needed for.
  StatusOr<std::string> ReadRequired(const std::string& path, std::string_view why) const {
    auto text = reader_.Read(path);
    if (text.ok()) return text;
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat(Display(path), ": missing (needed for ",
                                              absl::string_view(why.data(), why.size()), ")"));
    }
    return WithPath(text.status(), path);
  }

  // A file that may be absent: nullopt then. Other read errors are returned.
  StatusOr<std::optional<std::string>> ReadOptional(const std::string& path) const {
    auto text = reader_.Read(path);
    if (text.ok()) return std::optional<std::string>(*std::move(text));
    if (absl::IsNotFound(text.status())) return std::optional<std::string>();
    return WithPath(text.status(), path);
  }

  // Runs a parser over a file's text; a failure becomes DataLoss naming the file.
  template <typename Parser>
  auto Parse(const std::string& path, const std::string& text, Parser parser) const
      -> decltype(parser(std::string_view())) {
    auto parsed = parser(std::string_view(text));
    if (parsed.ok()) return parsed;
    return absl::DataLossError(absl::StrCat(Display(path), ": ", parsed.status().message()));
  }

  Status Malformed(const std::string& path, const std::string& why) const {
    return absl::DataLossError(absl::StrCat(Display(path), ": ", why));
  }

  // Entry names of a directory, with the reader's errors naming it.
  StatusOr<std::vector<std::string>> List(const std::string& dir) const {
    auto entries = reader_.List(dir);
    if (entries.ok() || absl::IsNotFound(entries.status())) return entries;
    return WithPath(entries.status(), dir);
  }

 private:
  const SystemReader& reader_;
};

// The PCI devices numarena places memory near (GPUs, NICs, InfiniBand), sorted by bus id,
// with their node when the firmware gives one. `topology` holds the nodes already read.
// Oddities that do not stop discovery (no numa_node file, numa_node -1, an offline node)
// are appended to `warnings`.
[[nodiscard]] StatusOr<std::vector<PciDevice>> ReadPciDevices(const KernelFiles& files,
                                                              const Topology& topology,
                                                              std::vector<std::string>& warnings);

// What the process may use: its CPU affinity, Mems_allowed and the cgroup's cpuset (v2, or
// v1's cpuset hierarchy), intersected with `topology`'s nodes. Limits a user should act on
// are appended to `warnings`.
[[nodiscard]] StatusOr<ProcessScope> ReadProcessScope(const KernelFiles& files,
                                                      const Topology& topology,
                                                      std::vector<std::string>& warnings);

}  // namespace numarena::topology_internal
