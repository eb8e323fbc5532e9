#pragma once
/// nn::dropout and nn::Dropout: torch.nn.functional.dropout's semantics (in training each element
/// is zeroed with probability p and the others scaled by 1 / (1 - p); in eval, or with p 0, the
/// input itself), with a CPU kernel that draws its masks from a counter-based generator instead of
/// LibTorch's serial one.
///
/// Why: on the CPU, ATen's dropout fills its mask with bernoulli_, one Mersenne Twister draw after
/// another on one thread, several ns per element; in a BERT step (dropout after the embeddings,
/// on the attention weights, twice per layer, and on LoRA's input) that is half the step
/// (bench_profile_step bf16 bert-lora). Here element i of a call is kept when a 32-bit hash of
/// (seed, i) is at least p * 2^32, computed 16 elements at a time with AVX-512 or 8 with AVX2 where
/// the CPU has them (the same draws without); the seed is one draw from LibTorch's CPU generator per call,
/// so torch::manual_seed makes runs repeat, memory::Checkpoint's saved generator state replays the
/// same masks, and the masks do not depend on the thread count. The mask is never stored: the
/// backward hashes the same (seed, i) again. Where ftopt differs: the masks are not the ones
/// torch.dropout draws for the same seed (the same distribution, another stream). CUDA tensors
/// go to ATen's own (fused, Philox) dropout.
///
///   auto y = ftopt::nn::dropout(x, 0.1, /*training=*/true);
///   ftopt::nn::Dropout drop(0.1);  // a drop-in for torch::nn::Dropout

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/options/dropout.h>
#include <torch/nn/pimpl.h>

#include <ftopt/detail/row_kernels.hpp>
#include <ftopt/error.hpp>
#include <ftopt/kernel_options.hpp>

namespace ftopt::nn {

namespace detail {

/// A 32-bit integer hash (lowbias32: two multiply-xorshift rounds, full avalanche).
inline std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352DU;
  x ^= x >> 15;
  x *= 0x846CA68BU;
  x ^= x >> 16;
  return x;
}

/// The seed's two halves as the hash rounds use them; `high` is element index >> 32.
struct DropoutKey {
  std::uint32_t first, second;
  DropoutKey(std::uint64_t seed, std::uint64_t high)
      : first(static_cast<std::uint32_t>(seed)),
        second(static_cast<std::uint32_t>(seed >> 32) + static_cast<std::uint32_t>(high) * 0x9E3779B9U) {}
  /// The 32 random bits of element index `low` (the index's low half).
  std::uint32_t bits(std::uint32_t low) const { return mix32(mix32(low ^ first) ^ second); }
};

/// One element times scale when its draw is >= threshold, else times 0 (as torch's input * mask:
/// a dropped NaN or infinity stays NaN), in float (double in double).
template <class T>
inline T dropped_or_scaled(T x, std::uint32_t bits, std::uint32_t threshold, double scale) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  return static_cast<T>(static_cast<Acc>(x) * (bits >= threshold ? static_cast<Acc>(scale) : Acc(0)));
}

/// mix32 on 8 lanes.
__attribute__((target("avx2"))) inline __m256i mix32x8(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x7FEB352DU)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x846CA68BU)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/// The same draws as DropoutKey::bits for the 8 indices low .. low + 7.
__attribute__((target("avx2"))) inline __m256i dropout_bits8(const DropoutKey& key, std::uint32_t low) {
  __m256i x = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(low)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  x = mix32x8(_mm256_xor_si256(x, _mm256_set1_epi32(static_cast<int>(key.first))));
  return mix32x8(_mm256_xor_si256(x, _mm256_set1_epi32(static_cast<int>(key.second))));
}

/// All ones in the lanes whose draw is below threshold (dropped): an unsigned compare through
/// the signed one, both sides shifted by 2^31.
__attribute__((target("avx2"))) inline __m256i dropout_lanes(__m256i bits, std::uint32_t threshold) {
  const __m256i flip = _mm256_set1_epi32(static_cast<int>(0x80000000U));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(threshold ^ 0x80000000U)), _mm256_xor_si256(bits, flip));
}

/// float: y[i] for i in [begin, end), begin a multiple of 8, 8 at a time; returns where it stopped.
__attribute__((target("avx2"))) inline std::int64_t dropout_avx2_float(const float* x, float* y, std::int64_t begin,
                                                                      std::int64_t end, const DropoutKey& key,
                                                                      std::uint32_t threshold, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  std::int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256i drop = dropout_lanes(dropout_bits8(key, static_cast<std::uint32_t>(i)), threshold);
    const __m256 factor = _mm256_andnot_ps(_mm256_castsi256_ps(drop), s);  // scale, or 0 where dropped
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), factor));
  }
  return i;
}

/// bf16: the same, through float, rounded back to nearest even as c10::BFloat16 rounds (NaN
/// stays a quiet NaN).
__attribute__((target("avx2"))) inline std::int64_t dropout_avx2_bf16(const std::uint16_t* x, std::uint16_t* y,
                                                                     std::int64_t begin, std::int64_t end,
                                                                     const DropoutKey& key, std::uint32_t threshold,
                                                                     float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF), nan = _mm256_set1_epi32(0x7FC0);
  std::int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256i drop = dropout_lanes(dropout_bits8(key, static_cast<std::uint32_t>(i)), threshold);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m256 factor = _mm256_andnot_ps(_mm256_castsi256_ps(drop), s);  // scale, or 0 where dropped
    const __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(packed), 16)), factor);
    const __m256i u = _mm256_castps_si256(v);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias),
                                                   _mm256_and_si256(_mm256_srli_epi32(u, 16), one)), 16);
    r = _mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    const __m128i out = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), out);
  }
  return i;
}

/// Every lane: the masked forms of the shifts and conversions below, whose unmasked forms GCC 12
/// warns about (an "uninitialized" placeholder inside its own intrinsics).
inline constexpr __mmask16 all16 = 0xFFFF;

/// mix32 on 16 lanes.
__attribute__((target("avx512f"))) inline __m512i mix32x16(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_maskz_srli_epi32(all16, x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(0x7FEB352DU)));
  x = _mm512_xor_si512(x, _mm512_maskz_srli_epi32(all16, x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(0x846CA68BU)));
  return _mm512_xor_si512(x, _mm512_maskz_srli_epi32(all16, x, 16));
}

/// The lanes of indices low .. low + 15 that are kept: their draw (DropoutKey::bits) >= threshold.
__attribute__((target("avx512f"))) inline __mmask16 dropout_kept16(const DropoutKey& key, std::uint32_t low,
                                                                   std::uint32_t threshold) {
  __m512i x = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(low)),
                               _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  x = mix32x16(_mm512_xor_si512(x, _mm512_set1_epi32(static_cast<int>(key.first))));
  x = mix32x16(_mm512_xor_si512(x, _mm512_set1_epi32(static_cast<int>(key.second))));
  return _mm512_cmp_epu32_mask(x, _mm512_set1_epi32(static_cast<int>(threshold)), _MM_CMPINT_NLT);
}

/// The AVX2 kernels' work 16 elements at a time with AVX-512 (the same draws, the same rounding).
__attribute__((target("avx512f"))) inline std::int64_t dropout_avx512_float(const float* x, float* y,
                                                                           std::int64_t begin, std::int64_t end,
                                                                           const DropoutKey& key,
                                                                           std::uint32_t threshold, float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  std::int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    // scale, or 0 where dropped: multiplied, not masked, so a dropped NaN stays NaN
    const __m512 factor = _mm512_maskz_mov_ps(dropout_kept16(key, static_cast<std::uint32_t>(i), threshold), s);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), factor));
  }
  return i;
}

__attribute__((target("avx512f"))) inline std::int64_t dropout_avx512_bf16(const std::uint16_t* x, std::uint16_t* y,
                                                                          std::int64_t begin, std::int64_t end,
                                                                          const DropoutKey& key,
                                                                          std::uint32_t threshold, float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF), nan = _mm512_set1_epi32(0x7FC0);
  std::int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 factor = _mm512_maskz_mov_ps(dropout_kept16(key, static_cast<std::uint32_t>(i), threshold), s);
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m512 v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_maskz_slli_epi32(all16, _mm512_maskz_cvtepu16_epi32(all16, packed), 16)), factor);
    const __m512i u = _mm512_castps_si512(v);
    __m512i r = _mm512_maskz_srli_epi32(all16, _mm512_add_epi32(_mm512_add_epi32(u, bias),
                                                   _mm512_and_si512(_mm512_maskz_srli_epi32(all16, u, 16), one)), 16);
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_maskz_cvtepi32_epi16(all16, r));
  }
  return i;
}

/// out[i] = in[i] * (keep(i) ? scale : 0), keep(i) when element i's 32-bit draw is >= threshold.
/// `in` and `out` contiguous, of one floating type; `isa` the copy that runs (AVX-512 16 lanes at
/// a time, then AVX2 8, then one by one; a copy row_isa resolved). The draws depend on (seed, i)
/// only: the same on every thread count and instruction set.
inline void apply_dropout_mask(const at::Tensor& in, at::Tensor& out, std::uint64_t seed, std::uint32_t threshold,
                               double scale, CpuIsa isa) {
  const bool avx512 = isa == CpuIsa::Avx512, avx2 = avx512 || isa == CpuIsa::Avx2;
  const std::int64_t n = in.numel();
  const float s = static_cast<float>(scale);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, in.scalar_type(), "ftopt::nn::dropout", [&] {
    const scalar_t* x = in.data_ptr<scalar_t>();
    scalar_t* y = out.data_ptr<scalar_t>();
    // Grains of whole blocks of 8, so a grain starts where an 8-wide block does.
    at::parallel_for(0, (n + 7) / 8, 2048, [&](std::int64_t first_block, std::int64_t last_block) {
      std::int64_t i = 8 * first_block;
      const std::int64_t end = std::min(n, 8 * last_block);
      while (i < end) {
        // Indices that share their high half share a key (2^32 is a multiple of 8).
        const std::uint64_t high = static_cast<std::uint64_t>(i) >> 32;
        const std::int64_t stop = std::min<std::int64_t>(end, static_cast<std::int64_t>((high + 1) << 32));
        const DropoutKey key(seed, high);
        // (scalar_t is an alias here, not a template parameter: every branch compiles)
        if (avx512) {
          if constexpr (std::is_same_v<scalar_t, float>)
            i = dropout_avx512_float(reinterpret_cast<const float*>(x), reinterpret_cast<float*>(y), i, stop, key,
                                     threshold, s);
          else if constexpr (std::is_same_v<scalar_t, at::BFloat16>)
            i = dropout_avx512_bf16(reinterpret_cast<const std::uint16_t*>(x), reinterpret_cast<std::uint16_t*>(y), i,
                                    stop, key, threshold, s);
        }
        if (avx2) {
          if constexpr (std::is_same_v<scalar_t, float>)
            i = dropout_avx2_float(reinterpret_cast<const float*>(x), reinterpret_cast<float*>(y), i, stop, key,
                                   threshold, s);
          else if constexpr (std::is_same_v<scalar_t, at::BFloat16>)
            i = dropout_avx2_bf16(reinterpret_cast<const std::uint16_t*>(x), reinterpret_cast<std::uint16_t*>(y), i,
                                  stop, key, threshold, s);
        }
        for (; i < stop; ++i)
          y[i] = dropped_or_scaled(x[i], key.bits(static_cast<std::uint32_t>(i)), threshold, scale);
      }
    });
  });
}

/// Dropout as an autograd function: the backward applies the same mask to the gradient, from the
/// seed saved in the context.
struct DropoutFunction : torch::autograd::Function<DropoutFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double p, std::int64_t seed,
                            std::int64_t isa) {
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["isa"] = isa;
    return masked(x, p, static_cast<std::uint64_t>(seed), static_cast<CpuIsa>(isa));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto seed = static_cast<std::uint64_t>(ctx->saved_data["seed"].toInt());
    const auto isa = static_cast<CpuIsa>(ctx->saved_data["isa"].toInt());
    return {masked(grads[0], ctx->saved_data["p"].toDouble(), seed, isa), at::Tensor(), at::Tensor(), at::Tensor()};
  }
  /// t with seed's mask for p applied (the dropped elements 0, the others scaled by 1 / (1 - p)).
  static at::Tensor masked(const at::Tensor& t, double p, std::uint64_t seed, CpuIsa isa) {
    const at::Tensor in = t.contiguous();
    at::Tensor out = at::empty_like(in);
    apply_dropout_mask(in, out, seed, threshold(p), 1.0 / (1.0 - p), isa);
    return out;
  }
  /// p * 2^32, the draws below which an element is dropped.
  static std::uint32_t threshold(double p) {
    const double t = p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(t);
  }
};

/// One 64-bit seed from LibTorch's default CPU generator (under its lock, as ATen's own kernels draw).
inline std::int64_t dropout_seed() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return static_cast<std::int64_t>(at::check_generator<at::CPUGeneratorImpl>(generator)->random64());
}

} // namespace detail

/// torch.nn.functional.dropout(x, p, training) with ftopt's CPU kernel (see the top of this file);
/// `isa`: the kernel's copy (KernelOptions::isa).
inline at::Tensor dropout(const at::Tensor& x, double p, bool training, CpuIsa isa = CpuIsa::Widest) {
  check(p >= 0 && p <= 1, "nn::dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0 || x.numel() == 0) return x;
  if (p == 1) return x * 0;  // everything dropped, as torch.dropout: zeros that still carry a gradient
  if (!x.device().is_cpu() || !at::isFloatingType(x.scalar_type())) return at::dropout(x, p, true);
  return detail::DropoutFunction::apply(x, p, detail::dropout_seed(),
                                        static_cast<std::int64_t>(ftopt::detail::row_isa(isa)));
}

/// A drop-in for torch::nn::Dropout (same options, no parameters) that runs nn::dropout.
class DropoutImpl : public torch::nn::Cloneable<DropoutImpl> {
public:
  explicit DropoutImpl(double p = 0.5) : DropoutImpl(torch::nn::DropoutOptions(p)) {}
  explicit DropoutImpl(const torch::nn::DropoutOptions& options) : options(options) { reset(); }
  void reset() override {
    check(options.p() >= 0 && options.p() <= 1, "nn::Dropout: p must be in [0, 1], got ", options.p());
    check(!options.inplace(), "nn::Dropout: inplace is not supported (the result is a new tensor)");
  }
  at::Tensor forward(const at::Tensor& x) { return nn::dropout(x, options.p(), is_training()); }
  torch::nn::DropoutOptions options;
};
TORCH_MODULE(Dropout);

} // namespace ftopt::nn
