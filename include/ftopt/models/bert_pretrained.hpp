#pragma once
/// A Hugging Face BERT folder into models::Bert, as transformers'
/// BertForSequenceClassification.from_pretrained(folder, num_labels=...) does:
///   - config.json -> BertOptions (model_type "bert"; anything models::Bert cannot be is an error
///     naming the field and its value);
///   - model.safetensors (or pytorch_model.bin) by name. A BertModel checkpoint (names without
///     "bert.", as sentence-transformers ships) loads into `bert.`; the classifier it lacks keeps
///     its fresh initialization and is listed in the report's `missing`. Any other missing tensor
///     is an error naming the file and every missing name; `embeddings.position_ids` (a buffer
///     older transformers saved) is ignored, as transformers ignores it.
///
///   auto [model, report] = ftopt::models::load_bert(folder, {.num_labels = 5});
///
/// Uses JSON: a source file that calls these includes <ftopt/json.hpp>.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

#include <ftopt/detail/json.hpp>
#include <ftopt/error.hpp>
#include <ftopt/models/bert.hpp>
#include <ftopt/weights/files.hpp>

namespace ftopt::models {

/// What load_bert changes of the config's options.
struct BertLoadOptions {
  std::int64_t num_labels = 2;
  std::optional<double> dropout;            ///< overrides hidden_dropout_prob
  std::optional<double> attention_dropout;  ///< overrides attention_probs_dropout_prob
  std::optional<double> classifier_dropout;
  BertPooling pooling = BertPooling::Pooler;
};

/// BertOptions from a config.json (HF BertConfig); num_labels from id2label when it has one.
template <class Json = nlohmann::json>
BertOptions bert_options_from_config(const std::filesystem::path& path) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const std::string where = "models::Bert: " + path.string();
  const Json c = ftopt::detail::read_json_file<Json>(path, where);
  check(c.is_object(), where, ": not a JSON object");
  BertOptions o;
  try {
    const std::string model_type = c.contains("model_type") ? c["model_type"].template get<std::string>() : "";
    check(model_type == "bert", where, ": model_type is '", model_type, "', not 'bert' (models::Bert reads BERT "
          "checkpoints)");
    auto get = [&](const char* key, auto fallback) { return ftopt::detail::json_value_or(c, key, fallback, where); };
    o.vocab_size = get("vocab_size", o.vocab_size);
    o.hidden = get("hidden_size", o.hidden);
    o.layers = get("num_hidden_layers", o.layers);
    o.heads = get("num_attention_heads", o.heads);
    o.intermediate = get("intermediate_size", o.intermediate);
    o.dropout = get("hidden_dropout_prob", o.dropout);
    o.attention_dropout = get("attention_probs_dropout_prob", o.attention_dropout);
    if (c.contains("classifier_dropout") && !c["classifier_dropout"].is_null())
      o.classifier_dropout = get("classifier_dropout", 0.0);
    o.max_position_embeddings = get("max_position_embeddings", o.max_position_embeddings);
    o.type_vocab_size = get("type_vocab_size", o.type_vocab_size);
    o.layer_norm_eps = get("layer_norm_eps", o.layer_norm_eps);
    o.pad_token_id = get("pad_token_id", o.pad_token_id);
    o.initializer_range = get("initializer_range", o.initializer_range);
    if (c.contains("id2label") && c["id2label"].is_object() && !c["id2label"].empty())
      o.num_labels = static_cast<std::int64_t>(c["id2label"].size());
    const std::string act = c.contains("hidden_act") ? c["hidden_act"].template get<std::string>() : "gelu";
    if (act == "gelu") o.hidden_act = HiddenAct::Gelu;
    else if (act == "gelu_new" || act == "gelu_pytorch_tanh") o.hidden_act = HiddenAct::GeluTanh;
    else if (act == "relu") o.hidden_act = HiddenAct::Relu;
    else fail(where, ": hidden_act '", act, "' is not one models::Bert has (gelu, gelu_new, gelu_pytorch_tanh, relu)");
    const std::string position = c.contains("position_embedding_type") ? c["position_embedding_type"].template get<std::string>()
                                                                        : "absolute";
    check(position == "absolute", where, ": position_embedding_type '", position, "' is not 'absolute', the only one "
          "models::Bert has");
  } catch (const typename Json::exception& e) {  // a field of the wrong JSON type
    fail(where, ": ", e.what());
  }
  o.validate();
  return o;
}

/// A model and what loading it found.
struct LoadedBert {
  Bert model;
  weights::LoadReport report;
};

/// models::Bert from a Hugging Face folder (config.json and model.safetensors or pytorch_model.bin).
template <class Json = nlohmann::json>
LoadedBert load_bert(const std::filesystem::path& folder, const BertLoadOptions& load = {}) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  check(std::filesystem::is_directory(folder), "models::load_bert: ", folder.string(), " is not a folder");
  BertOptions options = bert_options_from_config<Json>(folder / "config.json");
  options.num_labels = load.num_labels;
  if (load.dropout) options.dropout = *load.dropout;
  if (load.attention_dropout) options.attention_dropout = *load.attention_dropout;
  if (load.classifier_dropout) options.classifier_dropout = load.classifier_dropout;
  options.pooling = load.pooling;
  std::filesystem::path file = folder / "model.safetensors";
  if (!std::filesystem::is_regular_file(file)) file = folder / "pytorch_model.bin";
  check(std::filesystem::is_regular_file(file), "models::load_bert: ", folder.string(),
        " has neither model.safetensors nor pytorch_model.bin");
  weights::StateDict state;
  bool whole = false;  // a BertForSequenceClassification checkpoint (names start with "bert.")
  for (const auto& item : weights::load_file<Json>(file)) {
    if (item.key().ends_with("embeddings.position_ids")) continue;
    whole = whole || item.key().starts_with("bert.");
    state.insert(item.key(), item.value());
  }
  Bert model(options);
  const std::string where = "models::load_bert: " + file.string();
  auto report = weights::load_state_dict(*model, state, {.strict = false, .prefix = whole ? "" : "bert."}, where);
  for (const auto& name : report.missing)
    check(name.starts_with("classifier."), where, ": ", report.summary());
  for (const auto& name : report.unexpected)
    check(!name.starts_with("bert."), where, ": ", report.summary());
  return {std::move(model), std::move(report)};
}

} // namespace ftopt::models
