// The main job. By default (--task bbc-news, text_task.hpp): fine-tune all-MiniLM-L6-v2, a
// pretrained BERT, on the BBC News articles, the naive baseline against ftopt's policies.
// With --task llm (llm_task.hpp): teach an LLM (SmolLM2-135M-Instruct, or --llm-model's GGUF file)
// to name an article's BBC section, with LoRA and QLoRA over the file's own quantized blocks.
// With --task fashion-mnist: pretrain a backbone on Fashion-MNIST classes 0-4 (cached on disk
// after the first run), then fine-tune it on classes 5-9: the naive baseline (fp32, full fine-tuning), Bf16Mixed
// where the CPU computes bf16 natively, full fine-tuning with optim::AdamW8bit, and the PEFT
// policies (for the ViT: LoRA on every Linear of the blocks, with memory::Checkpoint, on query and
// value, its variants rsLoRA, DoRA, PiSSA and LoRA+, IA3, VeRA, and LoRA over an int8 and an NF4
// base; for the ResNet: LoRA on the convolutions, and Freeze with and without
// memory::Checkpoint), and close with a table. After each row the model (adapters merged) is
// evaluated for inference in fp32, with bf16 weights and with quant::DynamicInt8.
//
//   build/apps/finetune [options]        (build/apps/finetune --help lists them, with defaults)
//
// The application is split by concern: options.hpp (the command line, CLI11), models.hpp (data
// and models), runs.hpp (one row: train, evaluate, inference paths; the best policies' rows),
// table.hpp (the closing table), pretraining.hpp (the cached backbone), grid_modes.hpp (the
// ViT's policy grid by name, --auto and --grid), text_task.hpp and text_grid.hpp (the text
// task's rows and its own grid); this file puts them together.
//
// --all-classes instead trains the model on all ten classes and reports its test accuracy, to
// compare with the benchmark table in Fashion-MNIST's README. With --checkpoint FILE it writes a
// checkpoint after every epoch (atomically) and, when FILE exists, resumes from it first: a long
// run stopped part-way goes on where it was when the same command is run again.
//
// In either task the policies can be chosen by name (--precision, --peft, --memory, --quant):
// the combination is one of the task's grid's Trainers, compiled in (grid::Grid::visit), trained
// after the baseline. --auto lets grid::autotune choose: every combination trains briefly
// (--grid-steps) on 90% of the training set and is scored on the other 10%, and the fastest
// within 0.5 points of the baseline then trains for --epochs. --grid DIR runs the whole grid
// with a fixed budget of steps, evaluates on the test set, and writes the report (Markdown,
// JSON, SVG) to DIR. --profile FILE writes a Chrome trace of three training steps of the
// baseline. --results FILE writes the closing table as a result file (results.hpp), which
// scripts/bench.sh files under benchmarks/results/ for the documents' tables.
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string_view>
#include <type_traits>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "grid_modes.hpp"
#include "llm_task.hpp"
#include "models.hpp"
#include "options.hpp"
#include "pretraining.hpp"
#include "runs.hpp"
#include "table.hpp"
#include "text_grid.hpp"
#include "text_task.hpp"

namespace finetune {

template <class M>
int run(const Options& args, M (*make_model)(const Options&, std::int64_t), ftopt::nn::NamePatterns top) {
  const auto make = [&](std::int64_t classes) { return make_model(args, classes); };
  auto train_all = ftopt::data::load_fashion_mnist(ftopt::data::Split::Train, args.data);
  auto test_all = ftopt::data::load_fashion_mnist(ftopt::data::Split::Test, args.data);
  train_all = ftopt::data::first(train_all, args.train_limit);
  test_all = ftopt::data::first(test_all, args.test_limit);
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

  // Bf16Mixed rows where the CPU computes bf16 natively; pretraining too (it is not measured).
  const bool bf16 = use_bf16(args);
  torch::manual_seed(0);
  auto pretrained = make(5);
  pretrain_or_load(pretrained, args, bf16, options, pre_train,
                   prepare(ftopt::data::select_classes(test_all, first), mean, std), lr);
  const auto backbone = ftopt::weights::state_dict(*pretrained);

  std::vector<Row> rows;
  auto fresh = [&] {
    auto model = make(5);
    ftopt::weights::load_state_dict(*model, backbone);
    torch::manual_seed(selection.seed);  // every row gets the same new head
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
  }
  {
    // Full fine-tuning with both AdamW moments in 8 bits (a quarter of AdamW's state).
    auto model = fresh();
    const std::string precision = bf16 ? "Bf16Mixed" : "fp32";
    rows.push_back(bf16 ? train<true, ftopt::optim::AdamW8bit>(precision + ", full fine-tuning, optim::AdamW8bit",
                                                               ftopt::Trainer<ftopt::precision::Bf16Mixed>(options),
                                                               model, fine_train, fine_test, lr)
                        : train<true, ftopt::optim::AdamW8bit>(precision + ", full fine-tuning, optim::AdamW8bit",
                                                               ftopt::Trainer<>(options), model, fine_train, fine_test, lr));
  }
  if (bf16) {
    best_rows<ftopt::precision::Bf16Mixed>("Bf16Mixed", rows, fresh, top, options, fine_train, fine_test, lr);
  } else {
    best_rows<ftopt::precision::Fp32>("fp32", rows, fresh, top, options, fine_train, fine_test, lr);
  }
  print_table(rows);
  return 0;
}

} // namespace finetune

int main(int argc, char** argv) try {
  using namespace finetune;
  const Options args = parse(argc, argv);
  selection = {.only = args.rows, .seed = args.seed};
  for (int i = 0; i < argc; ++i) run_info.command += (i ? " " : "") + std::string(argv[i]);
  if (!args.results.empty()) {  // refused now, not after the run
    const auto folder = std::filesystem::absolute(args.results).parent_path();
    ftopt::check(std::filesystem::is_directory(folder), "finetune: --results: folder ", folder.string(),
                 " does not exist");
    ftopt::check(args.task != "fashion-mnist", "finetune: --results goes with --task bbc-news or llm");
  }
  // A combination the task's grid does not have is refused before any data is loaded.
  const auto named = named_combination(args, args.precision == "bf16");
  if (args.task == "llm") {
    ftopt::check(!args.named(), "finetune: --task llm runs its own rows; --peft, --memory and --quant do not apply");
    return run_llm(args);
  }
  if (args.task == "bbc-news") {
    if (args.named()) TextGrid::check<ftopt::models::Bert>(named);
    return run_text(args);
  }
  if (args.named()) MainGrid::check<ftopt::models::ViT>(named);
  if (args.model == "resnet") return run(args, &make_resnet, {"layer4", "fc"});
  return run(args, &make_vit, {"encoder.layer.3", "vit.layernorm", "classifier"});
} catch (const std::exception& e) {
  const std::string_view message = e.what();  // option errors already name the program
  std::cerr << (message.starts_with("finetune:") ? "" : "finetune: ") << message << '\n';
  return 1;
}
