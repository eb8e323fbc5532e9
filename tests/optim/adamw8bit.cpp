// Tests for include/ftopt/optim/adamw8bit.hpp against the definitions of torchao's AdamW8bit and
// bitsandbytes' block-wise 8-bit optimizers, written out here: the dynamic map in closed form,
// nearest-entry quantization by brute force over the map, and AdamW's update (torch::optim::AdamW)
// where no quantization happens.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <vector>

#include <torch/torch.h>

#include <ftopt/optim/adamw8bit.hpp>

#include "../support.hpp"

using namespace ftopt;
namespace blockwise = ftopt::optim::blockwise;

namespace {
/// The dynamic map in closed form, in double: exponent i in 0..6 splits [0.1, 1] into n = 2^i
/// (signed) or 2^(i+1) (unsigned) equal parts; the entries are the parts' midpoints times
/// 10^(i-6), with their negatives when signed; then 0 and 1.
std::vector<double> closed_form_map(bool is_signed) {
  std::vector<double> out{0.0, 1.0};
  for (int i = 0; i < 7; ++i) {
    const int n = is_signed ? 1 << i : 1 << (i + 1);
    for (int k = 0; k < n; ++k) {
      const double mid = 0.1 + 0.9 * (k + 0.5) / n;
      out.push_back(mid * std::pow(10.0, i - 6));
      if (is_signed) out.push_back(-mid * std::pow(10.0, i - 6));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// x quantized and decoded by brute force: per block of 256 its absolute maximum, then each value
/// over it replaced by the nearest map entry (the larger on a tie), times the maximum.
torch::Tensor nearest_entries(const torch::Tensor& x, const torch::Tensor& map) {
  const auto blocks = x.reshape({-1, 256});
  const auto absmax = blocks.abs().amax(1, true).clamp_min(1e-12);
  const auto scaled = (blocks / absmax).reshape({-1, 1});
  const auto distance = (scaled - map.reshape({1, -1})).abs();
  // argmin takes the first minimum; flipping the map takes the larger entry on a tie.
  const auto index = 255 - distance.flip(1).argmin(1);
  return (map.index_select(0, index).reshape({-1, 256}) * absmax).reshape(x.sizes());
}

torch::optim::AdamWOptions adamw_options() { return torch::optim::AdamWOptions(1e-2).betas({0.9, 0.99}).weight_decay(0.1); }
} // namespace

TEST_CASE("AdamW8bit's maps are bitsandbytes' dynamic maps", "[optim][adamw8bit]") {
  for (bool is_signed : {true, false}) {
    INFO("signed " << is_signed);
    const auto map = blockwise::dynamic_map(is_signed);
    const auto expected = closed_form_map(is_signed);
    REQUIRE(map.numel() == 256);
    REQUIRE(expected.size() == 256);
    for (std::size_t i = 0; i < 256; ++i)
      CHECK(map[static_cast<std::int64_t>(i)].item<double>() == Approx(expected[i]).epsilon(1e-6).margin(1e-12));
  }
}

TEST_CASE("Block-wise quantization picks each value's nearest map entry", "[optim][adamw8bit]") {
  torch::manual_seed(71);
  for (bool is_signed : {true, false}) {
    INFO("signed " << is_signed);
    // Values over several orders of magnitude, one block with a zero maximum.
    auto x = torch::randn({1024}) * torch::pow(10.0, torch::randint(-6, 1, {1024}).to(torch::kFloat));
    if (!is_signed) x = x.abs();
    x.slice(0, 256, 512).zero_();
    const auto map = blockwise::dynamic_map(is_signed);
    const auto midpoints = map.slice(0, 0, 255) + (map.slice(0, 1, 256) - map.slice(0, 0, 255)) * 0.5;
    const auto q = blockwise::quantize(x, midpoints);
    CHECK(q.codes.scalar_type() == torch::kByte);
    CHECK(q.absmax.numel() == 4);
    const auto decoded = blockwise::dequantize(q, map);
    CHECK(torch::allclose(decoded, nearest_entries(x, map), 0, 1e-12));
    CHECK(torch::equal(decoded.slice(0, 256, 512), torch::zeros({256})));
    // Each block's largest magnitude comes back as the maximum times the map's end: exactly when
    // positive (entry 1), times the most negative entry (-(1 - 0.9 / 128), signed) when negative.
    const auto blocks = x.reshape({-1, 256});
    const auto at_max = blocks.abs().argmax(1);
    for (int b : {0, 2, 3}) {
      const float value = blocks[b][at_max[b]].item<float>();
      const float back = decoded.reshape({-1, 256})[b][at_max[b]].item<float>();
      CHECK(back == Approx(value > 0 ? value : value * (1 - 0.9 / 128)).epsilon(1e-6));
    }
  }
}

TEST_CASE("The fused pass's table lookup gives searchsorted's codes", "[optim][adamw8bit]") {
  torch::manual_seed(79);
  for (bool is_signed : {true, false}) {
    INFO("signed " << is_signed);
    const auto map = blockwise::dynamic_map(is_signed);
    const auto thresholds = map.slice(0, 0, 255) + (map.slice(0, 1, 256) - map.slice(0, 0, 255)) * 0.5;
    // Values over every decade the map covers, the thresholds themselves and their neighbours.
    auto x = torch::rand({200000}) * torch::pow(10.0, torch::randint(-8, 1, {200000}).to(torch::kFloat));
    if (is_signed) x = x * (torch::randint(0, 2, {200000}) * 2 - 1);
    x = torch::cat({x, thresholds, torch::nextafter(thresholds, torch::zeros_like(thresholds)), map});
    if (!is_signed) x = x.abs();
    const auto expected = torch::searchsorted(thresholds, x, /*out_int32=*/false, /*right=*/true);
    const auto& host = blockwise::host_map(is_signed);
    std::vector<std::int64_t> got(static_cast<std::size_t>(x.numel()));
    const float* values = x.data_ptr<float>();
    for (std::size_t i = 0; i < got.size(); ++i) got[i] = host.code(values[i]);
    CHECK(torch::equal(torch::tensor(got), expected));
  }
}

TEST_CASE("AdamW8bit is AdamW where its state is float32 and on the first step", "[optim][adamw8bit]") {
  torch::manual_seed(72);
  // 300 values: fewer than 4096, so float32 moments; 4096 values: quantized.
  for (std::int64_t n : {300, 4096}) {
    INFO(n << " values");
    auto a = torch::randn({n}).requires_grad_(true);
    auto b = a.detach().clone().requires_grad_(true);
    torch::optim::AdamW reference({a}, adamw_options());
    optim::AdamW8bit eight({b}, adamw_options());
    const int steps = n < 4096 ? 20 : 1;
    for (int s = 0; s < steps; ++s) {
      const auto g = torch::randn({n});
      a.mutable_grad() = g.clone();
      b.mutable_grad() = g.clone();
      reference.step();
      eight.step();
      CHECK(torch::allclose(a, b, 1e-5, 1e-6));
    }
  }
}

TEST_CASE("AdamW8bit's later steps read the moments through the quantizer", "[optim][adamw8bit]") {
  torch::manual_seed(73);
  const std::int64_t n = 8192;
  auto p = torch::randn({n}).requires_grad_(true);
  const auto opts = adamw_options();
  optim::AdamW8bit optimizer({p}, opts);
  // The reference written from torchao's single_param_adam, moments stored by nearest_entries.
  auto expected = p.detach().clone();
  auto m = torch::zeros({n}), v = torch::zeros({n});
  auto plain = p.detach().clone(), plain_m = torch::zeros({n}), plain_v = torch::zeros({n});  // AdamW's own
  const auto signed_map = blockwise::dynamic_map(true), unsigned_map = blockwise::dynamic_map(false);
  const double lr = opts.lr(), b1 = 0.9, b2 = 0.99, wd = 0.1, eps = opts.eps();
  for (int step = 1; step <= 4; ++step) {
    const auto g = torch::randn({n});
    p.mutable_grad() = g.clone();
    optimizer.step();
    expected.mul_(1 - lr * wd);
    const auto m32 = m.lerp(g, 1 - b1), v32 = v.lerp(g * g, 1 - b2);
    const auto denom = (v32 / (1 - std::pow(b2, step))).sqrt() + eps;
    expected.sub_(lr * (m32 / (1 - std::pow(b1, step))) / denom);
    m = nearest_entries(m32, signed_map);
    v = nearest_entries(v32, unsigned_map);
    CHECK(torch::allclose(p, expected, 1e-4, 1e-6));
    plain.mul_(1 - lr * wd);
    plain_m.lerp_(g, 1 - b1);
    plain_v.lerp_(g * g, 1 - b2);
    plain.sub_(lr * (plain_m / (1 - std::pow(b1, step))) / ((plain_v / (1 - std::pow(b2, step))).sqrt() + eps));
  }
  // The quantized moments took the parameter off AdamW's own path, by about their rounding.
  const double off = (p - plain).abs().max().item<double>();
  CHECK(off > 1e-6);
  CHECK(off < lr);
}

TEST_CASE("AdamW8bit's fused CPU pass and its ATen operations agree", "[optim][adamw8bit]") {
  torch::manual_seed(78);
  auto fused = torch::randn({32, 256}).requires_grad_(true);
  auto aten = fused.detach().clone().requires_grad_(true);
  optim::AdamW8bit fused_optimizer({fused}, adamw_options()),
      aten_optimizer({aten}, adamw_options(), optim::AdamW8bit::Kernel::Aten);
  CHECK(fused_optimizer.kernel() == optim::AdamW8bit::Kernel::FusedCpu);  // the default
  for (int step = 0; step < 5; ++step) {
    const auto g = torch::randn({32, 256}) * (step + 1);
    fused.mutable_grad() = g.clone();
    aten.mutable_grad() = g.clone();
    fused_optimizer.step();
    aten_optimizer.step();
    CHECK(torch::allclose(fused, aten, 1e-5, 1e-7));
  }
  // The states agree too: block maxima to rounding, codes but for values that rounding moved
  // across a threshold (then by one).
  auto state_of = [](optim::AdamW8bit& o) -> optim::AdamW8bitParamState& {
    return static_cast<optim::AdamW8bitParamState&>(*o.state().begin()->second);
  };
  const auto& f = state_of(fused_optimizer);
  const auto& t = state_of(aten_optimizer);
  CHECK(torch::allclose(f.exp_avg_absmax(), t.exp_avg_absmax(), 1e-5, 0));
  CHECK(torch::allclose(f.exp_avg_sq_absmax(), t.exp_avg_sq_absmax(), 1e-5, 0));
  for (const auto& [x, y] : {std::pair{f.exp_avg_codes(), t.exp_avg_codes()}, std::pair{f.exp_avg_sq_codes(), t.exp_avg_sq_codes()}}) {
    const auto gap = (x.to(torch::kInt) - y.to(torch::kInt)).abs();
    CHECK(gap.max().item<int>() <= 1);
    CHECK(gap.sum().item<int>() <= x.numel() / 100);
  }
}

TEST_CASE("AdamW8bit follows AdamW on a small model", "[optim][adamw8bit]") {
  auto make = [] { return test::tiny_vit(74, /*hidden=*/64); };
  auto adamw_model = make();
  auto eight_model = make();
  torch::optim::AdamW adamw(adamw_model->parameters(), torch::optim::AdamWOptions(1e-3));
  optim::AdamW8bit eight(eight_model->parameters(), torch::optim::AdamWOptions(1e-3));
  torch::manual_seed(75);
  const auto x = torch::randn({32, 1, 28, 28});
  const auto y = torch::randint(0, 10, {32});
  double adamw_loss = 0, eight_loss = 0;
  for (int step = 0; step < 30; ++step) {
    for (auto [model, optimizer, loss] : {std::tuple{&adamw_model, static_cast<torch::optim::Optimizer*>(&adamw), &adamw_loss},
                                          std::tuple{&eight_model, static_cast<torch::optim::Optimizer*>(&eight), &eight_loss}}) {
      optimizer->zero_grad();
      const auto l = torch::nn::functional::cross_entropy((*model)->forward(x), y);
      l.backward();
      optimizer->step();
      *loss = l.item<double>();
    }
  }
  INFO("AdamW loss " << adamw_loss << ", AdamW8bit loss " << eight_loss);
  CHECK(eight_loss < 0.5 * std::log(10.0));  // it learns the batch
  CHECK(std::abs(eight_loss - adamw_loss) < 0.05 + 0.1 * adamw_loss);
}

TEST_CASE("AdamW8bit keeps under 30% of AdamW's state on a d-256 ViT", "[optim][adamw8bit]") {
  auto model = test::tiny_vit(77, /*hidden=*/256);
  optim::AdamW8bit optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  for (auto& p : model->parameters()) p.mutable_grad() = torch::randn(p.sizes());
  optimizer.step();
  // Per value: AdamW 8 bytes; quantized, 2 codes and 2 float maxima per 256 values.
  std::int64_t adamw_bytes = 0, expected = 0;
  for (const auto& p : model->parameters()) {
    adamw_bytes += 8 * p.numel();
    const bool quantized = p.numel() >= 4096 && p.numel() % 256 == 0;
    expected += quantized ? 2 * p.numel() + 2 * 4 * (p.numel() / 256) : 8 * p.numel();
  }
  CHECK(optimizer.state_bytes() == expected);
  INFO("state " << optimizer.state_bytes() << " of AdamW's " << adamw_bytes << " bytes");
  CHECK(optimizer.state_bytes() <= 0.30 * adamw_bytes);
}

TEST_CASE("AdamW8bit's state saves and loads", "[optim][adamw8bit]") {
  torch::manual_seed(76);
  auto p = torch::randn({64, 128}).requires_grad_(true);
  auto small = torch::randn({10}).requires_grad_(true);
  optim::AdamW8bit optimizer({p, small}, adamw_options());
  auto step = [](optim::AdamW8bit& o, torch::Tensor& a, torch::Tensor& b, std::uint64_t seed) {
    torch::manual_seed(seed);
    a.mutable_grad() = torch::randn(a.sizes());
    b.mutable_grad() = torch::randn(b.sizes());
    o.step();
  };
  for (std::uint64_t s = 0; s < 3; ++s) step(optimizer, p, small, s);
  std::stringstream stream;
  torch::save(optimizer, stream);
  auto p2 = p.detach().clone().requires_grad_(true);
  auto small2 = small.detach().clone().requires_grad_(true);
  optim::AdamW8bit restored({p2, small2}, torch::optim::AdamWOptions(0.5));
  torch::load(restored, stream);
  CHECK(restored.state_bytes() == optimizer.state_bytes());
  CHECK(static_cast<const torch::optim::AdamWOptions&>(restored.param_groups()[0].options()).lr() == Approx(1e-2));
  step(optimizer, p, small, 9);
  step(restored, p2, small2, 9);
  CHECK(torch::equal(p, p2));
  CHECK(torch::equal(small, small2));
}

TEST_CASE("AdamW8bit names bad options", "[optim][adamw8bit][errors]") {
  auto p = torch::randn({4}).requires_grad_(true);
  CHECK_THAT(test::message_of([&] { optim::AdamW8bit({p}, torch::optim::AdamWOptions(1e-3).amsgrad(true)); }),
             Catch::Contains("AdamW8bit: amsgrad = true is not supported"));
  CHECK_THAT(test::message_of([&] { optim::AdamW8bit({p}, torch::optim::AdamWOptions(1e-3).betas({0.9, 1.0})); }),
             Catch::Contains("AdamW8bit: betas must be in [0, 1), got (0.9, 1)"));
  CHECK_THAT(test::message_of([&] { optim::AdamW8bit({p}, torch::optim::AdamWOptions(-1)); }),
             Catch::Contains("AdamW8bit: lr must be >= 0, got -1"));
}
