#pragma once
/// Parts of a labelled dataset: its first samples (a quick run's slice), a subset of its classes
/// (the fine-tuning story: pretrain on classes 0-4, fine-tune on 5-9) and a seeded
/// train/validation split.
///
///   auto slice = ftopt::data::first(train, 2000);                         // 0: all of them
///   auto pretrain = ftopt::data::select_classes(train, {0, 1, 2, 3, 4});   // labels stay 0..4
///   auto finetune = ftopt::data::select_classes(train, {5, 6, 7, 8, 9});   // labels become 0..4
///   auto [fit_part, validation] = ftopt::data::split(finetune, 0.1, /*seed=*/1);

#include <algorithm>
#include <cstdint>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <ftopt/data/fashion_mnist.hpp>
#include <ftopt/error.hpp>

namespace ftopt::data {

/// The first `n` samples; all of them when n is 0 or at least the set's size.
inline LabelledImages first(const LabelledImages& set, std::int64_t n) {
  ftopt::detail::check(n >= 0, "data::first: the sample count must be >= 0, got ", n);
  if (n == 0 || n >= set.labels.size(0)) return set;
  return {set.images.narrow(0, 0, n), set.labels.narrow(0, 0, n)};
}

/// The samples whose label is one of `classes`, in their original order. With `relabel`, the
/// labels become positions in `classes` (classes {5, 9} -> labels 0 and 1).
inline LabelledImages select_classes(const LabelledImages& set, const std::vector<std::int64_t>& classes,
                                     bool relabel = true) {
  ftopt::detail::check(!classes.empty(), "select_classes: no classes given");
  ftopt::detail::check(std::set<std::int64_t>(classes.begin(), classes.end()).size() == classes.size(),
                       "select_classes: a class is listed twice");
  at::Tensor keep = at::zeros_like(set.labels, at::kBool);
  at::Tensor mapped = set.labels.clone();
  for (std::size_t i = 0; i < classes.size(); ++i) {
    at::Tensor is_class = set.labels.eq(classes[i]);
    ftopt::detail::check(is_class.any().item<bool>(), "select_classes: class ", classes[i],
                         " has no samples");
    keep.logical_or_(is_class);
    if (relabel) mapped.masked_fill_(is_class, static_cast<std::int64_t>(i));
  }
  at::Tensor index = keep.nonzero().squeeze(1);
  return {set.images.index_select(0, index), mapped.index_select(0, index)};
}

/// A seeded random split: (the rest, a `fraction` of the samples for validation).
inline std::pair<LabelledImages, LabelledImages> split(const LabelledImages& set, double fraction,
                                                       std::uint64_t seed) {
  ftopt::detail::check(fraction > 0.0 && fraction < 1.0, "split: fraction must be in (0, 1), got ", fraction);
  const std::int64_t n = set.labels.size(0);
  const auto held = static_cast<std::int64_t>(static_cast<double>(n) * fraction);
  ftopt::detail::check(held >= 1 && held < n, "split: a fraction of ", fraction, " of ", n,
                       " samples leaves an empty part");
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor order = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
  const at::Tensor rest = std::get<0>(order.narrow(0, held, n - held).sort());
  const at::Tensor part = std::get<0>(order.narrow(0, 0, held).sort());
  return {{set.images.index_select(0, rest), set.labels.index_select(0, rest)},
          {set.images.index_select(0, part), set.labels.index_select(0, part)}};
}

} // namespace ftopt::data
