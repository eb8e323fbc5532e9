// LoRA fine-tuning of a pretrained ViT: load weights saved under Hugging Face's ViT names
// (safetensors or torch.save), give it a new head for Fashion-MNIST's classes 5-9, train LoRA on
// query and value (PEFT's defaults: r 8, alpha 16) and the head, report the test accuracy, and
// save the adapter as PEFT writes it (PeftModel.from_pretrained reads the folder).
//
//   build/examples/lora_finetune --weights FILE [--heads 4] [--epochs 1] [--train-limit N]
//                                [--out DIR] [--data DIR]
//
// The ViT's shape (width, depth, patch size, MLP width) is read from the file; the image is
// Fashion-MNIST's 28x28 with one channel.

#include <iostream>
#include <string>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/json.hpp>  // for the file functions: <ftopt.hpp> declares JSON only

#include "args.hpp"

namespace {

struct Args {
  std::string weights, out = "lora-adapter", data = ftopt::data::default_fashion_mnist_dir().string();
  std::int64_t heads = 4, epochs = 1, train_limit = 0;
};

/// A ViT with the file's shape and a new head of `classes`, loaded from the file but for the head.
ftopt::models::ViT pretrained_vit(const std::string& path, std::int64_t heads, std::int64_t classes) {
  auto state = ftopt::weights::load_file(path);
  const auto at = [&](const std::string& name) {
    const auto* t = state.find(name);
    ftopt::check(t != nullptr, path, ": no tensor '", name, "' (not a ViT in Hugging Face's names)");
    return *t;
  };
  std::int64_t layers = 0;
  while (state.contains("vit.encoder.layer." + std::to_string(layers) + ".output.dense.weight")) ++layers;
  const auto patch = at("vit.embeddings.patch_embeddings.projection.weight");  // [hidden, 1, p, p]
  ftopt::models::ViT vit({.image_size = 28, .patch_size = patch.size(2), .channels = 1, .hidden = patch.size(0),
                          .layers = layers, .heads = heads,
                          .intermediate = at("vit.encoder.layer.0.intermediate.dense.weight").size(0),
                          .num_labels = classes});
  ftopt::weights::StateDict backbone;
  for (const auto& item : state)
    if (!item.key().starts_with("classifier.")) backbone.insert(item.key(), item.value());
  const auto report = ftopt::weights::load_state_dict(*vit, backbone, {.strict = false}, path);
  ftopt::check(report.unexpected.empty() && report.missing.size() == 2, path, ": not a ViT of Hugging Face's names (",
               report.missing.size(), " missing, ", report.unexpected.size(), " unexpected tensors)");
  return vit;
}

} // namespace

int main(int argc, char** argv) try {
  Args args;
  examples::parse("lora_finetune", argc, argv, {{"--weights", &args.weights}, {"--heads", &args.heads},
                  {"--epochs", &args.epochs}, {"--train-limit", &args.train_limit}, {"--out", &args.out},
                  {"--data", &args.data}});
  ftopt::check(!args.weights.empty(), "lora_finetune: --weights FILE is required (a ViT in Hugging Face's names)");

  using ftopt::data::Split;
  auto train_all = ftopt::data::load_fashion_mnist(Split::Train, args.data);
  train_all = ftopt::data::first(train_all, args.train_limit);
  const auto train = ftopt::data::select_classes(train_all, {5, 6, 7, 8, 9});  // labels become 0..4
  const auto test = ftopt::data::select_classes(ftopt::data::load_fashion_mnist(Split::Test, args.data), {5, 6, 7, 8, 9});
  const auto pixels = [](const torch::Tensor& t) { return t.to(torch::kFloat).div(255).sub(0.286).div(0.353).unsqueeze(1); };
  ftopt::data::TensorBatches train_batches(pixels(train.images), train.labels, {.batch_size = 128, .seed = 1});
  ftopt::data::TensorBatches test_batches(pixels(test.images), test.labels, {.batch_size = 500, .shuffle = false});

  auto vit = pretrained_vit(args.weights, args.heads, 5);
  const ftopt::peft::Lora lora({.r = 8, .alpha = 16, .targets = {"query", "value"}, .modules_to_save = {"classifier"}});
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Lora> trainer(
      {.epochs = args.epochs, .schedule = ftopt::schedule::WarmupLinear{.warmup_steps = 20},
       .threads = ftopt::hardware::all_cpus},
      {}, lora);
  torch::optim::AdamW optimizer(trainer.prepare(vit), torch::optim::AdamWOptions(3e-3));
  trainer.fit(vit, optimizer, train_batches, ftopt::callbacks::ProgressBar{});
  const auto accuracy = trainer.evaluate(vit, test_batches).accuracy.value_or(0);
  ftopt::peft::save_adapter(*vit, trainer.peft(), args.out);  // before finalize merges it away
  std::cout << "lora_finetune: " << ftopt::peft::trainable_report(*vit) << "; test accuracy " << 100 * accuracy
            << "% on classes 5-9; adapter saved to " << args.out << '\n';
  return 0;
} catch (const std::exception& e) {
  std::cerr << e.what() << '\n';
  return 1;
}
