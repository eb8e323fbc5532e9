// The laws of include/ftopt/peft/concept.hpp, checked on every Peft policy through one suite:
// exactly the trainable parameters require grad, training changes only them, and merge leaves
// the outputs as they were. The model is the tiny ViT (Prefix needs its attention).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {

template <class P>
P peft_law_policy() {
  if constexpr (std::is_same_v<P, peft::Freeze>) return peft::Freeze{.train = {"classifier"}};
  else if constexpr (std::is_same_v<P, peft::Lora>) return peft::Lora({.r = 4, .alpha = 8, .targets = {"query", "value"}});
  else if constexpr (std::is_same_v<P, peft::QLora<storage::Int8PerChannel>>)
    return P({.r = 4, .alpha = 8, .targets = {"query", "value"}});
  else if constexpr (std::is_same_v<P, peft::QLora<storage::Nf4>>)  // 16 x 16 weights: 4 blocks of 64
    return P({.r = 4, .alpha = 8, .targets = {"query", "value"}}, storage::Nf4{.block_size = 64, .scaler_block_size = 4});
  else if constexpr (std::is_same_v<P, peft::Adapter>) return peft::Adapter({.reduction_factor = 4});
  else if constexpr (std::is_same_v<P, peft::Prefix>) return peft::Prefix({.num_virtual_tokens = 3});
  else if constexpr (std::is_same_v<P, peft::Ia3>) return peft::Ia3({.targets = {"key", "value"}});
  else if constexpr (std::is_same_v<P, peft::Vera>) return peft::Vera({.r = 8, .targets = {"query", "value"}});
  else return P{};
}

test::Batches peft_law_batches() {
  torch::manual_seed(41);
  test::Batches batches;
  for (int i = 0; i < 3; ++i) batches.emplace_back(torch::randn({8, 1, 28, 28}), torch::randint(0, 10, {8}));
  return batches;
}

} // namespace

TEMPLATE_TEST_CASE("Every Peft policy keeps the Peft laws", "[peft][laws]", peft::Full, peft::Freeze, peft::Lora,
                   peft::QLora<storage::Int8PerChannel>, peft::QLora<storage::Nf4>, peft::Adapter, peft::Prefix, peft::Ia3, peft::Vera) {
  STATIC_REQUIRE(peft::Policy<TestType>);
  auto model = test::tiny_vit(40);
  const auto batches = peft_law_batches();
  Trainer<precision::Fp32, TestType> trainer(test::quiet(), {}, peft_law_policy<TestType>());
  const auto& trainable = trainer.prepare(model);

  // Law 1: every trainable parameter requires grad and no other parameter does.
  std::unordered_set<const void*> listed;
  for (const auto& p : trainable) listed.insert(p.unsafeGetTensorImpl());
  const auto named = model->named_parameters();
  for (const auto& item : named) {
    INFO(item.key());
    CHECK(item.value().requires_grad() == (listed.count(item.value().unsafeGetTensorImpl()) == 1));
  }
  CHECK(listed.size() == trainable.size());
  CHECK_FALSE(trainable.empty());

  // Training changes the trainable parameters and nothing else.
  const auto before = test::snapshot(*model);
  torch::optim::SGD optimizer(trainable, torch::optim::SGDOptions(0.5));
  trainer.fit(model, optimizer, batches);
  const auto after = test::snapshot(*model);
  std::size_t changed = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    INFO(named[i].key());
    const bool same = torch::equal(before[i], after[i]);
    if (!named[i].value().requires_grad()) CHECK(same);
    changed += !same;
  }
  CHECK(changed > 0);

  // Law 2: merge leaves the outputs unchanged, up to rounding.
  model->eval();
  const auto x = batches.front().first;
  torch::NoGradGuard no_grad;
  const auto unmerged = model->forward(x);
  trainer.finalize(model);
  const auto merged = model->forward(x);
  CHECK(((merged - unmerged).norm() / unmerged.norm()).item<double>() < 1e-5);
}
