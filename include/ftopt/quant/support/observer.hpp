#pragma once
/// Observers: what calibration learns about a tensor's range, and the affine quint8 parameters
/// PyTorch derives from it (torch/ao/quantization/observer.py).
///
///   quant::Observer o({.kind = quant::ObserverKind::MovingAverageMinMax});
///   for (...) o.observe(activation);
///   auto [scale, zero_point] = o.qparams(/*reduce_range=*/false, "layers.0 input");
///
/// Kinds: MinMax (MinMaxObserver), MovingAverageMinMax (MovingAverageMinMaxObserver,
/// averaging_constant 0.01), Percentile (the range between the p-th and (100-p)-th
/// percentiles of everything seen, a robust alternative to PyTorch's HistogramObserver; kept
/// as a bounded sample of values).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include <ftopt/error.hpp>

namespace ftopt::quant {

enum class ObserverKind { MinMax, MovingAverageMinMax, Percentile };

struct ObserverOptions {
  ObserverKind kind = ObserverKind::MinMax;
  double averaging_constant = 0.01;  ///< MovingAverageMinMax: PyTorch's default
  double percentile = 99.99;         ///< Percentile: keep [100 - p, p] of the values
  std::int64_t sample_limit = 1 << 20;  ///< Percentile: values kept (a strided subsample beyond)

  void validate() const {
    ftopt::detail::check(averaging_constant > 0 && averaging_constant <= 1,
                         "quant::ObserverOptions: averaging_constant must be in (0, 1], got ", averaging_constant);
    ftopt::detail::check(percentile > 50 && percentile <= 100,
                         "quant::ObserverOptions: percentile must be in (50, 100], got ", percentile);
    ftopt::detail::check(sample_limit > 0, "quant::ObserverOptions: sample_limit must be > 0, got ", sample_limit);
  }
};

class Observer {
public:
  explicit Observer(ObserverOptions options = {}) : options_(options) { options_.validate(); }

  void observe(const at::Tensor& x) {
    const at::Tensor v = x.detach().to(at::kFloat);
    if (v.numel() == 0) return;
    ++batches_;
    if (options_.kind == ObserverKind::Percentile) {
      at::Tensor flat = v.flatten();
      if (flat.numel() > options_.sample_limit)
        flat = flat.slice(0, 0, flat.numel(), (flat.numel() + options_.sample_limit - 1) / options_.sample_limit);
      sample_ = sample_.defined() ? at::cat({sample_, flat}) : flat.clone();
      if (sample_.numel() > 4 * options_.sample_limit) sample_ = sample_.slice(0, 0, sample_.numel(), 2);
      return;
    }
    const double lo = v.min().item<double>(), hi = v.max().item<double>();
    if (batches_ == 1 || options_.kind == ObserverKind::MinMax) {
      min_ = batches_ == 1 ? lo : std::min(min_, lo);
      max_ = batches_ == 1 ? hi : std::max(max_, hi);
    } else {  // MovingAverageMinMaxObserver: min += c * (batch min - min)
      min_ += options_.averaging_constant * (lo - min_);
      max_ += options_.averaging_constant * (hi - max_);
    }
  }

  std::int64_t batches() const { return batches_; }

  /// The observed range; an ftopt::Error naming `what` when nothing was observed.
  std::pair<double, double> range(const std::string& what) const {
    ftopt::detail::check(batches_ > 0, "quant: no calibration data reached ", what,
                         " (calibrate with at least one batch that runs through it)");
    if (options_.kind != ObserverKind::Percentile) return {min_, max_};
    const double q = options_.percentile / 100.0;
    const at::Tensor sorted = std::get<0>(sample_.sort());
    const auto at_quantile = [&](double p) {
      const auto i = static_cast<std::int64_t>(std::llround(p * static_cast<double>(sorted.numel() - 1)));
      return sorted[i].item<double>();
    };
    return {at_quantile(1.0 - q), at_quantile(q)};
  }

  /// Affine quint8 parameters as PyTorch's _calculate_qparams (per_tensor_affine): the range
  /// widened to include 0; scale = (max - min) / (quant_max - quant_min), at least float
  /// epsilon; zero_point = quant_min - round(min / scale), clamped. quant_max is 127 with
  /// reduce_range, else 255.
  std::pair<double, std::int64_t> qparams(bool reduce_range, const std::string& what) const {
    auto [lo, hi] = range(what);
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
    const double quant_min = 0, quant_max = reduce_range ? 127 : 255;
    const double scale = std::max((hi - lo) / (quant_max - quant_min),
                                  static_cast<double>(std::numeric_limits<float>::epsilon()));
    const double zero_point = std::clamp(quant_min - std::nearbyint(lo / scale), quant_min, quant_max);
    return {scale, static_cast<std::int64_t>(zero_point)};
  }

private:
  ObserverOptions options_;
  std::int64_t batches_ = 0;
  double min_ = 0, max_ = 0;
  at::Tensor sample_;
};

} // namespace ftopt::quant
