// Inference with quant::DynamicInt8 against float, side by side in one run: the main job's ViT
// (d 128, MLP 512; bench::vit_main), a smaller one (d 64, MLP 128), a wider ViT (d 256, 6 layers), an MLP (784-1024-1024-10) and a small ResNet (basic
// blocks [1,1,1], widths 32-64-128, whose convolutions only the static policy quantizes),
// batch 256, one thread;
// dynamic int8 with per-tensor and per-channel weights, static int8 (calibrated on the batch
// itself), bf16 under autocast and with bf16 weights (converted once); and each model's size on disk (safetensors) in float
// and after quant::save_int8.
//
//   build/benchmarks/bench_quant
#include <filesystem>

#include <unistd.h>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/json.hpp>  // for the file functions: <ftopt.hpp> declares JSON only

#include "machine.hpp"
#include "models.hpp"
#include "side_by_side.hpp"

namespace {

namespace q = ftopt::quant;

ftopt::models::ViT vit(std::int64_t hidden, std::int64_t layers) {
  torch::manual_seed(0);
  return ftopt::models::ViT({.image_size = 28, .patch_size = 4, .channels = 1, .hidden = hidden, .layers = layers,
                             .heads = 4, .intermediate = 2 * hidden, .num_labels = 10});
}
ftopt::models::ViT main_job_vit() {
  torch::manual_seed(0);
  return ftopt::models::ViT(ftopt::bench::vit_main);
}
ftopt::models::Mlp mlp() {
  torch::manual_seed(0);
  return ftopt::models::Mlp({.in = 784, .hidden = {1024, 1024}, .out = 10});
}

ftopt::models::ResNet resnet() {
  torch::manual_seed(0);
  return ftopt::models::ResNet({.layers = {1, 1, 1}, .widths = {32, 64, 128}, .in_channels = 1, .num_classes = 10,
                                .stem = ftopt::models::ResNetStem::Small});
}

template <class Make>
void inference(benchmark::State& state, Make make) {
  at::set_num_threads(1);
  torch::NoGradGuard no_grad;
  auto fp32 = make(), per_tensor = make(), per_channel = make(), fixed = make(), bf16 = make();
  fp32->eval(), per_tensor->eval(), per_channel->eval(), fixed->eval(), bf16->eval();
  bf16->to(torch::kBFloat16);  // bf16 weights, converted once
  q::DynamicInt8({.granularity = q::Granularity::PerTensor}).convert(*per_tensor);
  q::DynamicInt8({.granularity = q::Granularity::PerChannel}).convert(*per_channel);
  const auto x = torch::randn({256, 1, 28, 28});
  q::StaticInt8 calibrated;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> calibration{{x, torch::zeros({256}, torch::kLong)}};
  calibrated.calibrate(fixed, calibration);
  calibrated.convert(*fixed);
  const auto reference = fp32->forward(x);
  const auto x_bf16 = x.to(torch::kBFloat16);
  ftopt::bench::side_by_side(state, {{"fp32", [&] { fp32->forward(x); }},
                                     {"int8_tensor", [&] { per_tensor->forward(x); }},
                                     {"int8_channel", [&] { per_channel->forward(x); }},
                                     {"static_int8", [&] { fixed->forward(x); }},
                                     {"bf16_autocast", [&] {
                                        ftopt::compat::AutocastScope autocast(torch::kCPU, torch::kBFloat16);
                                        fp32->forward(x);
                                      }},
                                     {"bf16_weights", [&] { bf16->forward(x_bf16); }}});
  for (std::string c : {"int8_tensor", "int8_channel", "static_int8", "bf16_autocast", "bf16_weights"})
    state.counters[c + "_speedup"] = state.counters["fp32_us"] / state.counters[c + "_us"];
  auto rel_err = [&](const torch::Tensor& out) {
    return ((out.to(torch::kFloat) - reference).norm() / reference.norm()).template item<double>();
  };
  state.counters["int8_tensor_rel_err"] = rel_err(per_tensor->forward(x));
  state.counters["bf16_weights_rel_err"] = rel_err(bf16->forward(x_bf16));

  const auto dir = std::filesystem::temp_directory_path() / ("ftopt-bench-quant-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ftopt::weights::save(*fp32, dir / "float.safetensors");
  q::save_int8(*per_channel, dir / "int8.safetensors");
  state.counters["fp32_file_KiB"] = static_cast<double>(std::filesystem::file_size(dir / "float.safetensors")) / 1024;
  state.counters["int8_file_KiB"] = static_cast<double>(std::filesystem::file_size(dir / "int8.safetensors")) / 1024;
  std::filesystem::remove_all(dir);
}

} // namespace

BENCHMARK_CAPTURE(inference, vit_d128_main_job, main_job_vit)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(inference, vit_d64_4_layers, [] { return vit(64, 4); })->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(inference, vit_d256_6_layers, [] { return vit(256, 6); })->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(inference, mlp_784_1024_1024_10, mlp)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(inference, resnet_small_32_64_128, resnet)->Unit(benchmark::kMillisecond)->UseRealTime();

FTOPT_BENCHMARK_MAIN();
