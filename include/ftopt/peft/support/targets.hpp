#pragma once
/// The layers a PEFT policy adapts.
///
/// target_modules: the modules whose names match a PEFT policy's targets, in module order;
/// target_linears: the same where each must be an nn::Linear. A match of the wrong type, or no
/// match at all, is an error naming the policy and the module names the model has.

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/names.hpp>

namespace ftopt::peft::detail {

/// The modules whose names match a PEFT policy's targets, in module order. No match at all is an
/// error naming the policy and the module names the model has.
inline std::vector<std::pair<std::string, torch::nn::Module*>> target_modules(torch::nn::Module& module,
                                                                             const nn::NamePatterns& targets,
                                                                             std::string_view who) {
  std::vector<std::pair<std::string, torch::nn::Module*>> found;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    bool hit = false;
    for (const auto& pattern : targets) hit = hit || pattern.matches(item.key());
    if (hit) found.emplace_back(item.key(), item.value().get());
  }
  std::string names;
  for (const auto& t : targets) names += (names.empty() ? "'" : ", '") + t.text + "'";
  ftopt::detail::check(!found.empty(), who, ": targets ", names, " match no module; module names here: ",
                       nn::detail::module_names_hint(module));
  return found;
}

inline std::vector<std::pair<std::string, nn::LinearImpl*>> target_linears(torch::nn::Module& module,
                                                                           const nn::NamePatterns& targets,
                                                                           std::string_view who) {
  std::vector<std::pair<std::string, nn::LinearImpl*>> layers;
  for (const auto& [name, found] : target_modules(module, targets, who)) {
    auto* linear = found->as<nn::LinearImpl>();
    ftopt::detail::check(linear != nullptr, who, ": target '", name, "' is not an ftopt::nn::Linear; ", who,
                         " adapts nn::Linear layers");
    layers.emplace_back(name, linear);
  }
  return layers;
}

/// Folds each (layer name, branch) pair's branch into its layer of `module` (merge), or takes it
/// back out; a branch is an nn::Extension with merge_into and unmerge_from.
template <class Branch>
void fold_branches(torch::nn::Module& module, const std::vector<std::pair<std::string, std::shared_ptr<Branch>>>& branches,
                   bool merge) {
  auto modules = module.named_modules("", /*include_self=*/false);
  for (const auto& [name, branch] : branches) {
    auto& layer = *modules[name]->template as<typename Branch::layer_type>();
    merge ? branch->merge_into(layer) : branch->unmerge_from(layer);
  }
}

/// Registers `sub` on `layer` under `name`, on the layer's device and in its dtype, so an
/// adapter's weights live (and move, and save) with the layer they adapt.
inline nn::Linear adopt(nn::LinearImpl& layer, const std::string& name, nn::Linear sub) {
  sub->to(layer.weight.device(), layer.weight.scalar_type());
  return layer.register_module(name, sub);
}

} // namespace ftopt::peft::detail
