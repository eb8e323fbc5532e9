// Tests for include/ftopt/trainer/parameter_groups.hpp: the optimizer's groups, a Peft policy's own
// (LoRA+, as PEFT's create_loraplus_optimizer makes them) or one group of what prepare returned.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {

using LoraPlusTrainer = Trainer<precision::Fp32, peft::Lora>;

} // namespace

TEST_CASE("LoRA+ groups, as PEFT's create_loraplus_optimizer makes them", "[peft][lora][loraplus]") {
  auto model = test::tiny_vit(41);
  LoraPlusTrainer trainer(quiet(), {}, peft::Lora({.r = 4, .alpha = 8, .targets = {"query", "value"},
                                               .modules_to_save = {"classifier", "vit.layernorm"},
                                               .loraplus_lr_ratio = 16, .loraplus_weight_decay = 0.1}));
  auto groups = trainer.parameter_groups(model, torch::optim::AdamWOptions(1e-3).weight_decay(0.05));
  // PEFT's rule, by name: a matrix other than lora_B -> lr; lora_B or 1-D -> lr x 16, with decay
  // 0.1 unless a bias or a LayerNorm's tensor (then 0).
  std::map<std::string, std::pair<double, double>> expected;  // name -> (lr, weight decay)
  for (const auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    const std::string& name = item.key();
    const bool fast = name.find("lora_B") != std::string::npos || item.value().dim() == 1;
    const bool no_decay = name.ends_with("bias") || name.starts_with("vit.layernorm.");
    expected[name] = {fast ? 1.6e-2 : 1e-3, fast && no_decay ? 0.0 : 0.1};
  }
  CHECK(expected.size() == 8 + 2 + 2);  // the LoRA matrices, the head, the last LayerNorm
  std::map<const void*, std::string> name_of;
  for (const auto& item : model->named_parameters()) name_of[item.value().unsafeGetTensorImpl()] = item.key();
  REQUIRE(groups.size() == 3);
  std::size_t seen = 0;
  for (auto& group : groups) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (const auto& p : group.params()) {
      const auto& name = name_of.at(p.unsafeGetTensorImpl());
      INFO(name);
      CHECK(options.lr() == Approx(expected.at(name).first));
      CHECK(options.weight_decay() == Approx(expected.at(name).second));
      CHECK(options.betas() == torch::optim::AdamWOptions().betas());  // the rest from the defaults
      ++seen;
    }
  }
  CHECK(seen == expected.size());

  // The optimizer fits from them, and the lrs keep their ratio.
  torch::optim::AdamW optimizer(std::move(groups));
  torch::manual_seed(42);
  trainer.fit(model, optimizer, test::Batches{{torch::randn({8, 1, 28, 28}), torch::randint(0, 10, {8})}});
  CHECK(optimizer.param_groups()[1].options().get_lr() == Approx(16 * optimizer.param_groups()[0].options().get_lr()));

  // Without the ratio, and for other policies: one group of prepare()'s parameters, the options as given.
  auto plain_model = test::tiny_vit(43);
  LoraPlusTrainer plain(quiet(), {}, peft::Lora({.r = 4, .alpha = 8}));
  auto one = plain.parameter_groups(plain_model, torch::optim::AdamWOptions(1e-3).weight_decay(0.05));
  REQUIRE(one.size() == 1);
  CHECK(one[0].params().size() == plain.trainable_parameters().size());
  CHECK(static_cast<const torch::optim::AdamWOptions&>(one[0].options()).weight_decay() == 0.05);
  auto full_model = test::tiny_vit(44);
  Trainer<> full(quiet());
  auto whole = full.parameter_groups(full_model, torch::optim::SGDOptions(0.1));
  REQUIRE(whole.size() == 1);
  CHECK(whole[0].params().size() == full_model->parameters().size());
}
