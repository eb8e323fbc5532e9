// Tests for include/ftopt/weights/state_dict.hpp: loading reports every problem at once and
// changes nothing on error.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/nn/linear.hpp>
#include <ftopt/weights/state_dict.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

TEST_CASE("load_state_dict reports every problem at once and changes nothing on error", "[weights][errors]") {
  torch::manual_seed(0);
  torch::nn::Sequential model(nn::Linear(3, 4), nn::Linear(4, 2));
  auto before = test::snapshot(*model);
  weights::StateDict file;
  file.insert("0.weight", torch::ones({4, 3}));   // fine
  file.insert("1.weight", torch::ones({3, 4}));   // wrong shape
  file.insert("1.bias", torch::ones({2}, torch::kLong));  // wrong kind of dtype
  file.insert("2.weight", torch::ones({1}));      // unexpected
  // "0.bias" missing
  auto message = test::message_of([&] { weights::load_state_dict(*model, file); });
  CHECK_THAT(message, Contains("1 missing key: 0.bias") && Contains("1 unexpected key: 2.weight") &&
                          Contains("2 mismatches: 1.weight: model [2, 4], file [3, 4], 1.bias: model Float, file Long"));
  CHECK(test::same_values(before, test::snapshot(*model)));

  SECTION("non-strict loads what matches; shape mismatches still fail") {
    weights::StateDict partial;
    partial.insert("0.weight", torch::ones({4, 3}, torch::kHalf));
    partial.insert("extra", torch::ones({1}));
    auto report = weights::load_state_dict(*model, partial, {.strict = false});
    CHECK(report.loaded == 1);
    CHECK(report.missing.size() == 3);
    CHECK(report.unexpected == std::vector<std::string>{"extra"});
    CHECK(report.converted == std::vector<std::string>{"0.weight"});
    CHECK(torch::equal(model->parameters()[0], torch::ones({4, 3})));
  }
  SECTION("a prefix maps a backbone's names into a bigger model") {
    weights::StateDict backbone;
    backbone.insert("weight", torch::full({4, 3}, 2.0));
    backbone.insert("bias", torch::full({4}, 3.0));
    auto report = weights::load_state_dict(*model, backbone, {.strict = false, .prefix = "0."});
    CHECK(report.loaded == 2);
    CHECK(torch::equal(model->parameters()[1], torch::full({4}, 3.0)));
  }
}
