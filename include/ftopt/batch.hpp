#pragma once
/// ftopt::Batch: one (input, target) pair the Trainer steps on. Any of
///   - a tuple-like pair of tensors: std::pair<torch::Tensor, torch::Tensor>, std::tuple<...>;
///   - a struct with `data` and `target` tensors, like torch::data::Example<>.
/// ftopt::BatchRange: a range whose elements are Batches; iterated once per epoch.
///
///   std::vector<std::pair<torch::Tensor, torch::Tensor>> batches = ...;  // a BatchRange

#include <concepts>
#include <ranges>
#include <tuple>
#include <type_traits>

#include <ATen/core/Tensor.h>

#include <ftopt/detail/dependent_false.hpp>

namespace ftopt {

namespace detail {
template <class B>
concept PairOfTensors = requires(const B& b) {
  requires std::tuple_size<std::remove_cvref_t<B>>::value == 2;
  { std::get<0>(b) } -> std::convertible_to<at::Tensor>;
  { std::get<1>(b) } -> std::convertible_to<at::Tensor>;
};
template <class B>
concept DataTargetStruct = requires(const B& b) {
  { b.data } -> std::convertible_to<at::Tensor>;
  { b.target } -> std::convertible_to<at::Tensor>;
};
} // namespace detail

template <class B>
concept Batch = detail::PairOfTensors<B> || detail::DataTargetStruct<B>;

template <class R>
concept BatchRange = std::ranges::input_range<R> && Batch<std::ranges::range_reference_t<R>>;

/// The input tensor of a batch.
template <Batch B>
const at::Tensor& input_of(const B& batch) {
  if constexpr (detail::DataTargetStruct<B>) return batch.data;
  else return std::get<0>(batch);
}

/// The target tensor of a batch.
template <Batch B>
const at::Tensor& target_of(const B& batch) {
  if constexpr (detail::DataTargetStruct<B>) return batch.target;
  else return std::get<1>(batch);
}

namespace detail {
/// true, or one sentence saying why B cannot be a training batch (Trainer::train_step).
template <class B>
consteval bool check_batch() {
  static_assert(Batch<B>, "ftopt::Trainer::train_step: the batch must be an (input, target) pair of tensors or "
                          "have .data and .target (include/ftopt/batch.hpp).");
  return true;
}

/// true, or one sentence saying why R cannot feed fit or evaluate.
template <class R>
consteval bool check_batches() {
  using Range = std::remove_cvref_t<R>;
  if constexpr (!std::ranges::input_range<Range>)
    static_assert(dependent_false<R>, "ftopt::Trainer::fit/evaluate: the batches must be an "
                                      "input range (begin/end), iterated once per epoch.");
  else if constexpr (!Batch<std::ranges::range_reference_t<Range>>)
    static_assert(dependent_false<R>, "ftopt::Trainer::fit/evaluate: each batch must be an (input, target) "
                                      "pair of tensors or have .data and .target tensors "
                                      "(include/ftopt/batch.hpp).");
  return true;
}
} // namespace detail

} // namespace ftopt
