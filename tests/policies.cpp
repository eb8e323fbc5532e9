// Tests for the axis concepts (include/ftopt/<axis>/concept.hpp) and their baseline models.
// The laws each concept states are checked on every model through one TEMPLATE_TEST_CASE, with
// a user-written policy (the worked example of docs/architecture.md) beside the baselines.
#include <catch2/catch.hpp>

#include <regex>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "support.hpp"

using namespace ftopt;

static_assert(precision::Policy<precision::Fp32>);
static_assert(peft::Policy<peft::Full>);
static_assert(memory::Policy<memory::None>);
static_assert(parallel::Policy<parallel::Single>);
static_assert(quant::Policy<quant::None>);
// A policy models its own axis only.
static_assert(!precision::Policy<peft::Full>);
static_assert(!quant::Policy<memory::None>);
// The baselines carry no state beyond their settings: "a policy that does nothing adds no work".
static_assert(std::is_empty_v<precision::Fp32> && std::is_empty_v<peft::Full> &&
              std::is_empty_v<parallel::Single> && std::is_empty_v<quant::None>);

namespace {

/// docs/architecture.md's worked example: train only the parameters whose names match a regex.
struct TrainMatching {
  using axis = ftopt::axis::Peft;
  std::string pattern;

  void validate() const {
    try {
      std::regex{pattern};
    } catch (const std::regex_error&) {
      ftopt::detail::fail("TrainMatching: pattern is not a valid regex: '", pattern, "'");
    }
  }
  void attach(torch::nn::Module& module) {
    const std::regex re{pattern};
    for (auto& item : module.named_parameters())
      item.value().requires_grad_(std::regex_search(item.key(), re));
  }
  std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) const {
    return peft::Full{}.trainable_parameters(module);
  }
  void merge(torch::nn::Module&) {}
};
static_assert(peft::Policy<TrainMatching>);

using Baseline = Trainer<>;
using HeadOnly = Trainer<precision::Fp32, TrainMatching>;

template <class T>
T make_trainer() {
  TrainerOptions options{.device = torch::kCPU, .report_hardware = false};
  if constexpr (std::is_same_v<T, HeadOnly>) return T(options, {}, TrainMatching{.pattern = "^layers\\.2\\."});
  else return T(options);
}

} // namespace

TEMPLATE_TEST_CASE("Policy laws hold for every configuration", "[policies]", Baseline, HeadOnly) {
  auto model = test::small_mlp();
  auto batches = test::random_batches(3, 8);
  auto trainer = make_trainer<TestType>();
  auto before = test::snapshot(*model);
  const auto& trainable = trainer.prepare(model);
  torch::optim::SGD optimizer(trainable, torch::optim::SGDOptions(0.2));

  SECTION("peft: exactly the trainable parameters require grad; only they change") {
    auto named = model->named_parameters();
    std::size_t requiring = 0;
    for (auto& item : named) requiring += item.value().requires_grad();
    CHECK(requiring == trainable.size());
    auto first_loss = trainer.evaluate(model, batches).loss;
    trainer.fit(model, optimizer, batches);
    auto after = test::snapshot(*model);
    for (std::size_t i = 0; i < after.size(); ++i) {
      const bool trains = named[i].value().requires_grad();
      INFO(named[i].key());
      CHECK(torch::equal(before[i], after[i]) == !trains);
      CHECK_FALSE(named[i].value().grad().defined());  // gradients set to none after each step
    }
    CHECK(trainer.evaluate(model, batches).loss < first_loss);
  }
  SECTION("memory: forward returns the model's forward") {
    auto x = batches[0].first;
    CHECK(torch::equal(trainer.memory().forward(model, x), model->forward(x)));
    CHECK(trainer.memory().accumulation() == 1);
  }
  SECTION("parallel: one rank, reduce_sum is the identity") {
    auto t = torch::tensor({1.5, 2.5});
    CHECK(torch::equal(trainer.parallel().reduce_sum(t), t));
    CHECK(trainer.parallel().rank() == 0);
    CHECK(trainer.parallel().world_size() == 1);
  }
  SECTION("finalize (peft merge, quant convert) leaves the outputs unchanged") {
    trainer.fit(model, optimizer, batches);
    auto x = batches[1].first;
    auto out = model->forward(x).detach();
    trainer.finalize(model);
    CHECK(torch::equal(model->forward(x), out));
  }
}

TEST_CASE("A user-written policy's validate() runs when the Trainer takes it", "[policies][errors]") {
  CHECK_THAT(test::message_of([] { HeadOnly({}, {}, TrainMatching{.pattern = "(("}); }),
             Catch::Contains("pattern is not a valid regex: '(('"));
}
