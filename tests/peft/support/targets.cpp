// Tests for include/ftopt/peft/support/targets.hpp: the layers a PEFT policy adapts are the
// modules whose names match its targets (PEFT's target_modules rule: the whole name or a dotted
// suffix, or a regex over the whole name), in module order; no match, or a match that is not an
// nn::Linear, is an error naming the policy; an adapter's layers live on the layer they adapt.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/nn/linear.hpp>
#include <ftopt/peft/support/targets.hpp>

#include "../../support.hpp"

using namespace ftopt;
using Catch::Matchers::Equals;

namespace {

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    query = register_module("query", nn::Linear(4, 4));
    key = register_module("key", nn::Linear(4, 4));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})));
  }
  nn::Linear query{nullptr}, key{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(Block);

/// blocks.{0,1}.{query,key,norm}
struct NetImpl : torch::nn::Module {
  NetImpl() {
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 2; ++i) blocks->push_back(Block());
  }
  Block block(std::size_t i) { return Block(blocks->ptr<BlockImpl>(i)); }
  torch::nn::ModuleList blocks{nullptr};
};
TORCH_MODULE(Net);

std::vector<std::string> names(const std::vector<std::pair<std::string, torch::nn::Module*>>& found) {
  std::vector<std::string> out;
  for (const auto& [name, module] : found) out.push_back(name);
  return out;
}

/// A branch that records what it was folded into.
struct Recording {
  using layer_type = nn::LinearImpl;
  std::vector<std::pair<std::string, nn::LinearImpl*>>* log;
  void merge_into(nn::LinearImpl& layer) { log->emplace_back("merge", &layer); }
  void unmerge_from(nn::LinearImpl& layer) { log->emplace_back("unmerge", &layer); }
};

} // namespace

TEST_CASE("target_modules and target_linears: matches in module order, errors naming the policy", "[peft]") {
  Net net;
  // Module order, not the order of the patterns.
  const auto found = peft::detail::target_modules(*net, {"key", "query"}, "Who");
  CHECK(names(found) == std::vector<std::string>{"blocks.0.query", "blocks.0.key", "blocks.1.query", "blocks.1.key"});
  CHECK(found[1].second == net->block(0)->key.get());
  // A dotted suffix, and a regex over the whole name.
  CHECK(names(peft::detail::target_modules(*net, {"1.query"}, "Who")) == std::vector<std::string>{"blocks.1.query"});
  CHECK(names(peft::detail::target_modules(*net, {nn::regex("blocks\\.1\\.(key|norm)")}, "Who")) ==
        std::vector<std::string>{"blocks.1.key", "blocks.1.norm"});
  // "uery" is not a dotted suffix of "blocks.0.query".
  CHECK_THAT(test::message_of([&] { peft::detail::target_modules(*net, {"uery", "value"}, "Who"); }),
             Equals("Who: targets 'uery', 'value' match no module; module names here: 0, 1, blocks, key, norm, query"));

  const auto linears = peft::detail::target_linears(*net, {"query"}, "Who");
  REQUIRE(linears.size() == 2);
  CHECK(linears[1].first == "blocks.1.query");
  CHECK(linears[1].second == net->block(1)->query.get());
  CHECK_THAT(test::message_of([&] { peft::detail::target_linears(*net, {"query", "norm"}, "Who"); }),
             Equals("Who: target 'blocks.0.norm' is not an ftopt::nn::Linear; Who adapts nn::Linear layers"));
}

TEST_CASE("fold_branches folds each branch into its own layer, and adopt puts a sub-layer on the layer", "[peft]") {
  Net net;
  std::vector<std::pair<std::string, nn::LinearImpl*>> log;
  const std::vector<std::pair<std::string, std::shared_ptr<Recording>>> branches = {
      {"blocks.1.key", std::make_shared<Recording>(Recording{&log})},
      {"blocks.0.query", std::make_shared<Recording>(Recording{&log})}};
  peft::detail::fold_branches(*net, branches, /*merge=*/true);
  peft::detail::fold_branches(*net, branches, /*merge=*/false);
  const std::vector<std::pair<std::string, nn::LinearImpl*>> expected = {
      {"merge", net->block(1)->key.get()},
      {"merge", net->block(0)->query.get()},
      {"unmerge", net->block(1)->key.get()},
      {"unmerge", net->block(0)->query.get()}};
  CHECK(log == expected);

  // adopt: registered under the name, in the layer's dtype, saved with it.
  auto& layer = *net->block(0)->query;
  layer.to(torch::kBFloat16);
  auto sub = peft::detail::adopt(layer, "lora_A", nn::Linear(torch::nn::LinearOptions(4, 2).bias(false)));
  CHECK(sub->weight.scalar_type() == torch::kBFloat16);
  CHECK(layer.named_children()["lora_A"].get() == sub.get());
  CHECK(test::state_dict_names(layer) == std::vector<std::string>{"weight", "bias", "lora_A.weight"});
}
