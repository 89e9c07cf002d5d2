// `numarena advise --for TARGET` and GPUs named by index: each target's output parses as what
// it claims to be (shell by bash -n, the systemd drop-in as INI, the Pod as YAML) and carries
// the node's own numbers; `--gpu` refuses a device that is not a GPU.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.hpp"

namespace {

using numarena::testing::CliRun;
using numarena::testing::RunCli;

const std::string kEpyc = " --sysfs-root " + std::string(NUMARENA_FIXTURES) + "/epyc9654-snc4/sys";

// Writes `text` to a temporary file and runs `command` with {} replaced by its path; the
// command's exit status.
int Check(const std::string& text, std::string command) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("numarena_advise_for." + std::to_string(::getpid())))
                               .string();
  std::ofstream(path) << text;
  command.replace(command.find("{}"), 2, "'" + path + "'");
  int status = std::system(command.c_str());
  std::remove(path.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

CliRun Advise(const std::string& args) {
  CliRun run = RunCli("advise " + args + kEpyc);
  INFO("advise " << args << "\nstderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  return run;
}

TEST_CASE("advise --for: the launchers' lines are valid shell with their own flags",
          "[cli][advise]") {
  struct Expect {
    const char* target;
    const char* words;
  };
  for (Expect e : {Expect{"vllm", "vllm serve \"$MODEL\" --numa-bind --numa-bind-nodes 0\n"},
                   Expect{"sglang",
                          "python3 -m sglang.launch_server --model-path \"$MODEL\" "
                          "--numa-node 0\n"},
                   Expect{"llama.cpp",
                          "numactl --cpunodebind=0 --membind=0 llama-server -m "
                          "\"$MODEL\" --numa numactl --threads 96\n"},
                   Expect{"torchrun", "torchrun --numa-binding=node --nproc_per_node=1"}}) {
    INFO(e.target);
    CliRun run = Advise(std::string("--gpu cuda:0 --for ") + e.target);
    CHECK(run.out.find(e.words) != std::string::npos);
    CHECK(Check(run.out, "bash -n {}") == 0);
  }
  CHECK(Advise("--gpu 0 --for vllm").out.find("export CUDA_VISIBLE_DEVICES=0\n") !=
        std::string::npos);
  // A node, no GPU: no CUDA variables.
  CliRun node = Advise("--node 2 --for llama.cpp");
  CHECK(node.out.find("--cpunodebind=2 --membind=2") != std::string::npos);
  CHECK(node.out.find("CUDA") == std::string::npos);
  CHECK(Check(node.out, "bash -n {}") == 0);
}

TEST_CASE(
    "advise --for systemd: an INI drop-in with NUMAPolicy, NUMAMask, CPUAffinity and the "
    "health check",
    "[cli][advise]") {
  CliRun run = Advise("--gpu 41:00.0 --for systemd");
  const std::string parse =
      "python3 -c 'import configparser, sys; p = configparser.ConfigParser(strict=True, "
      "interpolation=None); p.optionxform = str; p.read_file(open(sys.argv[1])); s = "
      "p[\"Service\"]; "
      "assert s[\"NUMAPolicy\"] == \"bind\", s[\"NUMAPolicy\"]; assert s[\"NUMAMask\"] == \"0\"; "
      "assert s[\"CPUAffinity\"] == \"0-47,96-143\", s[\"CPUAffinity\"]; "
      "assert s[\"ExecStartPre\"].endswith(\"/numarena doctor --check --gpu 0000:41:00.0\"), "
      "s[\"ExecStartPre\"]; assert s[\"ExecStartPre\"].startswith(\"/\"); "
      "assert s[\"Environment\"] == \"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0\"' {}";
  CHECK(Check(run.out, parse) == 0);
}

TEST_CASE("advise --for k8s: a YAML Pod", "[cli][advise]") {
  CliRun run = Advise("--node 1 --for k8s");
  const std::string parse =
      "python3 -c 'import yaml, sys; pod = yaml.safe_load(open(sys.argv[1])); "
      "assert pod[\"kind\"] == \"Pod\"; r = pod[\"spec\"][\"containers\"][0][\"resources\"]; "
      "assert r[\"requests\"] == r[\"limits\"], r' {}";
  CHECK(Check(run.out, parse) == 0);
  CliRun bad = RunCli("advise --node 1 --for emacs" + kEpyc);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err ==
        "numarena advise: --for 'emacs': use one of vllm, sglang, llama.cpp, "
        "torchrun, systemd, k8s\n");
}

TEST_CASE(
    "advise and doctor: --gpu takes an index or cuda:N in PCI address order, and refuses a non-GPU",
    "[cli][advise][doctor]") {
  const std::string by_address = Advise("--gpu 0000:41:00.0").out;
  CHECK(Advise("--gpu 0").out == by_address);
  CHECK(Advise("--gpu cuda:0").out == by_address);
  for (const std::string command : {"advise", "doctor"}) {
    INFO(command);
    // The fixture's InfiniBand HCA (class 0x020700) is not a GPU.
    CliRun hca = RunCli(command + " --gpu 0000:c1:00.0" + kEpyc);
    CHECK(hca.exit_code == 2);
    CHECK(hca.err == "numarena " + command +
                         ": 0000:c1:00.0 is an infiniband (PCI class 0x020700), not a GPU: GPUs "
                         "are display controllers (class 0x03xxxx) or processing accelerators "
                         "(0x12xxxx); `numarena topo` lists the devices\n");
    CliRun missing = RunCli(command + " --gpu cuda:1" + kEpyc);
    CHECK(missing.exit_code == 2);
    CHECK(missing.err.find("no GPU of index 1: 1 GPU found (cuda:0 = 0000:41:00.0)") !=
          std::string::npos);
  }
  // The process checks against the GPU named by index: the same as by address.
  const std::string ops =
      " --pid 4242 --json --sysfs-root " + std::string(NUMARENA_FIXTURES) + "/ops-good/sys";
  CliRun doctor = RunCli("doctor --gpu cuda:0" + ops);
  INFO("stderr: " << doctor.err);
  CHECK(doctor.exit_code == 0);
  CHECK(doctor.out.find("process_") != std::string::npos);
  CHECK(doctor.out == RunCli("doctor --gpu 41:00.0" + ops).out);
}

}  // namespace

TEST_CASE(
    "advise --hugepages: the Pod asks for hugepages-2Mi and the systemd drop-in reserves "
    "them on the node",
    "[cli][advise][hugetlb]") {
  const std::string cxl = " --sysfs-root " + std::string(NUMARENA_FIXTURES) + "/cxl-hmat/sys";
  CliRun pod = RunCli("advise --node 1 --hugepages 1G --for k8s" + cxl);
  INFO("stderr: " << pod.err);
  REQUIRE(pod.exit_code == 0);
  const std::string parse_pod =
      "python3 -c 'import yaml, sys; pod = yaml.safe_load(open(sys.argv[1])); "
      "r = pod[\"spec\"][\"containers\"][0][\"resources\"]; "
      "assert r[\"requests\"] == r[\"limits\"], r; "
      "assert r[\"limits\"][\"hugepages-2Mi\"] == \"1Gi\", r; "
      "assert pod[\"spec\"][\"volumes\"][0][\"emptyDir\"][\"medium\"] == \"HugePages-2Mi\"; "
      "m = pod[\"spec\"][\"containers\"][0][\"volumeMounts\"][0]; "
      "assert m[\"name\"] == \"hugepages\", m' {}";
  CHECK(Check(pod.out, parse_pod) == 0);

  CliRun unit = RunCli("advise --node 1 --hugepages 1G --for systemd" + cxl);
  REQUIRE(unit.exit_code == 0);
  // Two ExecStartPre lines (systemd runs them in order): configparser keeps the last, so the
  // reservation is checked by line.
  CHECK(unit.out.find("\nExecStartPre=+/bin/sh -c 'echo 512 > /sys/devices/system/node/node1/"
                      "hugepages/hugepages-2048kB/nr_hugepages'\n") != std::string::npos);
  CHECK(Check(unit.out,
              "python3 -c 'import configparser, sys; p = configparser.ConfigParser(strict=False, "
              "interpolation=None); p.read_file(open(sys.argv[1])); assert p.has_section("
              "\"Service\")' {}") == 0);

  CliRun text = RunCli("advise --node 0 --hugepages 1G" + cxl);
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("huge pages:\n    # node 0's own huge page pools") != std::string::npos);
  CHECK(text.out.find("    echo 524 > ") != std::string::npos);

  CliRun bad = RunCli("advise --node 0 --hugepages lots" + cxl);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err == "numarena advise: --hugepages needs a size such as 4G, not 'lots'\n");
  CliRun no_pool = RunCli("advise --node 2 --hugepages 1G" + cxl);
  CHECK(no_pool.exit_code == 2);
  CHECK(no_pool.err.find("node 2 has no pool of 2 MiB huge pages") != std::string::npos);
}
