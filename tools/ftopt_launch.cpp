// ftopt-launch: runs a program as N ranks on this machine, the way torchrun --standalone does.
//
//   ftopt-launch --nproc 2 [--log-dir DIR] [--master-port P] [--grace-seconds S] -- program args...
//
// Each rank gets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (and
// OMP_NUM_THREADS=1 unless set). Exits with the status of the first rank that failed, else 0.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <ftopt/parallel/support/launch.hpp>

namespace {

long number(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  ftopt::detail::check(!value.empty() && *end == '\0' && n >= 0, "ftopt-launch: ", flag,
                       " needs a non-negative integer, got '", value, "'");
  return n;
}

} // namespace

int main(int argc, char** argv) try {
  ftopt::parallel::LaunchOptions options;
  std::vector<std::string> command;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--") {
      command.assign(argv + i + 1, argv + argc);
      break;
    }
    ftopt::detail::check(i + 1 < argc, "ftopt-launch: ", flag, " needs a value");
    const std::string value = argv[++i];
    if (flag == "--nproc") options.nproc = static_cast<int>(number(flag, value));
    else if (flag == "--master-addr") options.master_addr = value;
    else if (flag == "--master-port") options.master_port = static_cast<std::uint16_t>(number(flag, value));
    else if (flag == "--log-dir") options.log_dir = value;
    else if (flag == "--grace-seconds") options.grace = std::chrono::seconds(number(flag, value));
    else ftopt::detail::fail("ftopt-launch: unknown option ", flag,
                             " (known: --nproc, --master-addr, --master-port, --log-dir, --grace-seconds, then -- program args)");
  }
  ftopt::detail::check(!command.empty(), "ftopt-launch: nothing to run; usage: ftopt-launch --nproc N -- program args...");
  return ftopt::parallel::launch(options, command).code();
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 2;
}
