// Tests for include/ftopt/nn/extension.hpp: what a layer asks of what is attached. Its effect
// (none with nothing attached), and the kind that computes layers on one input together: a group
// runs through a kind only where every extension that names one names one of the same type (a
// typed key), and a kind that declines leaves each layer to its own forward.
#include <catch2/catch.hpp>

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <torch/torch.h>

#include <ftopt/nn/extension.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/shared_input_linears.hpp>

using namespace ftopt;

namespace {

/// A kind that computes a group as twice each layer's own output, and counts its calls;
/// `declines` makes it return nullopt.
template <int Tag>
struct Doubling final : nn::Together<nn::LinearImpl> {
  mutable int calls = 0;
  bool declines = false;
  std::optional<std::vector<at::Tensor>> forward(std::span<nn::LinearImpl* const> layers,
                                                 const at::Tensor& input) const override {
    ++calls;
    if (declines) return std::nullopt;
    std::vector<at::Tensor> out;
    for (auto* layer : layers) out.push_back(2 * layer->base_forward(input));
    return out;
  }
};

/// An extension that names `kind` and, alone, adds 1 to the layer's output.
struct Named : nn::Extension<nn::LinearImpl> {
  explicit Named(const nn::Together<nn::LinearImpl>* kind) : kind(kind) {}
  at::Tensor forward(nn::LinearImpl& layer, const at::Tensor& x) override { return layer.base_forward(x) + 1; }
  const nn::Together<nn::LinearImpl>* together() const override { return kind; }
  const nn::Together<nn::LinearImpl>* kind;
};

struct Three {
  nn::Linear a{4, 3}, b{4, 3}, c{4, 2};
  std::array<nn::LinearImpl*, 3> layers() { return {a.get(), b.get(), c.get()}; }
};

} // namespace

TEST_CASE("A layer's effect: none with nothing attached, else the extension's", "[nn][extension]") {
  nn::Linear layer(4, 3);
  CHECK(layer->effect() == nn::Effect::none);
  layer->attach(std::make_shared<Named>(nullptr));
  CHECK(layer->effect() == nn::Effect::changes);  // an extension's default
  layer->detach();
  CHECK(layer->effect() == nn::Effect::none);
}

TEST_CASE("Layers on one input group through one kind, by its type", "[nn][extension]") {
  torch::manual_seed(1);
  Three m;
  const auto x = torch::randn({5, 4});
  Doubling<0> kind, same_type;
  Doubling<1> other_type;
  SECTION("every extension names the same kind: it computes the group") {
    for (auto* layer : m.layers()) layer->attach(std::make_shared<Named>(&kind));
    const auto out = nn::shared_input_linears<3>(m.layers(), x);
    CHECK(kind.calls == 1);
    for (std::size_t i = 0; i < 3; ++i) CHECK(torch::allclose(out[i], 2 * m.layers()[i]->base_forward(x)));
  }
  SECTION("two objects of one type are one key; a layer with nothing attached is left to the kind") {
    m.a->attach(std::make_shared<Named>(&kind));
    m.b->attach(std::make_shared<Named>(&same_type));
    const auto out = nn::shared_input_linears<3>(m.layers(), x);
    CHECK(kind.calls + same_type.calls == 1);
    CHECK(torch::allclose(out[2], 2 * m.c->base_forward(x)));
  }
  SECTION("kinds of two types: each layer alone") {
    m.a->attach(std::make_shared<Named>(&kind));
    m.b->attach(std::make_shared<Named>(&other_type));
    const auto out = nn::shared_input_linears<3>(m.layers(), x);
    CHECK(kind.calls + other_type.calls == 0);
    CHECK(torch::allclose(out[0], m.a->base_forward(x) + 1));
    CHECK(torch::allclose(out[2], m.c->base_forward(x)));
  }
  SECTION("a kind that declines: each layer alone") {
    kind.declines = true;
    for (auto* layer : m.layers()) layer->attach(std::make_shared<Named>(&kind));
    const auto out = nn::shared_input_linears<3>(m.layers(), x);
    CHECK(kind.calls == 1);
    for (std::size_t i = 0; i < 3; ++i) CHECK(torch::allclose(out[i], m.layers()[i]->base_forward(x) + 1));
  }
  SECTION("fuse = false asks no kind") {
    for (auto* layer : m.layers()) layer->attach(std::make_shared<Named>(&kind));
    nn::shared_input_linears<3>(m.layers(), x, /*fuse=*/false);
    CHECK(kind.calls == 0);
  }
}
