// The C++ side of tests/peer/vit.py: builds models::ViT from a save_pretrained folder's
// config.json, loads its model.safetensors (strict), and writes the eval logits and one
// torch::optim::AdamW training step: logits, loss, gradients, moments and updated weights.
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ftopt/models/vit.hpp>

#include "peer.hpp"

namespace {

/// HF ViTConfig (config.json) -> ViTOptions; a setting models::ViT does not have is an error.
ftopt::models::ViTOptions vit_options(const std::filesystem::path& config_file) {
  std::ifstream in(config_file);
  if (!in) throw std::runtime_error("cannot read " + config_file.string());
  const auto config = nlohmann::json::parse(in);
  if (config.at("hidden_act") != "gelu")
    throw std::runtime_error("models::ViT has exact GELU only, config.json asks for " + config.at("hidden_act").dump());
  return {.image_size = config.at("image_size"),
          .patch_size = config.at("patch_size"),
          .channels = config.at("num_channels"),
          .hidden = config.at("hidden_size"),
          .layers = config.at("num_hidden_layers"),
          .heads = config.at("num_attention_heads"),
          .intermediate = config.at("intermediate_size"),
          .num_labels = static_cast<std::int64_t>(config.at("id2label").size()),
          .dropout = config.at("hidden_dropout_prob"),
          .attention_dropout = config.at("attention_probs_dropout_prob"),
          .layer_norm_eps = config.at("layer_norm_eps"),
          .qkv_bias = config.at("qkv_bias")};
}

void run(const std::vector<std::string>& args, const std::filesystem::path& work) {
  using namespace ftopt;
  if (args.size() != 6) throw std::runtime_error("run needs: FOLDER LR BETA1 BETA2 EPS WEIGHT_DECAY");
  const auto folder = work / args[0];
  models::ViT model(vit_options(folder / "config.json"));
  const auto report = weights::load(*model, folder / "model.safetensors");  // strict
  std::cout << "  ftopt loaded " << report.loaded << " tensors from " << args[0] << "/model.safetensors\n";
  auto input = peer::load(work, "input.safetensors");
  const auto& pixels = input["pixels"];
  const auto& labels = input["labels"];
  weights::StateDict out;

  model->eval();
  {
    torch::NoGradGuard no_grad;
    out.insert("logits", model->forward(pixels));
  }

  model->train();
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(std::stod(args[1]))
                                                         .betas({std::stod(args[2]), std::stod(args[3])})
                                                         .eps(std::stod(args[4]))
                                                         .weight_decay(std::stod(args[5])));
  optimizer.zero_grad();
  const auto logits = model->forward(pixels);
  const auto loss = torch::nn::functional::cross_entropy(logits, labels);
  loss.backward();
  out.insert("train_logits", logits.detach());
  out.insert("loss", loss.detach());
  for (const auto& p : model->named_parameters()) out.insert("grad." + p.key(), p.value().grad().clone());
  optimizer.step();
  std::int64_t step = -1;
  for (const auto& p : model->named_parameters()) {
    const auto& state = static_cast<const torch::optim::AdamWParamState&>(
        *optimizer.state().at(p.value().unsafeGetTensorImpl()));
    out.insert("exp_avg." + p.key(), state.exp_avg());
    out.insert("exp_avg_sq." + p.key(), state.exp_avg_sq());
    out.insert("param." + p.key(), p.value().detach());
    step = state.step();
  }
  out.insert("step", torch::tensor(step));
  peer::save(work, "vit.ftopt.safetensors", out);
}

} // namespace

int main(int argc, char** argv) { return ftopt::peer::main(argc, argv, {{"run", run}}); }
