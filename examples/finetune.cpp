// The main job: pretrain a backbone on Fashion-MNIST classes 0-4 (cached on disk after the first
// run), then fine-tune it on classes 5-9: the naive baseline (fp32, full fine-tuning), Bf16Mixed
// where the CPU computes bf16 natively, and the best policies ftopt has today (LoRA on every
// Linear of the ViT's blocks, once more with memory::Checkpoint, and LoRA on query and value;
// Freeze for the ResNet, whose convolutions LoRA does not adapt yet, with and without
// memory::Checkpoint), and close with a table. After each row the model (adapters merged) is
// evaluated for inference in fp32, with bf16 weights and with quant::DynamicInt8.
//
//   build/examples/finetune [--model vit|resnet] [--epochs N] [--pretrain-epochs N] [--lr X]
//                           [--precision auto|fp32|bf16] [--all-classes [--augment]]
//                           [--peft full|lora|adapter] [--memory none|checkpoint] [--quant none|dynamic-int8]
//                           [--auto [--budget SECONDS] [--grid-steps N]] [--grid DIR [--grid-steps N]]
//                           [--profile FILE]
//                           [--vit-hidden N] [--vit-layers N] [--vit-mlp N] [--vit-dropout P]
//                           [--label-smoothing P] [--warmup-steps N] [--checkpoint FILE]
//                           [--train-limit N] [--data DIR] [--cache DIR]
//
// --all-classes instead trains the model on all ten classes and reports its test accuracy, to
// compare with the benchmark table in Fashion-MNIST's README. With --checkpoint FILE it writes a
// checkpoint after every epoch (atomically) and, when FILE exists, resumes from it first: a long
// run stopped part-way goes on where it was when the same command is run again.
//
// The ViT's policies can be chosen by name (--precision, --peft, --memory, --quant): the
// combination is one of the main grid's Trainers, compiled in (grid::Grid::visit), trained
// after the baseline. --auto lets grid::autotune choose: every combination trains briefly
// (--grid-steps) on 90% of the training set and is scored on the other 10%, and the fastest
// within 0.5 points of the baseline then trains for --epochs. --grid DIR runs the whole grid
// with a fixed budget of steps, evaluates on the test set, and writes the report (Markdown,
// JSON, SVG) to DIR. --profile FILE writes a Chrome trace of three training steps of the
// first row.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/pipeline.hpp>

#include "args.hpp"

namespace {

struct Args {
  std::string model = "vit";
  std::string precision = "auto";  // auto: Bf16Mixed where the CPU has native bf16, else fp32
  std::int64_t epochs = 1;
  std::int64_t pretrain_epochs = 2;
  std::int64_t train_limit = 0;
  double lr = 0;  // 0: 2e-3 for the ResNet, 1e-3 for the ViT
  bool all_classes = false;
  bool augment = false;
  // The ViT's width and depth: large enough that the fp32 step is GEMM-bound (67% of it in
  // GEMMs, docs/benchmarks.md), small enough that the whole job runs in minutes on 2 cores.
  std::int64_t vit_hidden = 128;
  std::int64_t vit_layers = 4;
  std::int64_t vit_mlp = 4;  // the ViT's MLP width as a multiple of its width (HF ViT-Base: 4)
  double vit_dropout = 0.0;  // the ViT's hidden dropout (HF: hidden_dropout_prob)
  double label_smoothing = 0.0;      // cross-entropy's label_smoothing (as torch.nn.CrossEntropyLoss)
  std::int64_t warmup_steps = 50;    // WarmupCosine's linear warm-up
  std::string checkpoint;            // --all-classes: resume from and save to this file
  std::string peft, memory, quant;  // set: train this combination of the main grid
  bool autotune = false;
  double budget = 0;                 // --auto: seconds (0: no limit)
  std::int64_t grid_steps = 100;     // --auto and --grid: training steps per combination
  std::string grid_dir;              // --grid: where the report goes
  std::string profile;               // --profile: Chrome trace of the first row
  std::string data = ftopt::data::default_fashion_mnist_dir().string();
  std::string cache;

  bool named() const { return !peft.empty() || !memory.empty() || !quant.empty(); }
};

Args parse(int argc, char** argv) {
  Args args;
  if (const char* home = std::getenv("HOME")) args.cache = std::string(home) + "/.cache/ftopt";
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--all-classes" || flag == "--augment" || flag == "--auto") {
      (flag == "--augment" ? args.augment : flag == "--auto" ? args.autotune : args.all_classes) = true;
      continue;
    }
    ftopt::detail::check(i + 1 < argc, "finetune: ", flag, " needs a value");
    const char* value = argv[++i];
    if (flag == "--model") args.model = value;
    else if (flag == "--precision") args.precision = value;
    else if (flag == "--epochs") args.epochs = examples::count("finetune", flag, value);
    else if (flag == "--pretrain-epochs") args.pretrain_epochs = examples::count("finetune", flag, value);
    else if (flag == "--train-limit") args.train_limit = examples::count("finetune", flag, value);
    else if (flag == "--lr") args.lr = examples::positive("finetune", flag, value);
    else if (flag == "--vit-hidden") args.vit_hidden = examples::count("finetune", flag, value);
    else if (flag == "--vit-layers") args.vit_layers = examples::count("finetune", flag, value);
    else if (flag == "--vit-mlp") args.vit_mlp = examples::count("finetune", flag, value);
    else if (flag == "--vit-dropout") args.vit_dropout = examples::fraction("finetune", flag, value);
    else if (flag == "--label-smoothing") args.label_smoothing = examples::fraction("finetune", flag, value);
    else if (flag == "--warmup-steps") args.warmup_steps = examples::count("finetune", flag, value);
    else if (flag == "--checkpoint") args.checkpoint = value;
    else if (flag == "--peft") args.peft = value;
    else if (flag == "--memory") args.memory = value;
    else if (flag == "--quant") args.quant = value;
    else if (flag == "--budget") args.budget = examples::positive("finetune", flag, value);
    else if (flag == "--grid-steps") args.grid_steps = examples::count("finetune", flag, value);
    else if (flag == "--grid") args.grid_dir = value;
    else if (flag == "--profile") args.profile = value;
    else if (flag == "--data") args.data = value;
    else if (flag == "--cache") args.cache = value;
    else ftopt::detail::fail("finetune: unknown option ", flag, " (known: --model, --epochs, --pretrain-epochs, "
                             "--all-classes, --precision, --augment, --peft, --memory, --quant, --auto, --budget, "
                             "--grid, --grid-steps, --profile, --lr, --vit-hidden, --vit-layers, --vit-mlp, --vit-dropout, "
                             "--label-smoothing, --warmup-steps, --checkpoint, --train-limit, --data, --cache)");
  }
  ftopt::detail::check(args.model == "resnet" || args.model == "vit", "finetune: --model must be resnet or vit, got '",
                       args.model, "'");
  ftopt::detail::check(args.precision == "auto" || args.precision == "fp32" || args.precision == "bf16",
                       "finetune: --precision must be auto, fp32 or bf16, got '", args.precision, "'");
  ftopt::detail::check(args.epochs >= 1, "finetune: --epochs must be >= 1");
  ftopt::detail::check(args.vit_hidden % 4 == 0 && args.vit_hidden > 0,
                       "finetune: --vit-hidden must be a positive multiple of the 4 heads, got ", args.vit_hidden);
  ftopt::detail::check(args.vit_layers >= 1, "finetune: --vit-layers must be >= 1");
  ftopt::detail::check(args.vit_mlp >= 1, "finetune: --vit-mlp must be >= 1, got ", args.vit_mlp);
  const int modes = int(args.named()) + int(args.autotune) + int(!args.grid_dir.empty()) + int(args.all_classes);
  ftopt::detail::check(modes <= 1, "finetune: choose one of --peft/--memory/--quant, --auto, --grid and --all-classes");
  ftopt::detail::check(modes == 0 || args.all_classes || args.model == "vit",
                       "finetune: --peft, --memory, --quant, --auto and --grid choose among the ViT's policy grid; "
                       "use them with --model vit");
  ftopt::detail::check(args.checkpoint.empty() || args.all_classes, "finetune: --checkpoint goes with --all-classes");
  ftopt::detail::check(args.grid_steps >= 2, "finetune: --grid-steps must be >= 2, got ", args.grid_steps);
  return args;
}

/// Images as float [N, 1, 28, 28], standardized.
struct Prepared {
  torch::Tensor images, labels;
  double background = 0;  ///< a black pixel, standardized
};
Prepared prepare(const ftopt::data::LabelledImages& set, double mean, double std) {
  return {set.images.to(torch::kFloat).div_(255.0).sub_(mean).div_(std).unsqueeze(1), set.labels, -mean / std};
}

template <class M>
void reset_head(M& model) {
  const char* head = std::is_same_v<M, ftopt::models::ResNet> ? "fc" : "classifier";
  model->named_modules()[head]->template as<ftopt::nn::LinearImpl>()->reset_parameters();
}

ftopt::models::ResNet make_resnet(const Args&, std::int64_t classes) {
  return ftopt::models::ResNet({.layers = {1, 1, 1, 1}, .widths = {16, 32, 64, 128}, .in_channels = 1,
                                .num_classes = classes, .stem = ftopt::models::ResNetStem::Small});
}
ftopt::models::ViT make_vit(const Args& args, std::int64_t classes) {
  return ftopt::models::ViT({.image_size = 28, .patch_size = 4, .channels = 1, .hidden = args.vit_hidden,
                             .layers = args.vit_layers, .heads = 4, .intermediate = args.vit_mlp * args.vit_hidden,
                             .num_labels = classes, .dropout = args.vit_dropout});
}

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
template <class M>
ftopt::EvalStats evaluate_bf16_weights(M& model, ftopt::data::TensorBatches& batches) {
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

std::int64_t numel(const std::vector<torch::Tensor>& ts) {
  std::int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

/// How a row reads its training batches.
enum class Loading {
  InMemory,  ///< data::TensorBatches on the training thread: the naive baseline
  Pipeline,  ///< pipeline::from | shuffle | [augment] | batch | prefetch: a worker keeps batches ready
};

/// Trains one row. `Pipelines`: whether the pipeline loadings are compiled in (the grid's
/// combinations train in memory only, which keeps the main grid's compile time down).
template <bool Pipelines = true, class Trainer, class M>
Row train(std::string setup, Trainer trainer, M& model, const Prepared& train_set, const Prepared& test_set,
          double lr, Loading loading = Loading::InMemory, bool augmented = false, bool int8 = true) {
  namespace fp = ftopt::pipeline;
  std::cerr << "\n== " << setup << '\n';
  torch::manual_seed(1);  // every row starts from the same random state (adapter initialization)
  ftopt::data::TensorBatches test_batches(test_set.images, test_set.labels, {.batch_size = 500, .shuffle = false});
  const auto& params = trainer.prepare(model);
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(lr).weight_decay(0.05));
  if (const auto& saved = trainer.options().checkpoint; saved && std::filesystem::exists(saved->path)) {
    trainer.load_checkpoint(saved->path, model, optimizer);
    std::cerr << "resumed from " << saved->path.string() << " after epoch " << trainer.progress().epochs << '\n';
  }
  const auto fit = [&] {
    if (!Pipelines || loading == Loading::InMemory) {
      ftopt::data::TensorBatches batches(train_set.images, train_set.labels, {.batch_size = 128, .seed = 1});
      return trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{});
    }
    if constexpr (!Pipelines) return ftopt::FitSummary{};
    else {
    // Shifts of up to 2 pixels each way, the border black (torchvision's RandomCrop(28, padding=2)), and flips.
    const fp::AugmentOptions shift_flip{.crop = fp::RandomCrop{.size = 28, .padding = 2, .fill = train_set.background},
                                        .horizontal_flip = 0.5, .seed = 2};
    auto samples = fp::from(train_set.images, train_set.labels) | fp::shuffle(1);
    auto prefetched = fp::PrefetchOptions{.workers = 1, .depth = 4};
    if (augmented) {
      auto batches = std::move(samples) | fp::augment(shift_flip) | fp::batch(128) | fp::prefetch(prefetched);
      return trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{});
    }
    auto batches = std::move(samples) | fp::batch(128) | fp::prefetch(prefetched);
    return trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{});
    }
  }();
  std::size_t peak_bytes = 0;
  double seconds = 0, waiting = 0;
  for (const auto& e : fit.epochs) {
    peak_bytes = std::max(peak_bytes, e.peak_memory);
    seconds += e.seconds;
    waiting += e.phases.data;
  }
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

void print_table(const std::vector<Row>& rows) {
  std::cout << "\n| setup | s / epoch | data wait | peak MiB | trainable params | test acc | speed-up "
               "| fp32 inference acc | bf16 weights acc, speed-up | int8 acc, speed-up |\n"
            << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    std::cout << std::fixed << "| " << r.setup << " | " << std::setprecision(1) << r.epoch_seconds << " | "
              << 100.0 * r.data_wait << "% | " << r.peak_mib << " | " << r.trainable << " / " << r.total << " | "
              << std::setprecision(2) << 100.0 * r.test_accuracy << "% | "
              << rows.front().epoch_seconds / r.epoch_seconds << "x | " << 100.0 * r.fp32_accuracy << "% | "
              << 100.0 * r.bf16_accuracy << "%, " << r.bf16_speedup << "x | " << 100.0 * r.int8_accuracy << "%, "
              << r.int8_speedup << "x |\n";
}

/// Bf16Mixed pays where the hardware computes in bf16 (a CPU with avx512_bf16, a GPU);
/// elsewhere it is emulated and several times slower than fp32, so `--precision auto` skips it.
bool use_bf16(const Args& args) {
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
    // LoRA on every Linear of the blocks (PEFT's "all-linear" choice: query, key, value and the
    // dense projections) with a new head; adapters want a larger learning rate than full
    // fine-tuning.
    const ftopt::peft::Lora lora({.r = 8, .alpha = 16, .targets = {"query", "key", "value", "dense"},
                                  .modules_to_save = {"classifier"}});
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
    auto model = fresh();
    rows.push_back(train(precision + " + peft::Lora (r 8, query and value, head)",
                         ftopt::Trainer<Precision, ftopt::peft::Lora>(options, {}, query_value), model, train_set,
                         test_set, 3 * lr, Loading::Pipeline));
  } else {
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

namespace grid = ftopt::grid;

/// The ViT's policy grid: what --peft/--memory/--quant name, --auto chooses from and --grid
/// reports on. Every valid combination is a Trainer compiled into this program.
using MainGrid = grid::Grid<grid::Axis<ftopt::precision::Fp32, ftopt::precision::Bf16Mixed>,
                            grid::Axis<ftopt::peft::Full, ftopt::peft::Lora, ftopt::peft::Adapter>,
                            grid::Axis<ftopt::memory::None, ftopt::memory::Checkpoint>,
                            grid::Axis<ftopt::parallel::Single>,
                            grid::Axis<ftopt::quant::None, ftopt::quant::DynamicInt8>>;

/// The policies' settings in the grid: LoRA as in the best rows; bottleneck adapters (HF's
/// default places: attention output and MLP output); both train the new head in full.
auto grid_settings() {
  return grid::Settings(ftopt::peft::Lora({.r = 8, .alpha = 16, .targets = {"query", "key", "value", "dense"},
                                           .modules_to_save = {"classifier"}}),
                        ftopt::peft::Adapter({.modules_to_save = {"classifier"}}));
}

/// The grid's learning rates: adapters get 3x the full fine-tuning rate, as in the best rows.
grid::RunOptions grid_run_options(double lr) {
  return {.lr = lr, .lr_scale = {{"lora", 3.0}, {"adapter", 3.0}}};
}

/// Trains the combination `wanted` of the main grid for the run's epochs.
template <class Fresh>
Row train_named(const grid::Combination& wanted, Fresh& fresh, const ftopt::TrainerOptions& options,
                const Prepared& train_set, const Prepared& test_set, double lr) {
  const auto settings = grid_settings();
  Row row;
  MainGrid::visit<ftopt::models::ViT>(wanted, [&]<class T>(const grid::Combination& c) {
    auto model = fresh();
    row = train</*Pipelines=*/false>(c.key(), settings.trainer<T>(options), model, train_set, test_set,
                                     grid_run_options(lr).lr_for(c));
  });
  return row;
}

/// A Chrome trace of three baseline training steps (after one unrecorded step).
template <class Fresh>
void profile_baseline(const std::string& path, Fresh& fresh, const ftopt::TrainerOptions& options,
                      const Prepared& train_set, double lr) {
  auto model = fresh();
  ftopt::Trainer<> trainer(options);
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(lr).weight_decay(0.05));
  const std::int64_t n = std::min<std::int64_t>(4 * 128, train_set.labels.size(0));
  ftopt::data::TensorBatches batches(train_set.images.narrow(0, 0, n), train_set.labels.narrow(0, 0, n),
                                     {.batch_size = 128, .shuffle = false});
  trainer.fit(model, optimizer, batches, ftopt::callbacks::Profile({.path = path, .wait = 1, .steps = 3}));
  std::cerr << "finetune: a Chrome trace of 3 baseline steps is in " << path
            << " (open it in chrome://tracing or ui.perfetto.dev)\n";
}

grid::Combination named_combination(const Args& args, bool bf16) {
  return {.precision = bf16 ? "bf16" : "fp32", .peft = args.peft.empty() ? "full" : args.peft,
          .memory = args.memory.empty() ? "none" : args.memory, .quant = args.quant.empty() ? "none" : args.quant};
}

/// --peft/--memory/--quant, --auto and --grid, for the ViT.
template <class Fresh>
int run_grid_modes(const Args& args, bool bf16, Fresh& fresh, const ftopt::TrainerOptions& options,
                   const Prepared& train_set, const Prepared& test_set, double lr) {
  grid::RunOptions grid_options = grid_run_options(lr);
  grid_options.trainer = options;
  grid_options.trainer.log = &std::cerr;
  grid_options.steps = args.grid_steps;
  grid_options.budget_seconds = args.budget;
  grid_options.log = &std::cerr;
  // A short run warms up over its first tenth, then decays to the end of its steps.
  grid_options.trainer.schedule = ftopt::schedule::WarmupCosine{.warmup_steps = std::max<std::int64_t>(1, args.grid_steps / 10)};
  const auto batches = [](const Prepared& p) {
    return ftopt::data::TensorBatches(p.images, p.labels, {.batch_size = 128, .seed = 1});
  };
  ftopt::data::TensorBatches test_batches(test_set.images, test_set.labels, {.batch_size = 500, .shuffle = false});
  if (!args.grid_dir.empty()) {
    std::cerr << "finetune: the grid, " << MainGrid::valid_size<ftopt::models::ViT>() << " combinations, "
              << args.grid_steps << " steps each, evaluated on the test set\n";
    auto train_batches = batches(train_set);
    grid::Report report = grid::run<MainGrid>(fresh, train_batches, test_batches, grid_options, grid_settings());
    report.title = "ViT fine-tune, Fashion-MNIST classes 5-9: " + std::to_string(args.grid_steps) +
                   " steps per combination";
    report.write(args.grid_dir);
    report.print(std::cout);
    std::cout << "\nreport written to " << args.grid_dir << "/grid.{md,json,svg}\n";
    return 0;
  }
  std::vector<Row> rows;
  grid::Combination chosen = named_combination(args, bf16);
  std::optional<grid::Report> evidence;
  if (args.autotune) {
    // Scored on a validation split of the training set; the test set stays for the end.
    const std::int64_t n = train_set.labels.size(0), held = n / 10;
    const Prepared fit_part{train_set.images.narrow(0, 0, n - held), train_set.labels.narrow(0, 0, n - held)};
    const Prepared validation{train_set.images.narrow(0, n - held, held), train_set.labels.narrow(0, n - held, held)};
    auto fit_batches = batches(fit_part);
    ftopt::data::TensorBatches validation_batches(validation.images, validation.labels,
                                                  {.batch_size = 500, .shuffle = false});
    std::cerr << "finetune: --auto: " << MainGrid::valid_size<ftopt::models::ViT>() << " combinations, "
              << args.grid_steps << " steps each"
              << (args.budget > 0 ? ", within " + std::to_string(static_cast<int>(args.budget)) + " s" : "") << '\n';
    auto choice = grid::autotune<MainGrid>(fresh, fit_batches, validation_batches, grid_options, grid_settings());
    chosen = choice.best;
    evidence = std::move(choice.evidence);
    std::cerr << "finetune: --auto chose " << chosen.key() << '\n';
  }
  {
    auto model = fresh();
    rows.push_back(train("baseline: fp32, full fine-tuning", ftopt::Trainer<>(options), model, train_set, test_set, lr));
  }
  if (!(chosen == grid::Combination{})) rows.push_back(train_named(chosen, fresh, options, train_set, test_set, lr));
  if (evidence) {
    std::cout << "\n--auto's evidence (" << args.grid_steps << " steps each, accuracy on a validation split):\n";
    evidence->print(std::cout);
    std::cout << "chosen: " << chosen.key() << " (the fastest within " << std::defaultfloat << 100 * evidence->bound
              << " points of the baseline)\n";
  }
  print_table(rows);
  return 0;
}

template <class M>
int run(const Args& args, M (*make_model)(const Args&, std::int64_t), ftopt::nn::NamePatterns top) {
  const auto make = [&](std::int64_t classes) { return make_model(args, classes); };
  auto train_all = ftopt::data::load_fashion_mnist(ftopt::data::Split::Train, args.data);
  auto test_all = ftopt::data::load_fashion_mnist(ftopt::data::Split::Test, args.data);
  if (args.train_limit > 0 && args.train_limit < train_all.labels.size(0))
    train_all = {train_all.images.narrow(0, 0, args.train_limit), train_all.labels.narrow(0, 0, args.train_limit)};
  auto pixels = train_all.images.to(torch::kFloat).div_(255.0);
  const double mean = pixels.mean().item<double>(), std = pixels.std().item<double>();
  ftopt::TrainerOptions options{.epochs = args.epochs, .clip_grad_norm = 1.0,
                                .schedule = ftopt::schedule::WarmupCosine{.warmup_steps = args.warmup_steps},
                                .threads = ftopt::hardware::all_cpus};
  if (args.label_smoothing > 0)
    options.loss = [smoothing = args.label_smoothing](const torch::Tensor& output, const torch::Tensor& target) {
      return torch::nn::functional::cross_entropy(
          output, target, torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(smoothing));
    };
  const double lr = args.lr > 0 ? args.lr : args.model == "vit" ? 1e-3 : 2e-3;

  if (args.all_classes) {
    if (!args.checkpoint.empty()) options.checkpoint = ftopt::CheckpointOptions{.path = args.checkpoint};
    torch::manual_seed(0);
    auto model = make(10);
    const bool bf16 = use_bf16(args);
    const Loading loading = args.augment ? Loading::Pipeline : Loading::InMemory;
    const std::string setup =
        args.model + ", all 10 classes, " + (bf16 ? "bf16" : "fp32") + (args.augment ? ", random shifts and flips" : "");
    const auto train_set = prepare(train_all, mean, std), test_set = prepare(test_all, mean, std);
    auto row = bf16
                   ? train(setup, ftopt::Trainer<ftopt::precision::Bf16Mixed>(options), model, train_set, test_set, lr,
                           loading, args.augment)
                   : train(setup, ftopt::Trainer<>(options), model, train_set, test_set, lr, loading, args.augment);
    print_table({row});
    return 0;
  }

  const std::vector<std::int64_t> first{0, 1, 2, 3, 4}, second{5, 6, 7, 8, 9};
  const auto pre_train = prepare(ftopt::data::select_classes(train_all, first), mean, std);
  const auto fine_train = prepare(ftopt::data::select_classes(train_all, second), mean, std);
  const auto fine_test = prepare(ftopt::data::select_classes(test_all, second), mean, std);

  // Pretraining, cached: the same settings give the same file name.
  // Bf16Mixed rows where the CPU computes bf16 natively; pretraining too (it is not measured).
  const bool bf16 = use_bf16(args);
  const auto cache = std::filesystem::path(args.cache) /
                     (args.model +
                      (args.model == "vit" ? "-d" + std::to_string(args.vit_hidden) + "-l" +
                                                 std::to_string(args.vit_layers) + "-mlp" + std::to_string(args.vit_mlp)
                                           : "") +
                      (args.model == "vit" && args.vit_dropout > 0 ? "-dropout" + std::to_string(args.vit_dropout) : "") +
                      "-fashion-mnist-classes0-4-epochs" + std::to_string(args.pretrain_epochs) +
                      (bf16 ? "-bf16" : "") +
                      (args.train_limit ? "-limit" + std::to_string(args.train_limit) : "") + ".pt");
  torch::manual_seed(0);
  auto pretrained = make(5);
  if (std::filesystem::exists(cache)) {
    ftopt::weights::load(*pretrained, cache);
    std::cerr << "pretrained backbone from " << cache.string() << '\n';
  } else {
    auto pre_test = prepare(ftopt::data::select_classes(test_all, first), mean, std);
    auto pre_options = options;
    pre_options.epochs = std::max<std::int64_t>(1, args.pretrain_epochs);
    const std::string setup = "pretraining " + args.model + " on classes 0-4";
    if (bf16)
      train(setup, ftopt::Trainer<ftopt::precision::Bf16Mixed>(pre_options), pretrained, pre_train, pre_test, lr,
            Loading::InMemory, false, /*int8=*/false);
    else
      train(setup, ftopt::Trainer<>(pre_options), pretrained, pre_train, pre_test, lr, Loading::InMemory, false,
            /*int8=*/false);
    std::filesystem::create_directories(cache.parent_path());
    ftopt::weights::save(*pretrained, cache);
    std::cerr << "pretrained backbone saved to " << cache.string() << '\n';
  }
  const auto backbone = ftopt::weights::state_dict(*pretrained);

  std::vector<Row> rows;
  auto fresh = [&] {
    auto model = make(5);
    ftopt::weights::load_state_dict(*model, backbone);
    torch::manual_seed(1);  // every row gets the same new head
    reset_head(model);      // a new task: a new head
    return model;
  };
  if (!args.profile.empty()) profile_baseline(args.profile, fresh, options, fine_train, lr);
  if constexpr (std::is_same_v<M, ftopt::models::ViT>) {
    if (args.named() || args.autotune || !args.grid_dir.empty())
      return run_grid_modes(args, bf16, fresh, options, fine_train, fine_test, lr);
  }
  {
    auto model = fresh();
    rows.push_back(train("baseline: fp32, full fine-tuning", ftopt::Trainer<>(options), model, fine_train, fine_test, lr));
  }
  if (bf16) {
    auto model = fresh();
    rows.push_back(train("Bf16Mixed, full fine-tuning", ftopt::Trainer<ftopt::precision::Bf16Mixed>(options), model,
                         fine_train, fine_test, lr));
    best_rows<ftopt::precision::Bf16Mixed>("Bf16Mixed", rows, fresh, top, options, fine_train, fine_test, lr);
  } else {
    best_rows<ftopt::precision::Fp32>("fp32", rows, fresh, top, options, fine_train, fine_test, lr);
  }
  print_table(rows);
  return 0;
}

} // namespace

int main(int argc, char** argv) try {
  const Args args = parse(argc, argv);
  // A combination the grid does not have is refused before any data is loaded.
  if (args.named()) MainGrid::check<ftopt::models::ViT>(named_combination(args, args.precision == "bf16"));
  if (args.model == "resnet") return run(args, &make_resnet, {"layer4", "fc"});
  return run(args, &make_vit, {"encoder.layer.3", "vit.layernorm", "classifier"});
} catch (const std::exception& e) {
  const std::string_view message = e.what();  // option errors already name the program
  std::cerr << (message.starts_with("finetune:") ? "" : "finetune: ") << message << '\n';
  return 1;
}
