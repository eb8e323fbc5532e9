#pragma once
/// What ftopt's elementwise CPU kernels (nn::rms_norm, nn::apply_rotary) share: the widest
/// instruction set this CPU runs, and float <-> bf16 conversions that round as c10::BFloat16 does.
///
/// A kernel is written once, as an always-inline static `body` of plain loops over rows, and
/// compiled three times: for AVX-512, for AVX2 with FMA, and for the baseline x86-64 (or whatever
/// the compiler targets elsewhere). run_on calls the copy row_isa chose: the widest the CPU runs,
/// or the one KernelOptions::isa names (so each copy has its tests on any CPU that runs it). The bodies keep their sums in
/// 16 separate lanes, so the compiler vectorizes them without reordering a sum: the results are
/// the same on every instruction set and thread count, up to fused multiply-adds.
///
///   struct Twice { [[gnu::always_inline]] static void body(float* x, std::int64_t n) { ... } };
///   detail::run_on<Twice>(detail::row_isa(), x, n);  // its AVX-512, AVX2 or baseline copy

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include <ftopt/error.hpp>
#include <ftopt/kernel_options.hpp>

namespace ftopt::detail {

/// Whether this CPU runs a copy (Widest: always).
inline bool cpu_runs(CpuIsa isa) {
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return isa == CpuIsa::Avx512 ? avx512 : isa == CpuIsa::Avx2 ? avx2 : true;
#else
  return isa == CpuIsa::Widest || isa == CpuIsa::Baseline;
#endif
}

/// The copy's name, for messages and test names.
inline const char* isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Widest: return "widest";
    case CpuIsa::Avx512: return "AVX-512";
    case CpuIsa::Avx2: return "AVX2";
    case CpuIsa::Baseline: return "baseline";
  }
  return "?";
}

/// The copy that runs for `isa`: Widest becomes the widest this CPU runs; a named one is checked.
inline CpuIsa row_isa(CpuIsa isa = CpuIsa::Widest) {
  if (isa == CpuIsa::Widest) {
    static const CpuIsa widest = cpu_runs(CpuIsa::Avx512) ? CpuIsa::Avx512
                                 : cpu_runs(CpuIsa::Avx2) ? CpuIsa::Avx2
                                                          : CpuIsa::Baseline;
    return widest;
  }
  if (!cpu_runs(isa))
    throw Error(std::string("KernelOptions::isa: this CPU cannot run the ") + isa_name(isa) +
                " copy of ftopt's CPU kernels (choose CpuIsa::Widest)");
  return isa;
}

/// Lanes of the partial sums in the kernels' bodies (a 512-bit register of floats).
inline constexpr int row_lanes = 16;

/// float of a bf16's bits.
[[gnu::always_inline]] inline float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// The bf16 bits of a float, rounded to nearest even; NaN becomes the quiet NaN 0x7FC0
/// (c10::BFloat16's conversion).
[[gnu::always_inline]] inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t rounded = (u + 0x7FFFU + ((u >> 16) & 1U)) >> 16;
  return f != f ? std::uint16_t{0x7FC0} : static_cast<std::uint16_t>(rounded);
}

/// f rounded to bf16 and back: what an ATen bf16 op stores.
[[gnu::always_inline]] inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

} // namespace ftopt::detail

namespace ftopt::detail {

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
template <class Kernel, class... Args>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))) void run_avx512(Args... args) {
  Kernel::body(args...);
}
template <class Kernel, class... Args>
__attribute__((target("avx2,fma"))) void run_avx2(Args... args) {
  Kernel::body(args...);
}
#endif

/// Kernel::body(args...) compiled for `isa`, a copy row_isa resolved (Kernel::body always-inline,
/// so that it is compiled anew inside each copy).
template <class Kernel, class... Args>
void run_on(CpuIsa isa, Args... args) {
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
  switch (isa) {
    case CpuIsa::Avx512: return run_avx512<Kernel>(args...);
    case CpuIsa::Avx2: return run_avx2<Kernel>(args...);
    case CpuIsa::Widest:
    case CpuIsa::Baseline: break;
  }
#endif
  Kernel::body(args...);
}

} // namespace ftopt::detail
