// Tests for include/ftopt/quant/support/observer.hpp: ranges and affine quint8 parameters as
// PyTorch's observers compute them (torch/ao/quantization/observer.py).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/quant/support/observer.hpp>

#include "../../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using ftopt::test::ScratchDir;

TEST_CASE("Observers: ranges and affine quint8 parameters as PyTorch computes them", "[quant][observer]") {
  const auto a = torch::tensor({-1.0, 0.5, 2.0}), b = torch::tensor({-3.0, 1.0});
  SECTION("MinMax") {
    quant::Observer o;
    o.observe(a), o.observe(b);
    CHECK(o.range("x") == std::pair{-3.0, 2.0});
    // scale = (2 - -3) / 255, zero_point = 0 - round(-3 / scale) = round(153) = 153
    const auto [scale, zp] = o.qparams(false, "x");
    CHECK(scale == Approx(5.0 / 255));
    CHECK(zp == 153);
    const auto [scale7, zp7] = o.qparams(true, "x");
    CHECK(scale7 == Approx(5.0 / 127));
    CHECK(zp7 == 76);  // round(76.2)
  }
  SECTION("MovingAverageMinMax: min += 0.01 (batch min - min)") {
    quant::Observer o({.kind = quant::ObserverKind::MovingAverageMinMax});
    o.observe(a), o.observe(b);
    CHECK(o.range("x").first == Approx(-1.0 + 0.01 * (-3.0 - -1.0)));
    CHECK(o.range("x").second == Approx(2.0 + 0.01 * (1.0 - 2.0)));
  }
  SECTION("a range that excludes 0 is widened to include it") {
    quant::Observer o;
    o.observe(torch::tensor({1.0, 3.0}));
    const auto [scale, zp] = o.qparams(false, "x");
    CHECK(scale == Approx(3.0 / 255));
    CHECK(zp == 0);
  }
  SECTION("Percentile ignores the outlier that MinMax follows") {
    quant::Observer p({.kind = quant::ObserverKind::Percentile, .percentile = 99.0}), m;
    auto x = torch::linspace(-1, 1, 1001);
    x[500] = 100.0;
    p.observe(x), m.observe(x);
    CHECK(m.range("x").second == 100.0);
    CHECK(p.range("x").second < 1.0);
  }
  SECTION("nothing observed is an error naming the tensor") {
    quant::Observer o;
    CHECK_THAT(test::message_of([&] { o.qparams(false, "layer 'fc' input"); }),
               Contains("no calibration data reached layer 'fc' input"));
  }
}
