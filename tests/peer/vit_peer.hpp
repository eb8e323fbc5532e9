#pragma once
// What the ViT peer tests share (tests/peer/lora.cpp, ia3.cpp): ftopt's ViT on the base
// checkpoint transformers saved, its logits on the Python side's input, and transformers 5's
// in-memory module names, which PEFT writes and matches adapters with.
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ftopt/models/vit.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/files/names.hpp>

#include "peer.hpp"

namespace ftopt::peer {

/// transformers 5's renaming of ViTModel's checkpoint names (conversion_mapping.py, "ViTModel"),
/// in its order; ftopt's ViT has the checkpoint's names.
inline const peft::AdapterNames transformers_vit = peft::transformers_vit_names();

/// The Python side's config: image_size 28, patch_size 7, one channel, hidden 32, 2 layers,
/// 4 heads, intermediate 64, 10 labels; the weights are transformers' save_pretrained file.
inline models::ViT base_vit(const std::filesystem::path& work) {
  models::ViT vit({.image_size = 28, .patch_size = 7, .channels = 1, .hidden = 32, .layers = 2, .heads = 4,
                   .intermediate = 64, .num_labels = 10});
  weights::load(*vit, work / "base" / "model.safetensors");  // strict: every name matches
  return vit;
}

inline at::Tensor logits(models::ViT& vit, const std::filesystem::path& work) {
  vit->eval();
  torch::NoGradGuard no_grad;
  return vit->forward(peer::load(work, "input.safetensors")["x"]);
}

inline nlohmann::json texts(const nn::NamePatterns& patterns) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : patterns) out.push_back(p.text);
  return out;
}

inline void write_json(const std::filesystem::path& path, const nlohmann::json& value) {
  std::ofstream out(path);
  out << value.dump(2) << '\n';
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

/// The gradients of the cross-entropy of the ViT's logits on the Python side's input and labels,
/// as "grad.<PEFT key>" for every trainable tensor (the Python side compares them with PEFT's).
inline void insert_gradients(weights::StateDict& out, models::ViT& vit, const std::filesystem::path& work) {
  const auto own = weights::state_dict(*vit);
  const auto loss = torch::nn::functional::cross_entropy(vit->forward(load(work, "input.safetensors")["x"]),
                                                         load(work, "labels.safetensors")["labels"]);
  loss.backward();
  for (const auto& [own_key, peft_key] : peft::peft_keys(*vit, transformers_vit))
    if (own[own_key].requires_grad()) out.insert("grad." + peft_key, own[own_key].grad().clone());
}

} // namespace ftopt::peer
