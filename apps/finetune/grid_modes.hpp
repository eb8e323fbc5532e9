#pragma once
// The ViT's policy grid as the main job uses it: a combination by name (--peft/--memory/--quant),
// --auto (grid::autotune) and --grid (the whole grid's report), plus --profile's trace.
#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/report/grid.hpp>

#include "options.hpp"
#include "runs.hpp"
#include "table.hpp"

namespace finetune {

namespace grid = ftopt::grid;

/// The ViT's policy grid: what --peft/--memory/--quant name, --auto chooses from and --grid
/// reports on. Every valid combination is a Trainer compiled into this program.
using MainGrid = grid::Grid<grid::Axis<ftopt::precision::Fp32, ftopt::precision::Bf16Mixed>,
                            grid::Axis<ftopt::peft::Full,
                                       grid::Variants<ftopt::peft::Lora, "lora", "rslora", "dora", "pissa", "loraplus">,
                                       ftopt::peft::QLora<ftopt::storage::Int8PerChannel>,
                                       ftopt::peft::QLora<ftopt::storage::Nf4>, ftopt::peft::Adapter,
                                       ftopt::peft::Ia3, ftopt::peft::Vera>,
                            grid::Axis<ftopt::memory::None, ftopt::memory::Checkpoint>,
                            grid::Axis<ftopt::parallel::Single>,
                            grid::Axis<ftopt::quant::None, ftopt::quant::DynamicInt8>>;

/// The policies' settings in the grid: LoRA and its variants (settings of one peft::Lora type,
/// one Trainer for all five), LoRA over an int8 or NF4 base, IA3 and VeRA as in the best rows;
/// bottleneck adapters (HF's default places: attention output and MLP output); all train the
/// new head in full.
inline auto grid_settings(const ftopt::models::ViTOptions& vit) {
  using Lora = grid::Named<ftopt::peft::Lora>;
  return grid::Settings(vit_lora(), Lora{"rslora", vit_lora_variant("rslora")}, Lora{"dora", vit_lora_variant("dora")},
                        Lora{"pissa", vit_lora_variant("pissa")}, Lora{"loraplus", vit_lora_variant("loraplus")},
                        vit_qlora<ftopt::storage::Int8PerChannel>(vit), vit_qlora<ftopt::storage::Nf4>(vit),
                        ftopt::peft::Adapter({.modules_to_save = {"classifier"}}), vit_ia3(), vit_vera());
}

/// The grid's learning rates: LoRA (any variant, over any base) and adapters get 3x the full
/// fine-tuning rate, the vector methods (IA3, VeRA, a few thousand values each) 10x, as in the
/// best rows.
inline grid::RunOptions grid_run_options(double lr) {
  grid::RunOptions options{.lr = lr, .lr_scale = {{"lora", 3.0}, {"lora-int8", 3.0}, {"lora-nf4", 3.0},
                                                  {"adapter", 3.0}, {"ia3", 10.0}, {"vera", 10.0}}};
  for (const auto& variant : lora_variants) options.lr_scale[variant.first] = 3.0;
  return options;
}

/// Trains the combination `wanted` of the main grid for the run's epochs.
template <class Fresh>
Row train_named(const grid::Combination& wanted, Fresh& fresh, const ftopt::TrainerOptions& options,
                const Prepared& train_set, const Prepared& test_set, double lr) {
  const auto settings = grid_settings(fresh()->options());
  Row row;
  MainGrid::visit<ftopt::models::ViT>(wanted, [&]<class T>(const grid::Combination& c) {
    auto model = fresh();
    row = train</*Pipelines=*/false>(c.key(), settings.template trainer<T>(options, c), model, train_set, test_set,
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

/// --peft/--memory/--quant, --auto and --grid, for the ViT.
template <class Fresh>
int run_grid_modes(const Options& args, bool bf16, Fresh& fresh, const ftopt::TrainerOptions& options,
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
    return ftopt::data::TensorBatches(p.images, p.labels, {.batch_size = 128, .seed = selection.seed});
  };
  ftopt::data::TensorBatches test_batches(test_set.images, test_set.labels, {.batch_size = 500, .shuffle = false});
  if (!args.grid_dir.empty()) {
    std::cerr << "finetune: the grid, " << MainGrid::valid_size<ftopt::models::ViT>() << " combinations, "
              << args.grid_steps << " steps each, evaluated on the test set\n";
    auto train_batches = batches(train_set);
    grid::Report report = grid::run<MainGrid>(fresh, train_batches, test_batches, grid_options, grid_settings(fresh()->options()));
    report.title = "ViT fine-tune, Fashion-MNIST classes 5-9: " + std::to_string(args.grid_steps) +
                   " steps per combination";
    ftopt::report::write(report, args.grid_dir);
    ftopt::report::print(report, std::cout);
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
    auto choice = grid::autotune<MainGrid>(fresh, fit_batches, validation_batches, grid_options, grid_settings(fresh()->options()));
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
    ftopt::report::print(*evidence, std::cout);
    std::cout << "chosen: " << chosen.key() << " (the fastest within " << std::defaultfloat << 100 * evidence->bound
              << " points of the baseline)\n";
  }
  print_table(rows);
  return 0;
}

} // namespace finetune
