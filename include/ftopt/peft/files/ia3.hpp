#pragma once
/// (IA)^3 adapters on disk, as Hugging Face PEFT writes and reads them: the folder of
/// peft/files/adapter.hpp, with the vectors as "<target>.ia3_l" and IA3Config's field names
/// (peft_type "IA3", target_modules, feedforward_modules, modules_to_save, init_ia3_weights).
/// Checked against PEFT 0.21 both ways by tests/peer/ia3.py.
///
///   ftopt::peft::save_adapter(*model, trainer.peft(), "adapter");
///   auto ia3 = ftopt::peft::ia3_config("adapter");     // the saved Ia3Options
///   ... attach it to a fresh model (Trainer::prepare), then load_adapter(*model, "adapter")

#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include <ftopt/detail/json.hpp>
#include <ftopt/error.hpp>
#include <ftopt/peft/files/adapter.hpp>
#include <ftopt/peft/files/names.hpp>
#include <ftopt/peft/ia3.hpp>

namespace ftopt::peft {

/// Writes the module's trainable tensors and the Ia3 settings into `dir`, under PEFT's names.
template <class Json = nlohmann::ordered_json>
void save_adapter(const torch::nn::Module& module, const Ia3& policy, const std::filesystem::path& dir,
                  const AdapterNames& names = {}) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const Ia3Options& ia3 = policy.options();
  Json config = {
      {"peft_type", "IA3"},
      {"target_modules", detail::patterns_json<Json>(patterns_to_peft(module, ia3.targets, names))},
      {"feedforward_modules", ia3.feedforward.empty()
                                  ? Json::array()
                                  : detail::patterns_json<Json>(patterns_to_peft(module, ia3.feedforward, names))},
      {"modules_to_save", detail::modules_to_save_json<Json>(module, ia3.modules_to_save, names)},
      {"init_ia3_weights", true},
      {"fan_in_fan_out", false}};
  detail::write_adapter(module, dir, names, config, "Ia3");
}

/// The Ia3 settings of a saved adapter (PEFT's adapter_config.json). A config ftopt's Ia3 does not
/// compute (fan_in_fan_out, exclude_modules, init_ia3_weights false) is refused naming the field.
template <class Json = nlohmann::json>
Ia3Options ia3_config(const std::filesystem::path& dir) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const auto path = dir / "adapter_config.json";
  const std::string where = "ia3_config: " + path.string();
  const Json config = detail::read_config<Json>(path, "IA3", where);
  try {
    detail::refuse_set_fields(config, {"fan_in_fan_out", "exclude_modules", "target_parameters"}, where,
                              "ftopt's Ia3");
    ftopt::detail::check(config.value("init_ia3_weights", true), where,
                         ": init_ia3_weights = false (random vectors) is not supported by ftopt's Ia3");
    Ia3Options ia3;
    ia3.targets = detail::patterns_from(config.at("target_modules"));
    if (config.contains("feedforward_modules")) ia3.feedforward = detail::patterns_from(config["feedforward_modules"]);
    if (config.contains("modules_to_save")) ia3.modules_to_save = detail::patterns_from(config["modules_to_save"]);
    detail::validate_from(ia3, where);
    return ia3;
  } catch (const typename Json::exception& e) {
    ftopt::detail::fail(where, ": ", e.what());
  }
}

/// The same, with the patterns turned into ftopt's names of `module`'s modules when `names`
/// renames them; an entry that matches no module of the model is an error naming the file.
template <class Json = nlohmann::json>
Ia3Options ia3_config(const std::filesystem::path& dir, const torch::nn::Module& module, const AdapterNames& names) {
  Ia3Options ia3 = ia3_config<Json>(dir);
  detail::patterns_for_model(module, names, "ia3_config: " + (dir / "adapter_config.json").string(),
                             {{&ia3.targets, "target_modules"},
                              {&ia3.feedforward, "feedforward_modules", /*required=*/false},
                              {&ia3.modules_to_save, "modules_to_save"}});
  return ia3;
}

} // namespace ftopt::peft
