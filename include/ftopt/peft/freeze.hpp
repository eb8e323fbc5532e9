#pragma once
/// peft::Freeze: train only some of the model, chosen by name (ftopt::nn::NamePattern: a module
/// name at any depth, a dotted suffix, or nn::regex(...)); everything else is frozen, so the
/// backward skips its weight gradients. Works on any torch::nn::Module.
///
///   ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Freeze> trainer(
///       {}, {}, ftopt::peft::Freeze{.train = {"layer4", "fc"}});
///   ftopt::peft::Freeze{.freeze = {"embeddings", "encoder.layer.0"}};   // or name the frozen part
///   ftopt::peft::Freeze{.train = {"classifier"}, .last_blocks = 2, .blocks = "encoder.layer"};

#include <memory>
#include <string>

#include <ftopt/error.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/concept.hpp>
#include <ftopt/peft/full.hpp>

namespace ftopt::peft {

struct Freeze {
  using axis = ftopt::axis::Peft;
  static constexpr const char* name = "freeze";  ///< in grids, tables and flags

  /// Train only what these match (all other parameters freeze); empty: train everything
  /// that `freeze` does not name.
  nn::NamePatterns train;
  /// Freeze what these match.
  nn::NamePatterns freeze;
  /// Also train the last `last_blocks` children of the container named `blocks` (a Sequential or
  /// ModuleList: "encoder.layer" in the ViT, "layer4" in a ResNet); everything else freezes.
  std::int64_t last_blocks = 0;
  std::string blocks;

  void validate() const {
    ftopt::detail::check(!train.empty() || !freeze.empty() || last_blocks > 0,
                         "peft::Freeze: name what to train (.train, .last_blocks) or what to freeze (.freeze)");
    ftopt::detail::check(last_blocks >= 0, "peft::Freeze: last_blocks must be >= 0, got ", last_blocks);
    ftopt::detail::check(last_blocks == 0 || !blocks.empty(),
                         "peft::Freeze: last_blocks is ", last_blocks, " but .blocks names no container");
  }

  void attach(torch::nn::Module& module) {
    nn::NamePatterns trained = train;
    if (last_blocks > 0) {
      std::shared_ptr<torch::nn::Module> container;
      std::string name;
      for (const auto& item : module.named_modules("", false))
        if (nn::NamePattern(blocks).matches(item.key())) {
          ftopt::detail::check(container == nullptr, "peft::Freeze: .blocks '", blocks, "' matches both ", name,
                               " and ", item.key());
          container = item.value();
          name = item.key();
        }
      ftopt::detail::check(container != nullptr, "peft::Freeze: .blocks '", blocks,
                           "' matches no module; module names here: ", nn::detail::module_names_hint(module));
      const auto children = container->named_children();
      ftopt::detail::check(last_blocks <= static_cast<std::int64_t>(children.size()), "peft::Freeze: last_blocks is ",
                           last_blocks, " but ", name, " has ", children.size(), " blocks");
      for (std::size_t i = children.size() - static_cast<std::size_t>(last_blocks); i < children.size(); ++i)
        trained.emplace_back(name + "." + children[i].key());
    }
    if (!trained.empty()) nn::train_only(module, trained);
    if (!freeze.empty()) nn::freeze(module, freeze);
  }

  std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) const {
    return Full{}.trainable_parameters(module);
  }

  void merge(torch::nn::Module&) {}
};

static_assert(Policy<Freeze>);

} // namespace ftopt::peft
