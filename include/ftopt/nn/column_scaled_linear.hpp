#pragma once
/// nn::column_scaled_linear: a frozen nn::Linear whose input is scaled feature by feature by a
/// trainable vector l (IA3's feedforward target, y = W (x * l) + b), computed as one GEMM over
/// the weight with its columns scaled:
///
///     forward    y = x (W diag(l))^T + b
///     backward   g = dy W          dx = g * l          dl = sum over tokens of g * x
///
/// PEFT's form multiplies x by l first: a float32 product as large as the input and its cast
/// back in the forward, and the gradients of both in the backward. Here the forward makes no pass
/// over the input, and g is the GEMM the input's gradient needs anyway. dx and dl are PEFT's to
/// the bit (g * l taken in float32 and rounded once to the input's dtype, as PEFT's cast does;
/// dl's products of bf16 values exact in float32, summed over the tokens as PEFT's are); y
/// differs from PEFT's by rounding W diag(l) to the compute dtype instead of x * l.
///
///   if (auto y = ftopt::nn::column_scaled_linear(layer, x, l)) return *y;
///
/// Used where the layer's weight is frozen and nn::low_rank_linears_enabled() is on (the switch
/// of ftopt's merged-weight kernels); nullopt otherwise.

#include <cstdint>
#include <optional>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/low_rank_linears.hpp>

namespace ftopt::nn {
namespace detail {

/// x (W diag(l))^T + b for an input already in the compute dtype: W diag(l) formed in the
/// weight's dtype and cast once, as autocast casts W alone.
inline at::Tensor scaled_columns_linear(const at::Tensor& input, const at::Tensor& scale, const at::Tensor& weight,
                                        const at::Tensor& bias) {
  auto guard = no_autocast();
  const auto dtype = input.scalar_type();
  return at::linear(input, (weight * scale.reshape({1, -1})).to(dtype), bias.defined() ? bias.to(dtype) : bias);
}

class ColumnScaledLinearFunction : public torch::autograd::Function<ColumnScaledLinearFunction> {
public:
  using Context = torch::autograd::AutogradContext;

  /// input [*, in] in the compute dtype; scale l with in entries (any shape, PEFT's is [1, in]);
  /// weight [out, in], frozen; bias the layer's, or nothing.
  static at::Tensor forward(Context* ctx, const at::Tensor& input, const at::Tensor& scale, const at::Tensor& weight,
                            at::TensorList bias) {
    const at::Tensor b = bias.empty() ? at::Tensor() : bias[0];
    ctx->save_for_backward({input, scale, weight});
    ctx->saved_data["biases"] = static_cast<std::int64_t>(bias.size());
    ctx->saved_data["bias_dtype"] = b.defined() ? b.scalar_type() : input.scalar_type();
    return scaled_columns_linear(input, scale, weight, b);
  }

  static torch::autograd::variable_list backward(Context* ctx, torch::autograd::variable_list grad_outputs) {
    auto guard = no_autocast();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& scale = saved[1];
    const at::Tensor& weight = saved[2];
    const auto dtype = input.scalar_type();
    const at::Tensor dy = grad_outputs[0].to(dtype).reshape({-1, weight.size(0)});
    const at::Tensor g = at::mm(dy, weight.to(dtype));  // the gradient of x * l
    // One gradient per input of forward: input, scale, weight, the bias if any.
    torch::autograd::variable_list grads(3 + static_cast<std::size_t>(ctx->saved_data["biases"].toInt()));
    // dl first: its float32 temporaries are gone before dx is allocated.
    if (ctx->needs_input_grad(1))
      grads[1] = (g.to(scale.scalar_type()) * input.reshape({-1, input.size(-1)})).sum(0).view(scale.sizes());
    if (ctx->needs_input_grad(0)) {
      at::Tensor dx = at::empty_like(g);
      at::mul_out(dx, g, scale.reshape({1, -1}));  // in float32, rounded once into the input's dtype
      grads[0] = dx.view(input.sizes());
    }
    if (grads.size() == 4 && ctx->needs_input_grad(3))
      grads[3] = dy.sum(0).to(ctx->saved_data["bias_dtype"].toScalarType());
    return grads;
  }
};

} // namespace detail

/// y = W (x * l) + b as one GEMM over W diag(l), for a layer whose weight is frozen while the
/// switch is on; nullopt otherwise (the caller computes PEFT's form).
inline std::optional<at::Tensor> column_scaled_linear(LinearImpl& layer, const at::Tensor& x, const at::Tensor& scale) {
  if (!low_rank_linears_enabled().load(std::memory_order_relaxed) || layer.weight.requires_grad()) return std::nullopt;
  const at::Tensor input = autocast_input(x);
  if (!at::GradMode::is_enabled()) return detail::scaled_columns_linear(input, scale, layer.weight, layer.bias);
  return detail::ColumnScaledLinearFunction::apply(input, scale, layer.weight, detail::present(layer.bias));
}

} // namespace ftopt::nn
