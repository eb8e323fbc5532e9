#pragma once
/// ftopt::Model: what the Trainer trains. A LibTorch module handle, `torch::nn::ModuleHolder`
/// (e.g. `torch::nn::Linear`, `ftopt::models::Mlp`) or `std::shared_ptr<M>`, whose module has
/// `forward(torch::Tensor) -> torch::Tensor`.
///
///   ftopt::models::Mlp model({.in = 784, .hidden = {64}, .out = 10});   // models ftopt::Model

#include <concepts>
#include <memory>
#include <type_traits>

#include <torch/nn/module.h>

namespace ftopt {

template <class M>
concept Model = requires(M& model, const torch::Tensor& input) {
  requires std::derived_from<std::remove_cvref_t<decltype(*model)>, torch::nn::Module>;
  { model->forward(input) } -> std::convertible_to<torch::Tensor>;
};

namespace detail {

/// true, or one sentence saying why M is not a Model.
template <class M>
consteval bool check_model() {
  static_assert(Model<M>, "ftopt::Trainer: the model must be a module handle (a "
                          "torch::nn::ModuleHolder or std::shared_ptr to a torch::nn::Module) whose "
                          "module has forward(torch::Tensor) returning a tensor.");
  return true;
}

/// The least a Model can be; concepts of the axes check their generic hooks against it.
struct ArchetypeModule : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& x) { return x; }
};
using ArchetypeModel = std::shared_ptr<ArchetypeModule>;

/// The module behind a handle, as torch::nn::Module&.
template <Model M>
torch::nn::Module& module_of(M& model) {
  return *model;
}

} // namespace detail
} // namespace ftopt
