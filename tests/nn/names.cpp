// Tests for include/ftopt/nn/names.hpp: PEFT-style name patterns and freezing.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/models/vit.hpp>
#include <ftopt/nn/names.hpp>

#include "../support.hpp"

using namespace ftopt;

TEST_CASE("NamePattern matches as PEFT's target_modules does", "[nn][names]") {
  // PEFT (tuners_utils.check_target_module_exists): a list entry matches a key equal to it or
  // ending in "." + entry; a string is a regex that must match the whole key.
  nn::NamePattern query = "query";
  CHECK(query.matches("query"));
  CHECK(query.matches("vit.encoder.layer.0.attention.attention.query"));
  CHECK_FALSE(query.matches("vit.encoder.layer.0.attention.attention.query_proj"));
  CHECK_FALSE(query.matches("subquery"));
  nn::NamePattern dotted = "attention.output.dense";
  CHECK(dotted.matches("vit.encoder.layer.1.attention.output.dense"));
  CHECK_FALSE(dotted.matches("vit.encoder.layer.1.output.dense"));
  auto re = nn::regex(R"(.*layer\.[01]\..*(query|value))");
  CHECK(re.matches("vit.encoder.layer.0.attention.attention.value"));
  CHECK_FALSE(re.matches("vit.encoder.layer.2.attention.attention.value"));
  CHECK_THROWS_WITH(nn::regex("(("), Catch::Contains("'((' is not a valid regular expression"));
}

TEST_CASE("freeze and train_only work by name on any module", "[nn][names]") {
  models::ViT vit({.image_size = 28, .patch_size = 7, .channels = 1, .hidden = 16, .layers = 2,
                   .heads = 2, .intermediate = 32, .num_labels = 10});
  const auto total = vit->parameters().size();
  SECTION("seeds' targets find query and value in every layer") {
    auto names = nn::parameters_under(*vit, {"query", "value"});
    CHECK(names.size() == 8);  // 2 layers x 2 modules x (weight, bias)
    CHECK(names.front() == "vit.encoder.layer.0.attention.attention.query.weight");
  }
  SECTION("freeze") {
    CHECK(nn::freeze(*vit, {"embeddings", "encoder.layer.0"}) == 4 + 16);  // cls, positions, patch conv w+b; one layer
    for (auto& item : vit->named_parameters()) {
      const bool frozen = item.key().rfind("vit.embeddings", 0) == 0 || item.key().rfind("vit.encoder.layer.0.", 0) == 0;
      INFO(item.key());
      CHECK(item.value().requires_grad() == !frozen);
    }
  }
  SECTION("train_only") {
    CHECK(nn::train_only(*vit, {"classifier"}) == 2);
    std::size_t training = 0;
    for (auto& p : vit->parameters()) training += p.requires_grad();
    CHECK(training == 2);
    CHECK(total > 2);
  }
  SECTION("a pattern that matches nothing lists the names it could have meant") {
    auto message = test::message_of([&] { nn::freeze(*vit, {"qeury"}); });
    CHECK_THAT(message, Catch::Contains("pattern 'qeury' matches no module or parameter") &&
                            Catch::Contains("query") && Catch::Contains("layernorm_before"));
    for (auto& p : vit->parameters()) CHECK(p.requires_grad());  // nothing changed
  }
}
