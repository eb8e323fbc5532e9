#pragma once
// Running ddp_worker.cpp as real ranks on localhost (parallel::launch) and reading what they
// wrote: shared by the DDP tests (ddp.cpp) and the Parallel laws (concept.cpp).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <ftopt/parallel/gloo.hpp>
#include <ftopt/parallel/nccl.hpp>
#include <ftopt/parallel/support/group.hpp>
#include <ftopt/parallel/support/launch.hpp>

#include "../support.hpp"

namespace ddp_test {

using ftopt::test::ScratchDir;
namespace parallel = ftopt::parallel;

/// Sets an environment variable for the scope, restoring the old value after.
class ScopedEnv {
public:
  ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) ::setenv(name_.c_str(), value, 1);
    else ::unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

private:
  std::string name_;
  std::optional<std::string> old_;
};

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Ranks {
  parallel::LaunchResult result;
  std::vector<std::string> logs;
  double seconds = 0;
};

/// Runs the worker as `nproc` ranks with `args`, outputs in `dir`.
inline Ranks run_workers(const ScratchDir& dir, std::vector<std::string> args, int nproc = 2,
                         std::chrono::milliseconds grace = std::chrono::seconds(30)) {
  args.insert(args.begin(), {FTOPT_DDP_WORKER, "--out", dir.path.string()});
  std::ostringstream launcher_log;
  const auto start = std::chrono::steady_clock::now();
  Ranks ranks;
  ranks.result = parallel::launch({.nproc = nproc, .log_dir = dir.path / "logs", .grace = grace, .log = &launcher_log}, args);
  ranks.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r < nproc; ++r) ranks.logs.push_back(read_text(dir.path / "logs" / ("rank" + std::to_string(r) + ".log")));
  return ranks;
}

/// What a worker wrote: name -> tensor.
inline std::map<std::string, torch::Tensor> load(const std::filesystem::path& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path.string());
  std::map<std::string, torch::Tensor> out;
  for (const auto& key : archive.keys()) archive.read(key, out[key]);
  return out;
}

/// Whether this LibTorch has Gloo; if not, the test is marked skipped (never passed).
inline bool have_gloo() {
  if (parallel::has_backend(parallel::Backend::Gloo)) return true;
  ftopt::test::skip("this build has no Gloo backend");
  return false;
}

} // namespace ddp_test
