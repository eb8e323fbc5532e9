// Tests for include/ftopt/peft/prefix.hpp (Li & Liang 2021; PEFT's PrefixTuningConfig and
// PrefixEncoder: [num_virtual_tokens, layers * 2 * hidden], optionally through an MLP).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::quiet;

namespace {
using PrefixTrainer = Trainer<precision::Fp32, peft::Prefix>;
} // namespace

TEST_CASE("Prefix adds trainable key and value rows to every attention layer", "[peft][prefix]") {
  auto model = test::tiny_vit(1);
  PrefixTrainer trainer(quiet(), {}, peft::Prefix({.num_virtual_tokens = 5}));
  const auto& trainable = trainer.prepare(model);
  REQUIRE(trainable.size() == 1);
  CHECK(model->named_parameters()["prefix_encoder.embedding.weight"].sizes() == torch::IntArrayRef({5, 2 * 2 * 16}));
  for (const auto& item : model->named_parameters())
    CHECK(item.value().requires_grad() == (item.key().rfind("prefix_encoder.", 0) == 0));

  // Layer 1's attention against the same attention written out over [prefix; computed] keys.
  auto& attention = *model->vit->encoder_layer(1).attention->attention;
  auto x = torch::randn({3, 17, 16});
  auto [pk, pv] = attention.prefix()->key_value();
  CHECK(pk.sizes() == torch::IntArrayRef({5, 16}));
  auto all = model->named_parameters()["prefix_encoder.embedding.weight"].view({5, 2, 2, 16});
  CHECK(torch::equal(pk, all.select(1, 1).select(1, 0)));
  CHECK(torch::equal(pv, all.select(1, 1).select(1, 1)));
  auto split = [](const torch::Tensor& t) { return t.reshape({3, t.size(1), 2, 8}).transpose(1, 2); };
  auto k = torch::cat({pk.unsqueeze(0).expand({3, 5, 16}), attention.key(x)}, 1);
  auto v = torch::cat({pv.unsqueeze(0).expand({3, 5, 16}), attention.value(x)}, 1);
  auto scores = torch::matmul(split(attention.query(x)), split(k).transpose(-2, -1)) / std::sqrt(8.0);
  auto expected = torch::matmul(scores.softmax(-1), split(v)).transpose(1, 2).reshape({3, 17, 16});
  CHECK(torch::allclose(attention.forward(x), expected, 1e-5, 1e-6));
}

TEST_CASE("Prefix with the reparameterization MLP trains only the prefix", "[peft][prefix]") {
  auto model = test::tiny_vit(2);
  PrefixTrainer trainer(quiet({.epochs = 5}), {},
                        peft::Prefix({.num_virtual_tokens = 4, .prefix_projection = true, .encoder_hidden_size = 24,
                                      .modules_to_save = {"classifier"}}));
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
  auto params = model->named_parameters();
  CHECK(params["prefix_encoder.embedding.weight"].sizes() == torch::IntArrayRef({4, 16}));
  CHECK(params["prefix_encoder.transform.0.weight"].sizes() == torch::IntArrayRef({24, 16}));
  CHECK(params["prefix_encoder.transform.2.weight"].sizes() == torch::IntArrayRef({2 * 2 * 16, 24}));
  auto frozen = params["vit.encoder.layer.0.attention.attention.query.weight"].clone();
  torch::manual_seed(3);
  auto summary = trainer.fit(model, optimizer, test::Batches{{torch::randn({32, 1, 28, 28}), torch::randint(0, 10, {32})}});
  CHECK(summary.epochs.back().loss < summary.epochs.front().loss);
  CHECK(torch::equal(model->named_parameters()["vit.encoder.layer.0.attention.attention.query.weight"], frozen));
}

TEST_CASE("Prefix names bad settings", "[peft][prefix][errors]") {
  CHECK_THAT(test::message_of([] { PrefixTrainer(quiet(), {}, peft::Prefix({.num_virtual_tokens = 0})); }),
             Catch::Contains("num_virtual_tokens must be >= 1, got 0"));
}
