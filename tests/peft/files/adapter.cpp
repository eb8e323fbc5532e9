// Tests for include/ftopt/peft/files/adapter.hpp, what PEFT's adapter folders share whatever the
// method: load_adapter places each tensor of adapter_model.safetensors by PEFT's key under
// "base_model.model." (or ftopt's own name; a tuner's own tensor under "base_model."), skips the
// frozen "<module>.original_module.*" copy PEFT keeps of a modules_to_save module and reads its
// "<module>.modules_to_save.*" copy unless the plain key is there too, and refuses a tensor with
// no place; patterns go into adapter_config.json as PEFT reads target_modules (a list of names,
// each matching the whole module name or a dotted suffix, or one regex that re.fullmatch tries).
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ftopt/peft/files/adapter.hpp>
#include <ftopt/peft/lora.hpp>

#include "../../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {

/// encoder.query (LoRA's target), head (a modules_to_save), and a buffer of the root module, as
/// a tuner's own tensor is kept.
struct TinyImpl : torch::nn::Module {
  TinyImpl() {
    query = nn::Linear(4, 4);
    encoder = register_module("encoder", torch::nn::Sequential());
    encoder->push_back("query", query);
    head = register_module("head", nn::Linear(4, 2));
    shared = register_buffer("shared", torch::zeros({2, 4}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head(encoder->forward(x)); }
  torch::nn::Sequential encoder{nullptr};
  nn::Linear query{nullptr}, head{nullptr};
  torch::Tensor shared;
};
TORCH_MODULE(Tiny);

Tiny with_lora() {
  torch::manual_seed(25);
  Tiny model;
  peft::Lora({.r = 2, .alpha = 4, .targets = {"query"}, .modules_to_save = {"head"}}).attach(*model);
  return model;
}

std::string pattern_text(const nlohmann::json& value) { return value.get<std::string>(); }

} // namespace

TEST_CASE("load_adapter: PEFT's keys, ftopt's own, a tuner's own tensor and modules_to_save's copies", "[peft][lora]") {
  test::ScratchDir dir("adapter-load");
  auto model = with_lora();
  const auto values = [](std::int64_t rows, std::int64_t cols, double start) {
    return torch::arange(rows * cols, torch::kFloat).view({rows, cols}) * 0.01 + start;
  };
  weights::StateDict file;
  file.insert("base_model.model.encoder.query.lora_A.weight", values(2, 4, 1));  // PEFT's key
  file.insert("base_model.model.encoder.query.lora_B.weight", values(4, 2, 2));
  file.insert("base_model.model.encoder.query.weight", values(4, 4, 3));  // ftopt's name, not base_layer's
  file.insert("base_model.model.head.modules_to_save.weight", values(2, 4, 4));  // the trained copy
  file.insert("base_model.model.head.original_module.weight", values(2, 4, -9));  // the frozen one: skipped
  file.insert("base_model.model.head.original_module.bias", values(1, 2, -9).view({2}));
  file.insert("base_model.model.head.bias", values(1, 2, 5).view({2}));  // the plain key wins over ...
  file.insert("base_model.model.head.modules_to_save.bias", values(1, 2, -9).view({2}));  // ... this copy
  file.insert("base_model.shared", values(2, 4, 6));  // the tuner's own
  weights::save_safetensors(dir.path / "adapter_model.safetensors", file);

  const auto report = peft::load_adapter(*model, dir.path);
  CHECK(report.loaded == 6);
  CHECK(torch::equal(model->query->named_modules()["lora_A"]->named_parameters()["weight"], values(2, 4, 1)));
  CHECK(torch::equal(model->query->named_modules()["lora_B"]->named_parameters()["weight"], values(4, 2, 2)));
  CHECK(torch::equal(model->query->weight, values(4, 4, 3)));
  CHECK(torch::equal(model->head->weight, values(2, 4, 4)));
  CHECK(torch::equal(model->head->bias, values(1, 2, 5).view({2})));
  CHECK(torch::equal(model->shared, values(2, 4, 6)));

  // A tensor with no place: nothing is loaded, and the first such key is named.
  file.insert("base_model.model.encoder.key.weight", values(4, 4, 7));
  weights::save_safetensors(dir.path / "adapter_model.safetensors", file);
  auto fresh = with_lora();
  const auto before = fresh->head->weight.clone();
  CHECK_THAT(test::message_of([&] { peft::load_adapter(*fresh, dir.path); }),
             Equals("load_adapter: " + (dir.path / "adapter_model.safetensors").string() +
                    ": 1 tensors have no place in the model (is the same adapter attached?), first: "
                    "base_model.model.encoder.key.weight"));
  CHECK(torch::equal(fresh->head->weight, before));
}

TEST_CASE("Adapter configs: patterns as PEFT's target_modules, the common fields, refused settings", "[peft][lora]") {
  using peft::detail::patterns_from;
  using peft::detail::patterns_json;
  SECTION("names stay a list; one regex stays a string; names mixed with a regex become one regex") {
    CHECK(patterns_json<nlohmann::json>({"query", "value"}) == nlohmann::json({"query", "value"}));
    CHECK(patterns_json<nlohmann::json>({nn::regex("layer\\.[01]\\..*")}) == "layer\\.[01]\\..*");
    const auto mixed = patterns_json<nlohmann::json>({"attention.query", nn::regex("head")});
    REQUIRE(mixed.is_string());
    CHECK(pattern_text(mixed) == "((.*\\.)?attention\\.query)|(head)");
    // re.fullmatch semantics: the whole name, or a dotted suffix for the name entry.
    const std::regex re(pattern_text(mixed));
    CHECK(std::regex_match("attention.query", re));
    CHECK(std::regex_match("vit.layer.0.attention.query", re));
    CHECK(std::regex_match("head", re));
    CHECK_FALSE(std::regex_match("vit.self_attention.query", re));  // "self_attention" is no component
    CHECK_FALSE(std::regex_match("attentionXquery", re));           // a dot is a dot
    CHECK_FALSE(std::regex_match("vit.head", re));                  // a regex matches the whole name
    // Read back: a list gives names, a string one regex, null nothing.
    const auto names = patterns_from(nlohmann::json({"query", "value"}));
    REQUIRE(names.size() == 2);
    CHECK_FALSE(names[1].is_regex());
    CHECK(names[1].text == "value");
    const auto regex = patterns_from(mixed);
    REQUIRE(regex.size() == 1);
    CHECK(regex[0].is_regex());
    CHECK(regex[0].matches("vit.layer.0.attention.query"));
    CHECK(patterns_from(nlohmann::json(nullptr)).empty());
  }
  SECTION("write_adapter: the trainable tensors under base_model.model., the fields every config has") {
    test::ScratchDir dir("adapter-write");
    auto model = with_lora();
    peft::detail::write_adapter(*model, dir.path, {}, nlohmann::json{{"peft_type", "LORA"}}, "Who");
    std::set<std::string> keys;
    for (const auto& item : weights::load_safetensors(dir.path / "adapter_model.safetensors")) keys.insert(item.key());
    CHECK(keys == std::set<std::string>{"base_model.model.encoder.query.lora_A.weight",
                                        "base_model.model.encoder.query.lora_B.weight",
                                        "base_model.model.head.weight", "base_model.model.head.bias"});
    std::ifstream in(dir.path / "adapter_config.json");
    const auto config = nlohmann::json::parse(in);
    CHECK(config["peft_type"] == "LORA");
    CHECK(config["inference_mode"] == true);
    CHECK(config["task_type"].is_null());
    CHECK(config["base_model_name_or_path"].is_null());

    for (auto& p : model->parameters()) p.requires_grad_(false);
    CHECK_THAT(test::message_of([&] {
                 peft::detail::write_adapter(*model, dir.path, {}, nlohmann::json::object(), "Who");
               }),
               Equals("save_adapter: the module has no trainable tensors (was Who attached?)"));
  }
  SECTION("a field set to what the policy does not compute is refused; absent, null, false or empty is not") {
    const auto config = nlohmann::json::parse(R"({"a": null, "b": false, "c": {}, "d": [], "e": [3]})");
    peft::detail::refuse_set_fields(config, {"a", "b", "c", "d", "missing"}, "cfg.json", "Who");
    CHECK_THAT(test::message_of([&] { peft::detail::refuse_set_fields(config, {"a", "e"}, "cfg.json", "Who"); }),
               Equals("cfg.json: e = [3] is not supported by Who"));
  }
}
