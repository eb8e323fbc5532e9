// Tests for include/ftopt/trainer/evaluate.hpp: mean loss and accuracy, the weights untouched.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

TEST_CASE("evaluate computes mean loss and accuracy without touching the weights", "[trainer]") {
  auto batches = test::random_batches(3, 10);
  auto model = test::small_mlp(1, /*dropout=*/0.5);
  Trainer<> trainer(quiet());
  trainer.prepare(model);
  auto before = test::snapshot(*model);
  model->train();
  auto stats = trainer.evaluate(model, batches);
  CHECK(model->is_training());  // restored
  CHECK(test::same_values(before, test::snapshot(*model)));
  model->eval();  // reference: eval mode, so dropout is off as in evaluate
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> xs, ys;
  for (auto& [x, y] : batches) xs.push_back(x), ys.push_back(y);
  auto out = model->forward(torch::cat(xs));
  auto y = torch::cat(ys);
  CHECK(stats.samples == 30);
  CHECK(stats.loss == Approx(torch::nn::functional::cross_entropy(out, y).item<double>()).epsilon(1e-6));
  CHECK(*stats.accuracy == Approx(out.argmax(1).eq(y).sum().item<double>() / 30));
}
