#pragma once
/// Batched products of many small float32 matrices on the CPU, for attention on LibTorch 1.13.
///
/// Debian's LibTorch 1.13 is built with OpenBLAS, not MKL, and its at::bmm then multiplies one
/// batch item at a time: a select of each operand, a dispatch and a BLAS call per item. At
/// attention's sizes (the main job's ViT: 512 items of [50, 16] x [16, 50] per product) that
/// per-item cost dominates. batched_matmul runs such products in one loop over the items with
/// an AVX2/FMA register-blocked kernel, and its backward does the same; any other case (another
/// dtype or device, broadcast batch dims, larger matrices, a CPU without AVX2 and FMA, a compiler
/// without GCC's target attribute) goes to at::matmul unchanged. Measured side by side
/// (benchmarks/attention.cpp, docs/benchmarks.md): the ViT's attention products 0.62-0.69x the
/// time of at::matmul's, a whole training step of the main job's ViT 0.90x.
///
///   at::Tensor scores = ftopt::detail::batched_matmul(q, k.transpose(-2, -1));  // [..., L, d] x [..., d, S]
///
/// Gradients as at::matmul's: for C = A B, dA = dC B^T and dB = A^T dC, computed through the same
/// autograd function, so double backward works too.

#include <algorithm>
#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define FTOPT_BATCHED_MATMUL_AVX2 1
#include <immintrin.h>
#else
#define FTOPT_BATCHED_MATMUL_AVX2 0
#endif

namespace ftopt::detail {

/// The largest row, column or inner size batched_matmul takes, and the most multiply-adds per
/// item (m k n): above them OpenBLAS's blocked kernels pay for its per-item cost (64 items of
/// 64^3 take the kernel 1.4x at::matmul's time, 128^3 ones 2x: benchmarks/attention.cpp).
inline constexpr std::int64_t batched_matmul_max_size = 128;
inline constexpr std::int64_t batched_matmul_max_work = 1 << 16;

/// Whether this CPU runs the AVX2/FMA kernel (checked once).
inline bool batched_matmul_kernel_available() {
#if FTOPT_BATCHED_MATMUL_AVX2
  static const bool available = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return available;
#else
  return false;
#endif
}

/// Whether batched_matmul(a, b) takes the small-matrix kernel rather than at::matmul: the kernel
/// available on this CPU, float32 CPU tensors of the same rank >= 3 with equal batch dims, inner sizes that match,
/// every matrix size at most batched_matmul_max_size and m k n at most batched_matmul_max_work.
inline bool batched_matmul_applies(const at::Tensor& a, const at::Tensor& b) {
  if (!batched_matmul_kernel_available()) return false;
  if (a.dim() < 3 || a.dim() != b.dim() || !a.device().is_cpu() || !b.device().is_cpu()) return false;
  if (a.scalar_type() != at::kFloat || b.scalar_type() != at::kFloat) return false;
  if (a.sizes().slice(0, a.dim() - 2) != b.sizes().slice(0, b.dim() - 2)) return false;
  const std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (b.size(-2) != k) return false;
  const auto small = [](std::int64_t s) { return s >= 1 && s <= batched_matmul_max_size; };
  return small(m) && small(k) && small(n) && m * k * n <= batched_matmul_max_work && a.numel() > 0;
}

namespace batched_matmul_kernel {

#if FTOPT_BATCHED_MATMUL_AVX2
/// Lanes [0, width) of an 8-float vector, for the masked load of a row's last vector (width in [0, 8]).
__attribute__((target("avx2,fma"))) inline __m256i lanes(std::int64_t width) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(width)), index);
}

/// A's layout: element (i, p) of item g is at g * item + i * row + p * col (any strides: A is
/// read one scalar at a time, so a transposed or permuted A needs no copy).
struct Strides {
  std::int64_t item, row, col;
};

/// Columns [j0, j0 + width) of Rows rows of one item's C, width <= 8 * Vectors: each row keeps
/// its Vectors 8-float accumulators in registers across the inner dimension k.
template <int Rows, int Vectors>
__attribute__((target("avx2,fma"))) inline void block(const float* a, Strides sa, const float* b, float* c,
                                                      std::int64_t k, std::int64_t n, std::int64_t j0,
                                                      std::int64_t width) {
  // Only the last vector can be partial: it loads through a mask and stores through a buffer
  // (masked stores are slow on AMD's Zen cores).
  constexpr int Last = Vectors - 1;
  const std::int64_t tail = width - 8 * Last;
  const __m256i mask = lanes(tail);
  __m256 acc[Rows][Vectors];
  for (int r = 0; r < Rows; ++r)
    for (int t = 0; t < Vectors; ++t) acc[r][t] = _mm256_setzero_ps();
  for (std::int64_t p = 0; p < k; ++p) {
    const float* brow = b + p * n + j0;
    __m256 bv[Vectors];
    for (int t = 0; t < Last; ++t) bv[t] = _mm256_loadu_ps(brow + 8 * t);
    bv[Last] = _mm256_maskload_ps(brow + 8 * Last, mask);
    for (int r = 0; r < Rows; ++r) {
      const __m256 av = _mm256_set1_ps(a[r * sa.row + p * sa.col]);
      for (int t = 0; t < Vectors; ++t) acc[r][t] = _mm256_fmadd_ps(av, bv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < Rows; ++r) {
    float* crow = c + r * n + j0;
    for (int t = 0; t < Last; ++t) _mm256_storeu_ps(crow + 8 * t, acc[r][t]);
    if (tail == 8) {
      _mm256_storeu_ps(crow + 8 * Last, acc[r][Last]);
    } else {
      alignas(32) float buffer[8];
      _mm256_store_ps(buffer, acc[r][Last]);
      std::copy_n(buffer, tail, crow + 8 * Last);
    }
  }
}

/// All rows of one item's C in columns [j0, j0 + width), several rows at a time: six to eight
/// accumulators, enough independent FMA chains to hide their latency.
template <int Vectors>
__attribute__((target("avx2,fma"))) inline void columns(const float* a, Strides sa, const float* b, float* c,
                                                        std::int64_t m, std::int64_t k, std::int64_t n,
                                                        std::int64_t j0, std::int64_t width) {
  constexpr int Rows = Vectors == 1 ? 6 : Vectors == 2 ? 4 : 2;
  std::int64_t i = 0;
  for (; i + Rows <= m; i += Rows) block<Rows, Vectors>(a + i * sa.row, sa, b, c + i * n, k, n, j0, width);
  for (; i < m; ++i) block<1, Vectors>(a + i * sa.row, sa, b, c + i * n, k, n, j0, width);
}

/// C[g] = A[g] B[g] for items [begin, end) of A [G, m, k] (strides sa), contiguous B [G, k, n]
/// and C [G, m, n].
__attribute__((target("avx2,fma"))) inline void items(const float* a, Strides sa, const float* b, float* c,
                                                      std::int64_t begin, std::int64_t end, std::int64_t m,
                                                      std::int64_t k, std::int64_t n) {
  for (std::int64_t g = begin; g < end; ++g) {
    const float* ag = a + g * sa.item;
    const float* bg = b + g * k * n;
    float* cg = c + g * m * n;
    for (std::int64_t j0 = 0; j0 < n; j0 += 32) {
      const std::int64_t width = std::min<std::int64_t>(32, n - j0);
      switch ((width + 7) / 8) {
        case 1: columns<1>(ag, sa, bg, cg, m, k, n, j0, width); break;
        case 2: columns<2>(ag, sa, bg, cg, m, k, n, j0, width); break;
        case 3: columns<3>(ag, sa, bg, cg, m, k, n, j0, width); break;
        default: columns<4>(ag, sa, bg, cg, m, k, n, j0, width); break;
      }
    }
  }
}
#endif

/// The product of float32 CPU a [..., m, k] (any strides) and b [..., k, n] (copied to contiguous
/// rows if need be) with equal batch dims, no autograd; at::matmul's where the kernel is not available.
inline at::Tensor product(const at::Tensor& a, const at::Tensor& b) {
  if (!batched_matmul_kernel_available()) return at::matmul(a, b);
  const std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  // a as it lies where its batch dims merge into one stride; b's rows must be contiguous.
  const at::Tensor a3 = a.reshape({-1, m, k}), b3 = b.reshape({-1, k, n}).contiguous();
  const std::int64_t g = a3.size(0);
  at::Tensor c = at::empty({g, m, n}, a.options());
#if FTOPT_BATCHED_MATMUL_AVX2
  const float *pa = a3.data_ptr<float>(), *pb = b3.data_ptr<float>();
  float* pc = c.data_ptr<float>();
  const std::int64_t grain = std::max<std::int64_t>(1, 32768 / (m * k * n));  // ~32k multiply-adds a task
  const Strides sa{a3.stride(0), a3.stride(1), a3.stride(2)};
  at::parallel_for(0, g, grain,
                   [&](std::int64_t begin, std::int64_t end) { items(pa, sa, pb, pc, begin, end, m, k, n); });
#endif
  auto sizes = a.sizes().vec();
  sizes.back() = n;
  return c.view(sizes);
}

struct Function : torch::autograd::Function<Function> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    return product(a, b);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1], &dc = grads[0];
    at::Tensor da, db;
    if (ctx->needs_input_grad(0)) da = Function::apply(dc, b.transpose(-2, -1));
    if (ctx->needs_input_grad(1)) db = Function::apply(a.transpose(-2, -1), dc);
    return {da, db};
  }
};

} // namespace batched_matmul_kernel

/// a [..., m, k] times b [..., k, n], as at::matmul; small float32 CPU matrices go through the
/// AVX2/FMA kernel above (batched_matmul_applies) unless `use_kernel` is false
/// (KernelOptions::batched_matmul), everything else through at::matmul.
inline at::Tensor batched_matmul(const at::Tensor& a, const at::Tensor& b, bool use_kernel = true) {
  if (!use_kernel || !batched_matmul_applies(a, b)) return at::matmul(a, b);
  return batched_matmul_kernel::Function::apply(a, b);
}

} // namespace ftopt::detail
