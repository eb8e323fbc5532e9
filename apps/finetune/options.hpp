#pragma once
// The main job's command line (CLI11): every option with its default and, where the values are
// a set, the allowed ones (`finetune --help`); a bad value is refused with the option, the value
// and what it takes.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>

#include <ftopt/data/fashion_mnist.hpp>
#include <ftopt/error.hpp>

namespace finetune {

struct Options {
  std::string task = "bbc-news";   ///< bbc-news: the pretrained text encoder; llm: SmolLM2; fashion-mnist: the image job
  std::int64_t max_length = 128;   ///< bbc-news: tokens per article, [CLS] and [SEP] included
  std::string pooling = "mean";    ///< bbc-news: mean (sentence-transformers') or pooler (BertForSequenceClassification's)
  std::string text_model, text_data;  ///< bbc-news: the model folder and the class folders (default: FTOPT_DATA_DIR's)
  std::string llm_model;           ///< llm: a GGUF file (default: FTOPT_DATA_DIR's SmolLM2-135M-Instruct)
  std::int64_t llm_steps = 40;     ///< llm: training steps per row
  std::int64_t llm_batch = 8;      ///< llm: examples per step
  std::int64_t llm_chars = 400;    ///< llm: characters of each article in its question
  std::int64_t llm_test = 40;      ///< llm: held-out questions answered before and after
  std::int64_t llm_heldout = 1024; ///< llm: held-out tokens for perplexity
  double llm_text_share = 0.25;    ///< llm: the share of each batch that is plain article text
  std::string llm_save;            ///< llm: save each row's adapter and merged model under this folder
  std::string llm_chat_template;   ///< llm: the chat template by name (chatml, gemma3); default: the file's
  std::string model = "vit";
  std::string precision = "auto";  ///< auto: Bf16Mixed where the CPU has native bf16, else fp32
  std::int64_t epochs = 1;
  std::int64_t pretrain_epochs = 2;
  std::int64_t train_limit = 0;
  std::int64_t test_limit = 0;  ///< the image tasks: evaluate on the first N test images; 0: all
  double lr = 0;  ///< 0: 2e-3 for the ResNet, 1e-3 for the ViT
  bool all_classes = false;
  bool augment = false;
  // The ViT's width and depth: large enough that the fp32 step is GEMM-bound (67% of it in
  // GEMMs, docs/benchmarks.md), small enough that the whole job runs in minutes on 2 cores.
  std::int64_t vit_hidden = 128;
  std::int64_t vit_layers = 4;
  std::int64_t vit_mlp = 4;  ///< the ViT's MLP width as a multiple of its width (HF ViT-Base: 4)
  double vit_dropout = 0.0;  ///< the ViT's hidden dropout (HF: hidden_dropout_prob)
  double label_smoothing = 0.0;    ///< cross-entropy's label_smoothing (as torch.nn.CrossEntropyLoss)
  std::int64_t warmup_steps = 50;  ///< WarmupCosine's linear warm-up
  std::string checkpoint;          ///< --all-classes: resume from and save to this file
  std::string peft, memory, quant;  ///< set: train this combination of the main grid
  bool autotune = false;
  double budget = 0;              ///< --auto: seconds (0: no limit)
  std::int64_t grid_steps = 100;  ///< --auto and --grid: training steps per combination (bbc-news: 20 unless given)
  std::string grid_dir;           ///< --grid: where the report goes
  std::string profile;            ///< --profile: Chrome trace of the first row
  std::string rows;               ///< set: train only the rows whose setup contains it (and the baseline)
  std::string results;            ///< --results: the closing table as a result file (results.hpp)
  std::uint64_t seed = 1;         ///< the fine-tuning rows' seed: new head, adapters, batch order
  std::string data = ftopt::data::default_fashion_mnist_dir().string();
  std::string cache;

  bool named() const { return !peft.empty() || !memory.empty() || !quant.empty(); }
};

namespace detail {

/// The value as an integer, or none when it is not one.
inline std::optional<std::int64_t> integer(const std::string& value) {
  char* end = nullptr;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0') return std::nullopt;
  return n;
}

/// An integer option's rule, shown in --help as `description`: `why(n)` is empty when n keeps
/// it, else what is wrong; a value that is no integer is named as such.
template <class Why>
CLI::Validator integer_rule(std::string description, Why why) {
  return CLI::Validator(
      [why](std::string& value) {
        const auto n = integer(value);
        return n ? why(*n) : "needs an integer, got '" + value + "'";
      },
      std::move(description));
}

/// An integer option's lower bound.
inline CLI::Validator at_least(std::int64_t low) {
  return integer_rule("(>= " + std::to_string(low) + ")", [low](std::int64_t n) {
    return n >= low ? std::string() : "must be >= " + std::to_string(low) + ", got " + std::to_string(n);
  });
}

/// An integer option that must be a multiple of `step`.
inline CLI::Validator multiple_of(std::int64_t step) {
  return integer_rule("(a multiple of " + std::to_string(step) + ")", [step](std::int64_t n) {
    return n % step == 0 ? std::string() : "must be a multiple of " + std::to_string(step) + ", got " + std::to_string(n);
  });
}

/// The value as a number, or none when it is not one.
inline std::optional<double> number(const std::string& value) {
  char* end = nullptr;
  const double x = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0') return std::nullopt;
  return x;
}

/// A number option's rule, shown in --help as `description`: `why(x)` is empty when x keeps it.
template <class Why>
CLI::Validator number_rule(std::string description, Why why) {
  return CLI::Validator(
      [why](std::string& value) {
        const auto x = number(value);
        return x ? why(*x, value) : "needs a number, got '" + value + "'";
      },
      std::move(description));
}

/// A number >= 0.
inline CLI::Validator non_negative() {
  return number_rule("(>= 0)", [](double x, const std::string& value) {
    return x >= 0 ? std::string() : "must be >= 0, got " + value;
  });
}

/// A number in [0, 1).
inline CLI::Validator fraction() {
  return number_rule("(in [0, 1))", [](double x, const std::string& value) {
    return x >= 0 && x < 1 ? std::string() : "must be in [0, 1), got " + value;
  });
}

} // namespace detail

/// The options from the command line. `--help` prints them all and exits 0; a bad one prints
/// "finetune: <option>: <why>" and exits 1.
inline Options parse(int argc, char** argv) {
  Options o;
  if (const char* home = std::getenv("HOME")) o.cache = std::string(home) + "/.cache/ftopt";
  CLI::App app{"The main job: fine-tune all-MiniLM-L6-v2 (a pretrained BERT) on BBC News with the naive baseline and\n"
               "ftopt's policies, and close with a table. --task llm: teach an LLM from its GGUF (SmolLM2-135M-Instruct;\n"
               "--llm-model: another) to name a BBC article's section with LoRA and QLoRA (docs/llm.md). --task fashion-mnist: pretrain a\n"
               "backbone on Fashion-MNIST classes 0-4 (cached), fine-tune it on classes 5-9 (docs/models.md).",
               "finetune"};
  app.get_formatter()->column_width(34);
  app.add_option("--task", o.task, "what to fine-tune")
      ->check(CLI::IsMember({"bbc-news", "llm", "fashion-mnist"}))
      ->capture_default_str();
  app.add_option("--max-length", o.max_length, "bbc-news: tokens per article ([CLS] and [SEP] included)")
      ->check(detail::at_least(8))
      ->capture_default_str();
  app.add_option("--pooling", o.pooling, "bbc-news: what the classifier reads: the mean of the tokens (as all-MiniLM-L6-v2 "
                 "was trained) or the [CLS] token's pooler (BertForSequenceClassification)")
      ->check(CLI::IsMember({"mean", "pooler"}))
      ->capture_default_str();
  app.add_option("--text-model", o.text_model, "bbc-news: a Hugging Face BERT folder (default: the installed all-MiniLM-L6-v2)");
  app.add_option("--text-data", o.text_data, "bbc-news: a folder of class folders of .txt files (default: the installed BBC News)");
  app.add_option("--llm-model", o.llm_model, "llm: a GGUF file of a llama, qwen2 or gemma3 model "
                 "(default: the installed SmolLM2-135M-Instruct Q4_1; the data folder's checkpoints/ has "
                 "Qwen2.5-Coder-0.5B-Instruct and Gemma 3 270M, both Q4_K_M)");
  app.add_option("--chat-template", o.llm_chat_template, "llm: ask the questions in this chat template instead of "
                 "the file's (a base model such as Gemma 3 270M ships none)")
      ->check(CLI::IsMember({"chatml", "gemma3"}));
  app.add_option("--llm-steps", o.llm_steps, "llm: training steps per row")->check(detail::at_least(1))->capture_default_str();
  app.add_option("--llm-batch", o.llm_batch, "llm: articles per step")->check(detail::at_least(1))->capture_default_str();
  app.add_option("--llm-chars", o.llm_chars, "llm: characters of each article in its question")
      ->check(detail::at_least(50))
      ->capture_default_str();
  app.add_option("--llm-test", o.llm_test, "llm: held-out articles whose section the model is asked")
      ->check(detail::at_least(1))
      ->capture_default_str();
  app.add_option("--llm-heldout", o.llm_heldout, "llm: held-out BBC tokens for perplexity")
      ->check(detail::at_least(16))
      ->capture_default_str();
  app.add_option("--llm-text-share", o.llm_text_share, "llm: the share of each batch that is plain article text (loss "
                 "on every token) instead of a question and its answer (loss on the answer)")
      ->check(detail::fraction())
      ->capture_default_str();
  app.add_option("--llm-save", o.llm_save, "llm: after each row, save its adapter as PEFT writes it (DIR/ROW/adapter) "
                 "and the merged model as transformers' save_pretrained does, in bfloat16 (DIR/ROW/model)");
  app.add_option("--results", o.results, "write the closing table to this JSON file as the benchmarks write theirs "
                 "(the machine, the command, the rows), for scripts/report.py --store");
  app.add_option("--model", o.model, "the model")->check(CLI::IsMember({"vit", "resnet"}))->capture_default_str();
  app.add_option("--precision", o.precision, "auto: Bf16Mixed where the CPU computes bf16 natively, else fp32")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "fine-tuning epochs per row")->check(detail::at_least(1))->capture_default_str();
  app.add_option("--pretrain-epochs", o.pretrain_epochs, "epochs of pretraining (cached)")
      ->check(detail::at_least(0))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate; 0: 1e-3 for the ViT, 2e-3 for the ResNet (adapters 3x), 2e-3 for the LLM's adapters")
      ->check(detail::non_negative())
      ->capture_default_str();
  app.add_option("--train-limit", o.train_limit, "use N training images (the first) or articles (spread over the classes); 0: all")
      ->check(detail::at_least(0))
      ->capture_default_str();
  app.add_option("--test-limit", o.test_limit, "image tasks: evaluate on the first N test images; 0: all")
      ->check(detail::at_least(0))
      ->capture_default_str();
  app.add_flag("--all-classes", o.all_classes, "train on all ten classes instead and report the test accuracy");
  app.add_flag("--augment", o.augment, "with --all-classes: random shifts and flips through the Pipeline");
  app.add_option("--checkpoint", o.checkpoint, "with --all-classes: save after every epoch, resume when it exists");
  app.add_option("--peft", o.peft, "train this combination of the task's grid after the baseline (bbc-news: full, lora, "
                 "rslora, dora, loraplus, lora-nf4)")
      ->check(CLI::IsMember({"full", "lora", "rslora", "dora", "pissa", "loraplus", "lora-int8", "lora-nf4", "adapter",
                            "ia3", "vera"}));
  app.add_option("--memory", o.memory, "(with --peft/--quant) the grid combination's Memory policy")
      ->check(CLI::IsMember({"none", "checkpoint"}));
  app.add_option("--quant", o.quant, "(with --peft/--memory) the grid combination's Quant policy")
      ->check(CLI::IsMember({"none", "dynamic-int8"}));
  app.add_flag("--auto", o.autotune, "let grid::autotune choose the fastest within 0.5 points of the baseline");
  app.add_option("--budget", o.budget, "--auto's time budget in seconds; 0: none")
      ->check(detail::non_negative())
      ->capture_default_str();
  app.add_option("--grid", o.grid_dir, "run the whole grid and write its report (md, json, svg) to DIR");
  app.add_option("--grid-steps", o.grid_steps, "training steps per combination for --auto and --grid (bbc-news: 20)")
      ->check(detail::at_least(2))
      ->capture_default_str();
  app.add_option("--profile", o.profile, "write a Chrome trace of three baseline steps to FILE");
  app.add_option("--rows", o.rows, "train only the rows whose setup contains TEXT (the baseline always trains)");
  app.add_option("--seed", o.seed, "the fine-tuning rows' seed: the new head, adapters' initialization, batch order")
      ->capture_default_str();
  app.add_option("--vit-hidden", o.vit_hidden, "the ViT's width, a multiple of its 4 heads")
      ->check(detail::at_least(4))
      ->check(detail::multiple_of(4))
      ->capture_default_str();
  app.add_option("--vit-layers", o.vit_layers, "the ViT's blocks")->check(detail::at_least(1))->capture_default_str();
  app.add_option("--vit-mlp", o.vit_mlp, "the ViT's MLP width as a multiple of its width")
      ->check(detail::at_least(1))
      ->capture_default_str();
  app.add_option("--vit-dropout", o.vit_dropout, "the ViT's hidden dropout")->check(detail::fraction())->capture_default_str();
  app.add_option("--label-smoothing", o.label_smoothing, "cross-entropy's label smoothing")
      ->check(detail::fraction())
      ->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps, "the cosine schedule's warmup")
      ->check(detail::at_least(0))
      ->capture_default_str();
  app.add_option("--data", o.data, "the Fashion-MNIST folder")->capture_default_str();
  app.add_option("--cache", o.cache, "where pretrained backbones are kept")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) std::exit(app.exit(e));  // --help
    std::cerr << "finetune: " << e.what() << " (finetune --help lists the options)\n";
    std::exit(1);
  }
  const int modes = int(o.named()) + int(o.autotune) + int(!o.grid_dir.empty()) + int(o.all_classes);
  ftopt::check(modes <= 1, "finetune: choose one of --peft/--memory/--quant, --auto, --grid and --all-classes");
  ftopt::check(o.task == "fashion-mnist" || (!o.all_classes && o.profile.empty() && o.model == "vit"),
               "finetune: --model, --all-classes and --profile go with --task fashion-mnist");
  ftopt::check(modes == 0 || o.all_classes || o.model == "vit",
               "finetune: --peft, --memory, --quant, --auto and --grid choose among the ViT's policy grid; "
               "use them with --model vit");
  if (o.task == "bbc-news" && app.count("--grid-steps") == 0) o.grid_steps = 20;  // a BERT step is ~10x a ViT step
  ftopt::check(o.checkpoint.empty() || o.all_classes, "finetune: --checkpoint goes with --all-classes");
  return o;
}

} // namespace finetune
