#pragma once
// A small convolutional net, image batches and the float formula of a static int8 convolution, for
// the tests of quant::StaticInt8 and quant::Qat on nn::Conv2d. The formula is what
// torch.ao.quantization's static Conv2d computes (torch/ao/nn/quantized/modules/conv.py calls
// quantized::conv2d): the input quantized to quint8 with the calibrated scale and zero point,
// the qint8 weight (symmetric, per output channel) convolved with it in integers, the int32
// accumulator plus the bias requantized once to the output's quint8 scale and zero point.
// In float terms: quant(conv2d(dequant(quant(x)), dequant(W), b), out_scale, out_zero_point),
// to within one output step (the kernel's single rounding).
#include <torch/torch.h>

#include <ftopt/quant/static_int8.hpp>

namespace ftopt::test::quant_conv {

/// Two convolutions (the second strided and grouped) and a Linear head, on 3x8x8 images.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl() {
    conv1 = register_module("conv1", nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    conv2 = register_module("conv2", nn::Conv2d(torch::nn::Conv2dOptions(8, 8, 3).stride(2).padding(1).groups(2)));
    head = register_module("head", nn::Linear(8 * 4 * 4, 5));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return head(torch::relu(conv2(torch::relu(conv1(x)))).flatten(1));
  }
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::Linear head{nullptr};
};
TORCH_MODULE(ConvNet);

using Batches = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

inline Batches image_batches(int count, std::uint64_t seed) {
  torch::manual_seed(seed);
  Batches out;
  for (int i = 0; i < count; ++i) out.emplace_back(torch::randn({16, 3, 8, 8}), torch::randint(5, {16}));
  return out;
}

inline double relative(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got - want).norm() / want.norm()).item<double>();
}

/// The float formula above for one converted convolution.
inline torch::Tensor conv_reference(nn::Conv2dImpl& conv, const quant::StaticInt8Conv2d& kernel, const torch::Tensor& x) {
  const auto in = kernel.input(), out = kernel.output();
  const auto xq = torch::quantize_per_tensor(x, in.scale, in.zero_point, torch::kQUInt8).dequantize();
  const auto exact = torch::conv2d(xq, kernel.qweight().dequantize(), conv.bias, {2, 2}, {1, 1}, {1, 1}, 2);
  return torch::quantize_per_tensor(exact, out.scale, out.zero_point, torch::kQUInt8).dequantize();
}

} // namespace ftopt::test::quant_conv
