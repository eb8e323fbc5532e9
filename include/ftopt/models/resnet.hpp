#pragma once
/// models::ResNet: torchvision's ResNet (v1.5: the stride on the 3x3 conv of a bottleneck),
/// module for module and name for name: conv1, bn1, layer1..layer4 of BasicBlock or Bottleneck
/// (conv1/bn1/conv2/bn2[/conv3/bn3], downsample.0/.1), fc. A torchvision state dict loads as it
/// is, BatchNorm running statistics included. Options make small versions for 28x28 inputs: a
/// 3x3 stride-1 stem without max-pool, fewer channels, fewer blocks; the names stay the same.
///
///   auto r50 = ftopt::models::resnet50();                               // torchvision's resnet50
///   ftopt::models::ResNet small({.layers = {1, 1, 1, 1}, .widths = {16, 32, 64, 128},
///                                .in_channels = 1, .num_classes = 10,
///                                .stem = ftopt::models::ResNetStem::Small});

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/checkpoint.hpp>
#include <ftopt/nn/conv2d.hpp>
#include <ftopt/nn/linear.hpp>

namespace ftopt::models {

enum class ResNetBlock { Basic, Bottleneck };
enum class ResNetStem {
  ImageNet,  ///< 7x7 stride-2 conv, then 3x3 stride-2 max-pool (torchvision)
  Small,     ///< 3x3 stride-1 conv, no max-pool: for 28x28 or 32x32 inputs
};

struct ResNetOptions {
  ResNetBlock block = ResNetBlock::Basic;
  std::vector<std::int64_t> layers = {2, 2, 2, 2};           ///< blocks per stage
  std::vector<std::int64_t> widths = {64, 128, 256, 512};    ///< planes per stage
  std::int64_t in_channels = 3;
  std::int64_t num_classes = 1000;
  ResNetStem stem = ResNetStem::ImageNet;
  bool zero_init_residual = false;  ///< torchvision's option: last BN of each block starts at 0

  void validate() const {
    ftopt::detail::check(layers.size() == widths.size() && !layers.empty(),
                         "ResNetOptions: layers and widths need the same, non-zero length, got ",
                         layers.size(), " and ", widths.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      ftopt::detail::check(layers[i] >= 1, "ResNetOptions: layers[", i, "] must be >= 1, got ", layers[i]);
      ftopt::detail::check(widths[i] >= 1, "ResNetOptions: widths[", i, "] must be >= 1, got ", widths[i]);
    }
    ftopt::detail::check(in_channels >= 1, "ResNetOptions: in_channels must be >= 1, got ", in_channels);
    ftopt::detail::check(num_classes >= 1, "ResNetOptions: num_classes must be >= 1, got ", num_classes);
  }
};

namespace detail {

inline nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride = 1) {
  return nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

inline torch::nn::BatchNorm2d batch_norm(std::int64_t channels) {
  return torch::nn::BatchNorm2d(channels);
}

} // namespace detail

/// torchvision's BasicBlock (expansion 1) or Bottleneck (expansion 4).
class ResidualBlockImpl : public torch::nn::Module {
public:
  ResidualBlockImpl(ResNetBlock kind, std::int64_t in, std::int64_t planes, std::int64_t stride)
      : kind_(kind) {
    const std::int64_t out = planes * expansion(kind);
    if (kind == ResNetBlock::Basic) {
      conv1_ = register_module("conv1", detail::conv(in, planes, 3, stride));
      bn1_ = register_module("bn1", detail::batch_norm(planes));
      conv2_ = register_module("conv2", detail::conv(planes, planes, 3));
      bn2_ = register_module("bn2", detail::batch_norm(planes));
    } else {
      conv1_ = register_module("conv1", detail::conv(in, planes, 1));
      bn1_ = register_module("bn1", detail::batch_norm(planes));
      conv2_ = register_module("conv2", detail::conv(planes, planes, 3, stride));
      bn2_ = register_module("bn2", detail::batch_norm(planes));
      conv3_ = register_module("conv3", detail::conv(planes, out, 1));
      bn3_ = register_module("bn3", detail::batch_norm(out));
    }
    if (stride != 1 || in != out) {
      downsample_ = torch::nn::Sequential(detail::conv(in, out, 1, stride), detail::batch_norm(out));
      register_module("downsample", downsample_);
    }
  }

  static std::int64_t expansion(ResNetBlock kind) { return kind == ResNetBlock::Basic ? 1 : 4; }

  torch::Tensor forward(const torch::Tensor& x) {
    auto out = torch::relu(bn1_(conv1_(x)));
    if (kind_ == ResNetBlock::Basic) {
      out = bn2_(conv2_(out));
    } else {
      out = torch::relu(bn2_(conv2_(out)));
      out = bn3_(conv3_(out));
    }
    return torch::relu(out + (downsample_ ? downsample_->forward(x) : x));
  }

  /// The BatchNorm whose output joins the residual sum (zero_init_residual sets it to 0).
  torch::nn::BatchNorm2d& last_norm() { return kind_ == ResNetBlock::Basic ? bn2_ : bn3_; }

private:
  ResNetBlock kind_;
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};

TORCH_MODULE(ResidualBlock);

/// Its residual blocks, counted across the stages, are checkpointable (memory::Checkpoint).
class ResNetImpl : public torch::nn::Module, public nn::CheckpointableBlocks {
public:
  static constexpr bool has_checkpointable_blocks = true;

  explicit ResNetImpl(ResNetOptions options = {}) : options_(std::move(options)) {
    options_.validate();
    const bool imagenet = options_.stem == ResNetStem::ImageNet;
    std::int64_t channels = options_.widths.front();
    conv1_ = register_module("conv1", imagenet ? nn::Conv2d(torch::nn::Conv2dOptions(options_.in_channels, channels, 7)
                                                                .stride(2).padding(3).bias(false))
                                               : detail::conv(options_.in_channels, channels, 3));
    bn1_ = register_module("bn1", detail::batch_norm(channels));
    for (std::size_t stage = 0; stage < options_.layers.size(); ++stage) {
      torch::nn::Sequential layer;
      const std::int64_t planes = options_.widths[stage];
      for (std::int64_t b = 0; b < options_.layers[stage]; ++b) {
        const std::int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
        layer->push_back(ResidualBlock(options_.block, channels, planes, stride));
        channels = planes * ResidualBlockImpl::expansion(options_.block);
      }
      stages_.push_back(register_module("layer" + std::to_string(stage + 1), layer));
    }
    fc_ = register_module("fc", nn::Linear(channels, options_.num_classes));
    initialize();
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(bn1_(conv1_(x)));
    if (options_.stem == ResNetStem::ImageNet) h = torch::max_pool2d(h, 3, 2, 1);
    std::int64_t index = 0;
    for (auto& stage : stages_)
      for (auto& block : *stage) h = run_block(index++, *block.ptr()->as<ResidualBlockImpl>(), h);
    return fc_(torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }

  const ResNetOptions& options() const { return options_; }

private:
  /// torchvision's: Kaiming-normal (fan_out, relu) convs, BatchNorm weight 1 and bias 0.
  void initialize() {
    for (auto& module : modules(/*include_self=*/false)) {
      if (auto* c = module->as<nn::Conv2dImpl>())
        torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      else if (auto* b = module->as<torch::nn::BatchNorm2dImpl>()) {
        torch::nn::init::ones_(b->weight);
        torch::nn::init::zeros_(b->bias);
      }
    }
    if (options_.zero_init_residual)
      for (auto& module : modules(false))
        if (auto* block = module->as<ResidualBlockImpl>()) torch::nn::init::zeros_(block->last_norm()->weight);
  }

  ResNetOptions options_;
  nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<torch::nn::Sequential> stages_;
  nn::Linear fc_{nullptr};
};

/// The module handle, constructible from braced options.
class ResNet : public torch::nn::ModuleHolder<ResNetImpl> {
public:
  using torch::nn::ModuleHolder<ResNetImpl>::ModuleHolder;
  ResNet(ResNetOptions options)  // NOLINT: implicit, so `ResNet model({...})` reads well
      : ModuleHolder(std::make_shared<ResNetImpl>(std::move(options))) {}
};

/// torchvision's resnet18 / resnet34 / resnet50 (ImageNet stem, 1000 classes by default).
inline ResNet resnet18(std::int64_t num_classes = 1000) {
  return ResNet({.layers = {2, 2, 2, 2}, .num_classes = num_classes});
}
inline ResNet resnet34(std::int64_t num_classes = 1000) {
  return ResNet({.layers = {3, 4, 6, 3}, .num_classes = num_classes});
}
inline ResNet resnet50(std::int64_t num_classes = 1000) {
  return ResNet({.block = ResNetBlock::Bottleneck, .layers = {3, 4, 6, 3}, .num_classes = num_classes});
}

} // namespace ftopt::models
