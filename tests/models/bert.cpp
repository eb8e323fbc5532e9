// models/bert.hpp and models/bert_pretrained.hpp: what must hold of a BERT whatever its weights
// (padding changes nothing a real token sees; the input forms agree; mean pooling is its formula;
// checkpointed layers give the same gradients; prefixes attend), and config.json and weight files
// with what can be wrong with them. tests/peer/bert.py checks the real checkpoint against
// transformers.
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/json.hpp>
#include <ftopt/models/bert.hpp>
#include <ftopt/models/bert_pretrained.hpp>
#include <ftopt/peft/prefix.hpp>
#include <ftopt/quant/dynamic_int8.hpp>
#include <ftopt/weights/files.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {
models::BertOptions tiny_options(models::BertPooling pooling = models::BertPooling::Pooler) {
  return {.vocab_size = 50, .hidden = 16, .layers = 2, .heads = 4, .intermediate = 32, .dropout = 0.0,
          .attention_dropout = 0.0, .max_position_embeddings = 24, .initializer_range = 0.5, .num_labels = 3,
          .pooling = pooling};  // weights of size ~1, so that every difference shows in the logits
}
models::Bert tiny_bert(models::BertPooling pooling = models::BertPooling::Pooler, std::uint64_t seed = 5) {
  torch::manual_seed(seed);
  models::Bert bert(tiny_options(pooling));
  bert->eval();
  return bert;
}
} // namespace

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

TEST_CASE("load_bert: a Hugging Face folder, and what can be wrong with it", "[models]") {
  test::ScratchDir dir("bert-folder");
  auto write_config = [&](nlohmann::json config) { std::ofstream(dir.path / "config.json") << config.dump(); };
  const nlohmann::json config = {{"model_type", "bert"}, {"vocab_size", 50}, {"hidden_size", 16},
                                 {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"intermediate_size", 32},
                                 {"max_position_embeddings", 24}, {"hidden_act", "gelu"}};
  auto source = tiny_bert();
  // A BertModel checkpoint: names without "bert.", no classifier, and the position_ids buffer.
  weights::StateDict state;
  for (const auto& item : weights::state_dict(*source))
    if (item.key().starts_with("bert.")) state.insert(item.key().substr(5), item.value());
  state.insert("embeddings.position_ids", torch::arange(24).unsqueeze(0));
  weights::save_file(dir.path / "model.safetensors", state, weights::Format::Safetensors);

  CHECK(test::message_of([&] { models::load_bert(dir.path); }).find("config.json: no such file") != std::string::npos);
  write_config(config);
  auto [model, report] = models::load_bert(dir.path, {.num_labels = 3});
  CHECK(report.missing == std::vector<std::string>{"classifier.weight", "classifier.bias"});
  CHECK(torch::equal(model->bert->encoder_layer(1).attention->self->query->weight,
                     source->bert->encoder_layer(1).attention->self->query->weight));

  // config.json with one field changed: load_bert's message.
  auto refused_with = [&](const char* key, nlohmann::json value) {
    auto changed = config;
    changed[key] = std::move(value);
    write_config(changed);
    return test::message_of([&] { models::load_bert(dir.path); });
  };
  CHECK(refused_with("model_type", "gpt2").find("model_type is 'gpt2', not 'bert'") != std::string::npos);
  CHECK(refused_with("hidden_act", "swish").find("hidden_act 'swish'") != std::string::npos);
  CHECK(refused_with("hidden_size", "sixteen").find("hidden_size is \"sixteen\"") != std::string::npos);
  CHECK(refused_with("position_embedding_type", "relative_key").find("position_embedding_type 'relative_key'") !=
        std::string::npos);

  write_config(config);
  weights::StateDict missing;
  for (const auto& item : state)
    if (item.key() != "encoder.layer.1.output.dense.weight") missing.insert(item.key(), item.value());
  weights::save_file(dir.path / "model.safetensors", missing, weights::Format::Safetensors);
  const auto message = test::message_of([&] { models::load_bert(dir.path); });
  CHECK(message.find("model.safetensors") != std::string::npos);
  CHECK(message.find("bert.encoder.layer.1.output.dense.weight") != std::string::npos);
  std::filesystem::remove(dir.path / "model.safetensors");
  CHECK(test::message_of([&] { models::load_bert(dir.path); }).find("has neither model.safetensors nor pytorch_model.bin") !=
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
