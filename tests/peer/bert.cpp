// The C++ side of tests/peer/bert.py: text::BertTokenizer and models::Bert on
// sentence-transformers/all-MiniLM-L6-v2's real files (MODEL is that folder).
//   tokenize MODEL SOURCE TEXTS WORK  ids of every line of TEXTS (JSON strings), SOURCE tokenizer.json
//                                     or vocab.txt -> SOURCE.ids.safetensors {ids, lengths}
//   batch MODEL TEXTS MAX WORK        encode_batch(texts, max_length MAX) -> batch.ftopt.safetensors
//   model MODEL WORK                  input.safetensors (input_ids, attention_mask) and
//                                     classifier.safetensors -> model.ftopt.safetensors: hidden
//                                     states, pooled, sentence embeddings, logits (eval)
//   step MODEL LR BETA1 BETA2 EPS WD WORK  one AdamW step on input.safetensors' labels (dropout 0)
//                                     -> step.ftopt.safetensors: loss, weights after the step
//   lora-load MODEL DIR WORK          PEFT's adapter in DIR -> DIR.ftopt.safetensors: logits
//   lora-save MODEL DIR WORK          a Lora with non-zero adapters, saved to DIR -> its logits
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ftopt/models/bert.hpp>
#include <ftopt/models/bert_pretrained.hpp>
#include <ftopt/peft/files/lora.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/text/bert_tokenizer.hpp>

#include "lora_adapter.hpp"
#include "peer.hpp"

namespace {
using namespace ftopt;

/// The model with 5 labels and the Python side's classifier weights.
models::Bert classifier_model(const std::filesystem::path& model_dir, const std::filesystem::path& work,
                              double dropout = 0.1) {
  auto [model, report] = models::load_bert(model_dir, {.num_labels = 5, .dropout = dropout,
                                                       .attention_dropout = dropout});
  if (report.missing.size() != 2) throw std::runtime_error("expected only the classifier missing: " + report.summary());
  weights::load_state_dict(*model, peer::load(work, "classifier.safetensors"), {.strict = false});
  return model;
}

at::Tensor model_input(const std::filesystem::path& work) {
  auto input = peer::load(work, "input.safetensors");
  return models::bert_input(input["input_ids"], input["attention_mask"]);
}

at::Tensor eval_logits(models::Bert& model, const std::filesystem::path& work) {
  model->eval();
  torch::NoGradGuard no_grad;
  return model->forward(model_input(work));
}

} // namespace

int main(int argc, char** argv) {
  return peer::main(argc, argv, {
    {"tokenize", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 3) throw std::runtime_error("tokenize needs MODEL SOURCE TEXTS");
       const std::filesystem::path model = args[0];
       const auto tokenizer = args[1] == "vocab.txt" ? text::BertTokenizer::from_vocab_file(model / "vocab.txt")
                                                     : text::BertTokenizer::from_tokenizer_json(model / args[1]);
       std::vector<std::int64_t> ids, lengths;
       for (const auto& t : peer::read_json_lines(work / args[2])) {
         const auto encoded = tokenizer.encode(t);
         ids.insert(ids.end(), encoded.begin(), encoded.end());
         lengths.push_back(static_cast<std::int64_t>(encoded.size()));
       }
       weights::StateDict out;
       out.insert("ids", torch::tensor(ids, torch::kLong));
       out.insert("lengths", torch::tensor(lengths, torch::kLong));
       peer::save(work, args[1] + ".ids.safetensors", out);
     }},
    {"batch", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 3) throw std::runtime_error("batch needs MODEL TEXTS MAX");
       const auto tokenizer = text::BertTokenizer::from_pretrained(args[0]);
       const auto texts = peer::read_json_lines(work / args[1]);
       const auto batch = tokenizer.encode_batch(texts, {.max_length = std::stoll(args[2])});
       weights::StateDict out;
       out.insert("input_ids", batch.input_ids);
       out.insert("attention_mask", batch.attention_mask);
       peer::save(work, "batch.ftopt.safetensors", out);
     }},
    {"model", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("model needs MODEL");
       auto model = classifier_model(args[0], work);
       model->eval();
       torch::NoGradGuard no_grad;
       auto input = peer::load(work, "input.safetensors");
       weights::StateDict out;
       const auto hidden = model->bert->encode(input["input_ids"], input["attention_mask"]);
       out.insert("hidden", hidden);
       out.insert("pooled", model->bert->pooler(hidden));
       out.insert("sentence", model->sentence_embedding(model_input(work)));
       out.insert("logits", model->forward(model_input(work)));
       peer::save(work, "model.ftopt.safetensors", out);
     }},
    {"step", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 6) throw std::runtime_error("step needs MODEL LR BETA1 BETA2 EPS WD");
       auto model = classifier_model(args[0], work, /*dropout=*/0.0);
       model->train();
       torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(std::stod(args[1]))
                                                              .betas({std::stod(args[2]), std::stod(args[3])})
                                                              .eps(std::stod(args[4]))
                                                              .weight_decay(std::stod(args[5])));
       const auto loss = torch::nn::functional::cross_entropy(model->forward(model_input(work)),
                                                              peer::load(work, "input.safetensors")["labels"]);
       loss.backward();
       optimizer.step();
       weights::StateDict out;
       out.insert("loss", loss.detach());
       for (const auto& item : weights::state_dict(*model)) out.insert("param." + item.key(), item.value());
       peer::save(work, "step.ftopt.safetensors", out);
     }},
    {"lora-load", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 2) throw std::runtime_error("lora-load needs MODEL DIR");
       auto model = classifier_model(args[0], work);
       peer::load_peft_lora(*model, work / args[1]);
       weights::StateDict out;
       out.insert("logits", eval_logits(model, work));
       peer::save(work, args[1] + ".ftopt.safetensors", out);
     }},
    {"lora-save", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 2) throw std::runtime_error("lora-save needs MODEL DIR");
       auto model = classifier_model(args[0], work);
       peft::Lora lora({.r = 8, .alpha = 16, .dropout = 0.1, .targets = {"query", "value"}});
       lora.validate();
       lora.attach(*model);
       peer::perturb_trainable(*model);  // B starts at zero: give every adapter tensor a value
       peft::save_adapter(*model, lora, work / args[1]);
       weights::StateDict out;
       out.insert("logits", eval_logits(model, work));
       peer::save(work, args[1] + ".ftopt.safetensors", out);
     }},
  });
}
