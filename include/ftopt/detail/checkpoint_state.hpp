#pragma once
/// What a checkpoint holds besides weights: the default RNG generators' states (the CPU one, and
/// each CUDA device's where there are any), and the state of policies that keep some.
/// A policy keeps state by having both `save_state(torch::serialize::OutputArchive&) const` and
/// `load_state(torch::serialize::InputArchive&)` (a loss scaler's scale, say).

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <torch/cuda.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

namespace ftopt::detail {

/// The default generators by name: "cpu", "cuda0", "cuda1", ...
inline std::vector<std::pair<std::string, at::Generator>> rng_generators() {
  std::vector<std::pair<std::string, at::Generator>> out;
  out.emplace_back("cpu", at::globalContext().defaultGenerator(c10::Device(c10::kCPU)));
  if (torch::cuda::is_available())
    for (int i = 0, n = static_cast<int>(torch::cuda::device_count()); i < n; ++i)
      out.emplace_back("cuda" + std::to_string(i),
                       at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))));
  return out;
}

inline std::vector<std::pair<std::string, at::Tensor>> rng_states() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [name, generator] : rng_generators()) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    out.emplace_back(name, generator.get_state());
  }
  return out;
}

template <class P>
concept KeepsState = requires(P& p, const P& cp, torch::serialize::OutputArchive& out,
                              torch::serialize::InputArchive& in) {
  cp.save_state(out);
  p.load_state(in);
};

/// Calls f(policy, axis name) for each of the five policies (Precision, Peft, Memory,
/// Parallel, Quant order) that keeps state.
template <class Policies, class F>
void for_each_policy_state(Policies policies, F&& f) {
  static constexpr const char* axes[] = {"precision", "peft", "memory", "parallel", "quant"};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          auto& policy = std::get<I>(policies);
          if constexpr (KeepsState<std::remove_cvref_t<decltype(policy)>>) f(policy, axes[I]);
        }(),
        ...);
  }(std::make_index_sequence<std::tuple_size_v<Policies>>{});
}

} // namespace ftopt::detail
