#pragma once
/// parallel::launch: starts N copies of a program on this machine the way torchrun does
/// (`torchrun --standalone --nproc-per-node N`): each gets MASTER_ADDR, MASTER_PORT, RANK,
/// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and OMP_NUM_THREADS (1 unless set, as torchrun).
/// When one copy fails, the others get `grace` to stop on their own (a parallel::Ddp rank
/// notices the lost peer and says so), then SIGTERM, then SIGKILL. The `ftopt-launch` tool
/// (tools/ftopt_launch.cpp) is this function behind a command line.
///
///   int status = parallel::launch({.nproc = 2, .log_dir = "logs"}, {"./train", "--epochs", "3"});
///
/// POSIX only (posix_spawn); no LibTorch needed.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ftopt/error.hpp>

extern char** environ;

namespace ftopt::parallel {

struct LaunchOptions {
  int nproc = 2;                                ///< processes (ranks) on this machine
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 0;                ///< 0: a free port, picked here
  /// Each rank's stdout and stderr go to <log_dir>/rank<r>.log; empty: inherited.
  std::filesystem::path log_dir;
  std::chrono::milliseconds grace = std::chrono::seconds(30);  ///< after a failure, before SIGTERM
  std::ostream* log = &std::cerr;               ///< the launcher's own messages

  void validate() const {
    ftopt::detail::check(nproc >= 1 && nproc <= 1024, "parallel::launch: nproc must be in 1..1024, got ", nproc);
    ftopt::detail::check(!master_addr.empty(), "parallel::launch: master_addr is empty");
    ftopt::detail::check(grace.count() >= 0, "parallel::launch: grace must be >= 0, got ", grace.count(), " ms");
  }
};

/// How each rank ended: exit code, or 128 + signal number for a signal (as shells report).
struct LaunchResult {
  std::vector<int> status;
  std::optional<int> first_failed;  ///< the rank that failed first, if any
  int code() const { return first_failed ? status[static_cast<std::size_t>(*first_failed)] : 0; }
};

/// A TCP port nobody listens on right now (bind to port 0 and ask). Another process may take it
/// before rank 0 binds it; torchrun's standalone mode takes the same chance.
inline std::uint16_t free_port(const std::string& addr = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ftopt::detail::check(fd >= 0, "parallel::free_port: socket(): ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  if (::inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) == 0;
  const int error = errno;
  ::close(fd);
  ftopt::detail::check(ok, "parallel::free_port: no free port on ", addr, ": ", std::strerror(error));
  return ntohs(a.sin_port);
}

namespace detail {

inline int exit_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

/// This process's environment with `set` added or replaced, as "KEY=value" strings.
inline std::vector<std::string> environment_with(const std::map<std::string, std::string>& set) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    if (!set.contains(entry.substr(0, entry.find('=')))) out.push_back(entry);
  }
  for (const auto& [key, value] : set) out.push_back(key + "=" + value);
  return out;
}

inline std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

} // namespace detail

/// Runs `command` (program and arguments; the program is looked up in PATH) as `nproc` ranks
/// and waits for all of them.
inline LaunchResult launch(const LaunchOptions& options, std::vector<std::string> command) {
  options.validate();
  ftopt::detail::check(!command.empty(), "parallel::launch: no program to run");
  const std::uint16_t port = options.master_port ? options.master_port : free_port(options.master_addr);
  if (!options.log_dir.empty()) std::filesystem::create_directories(options.log_dir);
  auto argv = detail::pointers(command);

  std::vector<pid_t> pids(static_cast<std::size_t>(options.nproc), -1);
  LaunchResult result;
  result.status.assign(pids.size(), -1);
  for (int r = 0; r < options.nproc; ++r) {
    std::map<std::string, std::string> vars{
        {"MASTER_ADDR", options.master_addr},      {"MASTER_PORT", std::to_string(port)},
        {"RANK", std::to_string(r)},               {"WORLD_SIZE", std::to_string(options.nproc)},
        {"LOCAL_RANK", std::to_string(r)},         {"LOCAL_WORLD_SIZE", std::to_string(options.nproc)}};
    if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp == nullptr || *omp == '\0') vars["OMP_NUM_THREADS"] = "1";
    auto env = detail::environment_with(vars);
    auto envp = detail::pointers(env);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    std::string log_path;
    if (!options.log_dir.empty()) {
      log_path = (options.log_dir / ("rank" + std::to_string(r) + ".log")).string();
      posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    }
    pid_t pid = -1;
    const int error = posix_spawnp(&pid, argv.front(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (error != 0) {
      for (pid_t started : pids)
        if (started > 0) ::kill(started, SIGKILL), ::waitpid(started, nullptr, 0);
      ftopt::detail::fail("parallel::launch: cannot start '", command.front(), "' for rank ", r, ": ",
                          std::strerror(error));
    }
    pids[static_cast<std::size_t>(r)] = pid;
  }

  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> failed_at;
  bool terminated = false;
  std::size_t running = pids.size();
  while (running > 0) {
    for (std::size_t r = 0; r < pids.size(); ++r) {
      int wait_status = 0;
      if (pids[r] <= 0 || ::waitpid(pids[r], &wait_status, WNOHANG) != pids[r]) continue;
      result.status[r] = detail::exit_status(wait_status);
      pids[r] = -1;
      --running;
      if (result.status[r] != 0 && !result.first_failed) {
        result.first_failed = static_cast<int>(r);
        failed_at = Clock::now();
        *options.log << "ftopt-launch: rank " << r << " exited with status " << result.status[r]
                     << "; the other ranks have " << options.grace.count() << " ms to stop\n";
      }
    }
    if (running > 0 && failed_at && Clock::now() - *failed_at > options.grace) {
      const bool force = Clock::now() - *failed_at > options.grace + std::chrono::seconds(5);
      if (!terminated || force) {
        if (!terminated) *options.log << "ftopt-launch: stopping the remaining ranks (SIGTERM, SIGKILL after 5 s)\n";
        for (pid_t p : pids)
          if (p > 0) ::kill(p, force ? SIGKILL : SIGTERM);
        terminated = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

} // namespace ftopt::parallel
