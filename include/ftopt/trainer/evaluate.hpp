#pragma once
/// The evaluation loop behind Trainer::evaluate: every batch through the model in eval mode,
/// without gradients, under the precision policy's forward scope; loss and top-1 accuracy
/// summed on the device and over ranks once, at the end. The model's train/eval mode is
/// restored after.

#include <torch/nn/module.h>
#include <torch/utils.h>

#include <ftopt/batch.hpp>
#include <ftopt/detail/clock.hpp>
#include <ftopt/detail/eval_scope.hpp>
#include <ftopt/detail/meter.hpp>
#include <ftopt/model.hpp>
#include <ftopt/state.hpp>
#include <ftopt/trainer/inputs.hpp>
#include <ftopt/trainer_options.hpp>

namespace ftopt::trainer {

template <class M, class R, class Precision, class ReduceSum>
EvalStats evaluate(M& model, R& batches, const Precision& precision, const LossFunction& loss,
                   const torch::Device& device, ReduceSum reduce_sum) {
  const ftopt::detail::EvalScope eval(detail::module_of(model));
  torch::NoGradGuard no_grad;
  const auto start = detail::Clock::now();
  detail::Meter meter(device);
  for (auto&& batch : batches) {
    const torch::Tensor input = policy_input(precision, on_device(input_of(batch), device));
    const torch::Tensor target = on_device(target_of(batch), device);
    const auto [output, value] = output_and_loss(
        precision, [&] { return model->forward(input); }, [&](const torch::Tensor& out) { return loss(out, target); });
    meter.add(value, output, target);
  }
  auto totals = meter.reduced(reduce_sum);
  return {totals.samples, totals.mean_loss(), totals.accuracy(), detail::seconds_since(start)};
}

} // namespace ftopt::trainer
