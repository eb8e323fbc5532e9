// Tests for include/ftopt/models/resnet.hpp: torchvision's ResNets, name for name and logit for
// logit (fixtures from tests/fixtures/make_fixtures.py, torchvision 0.14.1, PyTorch 1.13.1).
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <torch/torch.h>

#include <ftopt/models/resnet.hpp>
#include <ftopt/weights/files.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::fixture;

namespace {

/// "name shape dtype" lines of a model's state dict, as make_fixtures.py writes them.
std::vector<std::string> described(const torch::nn::Module& module) {
  std::vector<std::string> out;
  for (const auto& item : weights::state_dict(module)) {
    std::ostringstream s;
    s << item.key() << ' ';
    const auto sizes = item.value().sizes();
    if (sizes.empty()) s << "scalar";
    for (std::size_t i = 0; i < sizes.size(); ++i) s << (i ? "x" : "") << sizes[i];
    s << ' ' << (item.value().scalar_type() == torch::kLong ? "int64" : "float32");
    out.push_back(s.str());
  }
  return out;
}

std::vector<std::string> torchvision_lines(const std::string& arch) {
  std::ifstream in(fixture("torchvision_resnet_state_dicts.txt"));
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind(arch + " ", 0) == 0) out.push_back(line.substr(arch.size() + 1));
  return out;
}

/// make_fixtures.py's deterministic_fill, in the same state-dict order.
void deterministic_fill(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  std::int64_t k = 0;
  for (const auto& item : weights::state_dict(module)) {
    auto t = item.value();
    if (item.key().ends_with("num_batches_tracked")) {
      ++k;
      continue;
    }
    auto v = 0.05 * torch::sin(0.01 * torch::arange(t.numel(), torch::kDouble) + static_cast<double>(k));
    if (item.key().ends_with("running_var")) v = 0.5 + v.abs();
    t.copy_(v.view(t.sizes()).to(t.scalar_type()));
    ++k;
  }
}

} // namespace

TEST_CASE("ResNet-18/34/50 have torchvision's state dicts, name for name", "[models][resnet]") {
  CHECK(described(*models::resnet18()) == torchvision_lines("resnet18"));
  CHECK(described(*models::resnet34()) == torchvision_lines("resnet34"));
  CHECK(described(*models::resnet50()) == torchvision_lines("resnet50"));
}

TEST_CASE("ResNet gives torchvision's logits for the same weights", "[models][resnet]") {
  auto io = weights::load_safetensors(fixture("torchvision_resnet_logits.safetensors"));
  for (auto [arch, model] : {std::pair{"resnet18", models::resnet18(10)}, std::pair{"resnet50", models::resnet50(10)}}) {
    INFO(arch);
    deterministic_fill(*model);
    model->eval();
    torch::NoGradGuard no_grad;
    auto logits = model->forward(io[std::string(arch) + ".input"]);
    auto expected = io[std::string(arch) + ".logits"];
    CHECK(torch::allclose(logits, expected, 1e-4, 1e-5));
  }
}

TEST_CASE("Small ResNets run on 28x28 with the same names", "[models][resnet]") {
  models::ResNet small({.layers = {1, 1, 1}, .widths = {8, 16, 32}, .in_channels = 1, .num_classes = 10,
                        .stem = models::ResNetStem::Small});
  CHECK(small->forward(torch::randn({2, 1, 28, 28})).sizes() == torch::IntArrayRef({2, 10}));
  auto names = weights::state_dict(*small).keys();
  CHECK(std::find(names.begin(), names.end(), "layer2.0.downsample.0.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "layer3.0.bn2.running_var") != names.end());
  CHECK_THROWS_WITH(models::ResNet({.layers = {1, 1}, .widths = {8}}),
                    Catch::Contains("layers and widths need the same, non-zero length, got 2 and 1"));
}
