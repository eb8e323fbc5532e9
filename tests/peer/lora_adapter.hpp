#pragma once
// PEFT's LoRA adapter files into a model whose names are transformers' own (BERT, Llama): the
// "lora-load" commands of tests/peer/bert.cpp and tests/peer/llama.cpp.
#include <filesystem>
#include <iostream>

#include <torch/torch.h>

#include <ftopt/json.hpp>
#include <ftopt/peft/files/lora.hpp>
#include <ftopt/peft/lora.hpp>

namespace ftopt::peer {

/// The LoRA of adapter_config.json in `dir`, attached to `module` with the tensors of
/// adapter_model.safetensors loaded; prints how many it loaded into how many layers.
inline peft::Lora load_peft_lora(torch::nn::Module& module, const std::filesystem::path& dir) {
  peft::Lora lora(peft::lora_config(dir));
  lora.validate();
  lora.attach(module);
  const auto report = peft::load_adapter(module, dir);
  std::cout << "  ftopt loaded " << report.loaded << " adapter tensors into " << lora.branches().size()
            << " LoRA layers\n";
  return lora;
}

} // namespace ftopt::peer
