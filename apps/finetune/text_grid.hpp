#pragma once
// The text task's policy grid: a combination by name (--precision/--peft/--memory), --auto
// (grid::autotune on a validation split of the training articles) and --grid (the whole grid,
// scored on the test articles).
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/report/grid.hpp>

#include "options.hpp"
#include "runs.hpp"
#include "table.hpp"
#include "text_task.hpp"

namespace finetune {

/// all-MiniLM-L6-v2's grid: fp32 and Bf16Mixed; full fine-tuning, the PEFT recipe's LoRA and its
/// variants (one Trainer type for the four), LoRA over an NF4 base; with and without
/// memory::Checkpoint over the encoder's layers. Every row of the table has a combination here
/// (AdamW8bit is an optimizer, not a policy); quant::DynamicInt8 changes inference only, which
/// every row reports anyway.
using TextGrid = ftopt::grid::Grid<
    ftopt::grid::Axis<ftopt::precision::Fp32, ftopt::precision::Bf16Mixed>,
    ftopt::grid::Axis<ftopt::peft::Full, ftopt::grid::Variants<ftopt::peft::Lora, "lora", "rslora", "dora", "loraplus">,
                      ftopt::peft::QLora<ftopt::storage::Nf4>>,
    ftopt::grid::Axis<ftopt::memory::None, ftopt::memory::Checkpoint>>;

static_assert(TextGrid::valid_size<ftopt::models::Bert>() == 24 && TextGrid::valid_trainers<ftopt::models::Bert>() == 12,
              "docs/text.md gives the text grid's size");

/// The policies' settings in the text grid (text_lora's variants, QLoRA over the recipe).
inline auto text_grid_settings() {
  using Lora = ftopt::grid::Named<ftopt::peft::Lora>;
  return ftopt::grid::Settings(text_lora("lora"), Lora{"rslora", text_lora("rslora")}, Lora{"dora", text_lora("dora")},
                               Lora{"loraplus", text_lora("loraplus")}, text_qlora());
}

/// The grid's run options: the rows' learning rates (adapters 10x), optimizer (FusedAdamW, weight
/// decay 0.01) and schedule (a tenth of the steps warming up, then linear decay).
inline ftopt::grid::RunOptions text_grid_options(const Options& args, const ftopt::TrainerOptions& trainer, double lr) {
  ftopt::grid::RunOptions o{.trainer = trainer, .steps = args.grid_steps, .lr = lr,
                            .lr_scale = {{"lora", 10.0}, {"rslora", 10.0}, {"dora", 10.0}, {"loraplus", 10.0},
                                         {"lora-nf4", 10.0}},
                            .budget_seconds = args.budget, .log = &std::cerr};
  o.trainer.log = &std::cerr;
  o.trainer.schedule = ftopt::schedule::WarmupLinear{.warmup_steps = std::max<std::int64_t>(1, args.grid_steps / 10)};
  o.optimizer = [](const ftopt::grid::Trainable& trainable, double rate) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<ftopt::optim::FusedAdamW>(
        trainable.adamw_groups(torch::optim::AdamWOptions(rate).weight_decay(0.01)));
  };
  return o;
}

/// The articles of `set` tokenized once and padded in shuffled batches, for the grid's short runs.
inline std::vector<std::pair<torch::Tensor, torch::Tensor>> tokenized_batches(const TextTask& task,
                                                                              const ftopt::data::TextSet& set) {
  namespace fp = ftopt::pipeline;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  for (auto batch : fp::from(set) | fp::shuffle(selection.seed) | fp::tokenize(task.tokenizer, {.max_length = task.max_length}) |
                        fp::pad_batch(task.batch_size, task.tokenizer.pad_id()))
    out.push_back(std::move(batch));
  return out;
}

/// --peft/--memory/--precision, --auto and --grid, for the text task: the baseline row and the
/// chosen combination's row (trained like every row, for --epochs), or the grid's report.
inline int run_text_grid_modes(const Options& args, const TextTask& task, const ftopt::TrainerOptions& options,
                               double lr, bool bf16) {
  const auto fresh = [&] { return fresh_bert(task); };
  const auto settings = text_grid_settings();
  const auto grid_options = text_grid_options(args, options, lr);
  if (!args.grid_dir.empty()) {
    std::cerr << "finetune: the text grid, " << TextGrid::valid_size<ftopt::models::Bert>() << " combinations, "
              << args.grid_steps << " steps each, evaluated on the test articles\n";
    auto train_batches = tokenized_batches(task, task.train);
    auto report = ftopt::grid::run<TextGrid>(fresh, train_batches, task.test_batches, grid_options, settings);
    report.title = "all-MiniLM-L6-v2 on BBC News: " + std::to_string(args.grid_steps) + " steps per combination";
    ftopt::report::write(report, args.grid_dir);
    ftopt::report::print(report, std::cout);
    std::cout << "\nreport written to " << args.grid_dir << "/grid.{md,json,svg}\n";
    return 0;
  }
  ftopt::grid::Combination chosen = named_combination(args, bf16);
  std::optional<ftopt::grid::Report> evidence;
  if (args.autotune) {
    // Scored on a stratified tenth of the training articles; the test articles stay for the end.
    const auto [fit_at, validation_at] = ftopt::data::stratified_split(task.train.labels, 0.1, /*seed=*/0);
    auto fit_batches = tokenized_batches(task, task.train.subset(fit_at));
    const auto validation_batches = tokenized_batches(task, task.train.subset(validation_at));
    std::cerr << "finetune: --auto: " << TextGrid::valid_size<ftopt::models::Bert>() << " combinations, "
              << args.grid_steps << " steps each on " << fit_at.size() << " articles, scored on " << validation_at.size()
              << (args.budget > 0 ? ", within " + std::to_string(static_cast<int>(args.budget)) + " s" : "") << '\n';
    auto choice = ftopt::grid::autotune<TextGrid>(fresh, fit_batches, validation_batches, grid_options, settings);
    chosen = choice.best;
    evidence = std::move(choice.evidence);
    std::cerr << "finetune: --auto chose " << chosen.key() << '\n';
  }
  std::vector<Row> rows;
  rows.push_back(text_baseline(options, task, lr));
  if (!(chosen == ftopt::grid::Combination{}))
    TextGrid::visit<ftopt::models::Bert>(chosen, [&]<class T>(const ftopt::grid::Combination& c) {
      rows.push_back(train_text(c.key(), settings.template trainer<T>(options, c), task, grid_options.lr_for(c)));
    });
  if (evidence) {
    std::cout << "\n--auto's evidence (" << args.grid_steps << " steps each, accuracy on a validation split):\n";
    ftopt::report::print(*evidence, std::cout);
    std::cout << "chosen: " << chosen.key() << " (the fastest within " << std::defaultfloat << 100 * evidence->bound
              << " points of the baseline)\n";
  }
  print_text_table(args, task, rows);
  return 0;
}

/// The text task: its rows, or with --peft/--memory, --auto or --grid, its grid's modes.
inline int run_text(const Options& args) {
  const TextTask task = load_text_task(args);
  const bool bf16 = use_bf16(args);
  const auto options = text_trainer_options(args, task);
  const double lr = args.lr > 0 ? args.lr : 3e-4;  // full fine-tuning; the adapters take 10x
  if (args.named() || args.autotune || !args.grid_dir.empty()) return run_text_grid_modes(args, task, options, lr, bf16);
  return run_text_rows(args, task, options, lr, bf16);
}

} // namespace finetune
