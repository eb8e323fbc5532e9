// Tests for include/ftopt/model.hpp: what ftopt::Model accepts (a module handle whose module has
// forward(Tensor) -> Tensor), the archetype the axes' concepts check against, and module_of.
#include <catch2/catch.hpp>

#include <memory>

#include <torch/torch.h>

#include <ftopt.hpp>

using namespace ftopt;

static_assert(Model<models::Mlp>);
static_assert(Model<torch::nn::Linear>);
static_assert(Model<std::shared_ptr<models::MlpImpl>>);
static_assert(!Model<std::shared_ptr<torch::nn::Module>>);  // no forward
static_assert(!Model<torch::Tensor>);

namespace {

/// A module whose forward returns no tensor.
struct CountsImpl : torch::nn::Module {
  int forward(const torch::Tensor& x) { return static_cast<int>(x.numel()); }
};

} // namespace

TEST_CASE("Model: module handles with a tensor forward, the archetype, and module_of",
          "[model]") {
  STATIC_REQUIRE(Model<ftopt::detail::ArchetypeModel>);
  STATIC_REQUIRE(ftopt::detail::check_model<models::Mlp>());
  STATIC_REQUIRE_FALSE(Model<std::shared_ptr<CountsImpl>>);  // forward returns an int
  STATIC_REQUIRE_FALSE(Model<CountsImpl>);                   // a module, not a handle

  // The archetype's forward is the identity: the least a Model computes.
  auto archetype = std::make_shared<ftopt::detail::ArchetypeModule>();
  const auto x = torch::randn({2, 3});
  CHECK(archetype->forward(x).is_same(x));

  // module_of reaches the module behind either kind of handle.
  torch::nn::Linear linear(3, 2);
  CHECK(&ftopt::detail::module_of(linear) == static_cast<torch::nn::Module*>(linear.get()));
  auto shared = std::make_shared<models::MlpImpl>(models::MlpOptions{.in = 3, .hidden = {4}, .out = 2});
  CHECK(&ftopt::detail::module_of(shared) == static_cast<torch::nn::Module*>(shared.get()));
  CHECK(ftopt::detail::module_of(linear).parameters().size() == 2);  // weight and bias
}
