// Int8 inference for the fine-tuning task (Fashion-MNIST classes 5-9): train the reference ViT in
// float, then compare on the test set, in one closing table:
//   float                         the trained model
//   quant::DynamicInt8            int8 weights, activations quantized per call
//   quant::StaticInt8 (PTQ)       calibrated on training batches, int8 activations between layers
//   quant::Qat                    the float model trained on with fake quantization, converted
// with accuracy, its change against float, inference time per 1000 images, and the int8 file size;
// and the per-layer report (quant::layer_errors) of the static model, worst layers first.
//
//   build/examples/quantize [--epochs N] [--qat-epochs N] [--calibration-batches N]
//                           [--train-limit N] [--data DIR]

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <string>

#include <unistd.h>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/json.hpp>  // for the file functions: <ftopt.hpp> declares JSON only

#include "args.hpp"

namespace {

ftopt::models::ViT make_vit() {
  return ftopt::models::ViT({.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 64, .layers = 4, .heads = 4,
                             .intermediate = 128, .num_labels = 5});
}

struct Row { std::string method; double accuracy, ms_per_1000, file_kib; };

} // namespace

int main(int argc, char** argv) try {
  namespace q = ftopt::quant;
  std::int64_t epochs = 3, qat_epochs = 1, calibration_batches = 16, train_limit = 0;
  std::string data = ftopt::data::default_fashion_mnist_dir().string();
  examples::parse("quantize", argc, argv, {{"--epochs", &epochs}, {"--qat-epochs", &qat_epochs},
                  {"--calibration-batches", &calibration_batches}, {"--train-limit", &train_limit}, {"--data", &data}});
  const auto classes_5_to_9 = [&](ftopt::data::Split split) {
    return ftopt::data::select_classes(ftopt::data::load_fashion_mnist(split, data), {5, 6, 7, 8, 9});
  };
  const auto train_set = ftopt::data::first(classes_5_to_9(ftopt::data::Split::Train), train_limit);
  const auto test_set = classes_5_to_9(ftopt::data::Split::Test);
  const auto images = [](const torch::Tensor& t) { return t.to(torch::kFloat).div_(255.0).sub_(0.286).div_(0.353).unsqueeze(1); };
  ftopt::data::TensorBatches train(images(train_set.images), train_set.labels, {.batch_size = 128, .seed = 1});
  ftopt::data::TensorBatches test(images(test_set.images), test_set.labels, {.batch_size = 500, .shuffle = false});
  ftopt::TrainerOptions options{.epochs = epochs, .clip_grad_norm = 1.0,
                                .schedule = ftopt::schedule::WarmupCosine{.warmup_steps = 50},
                                .threads = ftopt::hardware::all_cpus};

  std::cerr << "\n== float training, ViT on classes 5-9\n";
  torch::manual_seed(0);
  auto model = make_vit();
  ftopt::Trainer<> trainer(options);
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(2e-3).weight_decay(0.05));
  trainer.fit(model, optimizer, train, ftopt::callbacks::ProgressBar{});
  const auto trained = ftopt::weights::state_dict(*model);
  const auto copy = [&] {  // the trained float model, for inference
    auto m = make_vit();
    ftopt::weights::load_state_dict(*m, trained);
    m->eval();
    return m;
  };

  const auto dir = std::filesystem::temp_directory_path() / ("ftopt-quantize-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<Row> rows;  // method, accuracy, time per 1000 images, file size
  const auto measure = [&](std::string method, ftopt::models::ViT m, bool int8) {
    auto eval = trainer.evaluate(m, test);
    const auto file = dir / "model.safetensors";
    if (int8) q::save_int8(*m, file);
    else ftopt::weights::save(*m, file);
    rows.push_back({std::move(method), eval.accuracy.value_or(0), 1e6 * eval.seconds / static_cast<double>(eval.samples),
                    static_cast<double>(std::filesystem::file_size(file)) / 1024});
  };

  measure("float (fp32)", copy(), false);
  auto dynamic = copy();
  q::DynamicInt8().convert(*dynamic);
  measure("quant::DynamicInt8", dynamic, true);

  auto ptq = copy();
  q::StaticInt8 static_int8;
  static_int8.calibrate(ptq, train, calibration_batches);
  static_int8.convert(*ptq);
  measure("quant::StaticInt8 (PTQ, " + std::to_string(calibration_batches) + " batches)", ptq, true);
  auto errors = q::layer_errors(ptq, train, 4);
  std::sort(errors.begin(), errors.end(), [](const auto& a, const auto& b) { return a.relative_error > b.relative_error; });

  std::cerr << "\n== quantization-aware training from the float model\n";
  auto qat_model = copy();
  auto qat_options = options;
  qat_options.epochs = qat_epochs;
  qat_options.schedule = ftopt::schedule::WarmupCosine{.warmup_steps = 10};
  ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Full, ftopt::memory::None, ftopt::parallel::Single, q::Qat> qat(
      qat_options, {}, {}, {}, {}, q::Qat({.activations = {.kind = q::ObserverKind::MovingAverageMinMax}}));
  torch::optim::AdamW qat_optimizer(qat.prepare(qat_model), torch::optim::AdamWOptions(2e-4).weight_decay(0.05));
  qat.fit(qat_model, qat_optimizer, train, ftopt::callbacks::ProgressBar{});
  qat.finalize(qat_model);
  qat_model->eval();
  measure("quant::Qat (" + std::to_string(qat_epochs) + " epoch, then int8)", qat_model, true);
  std::filesystem::remove_all(dir);

  std::cout << "\n| method | test acc | vs float | ms / 1000 images | file KiB |\n|---|---|---|---|---|\n";
  for (const auto& r : rows)
    std::cout << std::fixed << std::setprecision(2) << "| " << r.method << " | " << 100 * r.accuracy << "% | "
              << std::showpos << 100 * (r.accuracy - rows.front().accuracy) << std::noshowpos << " pts | "
              << std::setprecision(1) << r.ms_per_1000 << " | " << r.file_kib << " |\n";
  std::cout << "\nStaticInt8, relative output error per layer (worst 5 of " << errors.size() << "):\n";
  for (std::size_t i = 0; i < std::min<std::size_t>(5, errors.size()); ++i)
    std::cout << "  " << errors[i].layer << "  " << std::setprecision(4) << errors[i].relative_error << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
