#pragma once
// The main job's data and models: standardized images, the ResNet and the ViT it fine-tunes,
// and the new head each fine-tuning row starts from.
#include <cstdint>
#include <type_traits>

#include <torch/torch.h>

#include <ftopt/data/fashion_mnist.hpp>
#include <ftopt/models/resnet.hpp>
#include <ftopt/models/vit.hpp>
#include <ftopt/nn/linear.hpp>

#include "options.hpp"

namespace finetune {

/// Images as float [N, 1, 28, 28], standardized.
struct Prepared {
  torch::Tensor images, labels;
  double background = 0;  ///< a black pixel, standardized
};
inline Prepared prepare(const ftopt::data::LabelledImages& set, double mean, double std) {
  return {set.images.to(torch::kFloat).div_(255.0).sub_(mean).div_(std).unsqueeze(1), set.labels, -mean / std};
}

template <class M>
void reset_head(M& model) {
  const char* head = std::is_same_v<M, ftopt::models::ResNet> ? "fc" : "classifier";
  model->named_modules()[head]->template as<ftopt::nn::LinearImpl>()->reset_parameters();
}

inline ftopt::models::ResNet make_resnet(const Options&, std::int64_t classes) {
  return ftopt::models::ResNet({.layers = {1, 1, 1, 1}, .widths = {16, 32, 64, 128}, .in_channels = 1,
                                .num_classes = classes, .stem = ftopt::models::ResNetStem::Small});
}
inline ftopt::models::ViT make_vit(const Options& args, std::int64_t classes) {
  return ftopt::models::ViT({.image_size = 28, .patch_size = 4, .channels = 1, .hidden = args.vit_hidden,
                             .layers = args.vit_layers, .heads = 4, .intermediate = args.vit_mlp * args.vit_hidden,
                             .num_labels = classes, .dropout = args.vit_dropout});
}

} // namespace finetune
