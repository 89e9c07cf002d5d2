// Progress of long commands: `numarena bandwidth` and `numarena decode` write a progress line
// on stderr when it is a terminal (here a pseudo-terminal), rewritten in place and erased
// before the result, and nothing at all on stderr when it is a pipe. stdout carries the
// result unchanged either way.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

namespace {

struct Run {
  std::string out, err;
  int status = -1;
};

// Reads `fd` to its end (EOF, or EIO once a pty's other side is closed), at most 60 s.
std::string Drain(int fd) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  char buffer[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    text.append(buffer, std::size_t(n));
  }
  return text;
}

// Runs the numarena CLI with `args`, stdout on a pipe and stderr on a pseudo-terminal (when
// `tty`) or on a pipe.
Run RunCli(const std::vector<std::string>& args, bool tty) {
  int out[2];
  REQUIRE(::pipe(out) == 0);
  int err_read = -1, err_write = -1;
  if (tty) {
    REQUIRE(::openpty(&err_read, &err_write, nullptr, nullptr, nullptr) == 0);
  } else {
    int err[2];
    REQUIRE(::pipe(err) == 0);
    err_read = err[0];
    err_write = err[1];
  }
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err_write, STDERR_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::close(err_read);
    ::close(err_write);
    std::vector<char*> argv{const_cast<char*>(NUMARENA_CLI)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err_write);
  Run run;
  // stdout is small (one table or JSON object): read stderr first, then stdout.
  run.err = Drain(err_read);
  run.out = Drain(out[0]);
  ::close(err_read);
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

bool EndsWith(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

TEST_CASE("bandwidth: progress on a terminal's stderr, erased at the end, none on a pipe",
          "[cli][progress]") {
  const std::vector<std::string> args = {"bandwidth", "--bytes", "1M", "--seconds", "0.2",
                                         "--threads", "1", "--json"};
  Run tty = RunCli(args, true);
  INFO("stderr on a terminal: " << tty.err);
  CHECK(tty.status == 0);
  CHECK(tty.out.rfind("{", 0) == 0);
  CHECK(tty.err.rfind("\rnumarena bandwidth: [0/", 0) == 0);
  CHECK(tty.err.find(" figures, ") != std::string::npos);
  CHECK(tty.err.find("arrays on memory node ") != std::string::npos);
  CHECK(tty.err.find(": read\x1b[K") != std::string::npos);
  CHECK(tty.err.find(": latency\x1b[K") != std::string::npos);
  CHECK(tty.err.find('\n') == std::string::npos);  // one line, rewritten in place
  CHECK(EndsWith(tty.err, "\r\x1b[K"));             // erased before the result

  Run piped = RunCli(args, false);
  CHECK(piped.status == 0);
  CHECK(piped.out.rfind("{", 0) == 0);
  CHECK(piped.err.empty());
}

TEST_CASE("decode: progress on a terminal's stderr, erased at the end, none on a pipe",
          "[cli][progress]") {
  const std::vector<std::string> args = {"decode", "--sequences", "2", "--prompt", "16",
                                         "--steps", "3", "--layers", "1", "--heads", "2",
                                         "--head-dim", "8", "--config", "membind,full"};
  Run tty = RunCli(args, true);
  INFO("stderr on a terminal: " << tty.err);
  CHECK(tty.status == 0);
  CHECK(tty.out.find("membind") != std::string::npos);
  CHECK(tty.err.rfind("\rnumarena decode: [1/2 configurations] membind: prefill\x1b[K", 0) == 0);
  CHECK(tty.err.find("\rnumarena decode: [2/2 configurations] full: decode step 1 of 3\x1b[K") !=
        std::string::npos);
  CHECK(tty.err.find('\n') == std::string::npos);
  CHECK(EndsWith(tty.err, "\r\x1b[K"));

  Run piped = RunCli(args, false);
  CHECK(piped.status == 0);
  CHECK(piped.out.find("membind") != std::string::npos);
  CHECK(piped.err.empty());
}
