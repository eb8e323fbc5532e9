// The C++ side of tests/peer/lora.py: ftopt's ViT on the base checkpoint transformers saved,
// with LoRA adapters read from PEFT's files ("load") or written for PEFT to read ("save").
// Module names are transformers 5's in-memory ViT names (what PEFT writes), through
// peft::AdapterNames; "names" lists them so the Python side can check them against the model.
#include <cmath>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ftopt/models/vit.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/peft/files/lora.hpp>
#include <ftopt/peft/qlora.hpp>

#include "peer.hpp"
#include "vit_peer.hpp"

namespace {
using namespace ftopt;
using peer::base_vit, peer::logits, peer::texts, peer::write_json, peer::transformers_vit;

/// qlora's run for one format: QLora on the base's queries and values with non-zero adapters,
/// written to work/CASE -> CASE.ftopt.safetensors: its logits, the gradients, the dequantized
/// bases under the bare model's PEFT names ("base.<name>"), and the logits after merge.
template <class Format>
void qlora_case(const std::string& name, Format format, const std::filesystem::path& work) {
  std::map<std::string, std::string> bare_names;
  for (const auto& [own, peft_key] : peft::peft_keys(*base_vit(work), transformers_vit)) bare_names[own] = peft_key;
  auto vit = base_vit(work);
  peft::QLora<Format> qlora({.r = 4, .alpha = 8, .targets = {"query", "value"}}, format);
  qlora.attach(*vit);
  peer::perturb_trainable(*vit);
  peft::save_adapter(*vit, qlora, work / name, transformers_vit);
  weights::StateDict out;
  out.insert("logits", logits(vit, work));
  peer::insert_gradients(out, vit, work);
  for (const auto& [layer, base] : qlora.bases())
    out.insert("base." + bare_names.at(layer + ".weight"), Format::dequantize(base->packed(), at::kFloat));
  qlora.merge(*vit);
  out.insert("merged_logits", logits(vit, work));
  peer::save(work, name + ".ftopt.safetensors", out);
}

/// The LoRA+ step both sides take: SGD at lr 1e-2, B's lr 16 times A's, weight decay 0.1.
constexpr double loraplus_lr = 1e-2, loraplus_ratio = 16, loraplus_decay = 0.1;

} // namespace

int main(int argc, char** argv) {
  return peer::main(argc, argv, {
    // names: the PEFT names of the bare ViT's tensors -> names.json
    {"names", [](const std::vector<std::string>&, const std::filesystem::path& work) {
       nlohmann::json names = nlohmann::json::array();
       for (const auto& [own, peft_key] : peft::peft_keys(*base_vit(work), transformers_vit)) names.push_back(peft_key);
       write_json(work / "names.json", names);
     }},
    // load CASE: PEFT's adapter in work/CASE -> CASE.ftopt.safetensors (base and adapted logits)
    // and CASE.ftopt.json (the settings ftopt read, how many tensors it loaded)
    {"load", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("load needs one argument: the adapter's folder");
       const auto dir = work / args[0];
       auto vit = base_vit(work);
       const auto base = logits(vit, work);
       const peft::LoraOptions options = peft::lora_config(dir, *vit, transformers_vit);
       peft::Lora lora(options);
       lora.validate();
       lora.attach(*vit);
       const auto report = peft::load_adapter(*vit, dir, transformers_vit);
       weights::StateDict out;
       out.insert("base", base);
       out.insert("logits", logits(vit, work));
       peer::save(work, args[0] + ".ftopt.safetensors", out);
       write_json(work / (args[0] + ".ftopt.json"),
                  {{"r", options.r}, {"lora_alpha", options.alpha}, {"lora_dropout", options.dropout},
                   {"bias", peft::detail::bias_name(options.bias)}, {"use_rslora", options.rslora},
                   {"use_dora", options.dora},
                   {"init_lora_weights", peft::detail::init_json<nlohmann::json>(options.init)},
                   {"target_modules", texts(options.targets)}, {"modules_to_save", texts(options.modules_to_save)},
                   {"lora_layers", lora.branches().size()}, {"loaded", report.loaded}});
     }},
    // qlora CASE FORMAT (int8 or nf4): qlora_case
    {"qlora", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 2) throw std::runtime_error("qlora needs CASE FORMAT");
       if (args[1] == "int8") qlora_case(args[0], storage::Int8PerChannel{}, work);
       else qlora_case(args[0], storage::Nf4{.block_size = 64, .scaler_block_size = 4}, work);  // 32 x 32: 16 blocks
     }},
    // save CASE R ALPHA BIAS RSLORA MODULES_TO_SAVE DORA INIT (0/1, a name or "-", 0/1, true or
    // an init_lora_weights name): a Lora on the base with every trainable tensor set to non-zero
    // values, written to work/CASE for PEFT -> CASE.ftopt.safetensors: its logits before and after
    // merge, the merged weights, the gradients of the loss on work/labels.safetensors
    // ("grad.<PEFT key>"), and the adapter after one LoRA+ SGD step ("stepped.<PEFT key>")
    {"save", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 8) throw std::runtime_error("save needs CASE R ALPHA BIAS RSLORA MODULES_TO_SAVE DORA INIT");
       peft::LoraOptions options{.r = std::stoll(args[1]), .alpha = std::stod(args[2]), .dropout = 0.0,
                                 .targets = {"query", "value"}, .bias = peft::detail::bias_from(args[3], "save's BIAS"),
                                 .rslora = args[4] == "1", .dora = args[6] == "1",
                                 .init = peft::detail::init_from(args[7] == "true" ? nlohmann::json(true)
                                                                                   : nlohmann::json(args[7]),
                                                                 "save's INIT"),
                                 .loraplus_lr_ratio = loraplus_ratio, .loraplus_weight_decay = loraplus_decay};
       if (args[5] != "-") options.modules_to_save = {args[5]};
       auto vit = base_vit(work);
       peft::Lora lora(options);
       lora.validate();
       lora.attach(*vit);
       peer::perturb_trainable(*vit);
       peft::save_adapter(*vit, lora, work / args[0], transformers_vit);
       weights::StateDict out;
       out.insert("logits", logits(vit, work));
       const auto own = weights::state_dict(*vit);
       const auto keys = peft::peft_keys(*vit, transformers_vit);
       {
         const torch::optim::SGDOptions sgd(loraplus_lr);
         auto optimizer = torch::optim::SGD(lora.parameter_groups(*vit, sgd), sgd);
         peer::insert_gradients(out, vit, work);
         optimizer.step();
         for (const auto& [own_key, peft_key] : keys)
           if (own[own_key].requires_grad()) out.insert("stepped." + peft_key, own[own_key].detach().clone());
         // Back to the saved adapter for the merge.
         peft::load_adapter(*vit, work / args[0], transformers_vit);
       }
       lora.merge(*vit);
       out.insert("merged_logits", logits(vit, work));
       for (const auto& item : weights::state_dict(*vit))
         if (item.key().find(".lora_") == std::string::npos) out.insert("merged." + item.key(), item.value());
       peer::save(work, args[0] + ".ftopt.safetensors", out);
     }},
  });
}
