// Tests for include/ftopt/batch.hpp: the shapes fit accepts.
#include <catch2/catch.hpp>

#include <list>
#include <tuple>

#include <range/v3/view/transform.hpp>
#include <torch/torch.h>

#include <ftopt.hpp>

#include "support.hpp"

using namespace ftopt;

static_assert(Batch<std::pair<torch::Tensor, torch::Tensor>>);
static_assert(Batch<std::tuple<torch::Tensor, torch::Tensor>>);
static_assert(Batch<torch::data::Example<>>);
static_assert(!Batch<torch::Tensor>);
static_assert(!Batch<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>>);

TEST_CASE("fit takes any range of batch shapes, range-v3 views included", "[batch]") {
  auto pairs = test::random_batches(2, 4);
  std::list<torch::data::Example<>> examples;
  for (auto& [x, y] : pairs) examples.push_back({x, y});
  auto as_tuples = pairs | ranges::views::transform([](const auto& b) {
                     return std::tuple<torch::Tensor, torch::Tensor>{b.first, b.second};
                   });
  static_assert(BatchRange<decltype(as_tuples)&>);

  auto model = test::small_mlp();
  Trainer<> trainer({.device = torch::kCPU, .report_hardware = false});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  CHECK(trainer.fit(model, optimizer, examples).epochs[0].samples == 8);
  CHECK(trainer.fit(model, optimizer, as_tuples).epochs[0].samples == 8);
  CHECK(trainer.evaluate(model, examples).samples == 8);
}
