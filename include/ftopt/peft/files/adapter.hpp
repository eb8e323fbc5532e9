#pragma once
/// What PEFT's adapter folders share, whatever the method: `adapter_model.safetensors` with the
/// trainable tensors under "base_model.model.<PEFT name>" (and tensors PEFT keeps on its tuner
/// rather than in the model, VeRA's projections, under "base_model.<name>") and
/// `adapter_config.json` with the config's field names (peft_type first). peft/files/lora.hpp,
/// ia3.hpp and vera.hpp write and read each method's config; `load_adapter` loads the tensors of any.
/// The functions that touch JSON are templates over the JSON type, defaulted and never named by a
/// caller, so that nlohmann::json is compiled only where an adapter is read or written; that
/// source file includes <ftopt/json.hpp> (docs/build.md, "Compile time").

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/detail/json.hpp>
#include <ftopt/error.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/files/names.hpp>
#include <ftopt/weights/safetensors.hpp>
#include <ftopt/weights/state_dict.hpp>

namespace ftopt::peft {

inline constexpr const char* peft_prefix = "base_model.model.";
/// Where PEFT's tuner keeps tensors of its own (VeRA's shared projections): "base_model.vera_A".
inline constexpr const char* peft_tuner_prefix = "base_model.";

namespace detail {
/// Patterns as PEFT's config holds them: a list of names, or one regex (re.fullmatch). Names mixed
/// with a regex become one regex, each name as "(.*\.)?name" (PEFT's rule for a name: the module's
/// whole name or its dotted suffix), joined by "|".
template <class Json>
Json patterns_json(const nn::NamePatterns& patterns) {
  const bool any_regex = std::any_of(patterns.begin(), patterns.end(), [](const nn::NamePattern& p) { return p.is_regex(); });
  if (!any_regex) {
    Json list = Json::array();
    for (const auto& p : patterns) list.push_back(p.text);
    return list;
  }
  if (patterns.size() == 1) return patterns.front().text;
  std::string joined;
  for (const auto& p : patterns) {
    std::string alternative = p.text;
    if (!p.is_regex()) {
      alternative.clear();
      for (char c : p.text) alternative += c == '.' ? std::string("\\.") : std::string(1, c);
      alternative = "(.*\\.)?" + alternative;
    }
    joined += (joined.empty() ? "(" : "|(") + alternative + ")";
  }
  return joined;
}
template <class Json>
nn::NamePatterns patterns_from(const Json& value) {
  if (value.is_string()) return {nn::regex(value.template get<std::string>())};
  nn::NamePatterns out;
  if (value.is_array())
    for (const auto& v : value) out.emplace_back(v.template get<std::string>());
  return out;
}
/// modules_to_save as PEFT writes it: null when empty.
template <class Json>
Json modules_to_save_json(const torch::nn::Module& module, const nn::NamePatterns& patterns, const AdapterNames& names) {
  return patterns.empty() ? Json(nullptr) : patterns_json<Json>(patterns_to_peft(module, patterns, names));
}

/// Writes the module's trainable tensors under PEFT's names, the tensors of `tuner` under their
/// own (full) keys, and `config` (the method's fields, then the fields every PEFT config has) into
/// `dir` (created if needed); `who` names the policy in the error when nothing trains.
template <class Json>
void write_adapter(const torch::nn::Module& module, const std::filesystem::path& dir, const AdapterNames& names,
                   Json config, const std::string& who, const weights::StateDict& tuner = weights::StateDict()) {
  config["inference_mode"] = true;
  config["task_type"] = nullptr;
  config["base_model_name_or_path"] = nullptr;
  std::filesystem::create_directories(dir);
  const auto own = weights::state_dict(module);
  weights::StateDict adapter;
  for (const auto& [own_key, peft_key] : peft_keys(module, names))
    if (own[own_key].requires_grad()) adapter.insert(peft_prefix + peft_key, own[own_key]);
  ftopt::detail::check(!adapter.is_empty(), "save_adapter: the module has no trainable tensors (was ", who,
                       " attached?)");
  for (const auto& item : tuner) adapter.insert(item.key(), item.value());
  weights::save_safetensors<Json>(dir / "adapter_model.safetensors", adapter, {{"format", "pt"}});
  ftopt::detail::write_atomically(dir / "adapter_config.json", "save_adapter",
                                  [&](std::ostream& out) { out << config.dump(2) << '\n'; });
}

/// adapter_config.json parsed, its peft_type checked against `peft_type`; `where` starts each error.
template <class Json>
Json read_config(const std::filesystem::path& path, const std::string& peft_type, const std::string& where) {
  const Json config = ftopt::detail::read_json_file<Json>(path, where);
  const std::string found =
      config.is_object() && config.contains("peft_type") && config["peft_type"].is_string()
          ? config["peft_type"].template get<std::string>()
          : "";
  ftopt::detail::check(found == peft_type, where, ": peft_type is '", found, "', not '", peft_type, "'");
  return config;
}

/// Fields of a config that ask for what the policy does not compute: one that is set (not absent,
/// null, false or empty) is refused with the file, the field and its value, rather than read as
/// the plain method.
template <class Json>
void refuse_set_fields(const Json& config, std::initializer_list<const char*> keys, const std::string& where,
                       const std::string& policy) {
  for (const char* key : keys) {
    if (!config.contains(key)) continue;
    const auto& value = config[key];
    const bool unset = value.is_null() || value == false || (value.is_object() && value.empty()) ||
                       (value.is_array() && value.empty());
    ftopt::detail::check(unset, where, ": ", key, " = ", value.dump(), " is not supported by ", policy);
  }
}

/// options.validate(), its error prefixed with `where` (the file the options came from).
template <class Options>
void validate_from(const Options& options, const std::string& where) {
  try {
    options.validate();
  } catch (const ftopt::Error& e) {
    ftopt::detail::fail(where, ": ", e.what());
  }
}

/// Each of a config's patterns (its field `field`) matches a module of `module`, or the error names
/// the file, the entry and the module names the model has.
inline void require_in_model(const torch::nn::Module& module, const nn::NamePatterns& patterns,
                             const std::string& field, const std::string& where) {
  for (const auto& pattern : patterns) {
    bool found = false;
    for (const auto& item : module.named_modules("", /*include_self=*/false))
      found = found || pattern.matches(item.key());
    ftopt::detail::check(found, where, ": ", field, " entry '", pattern.text,
                         "' matches no module of the model; module names here: ", nn::detail::module_names_hint(module));
  }
}
/// One pattern list of a config read from a file: the field it came from, and whether each
/// entry must match a module of the model (target_modules, modules_to_save) or may not.
struct ConfigPatterns {
  nn::NamePatterns* patterns;
  const char* field;
  bool required = true;
};

/// Turns a config's pattern lists into ftopt's names of `module`'s modules (see
/// patterns_from_peft) and checks the required ones against the model (require_in_model).
inline void patterns_for_model(const torch::nn::Module& module, const AdapterNames& names, const std::string& where,
                               std::initializer_list<ConfigPatterns> fields) {
  for (const auto& field : fields) {
    *field.patterns = patterns_from_peft(module, *field.patterns, names);
    if (field.required) require_in_model(module, *field.patterns, field.field, where);
  }
}
} // namespace detail

/// Loads a saved adapter into a module that has the same policy (Lora, Ia3, Vera) attached. Every
/// tensor of the file must find its place; the module's other tensors are left as they are. Keys
/// are PEFT's (see peft_keys; ftopt's own names are accepted too); a tuner's own tensor
/// ("base_model.vera_A") loads into the module's tensor of that name (Vera's buffer "vera_A"). PEFT's copies of a modules_to_save module
/// beside its saved tensors, "<module>.original_module.*" (the frozen original) and
/// "<module>.modules_to_save.*" (which bias="all" adds), are skipped: ftopt trains that module
/// in place.
template <class Json = nlohmann::json>
weights::LoadReport load_adapter(torch::nn::Module& module, const std::filesystem::path& dir,
                                 const AdapterNames& names = {}) {
  const auto path = dir / "adapter_model.safetensors";
  weights::StateDict file = weights::load_safetensors<Json>(path);
  std::unordered_map<std::string, std::string> own_key_of;
  for (const auto& [own_key, peft_key] : peft_keys(module, names)) own_key_of.emplace(peft_key, own_key);
  const auto own = weights::state_dict(module);
  const std::string prefix = peft_prefix;
  const std::string tuner = peft_tuner_prefix;
  auto strip = [&](const std::string& key) {
    return key.starts_with(prefix) ? key.substr(prefix.size())
                                   : key.starts_with(tuner) ? key.substr(tuner.size()) : key;
  };
  weights::StateDict renamed;
  std::vector<std::string> stray;
  for (const auto& item : file) {
    std::string key = strip(item.key());
    if (key.find(".original_module.") != std::string::npos) continue;
    if (const auto at = key.find(".modules_to_save."); at != std::string::npos) {
      key.erase(at + 1, std::string("modules_to_save.").size());
      if (file.contains(prefix + key)) continue;
    }
    const auto found = own_key_of.find(key);
    const std::string own_key = found != own_key_of.end() ? found->second : own.contains(key) ? key : "";
    if (own_key.empty()) {
      stray.push_back(item.key());
      continue;
    }
    ftopt::detail::check(!renamed.contains(own_key), "load_adapter: ", path.string(), ": two tensors name ", own_key,
                         " (the second: ", item.key(), ")");
    renamed.insert(own_key, item.value());
  }
  ftopt::detail::check(stray.empty(), "load_adapter: ", path.string(), ": ", stray.size(),
                       " tensors have no place in the model (is the same adapter attached?), first: ",
                       stray.empty() ? "" : stray.front());
  return weights::load_state_dict(module, renamed, {.strict = false}, "load_adapter: " + path.string());
}

} // namespace ftopt::peft
