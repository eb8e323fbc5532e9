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
#include <initializer_list>
#include <string>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include <ftopt/detail/json.hpp>
#include <ftopt/error.hpp>
#include <ftopt/peft/files/adapter.hpp>
#include <ftopt/peft/files/names.hpp>
#include <ftopt/peft/lora.hpp>

namespace ftopt::peft {

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
template <class Json>
Json init_json(LoraInit init) {
  switch (init) {
    case LoraInit::Gaussian: return "gaussian";
    case LoraInit::Pissa: return "pissa";
    case LoraInit::Olora: return "olora";
    case LoraInit::Default: break;
  }
  return true;
}
template <class Json>
LoraInit init_from(const Json& value, const std::string& where) {
  if (value == true) return LoraInit::Default;
  for (LoraInit init : {LoraInit::Gaussian, LoraInit::Pissa, LoraInit::Olora})
    if (value == init_json<Json>(init)) return init;
  ftopt::detail::fail(where, ": init_lora_weights = ", value.dump(),
                      " is not supported; ftopt's Lora knows true, \"gaussian\", \"pissa\" and \"olora\"");
}
/// LoraConfig fields that change what the adapter computes and that ftopt's Lora does not do.
inline constexpr std::initializer_list<const char*> lora_unsupported = {
    "use_qalora", "lora_bias", "fan_in_fan_out", "rank_pattern", "alpha_pattern", "layer_replication",
    "layers_to_transform", "exclude_modules", "target_parameters", "trainable_token_indices",
    "alora_invocation_tokens", "use_bdlora", "megatron_config", "corda_config", "eva_config", "arrow_config",
    "velora_config", "monteclora_config", "kasa_config", "lora_ga_config", "loftq_config"};
} // namespace detail

/// Writes the module's trainable tensors and the Lora settings into `dir` (created if needed),
/// under PEFT's names (`names` renames the modules, see AdapterNames).
template <class Json = nlohmann::ordered_json>
void save_adapter(const torch::nn::Module& module, const Lora& policy, const std::filesystem::path& dir,
                  const AdapterNames& names = {}) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const LoraOptions& lora = policy.options();
  Json config = {
      {"peft_type", "LORA"},
      {"r", lora.r},
      {"lora_alpha", lora.alpha},
      {"lora_dropout", lora.dropout},
      {"target_modules", detail::patterns_json<Json>(patterns_to_peft(module, lora.targets, names))},
      {"bias", detail::bias_name(lora.bias)},
      {"modules_to_save", detail::modules_to_save_json<Json>(module, lora.modules_to_save, names)},
      {"use_rslora", lora.rslora},
      {"use_dora", lora.dora},
      {"fan_in_fan_out", false},
      {"init_lora_weights", detail::init_json<Json>(lora.init)}};
  detail::write_adapter(module, dir, names, config, "Lora");
}

/// The Lora settings of a saved adapter (PEFT's adapter_config.json).
template <class Json = nlohmann::json>
LoraOptions lora_config(const std::filesystem::path& dir) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const auto path = dir / "adapter_config.json";
  const std::string where = "lora_config: " + path.string();
  const Json config = detail::read_config<Json>(path, "LORA", where);
  try {
    detail::refuse_set_fields(config, detail::lora_unsupported, where, "ftopt's Lora");
    LoraOptions lora;
    lora.r = config.at("r").template get<std::int64_t>();
    lora.alpha = config.at("lora_alpha").template get<double>();
    lora.dropout = config.value("lora_dropout", 0.0);
    lora.targets = detail::patterns_from(config.at("target_modules"));
    lora.bias = detail::bias_from(config.value("bias", std::string("none")), where);
    if (config.contains("modules_to_save")) lora.modules_to_save = detail::patterns_from(config["modules_to_save"]);
    lora.rslora = config.value("use_rslora", false);
    lora.dora = config.value("use_dora", false);
    lora.init = detail::init_from(config.value("init_lora_weights", Json(true)), where);
    detail::validate_from(lora, where);
    return lora;
  } catch (const typename Json::exception& e) {
    ftopt::detail::fail("lora_config: ", path.string(), ": ", e.what());
  }
}

/// The same, with target_modules and modules_to_save turned into ftopt's names of `module`'s
/// modules (the model before Lora is attached) when `names` renames them; an entry that matches
/// no module of the model is an error naming the file and the entry.
template <class Json = nlohmann::json>
LoraOptions lora_config(const std::filesystem::path& dir, const torch::nn::Module& module, const AdapterNames& names) {
  LoraOptions lora = lora_config<Json>(dir);
  detail::patterns_for_model(module, names, "lora_config: " + (dir / "adapter_config.json").string(),
                             {{&lora.targets, "target_modules"}, {&lora.modules_to_save, "modules_to_save"}});
  return lora;
}

} // namespace ftopt::peft
