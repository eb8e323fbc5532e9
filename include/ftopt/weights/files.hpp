#pragma once
/// Weights files by path: torch.save zip archives (.pt, .pth, .bin) and safetensors, told apart
/// by their first bytes, not their names. The functions that may read or write safetensors are
/// templates over its JSON type only so that JSON is compiled where they are used: a source file
/// that calls them includes <ftopt/json.hpp>.
///
///   auto report = ftopt::weights::load(*model, "resnet50.pth");           // strict by default
///   ftopt::weights::save(*model, "tuned.safetensors");

#include <filesystem>
#include <fstream>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include <ftopt/error.hpp>
#include <ftopt/weights/safetensors.hpp>
#include <ftopt/weights/state_dict.hpp>
#include <ftopt/weights/torch_file.hpp>

namespace ftopt::weights {

enum class Format { Torch, Safetensors };

/// Reads a state dict from either format. `key` picks a nested dict in a torch.save file.
template <class Json = nlohmann::json>
StateDict load_file(const std::filesystem::path& path, const std::string& key = "") {
  ftopt::detail::check(std::filesystem::is_regular_file(path), "weights::load_file: ", path.string(),
                       ": no such file");
  std::ifstream in(path, std::ios::binary);
  char head[2] = {};
  in.read(head, 2);
  if (head[0] == 'P' && head[1] == 'K') return load_torch_file(path, key);
  return load_safetensors<Json>(path);
}

/// The format a file name asks for: .safetensors, else torch.save's.
inline Format format_for(const std::filesystem::path& path) {
  return path.extension() == ".safetensors" ? Format::Safetensors : Format::Torch;
}

/// Writes a state dict in `format` (atomically).
template <class Json = nlohmann::ordered_json>
void save_file(const std::filesystem::path& path, const StateDict& state, Format format) {
  if (format == Format::Safetensors) save_safetensors<Json>(path, state);
  else save_torch_file(path, state);
}

/// Loads a weights file into a module (see load_state_dict for the checks).
template <class Json = nlohmann::json>
LoadReport load(torch::nn::Module& module, const std::filesystem::path& path, const LoadOptions& options = {},
                const std::string& key = "") {
  return load_state_dict(module, load_file<Json>(path, key), options, "weights::load: " + path.string());
}

/// Saves a module's state dict, in the format its name asks for.
template <class Json = nlohmann::ordered_json>
void save(const torch::nn::Module& module, const std::filesystem::path& path) {
  save_file<Json>(path, state_dict(module), format_for(path));
}

} // namespace ftopt::weights
