// The C++ side of tests/peer/resnet.py: load torchvision's state dict into models::resnetNN and
// write its logits on the Python side's input; with LoRA on its convolutions, read PEFT's
// adapter ("lora_load") or write one for PEFT ("lora_save").
#include <stdexcept>

#include <torch/torch.h>

#include <ftopt/models/resnet.hpp>
#include <ftopt/peft/files/lora.hpp>
#include <ftopt/peft/lora.hpp>

#include "peer.hpp"

namespace {
using namespace ftopt;

models::ResNet load_resnet(const std::string& arch, const std::filesystem::path& work) {
  auto model = arch == "resnet18" ? models::resnet18(10)
               : arch == "resnet50" ? models::resnet50(10)
                                    : throw std::runtime_error("unknown model " + arch);
  weights::load(*model, work / (arch + ".pt"));
  return model;
}

at::Tensor logits(models::ResNet& model, const std::filesystem::path& work) {
  model->eval();
  torch::NoGradGuard no_grad;
  return model->forward(peer::load(work, "input.safetensors")["x"]);
}

} // namespace

int main(int argc, char** argv) {
  return peer::main(argc, argv, {
    {"logits", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("logits needs one argument: resnet18 or resnet50");
       auto model = load_resnet(args[0], work);
       weights::StateDict out;
       out.insert("logits", logits(model, work));
       peer::save(work, args[0] + ".ftopt.safetensors", out);
     }},
    // lora_load CASE: resnet18 with PEFT's adapter in work/CASE -> CASE.ftopt.safetensors (logits)
    {"lora_load", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("lora_load needs one argument: the adapter's folder");
       auto model = load_resnet("resnet18", work);
       peft::Lora lora(peft::lora_config(work / args[0]));
       lora.validate();
       lora.attach(*model);
       peft::load_adapter(*model, work / args[0]);
       weights::StateDict out;
       out.insert("logits", logits(model, work));
       out.insert("conv_layers", torch::tensor(static_cast<std::int64_t>(lora.conv_branches().size())));
       peer::save(work, args[0] + ".ftopt.safetensors", out);
     }},
    // lora_save CASE: resnet18 with LoRA r 4, alpha 8 on every conv1 and conv2, fc kept, every
    // trainable tensor set to non-zero values, written to work/CASE -> CASE.ftopt.safetensors
    // (logits before and after merge)
    {"lora_save", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("lora_save needs one argument: the adapter's folder");
       auto model = load_resnet("resnet18", work);
       peft::Lora lora({.r = 4, .alpha = 8, .targets = {"conv1", "conv2"}, .modules_to_save = {"fc"}});
       lora.attach(*model);
       peer::perturb_trainable(*model, 0.02);
       peft::save_adapter(*model, lora, work / args[0]);
       weights::StateDict out;
       out.insert("logits", logits(model, work));
       lora.merge(*model);
       out.insert("merged_logits", logits(model, work));
       peer::save(work, args[0] + ".ftopt.safetensors", out);
     }},
  });
}
