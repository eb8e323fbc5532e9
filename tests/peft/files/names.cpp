// Tests for include/ftopt/peft/files/names.hpp: ftopt's ViT names as transformers 5 and PEFT spell
// them.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/peft/files/names.hpp>

#include "../../support.hpp"

using namespace ftopt;

TEST_CASE("AdapterNames map ftopt's ViT names to the ones transformers 5 and PEFT use", "[peft][lora]") {
  // Expected names written out from transformers 5's ViT (vit.layers.N.attention.q_proj, ...,
  // mlp.fc1/fc2) and PEFT's LoraLayer (the adapted Linear's own tensors under base_layer);
  // peer.lora checks the same table against the live libraries.
  auto model = test::tiny_vit(6);
  peft::Lora lora({.r = 2, .alpha = 4, .targets = {"query", "value"}});
  lora.attach(*model);
  const auto names = peft::transformers_vit_names();
  std::map<std::string, std::string> peft_key;
  for (const auto& [own, theirs] : peft::peft_keys(*model, names)) peft_key[own] = theirs;
  CHECK(peft_key.at("vit.encoder.layer.0.attention.attention.query.lora_A.weight") ==
        "vit.layers.0.attention.q_proj.lora_A.weight");
  CHECK(peft_key.at("vit.encoder.layer.1.attention.attention.value.bias") == "vit.layers.1.attention.v_proj.base_layer.bias");
  CHECK(peft_key.at("vit.encoder.layer.1.attention.attention.key.weight") == "vit.layers.1.attention.k_proj.weight");
  CHECK(peft_key.at("vit.encoder.layer.0.attention.output.dense.weight") == "vit.layers.0.attention.o_proj.weight");
  CHECK(peft_key.at("vit.encoder.layer.0.intermediate.dense.weight") == "vit.layers.0.mlp.fc1.weight");
  CHECK(peft_key.at("vit.encoder.layer.0.output.dense.weight") == "vit.layers.0.mlp.fc2.weight");
  CHECK(peft_key.at("classifier.weight") == "classifier.weight");
  // No rules: the names stay, only PEFT's base_layer is added.
  CHECK(peft::peft_keys(*model, {}).front().first == peft::peft_keys(*model, {}).front().second);

  auto texts = [](const nn::NamePatterns& patterns) {
    std::vector<std::string> out;
    for (const auto& p : patterns) out.push_back(p.text);
    return out;
  };
  const auto to_peft = peft::patterns_to_peft(*model, {"query", "value"}, names);
  CHECK(texts(to_peft) == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(texts(peft::patterns_from_peft(*model, to_peft, names)) == std::vector<std::string>{"query", "value"});
  // A rule replaces the first place its literal fragment occurs, each rule in turn.
  CHECK(peft::AdapterNames{{{"a.", "b."}, {"b.c", "d"}}}.module("x.a.a.c") == "x.b.a.c");
  CHECK(peft::AdapterNames{{{"a.", "b."}, {"b.a", "d"}}}.module("x.a.a.c") == "x.d.c");
  // A regular expression (as transformers' rules are written) is refused, not read as text.
  CHECK_THAT(test::message_of([] { peft::AdapterNames{{{R"(encoder\.layer\.)", "layers."}}}.module("a.b"); }),
             Catch::Contains("AdapterNames: the rule 'encoder\\.layer\\.' -> 'layers.' is not literal text"));
  CHECK_THAT(test::message_of([] { peft::AdapterNames{{{"", "x"}}}.module("a.b"); }),
             Catch::Contains("AdapterNames: the rule '' -> 'x' is not literal text"));
}
