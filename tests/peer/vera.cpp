// The C++ side of tests/peer/vera.py: ftopt's ViT on the base checkpoint transformers saved, with
// VeRA vectors read from PEFT's files ("load") or written for PEFT to read ("save"), in
// transformers 5's module names (vit_peer.hpp).
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include <ftopt/peft/files/vera.hpp>
#include <ftopt/peft/vera.hpp>

#include "peer.hpp"
#include "vit_peer.hpp"

int main(int argc, char** argv) {
  using namespace ftopt;
  using peer::base_vit, peer::logits, peer::transformers_vit;
  return peer::main(argc, argv, {
    // load CASE: PEFT's adapter in work/CASE -> CASE.ftopt.safetensors (the projections ftopt
    // drew, then the logits with the file loaded) and CASE.ftopt.json (the settings ftopt read)
    {"load", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("load needs one argument: the adapter's folder");
       auto vit = base_vit(work);
       peft::Vera vera(peft::vera_config(work / args[0], *vit, transformers_vit));
       vera.validate();
       vera.attach(*vit);
       weights::StateDict out;
       out.insert("drawn_A", vera.projections().a.clone());
       out.insert("drawn_B", vera.projections().b.clone());
       const auto report = peft::load_adapter(*vit, work / args[0], transformers_vit);
       out.insert("logits", logits(vit, work));
       peer::save(work, args[0] + ".ftopt.safetensors", out);
       const auto& options = vera.options();
       peer::write_json(work / (args[0] + ".ftopt.json"),
                        {{"adapted_layers", vera.branches().size()}, {"r", options.r},
                         {"projection_prng_key", options.projection_prng_key}, {"loaded", report.loaded}});
     }},
    // save CASE projection|key: VeRA (r 16, key 11) on queries, values and both MLP layers, the
    // head kept, every trainable tensor moved off its start, written to work/CASE with the
    // projections or without them -> CASE.ftopt.safetensors: logits before and after merge, the
    // merged weights, and the gradients of the loss ("grad.<PEFT key>")
    {"save", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 2 || (args[1] != "projection" && args[1] != "key"))
         throw std::runtime_error("save needs two arguments: the adapter's folder, then projection or key");
       auto vit = base_vit(work);
       const nn::NamePattern mlp_output = nn::regex(R"((.*\.)?layer\.\d+\.output\.dense)");
       peft::Vera vera({.r = 16, .targets = {"query", "value", "intermediate.dense", mlp_output},
                        .projection_prng_key = 11, .save_projection = args[1] == "projection",
                        .modules_to_save = {"classifier"}});
       vera.attach(*vit);
       peer::perturb_trainable(*vit, 0.3);
       peft::save_adapter(*vit, vera, work / args[0], transformers_vit);
       weights::StateDict out;
       out.insert("logits", logits(vit, work));
       peer::insert_gradients(out, vit, work);
       vera.merge(*vit);
       out.insert("merged_logits", logits(vit, work));
       for (const auto& item : weights::state_dict(*vit)) {
         const auto& key = item.key();
         if (key.find("vera_") == std::string::npos) out.insert("merged." + key, item.value());
       }
       peer::save(work, args[0] + ".ftopt.safetensors", out);
     }},
  });
}
