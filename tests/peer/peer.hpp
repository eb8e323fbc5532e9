#pragma once
// The C++ side of a peer test (tests/peer/peer.py runs it): `peer_<topic> COMMAND ARGS... WORK`,
// where WORK is the folder the Python side writes inputs to and reads ftopt's outputs from.
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <ftopt/json.hpp>
#include <ftopt/weights/files.hpp>

namespace ftopt::peer {

/// A command: its arguments (without the work folder) and the work folder.
using Command = std::function<void(const std::vector<std::string>& args, const std::filesystem::path& work)>;

/// Runs the command argv[1] with argv[2..n-2] and the work folder argv[n-1]; errors go to stderr
/// with exit code 1, an unknown command lists the known ones.
inline int main(int argc, char** argv, const std::map<std::string, Command>& commands) {
  try {
    if (argc < 3) throw std::runtime_error("usage: " + std::string(argv[0]) + " COMMAND [ARGS...] WORK");
    auto found = commands.find(argv[1]);
    if (found == commands.end()) {
      std::string known;
      for (const auto& [name, _] : commands) known += (known.empty() ? "" : ", ") + name;
      throw std::runtime_error("unknown command '" + std::string(argv[1]) + "' (known: " + known + ")");
    }
    found->second(std::vector<std::string>(argv + 2, argv + argc - 1), argv[argc - 1]);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return 1;
  }
}

/// The JSON strings of a file, one a line (texts written by the Python side).
inline std::vector<std::string> read_json_lines(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) texts.push_back(nlohmann::json::parse(line).get<std::string>());
  return texts;
}

/// Adds deterministic, non-zero values of about the size training gives to every trainable
/// tensor (LoRA's B starts at zero, IA3's vectors at one), so a file that loads nothing shows.
inline void perturb_trainable(torch::nn::Module& module, double amplitude = 0.05) {
  torch::NoGradGuard no_grad;
  double k = 0;
  for (auto& item : module.named_parameters())
    if (item.value().requires_grad()) {
      auto& t = item.value();
      const auto values = amplitude * torch::sin(0.37 * torch::arange(t.numel(), torch::kDouble) + k);
      t.add_(values.view(t.sizes()).to(t.scalar_type()));
      k += 1;
    }
}

/// Reads a safetensors file of the work folder.
inline weights::StateDict load(const std::filesystem::path& work, const std::string& name) {
  return weights::load_file(work / name);
}
/// Writes tensors to a safetensors file of the work folder (contiguous, on the CPU).
inline void save(const std::filesystem::path& work, const std::string& name, const weights::StateDict& tensors) {
  weights::StateDict out;
  for (const auto& item : tensors) out.insert(item.key(), item.value().detach().cpu().contiguous());
  weights::save_file(work / name, out, weights::Format::Safetensors);
}

} // namespace ftopt::peer
