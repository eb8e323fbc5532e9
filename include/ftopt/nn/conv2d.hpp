#pragma once
/// nn::Conv2d: torch::nn::Conv2d with an attach point for Peft and Quant policies. Same options
/// (torch::nn::Conv2dOptions, zero padding given as sizes), same parameters ("weight"
/// [out, in / groups, kh, kw], "bias" [out]) and initialization as torch::nn::Conv2d.
///
///   ftopt::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false));

#include <cmath>

#include <torch/nn/cloneable.h>
#include <torch/nn/init.h>
#include <torch/nn/options/conv.h>
#include <torch/nn/pimpl.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/error.hpp>
#include <ftopt/nn/extension.hpp>
#include <ftopt/nn/init.hpp>

namespace ftopt::nn {

class Conv2dImpl : public torch::nn::Cloneable<Conv2dImpl>, public Attachable<Conv2dImpl> {
public:
  explicit Conv2dImpl(torch::nn::Conv2dOptions options) : options(std::move(options)) { reset(); }

  void reset() override {
    ftopt::detail::check(compat::holds<torch::ExpandingArray<2>>(options.padding()),
                         "nn::Conv2d: padding must be given as sizes (kSame/kValid are not "
                         "supported by ftopt's Conv2d)");
    ftopt::detail::check(compat::holds<torch::enumtype::kZeros>(options.padding_mode()),
                         "nn::Conv2d: only zero padding_mode is supported");
    const auto& k = options.kernel_size();
    weight = register_parameter(
        "weight", torch::empty({options.out_channels(), options.in_channels() / options.groups(),
                                (*k)[0], (*k)[1]}));
    if (options.bias()) bias = register_parameter("bias", torch::empty(options.out_channels()));
    else bias = register_parameter("bias", {}, /*requires_grad=*/false);
    reset_parameters();
  }

  /// torch::nn::Conv2d's initialization (Kaiming-uniform, a = sqrt(5); bias +-1/sqrt(fan_in)).
  void reset_parameters() { detail::reset_like_torch(weight, bias); }

  at::Tensor forward(const at::Tensor& input) {
    if (extension_) [[unlikely]] return extension_->forward(*this, input);
    return base_forward(input);
  }

  /// The layer's own computation, whatever is attached.
  at::Tensor base_forward(const at::Tensor& input) {
    const auto& padding = compat::get<torch::ExpandingArray<2>>(options.padding());
    return at::conv2d(input, weight, bias, *options.stride(), *padding, *options.dilation(),
                      options.groups());
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "ftopt::nn::Conv2d(" << options.in_channels() << ", " << options.out_channels()
           << ", kernel_size=" << options.kernel_size() << ", stride=" << options.stride()
           << (extension_ ? ", extended" : "") << ")";
  }

  torch::nn::Conv2dOptions options;
  at::Tensor weight;
  at::Tensor bias;
};

TORCH_MODULE(Conv2d);

} // namespace ftopt::nn
