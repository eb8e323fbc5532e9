#pragma once
/// peft::AdapterNames: the names a model's tensors and modules have in PEFT's adapter files.
///
/// PEFT names a tensor after the Python module it wraps, plus its own layering: a LoRA layer
/// keeps the adapted Linear as `base_layer`, so its bias is `<layer>.base_layer.bias`, and its
/// adapters are `<layer>.lora_A.weight` and `<layer>.lora_B.weight`. The Python module names
/// need not be the checkpoint's: transformers 5 renames some models' modules when it loads a
/// checkpoint and back when it saves one (ViT: `vit.encoder.layer.0.attention.attention.query`
/// in the file, `vit.layers.0.attention.q_proj` in memory), while PEFT 0.21 writes adapters, and
/// matches `target_modules`, with the in-memory names. `rules` turns ftopt's module names (the
/// checkpoint's) into those: (fragment, replacement) pairs applied in order, each to the first
/// place its fragment occurs, as transformers' WeightRenaming applies its patterns; the fragments
/// are literal text where transformers' are regular expressions (docs/peft.md). No rules: the
/// names stay as they are.
///
///   ftopt::peft::AdapterNames v5{{{"encoder.layer.", "layers."}, {"attention.query", "q_proj"}}};
///   ftopt::peft::save_adapter(*model, lora, "adapter", v5);   // keys and target_modules as PEFT's

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/names.hpp>

namespace ftopt::peft {

struct AdapterNames {
  /// (fragment, replacement) pairs of literal text, e.g. {"encoder.layer.", "layers."}.
  std::vector<std::pair<std::string, std::string>> rules;

  /// PEFT's name for the module ftopt calls `name`: each rule in order replaces the first place
  /// its fragment occurs.
  std::string module(const std::string& name) const {
    std::string out = name;
    for (const auto& [fragment, replacement] : rules) {
      ftopt::detail::check(!fragment.empty() && fragment.find_first_of("\\()[]{}*+?^$|") == std::string::npos,
                           "AdapterNames: the rule '", fragment, "' -> '", replacement, "' is not literal text: "
                           "a rule's fragment is part of a module name as written (\"encoder.layer.\"), not a "
                           "regular expression");
      if (const auto at = out.find(fragment); at != std::string::npos) out.replace(at, fragment.size(), replacement);
    }
    return out;
  }
  bool renames() const { return !rules.empty(); }
};

/// transformers >= 5's in-memory names for ViTForImageClassification (models::ViT keeps the
/// checkpoint's): the names PEFT 0.21 writes a ViT's adapters under and matches target_modules
/// with. Checked against the live transformers 5.24 by the peer test peer.lora.
inline AdapterNames transformers_vit_names() {
  return {{
      {"encoder.layer.", "layers."},
      {"attention.query", "q_proj"},
      {"attention.key", "k_proj"},
      {"attention.value", "v_proj"},
      {"attention.output.dense", "attention.o_proj"},
      {"intermediate.dense", "mlp.fc1"},
      {"output.dense", "mlp.fc2"},
  }};
}

namespace detail {

/// A layer a PEFT tuner wraps: LoRA's (lora_A and lora_B children), IA3's (an ia3_l vector) or
/// VeRA's (vera_lambda_d and vera_lambda_b vectors).
/// PEFT keeps the wrapped layer's own tensors under "<layer>.base_layer".
inline bool is_tuner_layer(const torch::nn::Module& module) {
  bool a = false, b = false;
  for (const auto& child : module.named_children()) {
    a = a || child.key() == "lora_A";
    b = b || child.key() == "lora_B";
  }
  const auto own = module.named_parameters(/*recurse=*/false);
  return (a && b) || own.contains("ia3_l") || own.contains("vera_lambda_d");
}

/// The tensors an adapter registers on the layer it wraps, which keep the layer's own name.
inline bool is_adapter_tensor(const std::string& key) {
  return key == "lora_magnitude_vector" || key == "ia3_l" || key == "vera_lambda_d" || key == "vera_lambda_b";
}

/// The last `count` dotted components of `name` (all of it when it has fewer).
inline std::string last_components(const std::string& name, std::size_t count) {
  std::size_t start = name.size();
  for (std::size_t seen = 0; seen < count; ++seen) {
    const auto dot = start == 0 ? std::string::npos : name.rfind('.', start - 1);
    if (dot == std::string::npos) return name;
    start = dot;
  }
  return name.substr(start + 1);
}

/// A short list of names that picks exactly `chosen` among `all`: their common last components
/// (as many as `like` has) when that suffix picks no other name, else the full names.
inline std::vector<std::string> names_picking(const std::vector<std::string>& chosen,
                                              const std::vector<std::string>& all, const std::string& like) {
  const auto count = static_cast<std::size_t>(std::count(like.begin(), like.end(), '.')) + 1;
  const std::string suffix = last_components(chosen.front(), count);
  bool common = true;
  for (const auto& name : chosen) common = common && last_components(name, count) == suffix;
  if (common) {
    std::vector<std::string> picked;
    for (const auto& name : all)
      if (nn::NamePattern(suffix).matches(name)) picked.push_back(name);
    if (picked == chosen) return {suffix};
  }
  return chosen;
}

/// Turns patterns over one set of module names into names over another: `from` and `to` are the
/// same modules under the two namings, in the same order. A pattern that picks no module stays.
inline nn::NamePatterns translate_patterns(const nn::NamePatterns& patterns, const std::vector<std::string>& from,
                                           const std::vector<std::string>& to) {
  nn::NamePatterns out;
  auto add = [&](const std::string& text) {
    if (std::none_of(out.begin(), out.end(), [&](const nn::NamePattern& p) { return p.text == text; }))
      out.emplace_back(text);
  };
  for (const auto& pattern : patterns) {
    std::vector<std::string> chosen;
    for (std::size_t i = 0; i < from.size(); ++i)
      if (pattern.matches(from[i]) && std::find(chosen.begin(), chosen.end(), to[i]) == chosen.end())
        chosen.push_back(to[i]);
    if (chosen.empty()) {
      out.push_back(pattern);
      continue;
    }
    for (const auto& name : names_picking(chosen, to, pattern.is_regex() ? std::string("x") : pattern.text)) add(name);
  }
  return out;
}

/// The module's submodule names, ftopt's and PEFT's, in module order.
inline std::pair<std::vector<std::string>, std::vector<std::string>> module_names(const torch::nn::Module& module,
                                                                                  const AdapterNames& names) {
  std::pair<std::vector<std::string>, std::vector<std::string>> out;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    out.first.push_back(item.key());
    out.second.push_back(names.module(item.key()));
  }
  return out;
}

} // namespace detail

/// For each tensor of the module's state dict, in its order: (ftopt's key, PEFT's key without
/// "base_model.model."). A LoRA layer (a module with lora_A and lora_B children) has its own
/// tensors under `base_layer` and its adapters (lora_A, lora_B, DoRA's lora_magnitude_vector,
/// IA3's ia3_l, VeRA's vera_lambda_d and vera_lambda_b) under its name, as PEFT's tuner layers do.
inline std::vector<std::pair<std::string, std::string>> peft_keys(const torch::nn::Module& module,
                                                                  const AdapterNames& names = {}) {
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<std::string> lora_layers;
  for (const auto& item : module.named_modules()) {
    const std::string& name = item.key();
    const torch::nn::Module& sub = *item.value();
    const bool lora = detail::is_tuner_layer(sub);
    if (lora) lora_layers.push_back(name);
    std::string prefix = name.empty() ? "" : names.module(name) + ".";
    const auto dot = name.rfind('.');
    const std::string parent = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string leaf = name.substr(dot == std::string::npos ? 0 : dot + 1);
    const bool adapter_of_layer = (leaf == "lora_A" || leaf == "lora_B") &&
                                  std::find(lora_layers.begin(), lora_layers.end(), parent) != lora_layers.end();
    if (adapter_of_layer)
      prefix = names.module(parent) + "." + leaf + ".";  // the adapters keep the layer's PEFT name
    else if (lora)
      prefix += "base_layer.";
    for (const auto& p : sub.named_parameters(/*recurse=*/false)) {
      if (!p.value().defined()) continue;
      // DoRA's magnitude and IA3's and VeRA's vectors are the adapter's, not the wrapped layer's.
      const bool own_name = lora && detail::is_adapter_tensor(p.key());
      out.emplace_back((name.empty() ? "" : name + ".") + p.key(),
                       (own_name ? names.module(name) + "." : prefix) + p.key());
    }
    for (const auto& b : sub.named_buffers(/*recurse=*/false))
      if (b.value().defined()) out.emplace_back((name.empty() ? "" : name + ".") + b.key(), prefix + b.key());
  }
  return out;
}

/// PEFT's target_modules (or modules_to_save) for ftopt's patterns on this module: unchanged
/// without rules; with rules, the renamed suffix when it picks the same modules, else the full
/// PEFT names of the modules the pattern picks.
inline nn::NamePatterns patterns_to_peft(const torch::nn::Module& module, const nn::NamePatterns& patterns,
                                         const AdapterNames& names) {
  if (!names.renames()) return patterns;
  const auto [own_names, peft_names] = detail::module_names(module, names);
  return detail::translate_patterns(patterns, own_names, peft_names);
}

/// ftopt's patterns for PEFT's target_modules (or modules_to_save) on this module, the other way.
inline nn::NamePatterns patterns_from_peft(const torch::nn::Module& module, const nn::NamePatterns& patterns,
                                           const AdapterNames& names) {
  if (!names.renames()) return patterns;
  const auto [own_names, peft_names] = detail::module_names(module, names);
  return detail::translate_patterns(patterns, peft_names, own_names);
}

} // namespace ftopt::peft
