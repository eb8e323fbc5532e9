#pragma once
/// ftopt::KernelOptions: the choices between ftopt's own kernels and the form Python computes,
/// passed where they are used (a PEFT policy's options, a model's options). Each defaults to
/// ftopt's kernel; turning one off gives the other form of the same computation, for side-by-side
/// benchmarks and to rule a kernel out when chasing a numerical difference.
///
///   ftopt::peft::Lora lora({.r = 8, .targets = {"query", "value"}, .kernel = {.merged_weight = false}});
///   ftopt::models::ViT vit({.kernel = {.shared_input = false, .attention = ftopt::AttentionKernel::Fused}});

namespace ftopt {

/// Which kernel attention uses on LibTorch 2.x (nn::scaled_dot_product_attention): Auto
/// chooses by device, dtype and length; Fused always calls at::scaled_dot_product_attention;
/// WrittenOut always uses the math written out. 1.13 always writes it out.
enum class AttentionKernel { Auto, Fused, WrittenOut };

/// Which compiled copy of ftopt's own elementwise CPU kernels runs (RMSNorm, rotary embeddings,
/// dropout): Widest, the widest this CPU runs; or one named, forced, so that each copy can be
/// checked on any machine that runs it (a CPU that cannot is an error naming the copy).
enum class CpuIsa { Widest, Avx512, Avx2, Baseline };

struct KernelOptions {
  /// An adapter without dropout on a frozen weight runs as one GEMM over the weight with its update
  /// folded in (W + s B A, DoRA's rescaled rows, IA3's scaled columns: peft's adapter kernel).
  /// Off: PEFT's form, the base's output and the adapter's computed apart and combined.
  bool merged_weight = true;
  /// Layers on one input (attention's query, key and value) run as one GEMM over their stacked
  /// weights (nn::shared_input_linears). Off: one GEMM per layer.
  bool shared_input = true;
  /// Attention's kernel (Auto: the written-out math where it is measured faster, short sequences
  /// on the CPU; else ATen's fused one).
  AttentionKernel attention = AttentionKernel::Auto;
  /// Written-out attention's small float32 products through ftopt's AVX2/FMA kernel
  /// (detail::batched_matmul). Off: at::matmul.
  bool batched_matmul = true;
  /// RMSNorm and rotary embeddings through ftopt's fused CPU kernels (nn::rms_norm,
  /// nn::apply_rotary). Off: the ops as transformers writes them.
  bool row_kernels = true;
  /// The copy of those kernels (and of nn::dropout's) that runs (CpuIsa).
  CpuIsa isa = CpuIsa::Widest;
};

} // namespace ftopt
