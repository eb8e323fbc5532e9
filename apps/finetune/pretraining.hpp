#pragma once
// The main job's pretraining on classes 0-4, cached on disk: the same settings give the same
// file name (model shape, epochs, precision, training limit), so a later run loads the backbone
// instead of training it again, and a backbone of another shape is never loaded.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>

#include <ftopt.hpp>
#include <ftopt/json.hpp>  // for the file functions: <ftopt.hpp> declares JSON only

#include "models.hpp"
#include "options.hpp"
#include "runs.hpp"

namespace finetune {

/// Where the backbone for these options is kept.
inline std::filesystem::path pretrained_path(const Options& o, bool bf16) {
  std::string name = o.model;
  if (o.model == "vit") {
    name += "-d" + std::to_string(o.vit_hidden) + "-l" + std::to_string(o.vit_layers) + "-mlp" + std::to_string(o.vit_mlp);
    if (o.vit_dropout > 0) name += "-dropout" + std::to_string(o.vit_dropout);
  }
  name += "-fashion-mnist-classes0-4-epochs" + std::to_string(o.pretrain_epochs);
  if (bf16) name += "-bf16";
  if (o.train_limit) name += "-limit" + std::to_string(o.train_limit);
  return std::filesystem::path(o.cache) / (name + ".pt");
}

/// Loads `model`'s weights from the cache, or pretrains it on `train_set` (in Bf16Mixed where
/// `bf16`) and saves them there.
template <class M>
void pretrain_or_load(M& model, const Options& o, bool bf16, const ftopt::TrainerOptions& options,
                      const Prepared& train_set, const Prepared& test_set, double lr) {
  const auto cache = pretrained_path(o, bf16);
  if (std::filesystem::exists(cache)) {
    ftopt::weights::load(*model, cache);
    std::cerr << "pretrained backbone from " << cache.string() << '\n';
    return;
  }
  auto pre_options = options;
  pre_options.epochs = std::max<std::int64_t>(1, o.pretrain_epochs);
  const std::string setup = "pretraining " + o.model + " on classes 0-4";
  if (bf16)
    train(setup, ftopt::Trainer<ftopt::precision::Bf16Mixed>(pre_options), model, train_set, test_set, lr,
          Loading::InMemory, false, /*int8=*/false);
  else
    train(setup, ftopt::Trainer<>(pre_options), model, train_set, test_set, lr, Loading::InMemory, false,
          /*int8=*/false);
  std::filesystem::create_directories(cache.parent_path());
  ftopt::weights::save(*model, cache);
  std::cerr << "pretrained backbone saved to " << cache.string() << '\n';
}

} // namespace finetune
