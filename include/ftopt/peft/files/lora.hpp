#pragma once
/// LoRA adapters on disk, as Hugging Face PEFT writes and reads them: a folder with
/// `adapter_model.safetensors` (the trainable tensors only, named "base_model.model.<name>",
/// e.g. "base_model.model.vit.encoder.layer.0.attention.attention.query.lora_A.weight"; a
/// target's own bias is "<target>.base_layer.bias", as PEFT's LoraLayer wraps the Linear) and
/// `adapter_config.json` (LoraConfig's field names: peft_type, r, lora_alpha, lora_dropout,
/// target_modules, bias, modules_to_save, use_rslora, use_dora, init_lora_weights, ...); DoRA's
/// magnitudes are "<target>.lora_magnitude_vector". A config that asks for what ftopt's Lora does
/// not do (LoftQ, rank_pattern, lora_bias, ...) is refused, naming the field. A PiSSA or OLoRA
/// adapter loads onto the original base: attaching factors W again and leaves the same residual,
/// as PEFT's from_pretrained does. Checked against PEFT 0.21 both ways by tests/peer/lora.py. When the Python model names its modules differently from ftopt's
/// (transformers 5's ViT), pass AdapterNames (peft/files/names.hpp) to all three functions.
///
///   ftopt::peft::save_adapter(*model, trainer.peft(), "adapter");
///   auto lora = ftopt::peft::lora_config("adapter");               // the saved LoraOptions
///   ... attach it to a fresh model (Trainer::prepare) ...
///   ftopt::peft::load_adapter(*model, "adapter");

#include <filesystem>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/error.hpp>
#include <ftopt/peft/files/names.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/weights/safetensors.hpp>
#include <ftopt/weights/state_dict.hpp>

namespace ftopt::peft {

inline constexpr const char* peft_prefix = "base_model.model.";

namespace detail {
inline const char* bias_name(LoraBias bias) {
  return bias == LoraBias::All ? "all" : bias == LoraBias::LoraOnly ? "lora_only" : "none";
}
/// LoraConfig's bias names back to LoraBias; `where` names the file or option in the error.
inline LoraBias bias_from(const std::string& name, const std::string& where) {
  for (LoraBias bias : {LoraBias::None, LoraBias::All, LoraBias::LoraOnly})
    if (name == bias_name(bias)) return bias;
  ftopt::detail::fail(where, ": bias must be none, all or lora_only, got '", name, "'");
}
/// init_lora_weights as PEFT writes it: true, or the method's name.
inline nlohmann::json init_json(LoraInit init) {
  switch (init) {
    case LoraInit::Gaussian: return "gaussian";
    case LoraInit::Pissa: return "pissa";
    case LoraInit::Olora: return "olora";
    case LoraInit::Default: break;
  }
  return true;
}
inline LoraInit init_from(const nlohmann::json& value, const std::string& where) {
  if (value == true) return LoraInit::Default;
  for (LoraInit init : {LoraInit::Gaussian, LoraInit::Pissa, LoraInit::Olora})
    if (value == init_json(init)) return init;
  ftopt::detail::fail(where, ": init_lora_weights = ", value.dump(),
                      " is not supported; ftopt's Lora knows true, \"gaussian\", \"pissa\" and \"olora\"");
}
/// LoraConfig fields that change what the adapter computes and that ftopt's Lora does not do:
/// a file that sets one is refused rather than read as plain LoRA.
inline void refuse_unsupported(const nlohmann::json& config, const std::string& where) {
  for (const char* key : {"use_qalora", "lora_bias", "fan_in_fan_out", "rank_pattern", "alpha_pattern",
                          "layer_replication", "layers_to_transform", "exclude_modules", "target_parameters",
                          "trainable_token_indices", "alora_invocation_tokens", "use_bdlora", "megatron_config",
                          "corda_config", "eva_config", "arrow_config", "velora_config", "monteclora_config",
                          "kasa_config", "lora_ga_config", "loftq_config"}) {
    if (!config.contains(key)) continue;
    const auto& value = config[key];
    const bool unset = value.is_null() || value == false || (value.is_object() && value.empty()) ||
                       (value.is_array() && value.empty());
    ftopt::detail::check(unset, where, ": ", key, " = ", value.dump(), " is not supported by ftopt's Lora");
  }
}
inline nlohmann::json patterns_json(const nn::NamePatterns& patterns) {
  // PEFT: a list of names, or one string that is a regex.
  if (patterns.size() == 1 && patterns.front().is_regex) return patterns.front().text;
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : patterns) {
    ftopt::detail::check(!p.is_regex, "save_adapter: PEFT's config holds one regex or a list of names, not a mix");
    list.push_back(p.text);
  }
  return list;
}
inline nn::NamePatterns patterns_from(const nlohmann::json& value) {
  if (value.is_string()) return {nn::regex(value.get<std::string>())};
  nn::NamePatterns out;
  if (value.is_array())
    for (const auto& v : value) out.emplace_back(v.get<std::string>());
  return out;
}
} // namespace detail

/// Writes the module's trainable tensors and the Lora settings into `dir` (created if needed),
/// under PEFT's names (`names` renames the modules, see AdapterNames).
inline void save_adapter(const torch::nn::Module& module, const Lora& policy, const std::filesystem::path& dir,
                         const AdapterNames& names = {}) {
  const LoraOptions& lora = policy.options();
  std::filesystem::create_directories(dir);
  const auto own = weights::state_dict(module);
  weights::StateDict adapter;
  for (const auto& [own_key, peft_key] : peft_keys(module, names))
    if (own[own_key].requires_grad()) adapter.insert(peft_prefix + peft_key, own[own_key]);
  ftopt::detail::check(!adapter.is_empty(), "save_adapter: the module has no trainable tensors (was Lora attached?)");
  nlohmann::ordered_json config = {
      {"peft_type", "LORA"},
      {"r", lora.r},
      {"lora_alpha", lora.alpha},
      {"lora_dropout", lora.dropout},
      {"target_modules", detail::patterns_json(patterns_to_peft(module, lora.targets, names))},
      {"bias", detail::bias_name(lora.bias)},
      {"modules_to_save", lora.modules_to_save.empty()
                              ? nlohmann::json(nullptr)
                              : detail::patterns_json(patterns_to_peft(module, lora.modules_to_save, names))},
      {"use_rslora", lora.rslora},
      {"use_dora", lora.dora},
      {"fan_in_fan_out", false},
      {"init_lora_weights", detail::init_json(lora.init)},
      {"inference_mode", true},
      {"task_type", nullptr},
      {"base_model_name_or_path", nullptr}};
  weights::save_safetensors(dir / "adapter_model.safetensors", adapter, {{"format", "pt"}});
  ftopt::detail::write_atomically(dir / "adapter_config.json", "save_adapter",
                                  [&](std::ostream& out) { out << config.dump(2) << '\n'; });
}

/// The Lora settings of a saved adapter (PEFT's adapter_config.json).
inline LoraOptions lora_config(const std::filesystem::path& dir) {
  const auto path = dir / "adapter_config.json";
  ftopt::detail::check(std::filesystem::is_regular_file(path), "lora_config: ", path.string(), ": no such file");
  nlohmann::json config;
  try {
    std::ifstream in(path);
    config = nlohmann::json::parse(in);
    const std::string where = "lora_config: " + path.string();
    ftopt::detail::check(config.value("peft_type", "") == "LORA", where, ": peft_type is '",
                         config.value("peft_type", ""), "', not 'LORA'");
    detail::refuse_unsupported(config, where);
    LoraOptions lora;
    lora.r = config.at("r").get<std::int64_t>();
    lora.alpha = config.at("lora_alpha").get<double>();
    lora.dropout = config.value("lora_dropout", 0.0);
    lora.targets = detail::patterns_from(config.at("target_modules"));
    lora.bias = detail::bias_from(config.value("bias", std::string("none")), where);
    if (config.contains("modules_to_save")) lora.modules_to_save = detail::patterns_from(config["modules_to_save"]);
    lora.rslora = config.value("use_rslora", false);
    lora.dora = config.value("use_dora", false);
    lora.init = detail::init_from(config.value("init_lora_weights", nlohmann::json(true)), where);
    lora.validate();
    return lora;
  } catch (const nlohmann::json::exception& e) {
    ftopt::detail::fail("lora_config: ", path.string(), ": ", e.what());
  }
}

/// The same, with target_modules and modules_to_save turned into ftopt's names of `module`'s
/// modules (the model before Lora is attached) when `names` renames them.
inline LoraOptions lora_config(const std::filesystem::path& dir, const torch::nn::Module& module,
                               const AdapterNames& names) {
  LoraOptions lora = lora_config(dir);
  lora.targets = patterns_from_peft(module, lora.targets, names);
  lora.modules_to_save = patterns_from_peft(module, lora.modules_to_save, names);
  return lora;
}

/// Loads a saved adapter into a module that has the same Lora attached. Every tensor of the file
/// must find its place; the module's other tensors are left as they are. Keys are PEFT's (see
/// peft_keys; ftopt's own names are accepted too). PEFT's copies of a modules_to_save module
/// beside its saved tensors, "<module>.original_module.*" (the frozen original) and
/// "<module>.modules_to_save.*" (which bias="all" adds), are skipped: ftopt trains that module
/// in place.
inline weights::LoadReport load_adapter(torch::nn::Module& module, const std::filesystem::path& dir,
                                        const AdapterNames& names = {}) {
  const auto path = dir / "adapter_model.safetensors";
  weights::StateDict file = weights::load_safetensors(path);
  std::unordered_map<std::string, std::string> own_key_of;
  for (const auto& [own_key, peft_key] : peft_keys(module, names)) own_key_of.emplace(peft_key, own_key);
  const auto own = weights::state_dict(module);
  const std::string prefix = peft_prefix;
  auto strip = [&](const std::string& key) { return key.starts_with(prefix) ? key.substr(prefix.size()) : key; };
  weights::StateDict renamed;
  std::vector<std::string> stray;
  for (const auto& item : file) {
    std::string key = strip(item.key());
    if (key.find(".original_module.") != std::string::npos) continue;
    if (const auto at = key.find(".modules_to_save."); at != std::string::npos) {
      key.erase(at + 1, std::string("modules_to_save.").size());
      if (file.contains(prefix + key)) continue;
    }
    if (const auto found = own_key_of.find(key); found != own_key_of.end())
      renamed.insert(found->second, item.value());
    else if (own.contains(key))
      renamed.insert(key, item.value());
    else
      stray.push_back(item.key());
  }
  ftopt::detail::check(stray.empty(), "load_adapter: ", path.string(), ": ", stray.size(),
                       " tensors have no place in the model (is the same Lora attached?), first: ",
                       stray.empty() ? "" : stray.front());
  return weights::load_state_dict(module, renamed, {.strict = false}, "load_adapter: " + path.string());
}

} // namespace ftopt::peft
