#pragma once
/// Meter: the running sums behind an epoch's loss and accuracy, kept as device tensors so a
/// training step never waits for the host; read (and summed over ranks) once per epoch.

#include <cstdint>
#include <optional>

#include <ATen/ATen.h>

namespace ftopt::detail {

struct Meter {
  explicit Meter(c10::Device device)
      : loss_sum(at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device))),
        correct(at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device))) {}

  /// Adds a batch: its mean loss weighted by its size, and its top-1 hits when the output is
  /// [N, C] class scores and the target [N] class indices.
  void add(const at::Tensor& loss, const at::Tensor& output, const at::Tensor& target) {
    const std::int64_t n = output.dim() > 0 ? output.size(0) : 1;
    loss_sum.add_(loss.detach(), static_cast<double>(n));
    samples += n;
    if (output.dim() == 2 && target.dim() == 1 && !target.is_floating_point()) {
      correct.add_(output.argmax(1).eq(target).sum());
      classified += n;
    }
  }

  struct Totals {
    std::int64_t samples = 0, classified = 0;
    double loss_sum = 0, correct = 0;
    double mean_loss() const { return samples ? loss_sum / static_cast<double>(samples) : 0.0; }
    std::optional<double> accuracy() const {
      if (classified == 0) return std::nullopt;
      return correct / static_cast<double>(classified);
    }
  };

  /// The sums over all ranks, in one collective: `reduce_sum` is the parallel policy's.
  template <class ReduceSum>
  Totals reduced(ReduceSum&& reduce_sum) const {
    auto local = at::stack({loss_sum, correct, at::scalar_tensor(static_cast<double>(samples), loss_sum.options()),
                            at::scalar_tensor(static_cast<double>(classified), loss_sum.options())});
    auto all = reduce_sum(local).to(at::kCPU);
    auto v = all.template accessor<double, 1>();
    return {static_cast<std::int64_t>(v[2]), static_cast<std::int64_t>(v[3]), v[0], v[1]};
  }

  at::Tensor loss_sum, correct;
  std::int64_t samples = 0, classified = 0;
};

} // namespace ftopt::detail
