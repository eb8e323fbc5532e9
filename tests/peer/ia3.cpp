// The C++ side of tests/peer/ia3.py: ftopt's ViT on the base checkpoint transformers saved, with
// IA3 vectors read from PEFT's files ("load") or written for PEFT to read ("save"), in
// transformers 5's module names (vit_peer.hpp).
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include <ftopt/peft/files/ia3.hpp>
#include <ftopt/peft/ia3.hpp>

#include "peer.hpp"
#include "vit_peer.hpp"

int main(int argc, char** argv) {
  using namespace ftopt;
  using peer::base_vit, peer::logits, peer::texts, peer::transformers_vit;
  return peer::main(argc, argv, {
    // load CASE: PEFT's adapter in work/CASE -> CASE.ftopt.safetensors (logits) and CASE.ftopt.json
    // (the settings ftopt read, in PEFT's names, and how many tensors it loaded)
    {"load", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("load needs one argument: the adapter's folder");
       auto vit = base_vit(work);
       peft::Ia3 ia3(peft::ia3_config(work / args[0], *vit, transformers_vit));
       ia3.validate();
       ia3.attach(*vit);
       const auto report = peft::load_adapter(*vit, work / args[0], transformers_vit);
       weights::StateDict out;
       out.insert("logits", logits(vit, work));
       peer::save(work, args[0] + ".ftopt.safetensors", out);
       std::size_t feedforward = 0;
       for (const auto& [name, scaling] : ia3.scalings()) feedforward += scaling->feedforward();
       peer::write_json(work / (args[0] + ".ftopt.json"),
                        {{"scaled_layers", ia3.scalings().size()}, {"feedforward_layers", feedforward},
                         {"loaded", report.loaded}, {"modules_to_save", texts(ia3.options().modules_to_save)}});
     }},
    // save CASE: IA3 on key, value and the MLP output (feedforward), the head kept, every trainable
    // tensor moved off its start, written to work/CASE -> CASE.ftopt.safetensors: logits before and
    // after merge, the merged weights, and the gradients of the loss ("grad.<PEFT key>")
    {"save", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("save needs one argument: the adapter's folder");
       auto vit = base_vit(work);
       const nn::NamePattern mlp_output = nn::regex(R"((.*\.)?layer\.\d+\.output\.dense)");
       peft::Ia3 ia3({.targets = {"key", "value", mlp_output}, .feedforward = {mlp_output},
                      .modules_to_save = {"classifier"}});
       ia3.attach(*vit);
       peer::perturb_trainable(*vit, 0.3);
       peft::save_adapter(*vit, ia3, work / args[0], transformers_vit);
       weights::StateDict out;
       out.insert("logits", logits(vit, work));
       peer::insert_gradients(out, vit, work);
       ia3.merge(*vit);
       out.insert("merged_logits", logits(vit, work));
       for (const auto& item : weights::state_dict(*vit))
         if (!item.key().ends_with("ia3_l")) out.insert("merged." + item.key(), item.value());
       peer::save(work, args[0] + ".ftopt.safetensors", out);
     }},
  });
}
