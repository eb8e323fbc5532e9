#pragma once
/// Hardware set-up and the one-line report printed when training starts.
///
///   auto report = ftopt::hardware::configure();      // intra-op threads from the machine
///   std::cerr << report.summary() << '\n';
///   // LibTorch 1.13.0 | BLAS OpenBLAS 0.3.21 ... | threads 2 | bf16 yes | VNNI yes | device cpu

#include <dlfcn.h>
#include <link.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>

#include <c10/core/Device.h>

#include <ATen/Config.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <ftopt/error.hpp>

namespace ftopt::hardware {

/// Whether ftopt's own CPU kernels (the 8-bit optimizer step, NF4 dequantization, attention's
/// small products) run on LibTorch's intra-op threads in this source file. at::parallel_for is
/// inline in ATen's headers; where LibTorch threads with OpenMP, it uses more than the calling
/// thread only in code compiled with OpenMP, which ftopt's CMake package adds (docs/build.md).
#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
inline constexpr bool kernels_threaded = false;
#else
inline constexpr bool kernels_threaded = true;
#endif

/// What configure() found and set.
struct Report {
  std::string libtorch;      ///< e.g. "1.13.0"
  std::string blas;          ///< the BLAS library ATen's BLAS calls land in, as loaded
  int threads = 1;           ///< intra-op threads now set
  bool bf16 = false;         ///< the CPU has native bf16 dot products (avx512_bf16)
  bool vnni = false;         ///< the CPU has int8 dot products (avx512_vnni), for int8 Linear
  std::string device;        ///< "cpu" or "cuda (N devices)"

  std::string summary() const {
    std::ostringstream line;
    line << "LibTorch " << libtorch << " | BLAS " << blas << " | threads " << threads
         << (threads > 1 && !kernels_threaded ? " (ftopt's kernels 1: compiled without OpenMP)" : "") << " | bf16 " << (bf16 ? "yes" : "no") << " | VNNI " << (vnni ? "yes" : "no")
         << " | device " << device;
    return line.str();
  }
};

/// Settings for configure().
struct Options {
  /// Intra-op threads; 0 picks OMP_NUM_THREADS when set, else the CPUs this process may use.
  int threads = 0;
};

/// CPUs this process may run on (its affinity mask), at least 1.
inline int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace detail {

inline int threads_from(const Options& options) {
  ftopt::detail::check(options.threads >= 0,
                       "hardware::Options: threads must be >= 0 (0 = automatic), got ",
                       options.threads);
  if (options.threads > 0) return options.threads;
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(omp, &end, 10);
    if (end != omp && *end == '\0' && n > 0) return static_cast<int>(n);
  }
  return available_cpus();
}

/// The loaded shared object that provides BLAS, with its real path (Debian switches libblas.so.3
/// between reference BLAS and OpenBLAS through alternatives symlinks).
inline std::string loaded_blas() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("libblas") == std::string::npos &&
            name.find("openblas") == std::string::npos && name.find("mkl") == std::string::npos)
          return 0;
        std::error_code ec;
        auto real = std::filesystem::canonical(name, ec);
        *static_cast<std::string*>(out) = ec ? name : real.string();
        return 1;
      },
      &found);
  using OpenblasConfig = char* (*)();
  if (auto config = reinterpret_cast<OpenblasConfig>(dlsym(RTLD_DEFAULT, "openblas_get_config")))
  {
    // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ... USE_OPENMP SkylakeX MAX_THREADS=64": keep the
    // name, the version and whether it threads with OpenMP.
    std::istringstream words(config());
    std::string name, version, word;
    words >> name >> version;
    std::string out = name + " " + version;
    while (words >> word)
      if (word == "USE_OPENMP") out += " (OpenMP)";
    return out;
  }
  if (found.empty() && at::hasMKL()) return "MKL (linked into LibTorch)";  // the pip wheel
  if (found.empty()) return "built in or unknown";
  if (found.find("blas/libblas") != std::string::npos)
    return "reference BLAS (slow: install libopenblas0-openmp) " + found;
  return found;
}

inline bool cpu_supports_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

inline bool cpu_supports_vnni() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

} // namespace detail

/// Whether `device` computes in bf16 natively, so bf16 autocast pays: CUDA (compute capability
/// 8.0 and newer, which LibTorch's CUDA builds target), or a CPU with avx512_bf16. Elsewhere
/// bf16 is emulated and slower than fp32 (on an AVX2-only CPU a Bf16Mixed ViT step measured ~9x
/// slower; bench_precision, docs/precision.md).
inline bool has_native_bf16(c10::Device device) {
  if (device.is_cuda()) return true;
  return device.is_cpu() && detail::cpu_supports_bf16();
}

/// `Options::threads` value that takes OMP_NUM_THREADS when set, else every CPU this process may
/// use: `TrainerOptions{.threads = ftopt::hardware::all_cpus}`.
inline constexpr int all_cpus = 0;

/// The machine as LibTorch now runs on it; changes nothing.
inline Report report() {
  Report report;
  report.libtorch = TORCH_VERSION;
  report.blas = detail::loaded_blas();
  report.threads = at::get_num_threads();
  report.bf16 = detail::cpu_supports_bf16();
  report.vnni = detail::cpu_supports_vnni();
  report.device = torch::cuda::is_available()
                      ? "cuda (" + std::to_string(torch::cuda::device_count()) + " devices)"
                      : "cpu";
  return report;
}

/// Sets the intra-op thread count as configure() does, without building the report (the
/// Trainer calls it at the start of every fit that asks for threads).
inline void set_threads(const Options& options = {}) {
  const int threads = detail::threads_from(options);
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
}

/// Sets the intra-op thread count and reports the machine. LibTorch's own default here is 1
/// thread on a 2-CPU machine; training wants them all. The Trainer sets threads (set_threads)
/// only when TrainerOptions::threads is set: a thread count the user chose stays as chosen.
inline Report configure(const Options& options = {}) {
  set_threads(options);
  return report();
}

namespace detail {
/// Whether report_once has written in this process (one flag for the whole program: an inline
/// variable, not a static of a class template, which would be one per Trainer type).
inline std::atomic<bool> reported{false};
} // namespace detail

/// Writes "ftopt: <report>" to `log` the first time it is called in the process, and returns
/// true then; later calls write nothing and return false.
inline bool report_once(std::ostream& log) {
  if (detail::reported.exchange(true)) return false;
  log << "ftopt: " << report().summary() << '\n';
  return true;
}

} // namespace ftopt::hardware
