#pragma once
/// Where this process stands in a multi-process run, read from the variables that torchrun,
/// `ftopt-launch`, and the usual srun/mpirun wrappers set:
///   MASTER_ADDR  host of rank 0's TCPStore       MASTER_PORT  its port
///   RANK         this process, 0..WORLD_SIZE-1   WORLD_SIZE   how many processes
///   LOCAL_RANK   this process on its node (picks the GPU on CUDA builds)
/// A process started alone (none of them set) is rank 0 of 1. Every bad value is an
/// ftopt::Error naming the variable and the value.

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include <ftopt/error.hpp>

namespace ftopt::parallel {

struct Environment {
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 29500;  ///< torch.distributed's default port
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;

  /// The launcher's variables; unset ones keep the defaults above (a single process), but a
  /// WORLD_SIZE above 1 needs RANK, MASTER_ADDR and MASTER_PORT as well.
  static Environment from_env() {
    Environment env;
    const auto world = variable("WORLD_SIZE");
    if (world) env.world_size = integer("WORLD_SIZE", *world);
    if (const auto rank = variable("RANK")) env.rank = integer("RANK", *rank);
    env.local_rank = env.rank;
    if (const auto local = variable("LOCAL_RANK")) env.local_rank = integer("LOCAL_RANK", *local);
    if (env.world_size > 1) {
      for (const char* needed : {"RANK", "MASTER_ADDR", "MASTER_PORT"})
        ftopt::detail::check(variable(needed).has_value(), "parallel::Environment: WORLD_SIZE=", env.world_size,
                      " but ", needed, " is not set (a launcher such as torchrun or ftopt-launch sets it)");
    }
    if (const auto addr = variable("MASTER_ADDR")) env.master_addr = *addr;
    if (const auto port = variable("MASTER_PORT")) {
      const int value = integer("MASTER_PORT", *port);
      ftopt::detail::check(value >= 1 && value <= 65535, "parallel::Environment: MASTER_PORT=", *port,
                    " is not a port number (1-65535)");
      env.master_port = static_cast<std::uint16_t>(value);
    }
    env.validate();
    return env;
  }

  void validate() const {
    ftopt::detail::check(world_size >= 1, "parallel::Environment: WORLD_SIZE must be >= 1, got ", world_size);
    ftopt::detail::check(rank >= 0 && rank < world_size, "parallel::Environment: RANK=", rank,
                  " is outside 0..", world_size - 1, " (WORLD_SIZE=", world_size, ")");
    ftopt::detail::check(local_rank >= 0, "parallel::Environment: LOCAL_RANK must be >= 0, got ", local_rank);
    ftopt::detail::check(!master_addr.empty(), "parallel::Environment: MASTER_ADDR is empty");
  }

  /// "MASTER_ADDR:MASTER_PORT", for messages.
  std::string master() const { return master_addr + ":" + std::to_string(master_port); }

private:
  static std::optional<std::string> variable(const char* name) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  }

  static int integer(const char* name, const std::string& text) {
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text.c_str(), &end, 10);
    ftopt::detail::check(errno == 0 && end != text.c_str() && *end == '\0' && value >= 0 && value <= 1'000'000,
                  "parallel::Environment: ", name, "='", text, "' is not a non-negative integer");
    return static_cast<int>(value);
  }
};

} // namespace ftopt::parallel
