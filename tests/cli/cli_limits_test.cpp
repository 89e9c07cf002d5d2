// `numarena bandwidth` and `numarena decode` with numbers that size threads or memory beyond
// what the machine can give: each is refused with exit status 2 and one line naming the
// option and its limit (or the sizes and the free memory), and a thread the system refuses
// to start is reported the same way. None may abort (an uncaught std::system_error or
// std::bad_alloc was the failure), hang, or start allocating first.
#include <catch2/catch.hpp>

#include <string>

#include "cli_run.hpp"

namespace {

using numarena::testing::CliRun;
using numarena::testing::RunCli;

constexpr int kTimeoutSeconds = 60;

// A small, quick measurement: what the limit tests add their option to.
const std::string kQuickBandwidth = "bandwidth --bytes 1M --seconds 0.1 --no-latency";
const std::string kQuickDecode =
    "decode --sequences 1 --prompt 16 --steps 1 --layers 1 --heads 1 --head-dim 8 "
    "--config no_binding";

void ExpectRefused(const CliRun& run, const std::string& words) {
  INFO("stdout: " << run.out << "\nstderr: " << run.err);
  CHECK(run.exit_code == 2);
  CHECK(run.out.empty());
  CHECK(run.err.find(words) != std::string::npos);
  CHECK(run.err.find('\n') == run.err.size() - 1);  // one line
}

TEST_CASE("cli limits: thread counts beyond the limit are refused", "[cli]") {
  ExpectRefused(RunCli(kQuickBandwidth + " --threads 100000", kTimeoutSeconds),
                "numarena bandwidth: --threads needs a number of threads per CPU node from 1 to "
                "1024");
  ExpectRefused(RunCli(kQuickDecode + " --threads 100000", kTimeoutSeconds),
                "numarena decode: --threads needs a number of worker threads from 1 to 1024");
  ExpectRefused(RunCli(kQuickBandwidth + " --threads 1025", kTimeoutSeconds), "from 1 to 1024");
}

TEST_CASE("cli limits: sizes beyond memory are refused before anything is allocated", "[cli]") {
  // 2^64 and more: the multiplication by the suffix used to wrap.
  ExpectRefused(RunCli("bandwidth --bytes 99999999999G", kTimeoutSeconds),
                "--bytes needs a size such as");
  ExpectRefused(RunCli("bandwidth --bytes 16777216T", kTimeoutSeconds),
                "--bytes needs a size such as");
  // Three arrays far larger than any node's free memory.
  ExpectRefused(RunCli("bandwidth --bytes 1048576G --no-latency", kTimeoutSeconds),
                "three arrays of 1.0 PiB need 3.0 PiB on memory node");
  ExpectRefused(RunCli("bandwidth --seconds 1e300", kTimeoutSeconds), "at most 86400 (one day)");
  ExpectRefused(
      RunCli("decode --sequences 100000 --prompt 100000 --config no_binding", kTimeoutSeconds),
      "at once (KV cache 298.1 TiB, worker scratch ");
  ExpectRefused(RunCli("decode --sequences 2000000000 --prompt 2000000000 --steps 2000000000 "
                       "--layers 16 --heads 8 --head-dim 128",
                       kTimeoutSeconds),
                "the run would need more than 16 EiB");
  // A model shape whose bytes per token alone overflow is refused as such.
  ExpectRefused(RunCli("decode --sequences 1 --prompt 16 --steps 1 --layers 2000000000 "
                       "--heads 2000000000 --head-dim 2000000000",
                       kTimeoutSeconds),
                "bytes of KV per token does not fit in 64 bits");
}

TEST_CASE("cli limits: a thread the system refuses is an error, not an abort", "[cli]") {
  // 1 TiB stacks: no system overcommits one mapping that large (and 128 of them fill the
  // address space), so the very first worker cannot start.
  const std::string huge_stacks = "ulimit -s 1073741824";
  ExpectRefused(RunCli(kQuickBandwidth + " --threads 4", kTimeoutSeconds, huge_stacks),
                "could not start bandwidth worker 1 of 4: ");
  ExpectRefused(RunCli(kQuickDecode + " --threads 4", kTimeoutSeconds, huge_stacks),
                "could not start decode worker 1 of 4: ");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // A small address space: some workers start, then one is refused; those already running
  // must be released and joined, not left waiting for the others. (Sanitizers reserve
  // terabytes of address space at start, so this part runs in ordinary builds only.)
  const std::string small_address_space = "ulimit -v 600000";
  CliRun bandwidth =
      RunCli(kQuickBandwidth + " --threads 1000", kTimeoutSeconds, small_address_space);
  ExpectRefused(bandwidth, " of 1000: ");
  CHECK(bandwidth.err.find("could not start bandwidth worker 1 of") == std::string::npos);
  CliRun decode = RunCli(kQuickDecode + " --threads 1000", kTimeoutSeconds, small_address_space);
  ExpectRefused(decode, " of 1000: ");
  CHECK(decode.err.find("could not start decode worker 1 of") == std::string::npos);
#endif
}

}  // namespace
