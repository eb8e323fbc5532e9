// Tests for include/ftopt/models/bert_pretrained.hpp: load_bert reads a Hugging Face folder
// (config.json, safetensors or pytorch_model.bin), and names what can be wrong with it.
// tests/peer/bert.py checks the real checkpoint against transformers.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <torch/torch.h>

#include <ftopt/json.hpp>
#include <ftopt/models/bert_pretrained.hpp>
#include <ftopt/weights/files.hpp>

#include "../support.hpp"
#include "tiny_bert.hpp"

using namespace ftopt;
using ftopt::test::tiny_bert;

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
