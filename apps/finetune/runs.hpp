#pragma once
// One row of the main job: train a model under one Trainer type, evaluate it, then evaluate
// its inference paths (fp32, bf16 weights, int8), and the rows of ftopt's best policies.
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/pipeline.hpp>

#include "models.hpp"
#include "options.hpp"

namespace finetune {

struct Row {
  std::string setup;
  double epoch_seconds = 0;
  double peak_mib = 0;
  std::int64_t trainable = 0, total = 0;
  double test_accuracy = 0;
  double data_wait = 0;  ///< fraction of the epoch the Trainer waited for the next batch
  /// Inference after training, adapters merged: the test set in fp32, then with the weights in
  /// bf16 (converted once), then after quant::DynamicInt8; speed-ups over the fp32 evaluation.
  double fp32_accuracy = 0, bf16_accuracy = 0, int8_accuracy = 0;
  double bf16_speedup = 0, int8_speedup = 0;
};

/// The test set evaluated with the model's weights in bf16 (the fastest inference path where
/// the CPU computes bf16), the parameters and buffers (BatchNorm's running statistics) then put
/// back as they were, not as bf16 rounded them.
template <class M, class Batches>
ftopt::EvalStats evaluate_bf16_weights(M& model, Batches& batches) {
  const auto tensors = [&] {
    auto all = model->parameters();
    for (const auto& b : model->buffers()) all.push_back(b);
    return all;
  };
  std::vector<torch::Tensor> kept;
  for (const auto& t : tensors()) kept.push_back(t.detach().clone());
  model->to(torch::kBFloat16);
  auto stats = ftopt::Trainer<ftopt::precision::Bf16True>({.report_hardware = false}).evaluate(model, batches);
  model->to(torch::kFloat);
  torch::NoGradGuard no_grad;
  auto now = tensors();
  for (std::size_t i = 0; i < now.size(); ++i) now[i].copy_(kept[i]);
  return stats;
}

inline std::int64_t numel(const std::vector<torch::Tensor>& ts) {
  std::int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

/// Which rows train (--rows: the baseline and those whose setup contains the text) and their
/// seed (--seed): the new head, the adapters' initialization and the batch order.
struct RowSelection {
  std::string only;
  std::uint64_t seed = 1;
  bool wants(const std::string& setup) const {
    return only.empty() || setup.starts_with("baseline") || setup.find(only) != std::string::npos;
  }
};
inline RowSelection selection;  ///< set once by main from the options

/// How a row reads its training batches.
enum class Loading {
  InMemory,  ///< data::TensorBatches on the training thread: the naive baseline
  Pipeline,  ///< pipeline::from | shuffle | [augment] | batch | prefetch: a worker keeps batches ready
};

/// A row from a finished fit: time per epoch, data wait, peak memory, parameters, the test
/// accuracy, and (int8) the inference paths after training, adapters merged (Trainer::finalize):
/// the test set in fp32, with bf16 weights, and with every Linear dynamically quantized (by the
/// combination's own Quant policy when it has one).
template <class Trainer, class M, class Batches>
Row finish_row(std::string setup, Trainer& trainer, M& model, const ftopt::FitSummary& fit, Batches& test_batches,
               bool int8 = true) {
  std::size_t peak_bytes = 0;
  double seconds = 0, waiting = 0;
  for (const auto& e : fit.epochs) {
    peak_bytes = std::max(peak_bytes, e.peak_memory);
    seconds += e.seconds;
    waiting += e.phases.data;
  }
  if constexpr (requires { trainer.peft().base_bytes(); }) {  // a quantized frozen base: its share of float32
    std::ostringstream share;
    share << std::fixed << std::setprecision(1)
          << 100.0 * static_cast<double>(trainer.peft().base_bytes()) / static_cast<double>(trainer.peft().float_base_bytes());
    setup += "; base " + share.str() + "% of fp32";
  }
  const auto& params = trainer.trainable_parameters();
  auto test = trainer.evaluate(model, test_batches);
  std::cerr << "test accuracy " << std::fixed << std::setprecision(2) << 100.0 * test.accuracy.value_or(0) << "%\n";
  Row row{std::move(setup), fit.epochs.empty() ? 0.0 : seconds / static_cast<double>(fit.epochs.size()),
          static_cast<double>(peak_bytes) / (1 << 20), numel(params), numel(model->parameters()),
          test.accuracy.value_or(0), seconds > 0 ? waiting / seconds : 0.0};
  if (!int8) return row;
  // Inference: adapters merged (Trainer::finalize), evaluated in fp32, with bf16 weights, and
  // with every Linear dynamically quantized (by the combination's own Quant policy when it has one).
  constexpr bool quantizes = !std::is_same_v<typename Trainer::quant_type, ftopt::quant::None>;
  ftopt::Trainer<> fp32({.report_hardware = false});
  if (!quantizes) trainer.finalize(model);
  const auto plain = fp32.evaluate(model, test_batches);
  const auto bf16 = evaluate_bf16_weights(model, test_batches);
  if (quantizes) trainer.finalize(model);
  else ftopt::quant::DynamicInt8().convert(*model);
  const auto quantized = fp32.evaluate(model, test_batches);
  row.fp32_accuracy = plain.accuracy.value_or(0);
  row.bf16_accuracy = bf16.accuracy.value_or(0);
  row.int8_accuracy = quantized.accuracy.value_or(0);
  row.bf16_speedup = plain.seconds / bf16.seconds;
  row.int8_speedup = plain.seconds / quantized.seconds;
  std::cerr << "inference: fp32 " << 100.0 * row.fp32_accuracy << "%; bf16 weights " << 100.0 * row.bf16_accuracy
            << "%, " << std::setprecision(2) << row.bf16_speedup << "x fp32's speed; quant::DynamicInt8 "
            << 100.0 * row.int8_accuracy << "%, " << row.int8_speedup << "x\n";
  return row;
}

/// Trains one row. `Pipelines`: whether the pipeline loadings are compiled in (the grid's
/// combinations train in memory only, which keeps the main grid's compile time down).
/// `Optimizer`: AdamW, or an optimizer that takes its options (optim::AdamW8bit).
template <bool Pipelines = true, class Optimizer = torch::optim::AdamW, class Trainer, class M>
Row train(std::string setup, Trainer trainer, M& model, const Prepared& train_set, const Prepared& test_set,
          double lr, Loading loading = Loading::InMemory, bool augmented = false, bool int8 = true) {
  namespace fp = ftopt::pipeline;
  if (!selection.wants(setup)) return {};  // left out by --rows: no setup, no line in the table
  std::cerr << "\n== " << setup << '\n';
  torch::manual_seed(selection.seed);  // every row starts from the same random state (adapter initialization)
  ftopt::data::TensorBatches test_batches(test_set.images, test_set.labels, {.batch_size = 500, .shuffle = false});
  // One group, or the Peft policy's (LoRA+ gives B a larger lr).
  Optimizer optimizer(trainer.parameter_groups(model, torch::optim::AdamWOptions(lr).weight_decay(0.05)));
  if (const auto& saved = trainer.options().checkpoint; saved && std::filesystem::exists(saved->path)) {
    trainer.load_checkpoint(saved->path, model, optimizer);
    std::cerr << "resumed from " << saved->path.string() << " after epoch " << trainer.progress().epochs << '\n';
  }
  const auto fit = [&] {
    if (!Pipelines || loading == Loading::InMemory) {
      ftopt::data::TensorBatches batches(train_set.images, train_set.labels, {.batch_size = 128, .seed = selection.seed});
      return trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{});
    }
    if constexpr (!Pipelines) return ftopt::FitSummary{};
    else {
    // Shifts of up to 2 pixels each way, the border black (torchvision's RandomCrop(28, padding=2)), and flips.
    const fp::AugmentOptions shift_flip{.crop = fp::RandomCrop{.size = 28, .padding = 2, .fill = train_set.background},
                                        .horizontal_flip = 0.5, .seed = 2};
    auto samples = fp::from(train_set.images, train_set.labels) | fp::shuffle(selection.seed);
    auto prefetched = fp::PrefetchOptions{.workers = 1, .depth = 4};
    if (augmented) {
      auto batches = std::move(samples) | fp::augment(shift_flip) | fp::batch(128) | fp::prefetch(prefetched);
      return trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{});
    }
    auto batches = std::move(samples) | fp::batch(128) | fp::prefetch(prefetched);
    return trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{});
    }
  }();
  return finish_row(std::move(setup), trainer, model, fit, test_batches, int8);
}

/// The ViT's adapter settings, shared by the best rows and the policy grid (grid_modes.hpp):
/// LoRA on every Linear of the blocks (PEFT's "all-linear" choice: query, key, value and the
/// dense projections); (IA)^3 on keys, values and the MLP's intermediate activations (PEFT's ViT
/// defaults; `layer.N.output.dense` is the MLP's second Linear, not the attention's output);
/// VeRA at r 256 (its paper's and PEFT's default) on every block Linear. Each trains a new head.
inline ftopt::peft::Lora vit_lora() {
  return ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "key", "value", "dense"},
                            .modules_to_save = {"classifier"}});
}
/// PEFT's LoRA variants of vit_lora, by their names in the main grid: rsLoRA (scaling alpha /
/// sqrt(r)), DoRA, the PiSSA initialisation, and LoRA+ (B's lr 16 times A's, the ratio its paper
/// suggests; its groups take the main job's weight decay).
inline ftopt::peft::Lora vit_lora_variant(const std::string& name) {
  ftopt::peft::LoraOptions settings = vit_lora().options();
  if (name == "rslora") settings.rslora = true;
  else if (name == "dora") settings.dora = true;
  else if (name == "pissa") settings.init = ftopt::peft::LoraInit::Pissa;
  else if (name == "loraplus") settings.loraplus_lr_ratio = 16, settings.loraplus_weight_decay = 0.05;
  else ftopt::fail("finetune: no LoRA variant named '", name, "'");
  return ftopt::peft::Lora(std::move(settings));
}
/// The variants' names and their rows' labels.
inline const std::vector<std::pair<std::string, std::string>> lora_variants{
    {"rslora", "rsLoRA (r 8, all block Linears, head; scaling alpha / sqrt(r))"},
    {"dora", "+ DoRA (r 8, all block Linears, head)"},
    {"pissa", "PiSSA init (r 8, all block Linears, head)"},
    {"loraplus", "+ LoRA+ (r 8, all block Linears, head, B's lr x 16)"}};

/// QLoRA's idea: vit_lora's adapters over a frozen base held in `Format` (int8 per channel, or
/// NF4 in blocks of 64 with double-quantized scalers). NF4's scalers go in blocks of torchao's 256,
/// or of the largest divisor of 256 that divides a d x d weight's block count (64 for d 64), so
/// every width the options allow quantizes.
template <class Format>
ftopt::peft::QLora<Format> vit_qlora(const ftopt::models::ViTOptions& vit) {
  Format format{};
  if constexpr (std::is_same_v<Format, ftopt::storage::Nf4>)
    format.scaler_block_size = std::gcd<std::int64_t>(256, std::max<std::int64_t>(1, vit.hidden * vit.hidden / format.block_size));
  return ftopt::peft::QLora<Format>(vit_lora().options(), format);
}
inline ftopt::peft::Ia3 vit_ia3() {
  const ftopt::nn::NamePattern mlp_output = ftopt::nn::regex(R"((.*\.)?layer\.\d+\.output\.dense)");
  return ftopt::peft::Ia3({.targets = {"key", "value", mlp_output}, .feedforward = {mlp_output},
                           .modules_to_save = {"classifier"}});
}
inline ftopt::peft::Vera vit_vera() {
  return ftopt::peft::Vera({.r = 256, .targets = {"query", "key", "value", "dense"}, .modules_to_save = {"classifier"}});
}

/// Bf16Mixed pays where the hardware computes in bf16 (a CPU with avx512_bf16, a GPU);
/// elsewhere it is emulated and several times slower than fp32, so `--precision auto` skips it.
inline bool use_bf16(const Options& args) {
  if (args.precision != "auto") return args.precision == "bf16";
  const bool native = ftopt::hardware::has_native_bf16(torch::kCPU);
  if (!native) std::cerr << "finetune: this CPU has no native bf16 (avx512_bf16), so the rows train in "
                            "fp32 (--precision bf16 forces Bf16Mixed)\n";
  return native;
}

/// The best policies for the second phase: a PEFT policy, then the same with checkpointing
/// (memory::Checkpoint on every block: less activation memory for more compute).
template <class Precision, class Fresh>
void best_rows(const std::string& precision, std::vector<Row>& rows, Fresh fresh, const ftopt::nn::NamePatterns& top,
               const ftopt::TrainerOptions& options, const Prepared& train_set, const Prepared& test_set, double lr) {
  using M = decltype(fresh());
  if constexpr (std::is_same_v<M, ftopt::models::ViT>) {
    // LoRA on every Linear of the blocks with a new head; adapters want a larger learning rate
    // than full fine-tuning.
    const ftopt::peft::Lora lora = vit_lora();
    {
      auto model = fresh();
      rows.push_back(train(precision + " + peft::Lora (r 8, all block Linears, head)",
                           ftopt::Trainer<Precision, ftopt::peft::Lora>(options, {}, lora), model, train_set, test_set,
                           3 * lr, Loading::Pipeline));
    }
    {
      auto model = fresh();
      rows.push_back(train(precision + " + peft::Lora + memory::Checkpoint",
                           ftopt::Trainer<Precision, ftopt::peft::Lora, ftopt::memory::Checkpoint>(options, {}, lora),
                           model, train_set, test_set, 3 * lr, Loading::Pipeline));
    }
    // The original paper's and PEFT's default targets: fewer adapted layers, a faster step.
    const ftopt::peft::Lora query_value({.r = 8, .alpha = 16, .targets = {"query", "value"},
                                         .modules_to_save = {"classifier"}});
    {
      auto model = fresh();
      rows.push_back(train(precision + " + peft::Lora (r 8, query and value, head)",
                           ftopt::Trainer<Precision, ftopt::peft::Lora>(options, {}, query_value), model, train_set,
                           test_set, 3 * lr, Loading::Pipeline));
    }
    // PEFT's LoRA variants on the same layers (vit_lora_variant).
    for (const auto& [name, label] : lora_variants) {
      auto model = fresh();
      rows.push_back(train(precision + " + peft::Lora " + label,
                           ftopt::Trainer<Precision, ftopt::peft::Lora>(options, {}, vit_lora_variant(name)), model,
                           train_set, test_set, 3 * lr, Loading::Pipeline));
    }
    // PEFT's other vector methods: (IA)^3 and VeRA.
    {
      auto model = fresh();
      rows.push_back(train(precision + " + peft::Ia3 (keys, values, MLP activations, head)",
                           ftopt::Trainer<Precision, ftopt::peft::Ia3>(options, {}, vit_ia3()), model, train_set,
                           test_set, 10 * lr, Loading::Pipeline));
    }
    {
      auto model = fresh();
      rows.push_back(train(precision + " + peft::Vera (r 256, all block Linears, head)",
                           ftopt::Trainer<Precision, ftopt::peft::Vera>(options, {}, vit_vera()), model, train_set,
                           test_set, 10 * lr, Loading::Pipeline));
    }
    // The LoRA row again over a quantized frozen base (QLoRA): int8 per channel, then NF4.
    auto quantized_base = [&]<class Format>(const std::string& format) {
      auto model = fresh();
      const auto qlora = vit_qlora<Format>(model->options());
      rows.push_back(train(precision + " + peft::QLora<" + format + "> (r 8, all block Linears, head)",
                           ftopt::Trainer<Precision, ftopt::peft::QLora<Format>>(options, {}, qlora),
                           model, train_set, test_set, 3 * lr, Loading::Pipeline));
    };
    quantized_base.template operator()<ftopt::storage::Int8PerChannel>("storage::Int8PerChannel");
    quantized_base.template operator()<ftopt::storage::Nf4>("storage::Nf4");
  } else {
    // LoRA on every convolution of the residual blocks (PEFT's Conv2d LoRA) with a new head.
    {
      auto model = fresh();
      const ftopt::peft::Lora conv_lora({.r = 8, .alpha = 16, .targets = {"conv1", "conv2"}, .modules_to_save = {"fc"}});
      rows.push_back(train(precision + " + peft::Lora on the convolutions (r 8, conv1 and conv2, head)",
                           ftopt::Trainer<Precision, ftopt::peft::Lora>(options, {}, conv_lora), model, train_set,
                           test_set, 3 * lr, Loading::Pipeline));
    }
    std::string names;
    for (const auto& p : top) names += (names.empty() ? "" : "+") + p.text;
    const ftopt::peft::Freeze freeze{.train = top};
    {
      auto model = fresh();
      rows.push_back(train(precision + " + peft::Freeze (train " + names + ")",
                           ftopt::Trainer<Precision, ftopt::peft::Freeze>(options, {}, freeze), model, train_set,
                           test_set, lr, Loading::Pipeline));
    }
    auto model = fresh();
    rows.push_back(train(precision + " + peft::Freeze + memory::Checkpoint",
                         ftopt::Trainer<Precision, ftopt::peft::Freeze, ftopt::memory::Checkpoint>(options, {}, freeze),
                         model, train_set, test_set, lr, Loading::Pipeline));
  }
}

/// The grid combination --precision/--peft/--memory/--quant name (the baseline's policy where
/// one is not named).
inline ftopt::grid::Combination named_combination(const Options& args, bool bf16) {
  return {.precision = bf16 ? "bf16" : "fp32", .peft = args.peft.empty() ? "full" : args.peft,
          .memory = args.memory.empty() ? "none" : args.memory, .quant = args.quant.empty() ? "none" : args.quant};
}

} // namespace finetune
