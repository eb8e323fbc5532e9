// The C++ side of tests/peer/resnet.py: load torchvision's state dict into models::resnetNN and
// write its logits on the Python side's input.
#include <stdexcept>

#include <torch/torch.h>

#include <ftopt/models/resnet.hpp>

#include "peer.hpp"

int main(int argc, char** argv) {
  using namespace ftopt;
  return peer::main(argc, argv, {
    {"logits", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("logits needs one argument: resnet18 or resnet50");
       auto model = args[0] == "resnet18" ? models::resnet18(10)
                    : args[0] == "resnet50" ? models::resnet50(10)
                                            : throw std::runtime_error("unknown model " + args[0]);
       weights::load(*model, work / (args[0] + ".pt"));
       model->eval();
       torch::NoGradGuard no_grad;
       weights::StateDict out;
       out.insert("logits", model->forward(peer::load(work, "input.safetensors")["x"]));
       peer::save(work, args[0] + ".ftopt.safetensors", out);
     }},
  });
}
