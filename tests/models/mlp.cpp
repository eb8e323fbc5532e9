// Tests for include/ftopt/models/mlp.hpp: the names of Python's nn.Sequential.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/models/mlp.hpp>
#include <ftopt/weights/state_dict.hpp>

#include "../support.hpp"

using namespace ftopt;

TEST_CASE("The MLP's names follow Python's nn.Sequential", "[models]") {
  models::Mlp mlp({.in = 4, .hidden = {8, 8}, .out = 2, .dropout = 0.1});
  auto names = weights::state_dict(*mlp).keys();
  CHECK(names == std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.3.weight", "layers.3.bias",
                                          "layers.6.weight", "layers.6.bias"});
}
