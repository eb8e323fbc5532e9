#pragma once
/// VeRA adapters on disk, as Hugging Face PEFT writes and reads them: the folder of
/// peft/files/adapter.hpp, with the vectors as "<target>.vera_lambda_d" and ".vera_lambda_b",
/// the shared projections as "base_model.vera_A" and "base_model.vera_B" (outside the model's
/// prefix, as PEFT keeps them on its tuner; left out when save_projection is false) and
/// VeraConfig's field names (peft_type "VERA", r, target_modules, projection_prng_key,
/// save_projection, vera_dropout, d_initial, modules_to_save, ...). Checked against PEFT 0.21 both
/// ways by tests/peer/vera.py.
///
///   ftopt::peft::save_adapter(*model, trainer.peft(), "adapter");
///   auto vera = ftopt::peft::vera_config("adapter");     // the saved VeraOptions
///   ... attach it to a fresh model (Trainer::prepare), then load_adapter(*model, "adapter")

#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include <ftopt/detail/json.hpp>
#include <ftopt/error.hpp>
#include <ftopt/peft/files/adapter.hpp>
#include <ftopt/peft/files/names.hpp>
#include <ftopt/peft/vera.hpp>

namespace ftopt::peft {

/// Writes the module's trainable tensors, the projections (when save_projection) and the Vera
/// settings into `dir`, under PEFT's names.
template <class Json = nlohmann::ordered_json>
void save_adapter(const torch::nn::Module& module, const Vera& policy, const std::filesystem::path& dir,
                  const AdapterNames& names = {}) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const VeraOptions& vera = policy.options();
  ftopt::detail::check(policy.projections().a.defined(), "save_adapter: Vera is not attached to a model yet");
  Json config = {
      {"peft_type", "VERA"},
      {"r", vera.r},
      {"target_modules", detail::patterns_json<Json>(patterns_to_peft(module, vera.targets, names))},
      {"projection_prng_key", vera.projection_prng_key},
      {"save_projection", vera.save_projection},
      {"vera_dropout", vera.dropout},
      {"d_initial", vera.d_initial},
      {"fan_in_fan_out", false},
      {"bias", "none"},
      {"modules_to_save", detail::modules_to_save_json<Json>(module, vera.modules_to_save, names)},
      {"init_weights", true}};
  weights::StateDict projections;
  if (vera.save_projection) {
    projections.insert(std::string(peft_tuner_prefix) + "vera_A", policy.projections().a);
    projections.insert(std::string(peft_tuner_prefix) + "vera_B", policy.projections().b);
  }
  detail::write_adapter(module, dir, names, config, "Vera", projections);
}

/// The Vera settings of a saved adapter (PEFT's adapter_config.json). A config ftopt's Vera does
/// not compute (fan_in_fan_out, a bias other than "none", init_weights false, layers_to_transform)
/// is refused naming the field.
template <class Json = nlohmann::json>
VeraOptions vera_config(const std::filesystem::path& dir) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const auto path = dir / "adapter_config.json";
  const std::string where = "vera_config: " + path.string();
  const Json config = detail::read_config<Json>(path, "VERA", where);
  try {
    detail::refuse_set_fields(config, {"fan_in_fan_out", "layers_to_transform", "layers_pattern", "exclude_modules",
                                       "target_parameters"},
                              where, "ftopt's Vera");
    const std::string bias = config.value("bias", std::string("none"));
    ftopt::detail::check(bias == "none", where, ": bias = '", bias, "' is not supported; ftopt's Vera trains no biases");
    ftopt::detail::check(config.value("init_weights", true), where,
                         ": init_weights = false (random vectors) is not supported by ftopt's Vera");
    VeraOptions vera;
    vera.r = config.at("r").template get<std::int64_t>();
    vera.targets = detail::patterns_from(config.at("target_modules"));
    vera.projection_prng_key = config.value("projection_prng_key", std::uint64_t{0});
    vera.save_projection = config.value("save_projection", true);
    vera.dropout = config.value("vera_dropout", 0.0);
    vera.d_initial = config.value("d_initial", 0.1);
    if (config.contains("modules_to_save")) vera.modules_to_save = detail::patterns_from(config["modules_to_save"]);
    detail::validate_from(vera, where);
    return vera;
  } catch (const typename Json::exception& e) {
    ftopt::detail::fail(where, ": ", e.what());
  }
}

/// The same, with the patterns turned into ftopt's names of `module`'s modules when `names`
/// renames them; an entry that matches no module of the model is an error naming the file.
template <class Json = nlohmann::json>
VeraOptions vera_config(const std::filesystem::path& dir, const torch::nn::Module& module, const AdapterNames& names) {
  VeraOptions vera = vera_config<Json>(dir);
  detail::patterns_for_model(module, names, "vera_config: " + (dir / "adapter_config.json").string(),
                             {{&vera.targets, "target_modules"}, {&vera.modules_to_save, "modules_to_save"}});
  return vera;
}

} // namespace ftopt::peft
