// Tests for include/ftopt/models/bert.hpp: what must hold of a BERT whatever its weights (padding
// changes nothing a real token sees; the input forms agree; mean pooling is its formula;
// checkpointed layers give the same gradients; prefixes attend). Loading a Hugging Face folder:
// bert_pretrained.cpp; the real checkpoint against transformers: tests/peer/bert.py.
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/models/bert.hpp>
#include <ftopt/peft/prefix.hpp>
#include <ftopt/quant/dynamic_int8.hpp>

#include "../support.hpp"
#include "tiny_bert.hpp"

using namespace ftopt;

using ftopt::test::tiny_bert;
using ftopt::test::tiny_options;

TEST_CASE("Bert: padding changes nothing the tokens see", "[models]") {
  for (auto pooling : {models::BertPooling::Pooler, models::BertPooling::Mean}) {
    auto bert = tiny_bert(pooling);
    torch::NoGradGuard no_grad;
    const auto ids = torch::tensor({{2, 17, 9, 33, 3}});
    const auto alone = bert->forward(ids);
    const auto padded_ids = torch::tensor({{2, 17, 9, 33, 3, 0, 0, 0}});
    const auto mask = torch::tensor({{1, 1, 1, 1, 1, 0, 0, 0}});
    const auto padded = bert->forward(models::bert_input(padded_ids, mask));
    // The same sums over the 5 tokens, in GEMMs of other shapes: equal up to float rounding.
    CAPTURE((alone - padded).abs().max().item<double>());
    CHECK(torch::allclose(alone, padded, 1e-5, 1e-5));
    // Without the mask the padding is attended to and the logits move.
    CHECK_FALSE(torch::allclose(alone, bert->forward(padded_ids), 0, 1e-4));
    const auto hidden = bert->bert->encode(padded_ids, mask);
    CAPTURE((hidden.narrow(1, 0, 5) - bert->bert->encode(ids)).abs().max().item<double>());
    CHECK(torch::allclose(hidden.narrow(1, 0, 5), bert->bert->encode(ids), 1e-5, 1e-5));
  }
}

TEST_CASE("Bert: the input forms agree, and token types are embedded", "[models]") {
  auto bert = tiny_bert();
  torch::NoGradGuard no_grad;
  const auto ids = torch::tensor({{2, 5, 6, 3}, {2, 7, 3, 0}});
  const auto ones = torch::ones_like(ids);
  CHECK(torch::allclose(bert->forward(ids), bert->forward(models::bert_input(ids, ones)), 0, 1e-6));
  const auto zeros = torch::zeros_like(ids);
  CHECK(torch::allclose(bert->forward(ids), bert->forward(models::bert_input(ids, ones, zeros)), 0, 1e-6));
  CHECK_FALSE(torch::allclose(bert->forward(ids), bert->forward(models::bert_input(ids, ones, ones)), 0, 1e-4));
}

TEST_CASE("Bert: mean pooling is the masked mean, and BertPooling::Mean classifies it", "[models]") {
  const auto hidden = torch::arange(2 * 3 * 2, torch::kFloat).view({2, 3, 2});
  const auto mask = torch::tensor({{1, 1, 0}, {1, 1, 1}});
  // sum over kept tokens / their count, written out
  const auto expected = torch::stack({(hidden[0][0] + hidden[0][1]) / 2, (hidden[1][0] + hidden[1][1] + hidden[1][2]) / 3});
  CHECK(torch::allclose(models::mean_pooling(hidden, mask), expected));
  auto bert = tiny_bert(models::BertPooling::Mean);
  torch::NoGradGuard no_grad;
  const auto ids = torch::tensor({{2, 5, 6, 3}});
  const auto& c = bert->classifier;
  CHECK(torch::allclose(bert->forward(ids), torch::linear(bert->sentence_embedding(ids), c->weight, c->bias), 0, 1e-6));
  // Nothing reads the pooler: it is frozen, every other parameter trains (with the pooler's head, all do).
  for (const auto& item : bert->named_parameters()) {
    INFO(item.key());
    CHECK(item.value().requires_grad() == !item.key().starts_with("bert.pooler."));
  }
  for (const auto& p : tiny_bert(models::BertPooling::Pooler)->parameters()) CHECK(p.requires_grad());
}

TEST_CASE("Bert: checkpointed layers give the same gradients", "[models]") {
  const auto ids = torch::tensor({{2, 5, 6, 3, 0}, {2, 7, 8, 9, 3}});
  const auto input = models::bert_input(ids, ids.ne(0));
  auto gradients = [&](bool checkpointed) {
    auto bert = tiny_bert();
    bert->train();
    if (checkpointed) bert->bert->set_checkpointing({.every = 1});
    bert->forward(input).pow(2).sum().backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : bert->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    return g;
  };
  const auto plain = gradients(false), recomputed = gradients(true);
  REQUIRE(plain.size() == recomputed.size());
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(torch::allclose(plain[i], recomputed[i], 1e-5, 1e-6));
}

TEST_CASE("Bert: bad input is refused with its shape or type", "[models]") {
  auto bert = tiny_bert();
  CHECK(test::message_of([&] { bert->forward(torch::rand({2, 4})); }).find("must hold integer token ids") !=
        std::string::npos);
  CHECK(test::message_of([&] { bert->forward(torch::zeros({2, 4, 4}, torch::kLong)); }).find("got [2, 4, 4]") !=
        std::string::npos);
  CHECK(test::message_of([&] { bert->forward(torch::zeros({1, 30}, torch::kLong)); })
            .find("30 tokens is longer than max_position_embeddings 24") != std::string::npos);
  CHECK(test::message_of([] { models::Bert({.hidden = 10, .heads = 4}); }).find("hidden 10 must be a multiple of heads 4") !=
        std::string::npos);
}

TEST_CASE("Bert: prefix tuning attends to the prefix rows, padding still masked", "[models]") {
  auto bert = tiny_bert();
  peft::Prefix prefix({.num_virtual_tokens = 3});
  prefix.attach(*bert);
  bert->eval();
  torch::NoGradGuard no_grad;
  const auto ids = torch::tensor({{2, 17, 9, 3}});
  const auto alone = bert->forward(ids);
  const auto padded = bert->forward(models::bert_input(torch::tensor({{2, 17, 9, 3, 0, 0}}),
                                                       torch::tensor({{1, 1, 1, 1, 0, 0}})));
  CHECK(torch::allclose(alone, padded, 0, 1e-6));
  auto plain = tiny_bert();
  CHECK_FALSE(torch::allclose(alone, plain->forward(ids), 0, 1e-4));
}

TEST_CASE("Bert: quant::DynamicInt8 keeps its predictions", "[models]") {
  auto options = tiny_options();
  options.initializer_range = 0.02;  // BERT's own: int8's error does not compound through weights of size ~1
  torch::manual_seed(5);
  models::Bert bert(options);
  bert->eval();
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(4, 50, {8, 12});
  const auto before = bert->forward(ids);
  quant::DynamicInt8().convert(*bert);
  const auto after = bert->forward(ids);
  CHECK((after - before).abs().max().item<double>() < 0.05 * before.abs().max().item<double>());
}
