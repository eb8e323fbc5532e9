// The C++ side of tests/peer/loss_curve.py: `train PRECISION STEPS` trains ftopt's ViT (the base
// checkpoint transformers saved, PEFT's starting adapter loaded) with Trainer<Precision, Lora>
// and torch::optim::AdamW on the batches the Python side wrote, cycled, and writes each step's
// loss to PRECISION.losses.safetensors.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/models/vit.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/peft/files/lora.hpp>
#include <ftopt/precision/bf16_mixed.hpp>
#include <ftopt/precision/fp32.hpp>
#include <ftopt/trainer.hpp>

#include "peer.hpp"

namespace {
using namespace ftopt;

template <class Precision>
at::Tensor train(const std::filesystem::path& work, int steps) {
  models::ViT vit({.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 128, .layers = 2, .heads = 4,
                   .intermediate = 256, .num_labels = 10});
  weights::load(*vit, work / "base" / "model.safetensors");
  const auto names = peft::transformers_vit_names();
  Trainer<Precision, peft::Lora> trainer({.device = torch::kCPU, .report_hardware = false}, {},
                                         peft::lora_config(work / "start", *vit, names));
  torch::optim::AdamW optimizer(trainer.prepare(vit), torch::optim::AdamWOptions(5e-3));
  peft::load_adapter(*vit, work / "start", names);  // PEFT's A (random), B (zero) and classifier

  auto batches = peer::load(work, "batches.safetensors");
  std::vector<std::pair<at::Tensor, at::Tensor>> cycle;
  for (int i = 0; batches.contains("x" + std::to_string(i)); ++i)
    cycle.emplace_back(batches["x" + std::to_string(i)], batches["y" + std::to_string(i)]);
  if (cycle.empty()) throw std::runtime_error("batches.safetensors has no x0/y0");
  vit->train();
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step)
    losses.push_back(trainer.train_step(vit, optimizer, cycle[static_cast<std::size_t>(step) % cycle.size()])
                         .loss.template item<double>());
  return torch::tensor(losses, torch::kDouble).to(torch::kFloat);
}

} // namespace

int main(int argc, char** argv) {
  return peer::main(argc, argv, {
    {"train", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 2) throw std::runtime_error("train needs PRECISION (fp32 | bf16) and STEPS");
       const int steps = std::stoi(args[1]);
       at::Tensor losses;
       if (args[0] == "fp32") losses = train<precision::Fp32>(work, steps);
       else if (args[0] == "bf16") losses = train<precision::Bf16Mixed>(work, steps);
       else throw std::runtime_error("train: PRECISION must be fp32 or bf16, got '" + args[0] + "'");
       weights::StateDict out;
       out.insert("loss", losses);
       peer::save(work, args[0] + ".losses.safetensors", out);
     }},
  });
}
