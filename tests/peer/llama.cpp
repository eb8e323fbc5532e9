// The C++ side of tests/peer/llama.py and tests/peer/families.py: weights::Gguf, text::ByteLevelBpe,
// text::SentencePieceBpe and models::Llama on real GGUF files (SmolLM2-135M-Instruct,
// Qwen2.5-Coder-0.5B-Instruct, Gemma 3 270M) and on folders transformers wrote.
//   tokenize GGUF TOKENIZER_JSON TEXTS WORK  ids of every line of TEXTS (JSON strings), with the
//                                     tokenizer of the GGUF's metadata and with TOKENIZER_JSON
//                                     -> tokenize.ftopt.safetensors {gguf, json, lengths,
//                                     json_lengths, decoded_ok}
//   sp-tokenize GGUF TEXTS WORK       text::SentencePieceBpe's ids of every line of TEXTS (<bos> first
//                                     where the file adds it) -> sp-tokenize.ftopt.safetensors {ids,
//                                     lengths, decoded_ok (decode after the <bos> gives the text)}
//   sp-generate GGUF WORK             the text of generate.jsonl through text::SentencePieceBpe (<bos>
//                                     first), then greedy decoding of exactly 32 tokens
//                                     -> sp-generate.ftopt.safetensors {prompt, answer}
//   chat GGUF TEMPLATE CONVERSATIONS WORK  each line of CONVERSATIONS ([add_generation_prompt,
//                                     [role, content], ...]) rendered by text::ChatTemplate TEMPLATE
//                                     (chatml, gemma3, or file: the one GGUF ships) -> chat.TEMPLATE.jsonl (the texts) and its
//                                     ids by text::GgufTokenizer -> chat.TEMPLATE.ftopt.safetensors
//                                     {ids, lengths}
//   tensors GGUF WORK                 every tensor under transformers' names, dequantized to
//                                     float32 -> tensors.ftopt.safetensors
//   q4_1 GGUF WORK                    storage::Q4_1's blocks of q4_1.input.safetensors' "w" and, for every
//                                     Q4_1 tensor of GGUF, whether quantize(dequantize(blocks)) gives
//                                     its bytes back -> q4_1.ftopt.safetensors {blocks, same, tensors},
//                                     with "w" in storage::ggml::quantize's other types {q8_0, q4_0,
//                                     q5_0, q5_1}
//   blocks WORK                       storage::ggml::dequantize of blocks.input.safetensors (raw
//                                     blocks named by their type: q4_k, q5_0, ...) ->
//                                     blocks.ftopt.safetensors, the same names
//   fused-loss WORK                   loss::linear_cross_entropy of fused.input.safetensors {h, w,
//                                     labels} -> fused.ftopt.safetensors {loss, grad_h, grad_w}
//   generate GGUF WORK                the file's chat prompt (ChatML with its template's default system
//                                     prompt) for the user message of generate.jsonl,
//                                     then greedy decoding of exactly 32 tokens (no stop token)
//                                     -> generate.ftopt.safetensors {prompt, answer}, and
//                                     the prompt's text as generate.prompt.txt
//   lora-load FOLDER DIR WORK         PEFT's LoRA adapter in DIR over the model of FOLDER
//                                     -> DIR.ftopt.safetensors {logits} on input.safetensors
//   lora-save FOLDER DIR WORK         LoRA (r 8, alpha 16, the seven projections) with non-zero
//                                     adapters over FOLDER's model, saved to DIR -> its logits
//   qlora-save GGUF DIR WORK          QLoRA (storage::Ggml: the seven projections' blocks as the file
//                                     holds them, whatever their types) with non-zero adapters, saved
//                                     as PEFT's files to DIR -> DIR.ftopt.safetensors {logits,
//                                     base_bytes, file_bytes, bases, type.<T> (bases per block type)}
//   merge-save SOURCE DIR WORK        adapters with non-zero values over SOURCE's model (QLoRA over
//                                     the file's blocks for a GGUF, LoRA over float for a folder; r 8, the seven
//                                     projections), merged and saved with models::save_llama to DIR
//                                     -> DIR.ftopt.safetensors {base, adapted, merged} (logits)
//   packed GGUF WORK                  the documents of packed.input.safetensors {ids (concatenated),
//                                     lengths} packed by data::pack_sequences into one row, and
//                                     the model's logits on it -> packed.ftopt.safetensors {input,
//                                     labels, logits}
//   logits SOURCE WORK                models::Llama from a GGUF file or a transformers folder on
//                                     input.safetensors (input_ids, attention_mask) -> SOURCE's
//                                     file name + .ftopt.safetensors {logits} (float32, eval)
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <ftopt/data/packing.hpp>
#include <ftopt/loss/causal_lm.hpp>
#include <ftopt/models/generate.hpp>
#include <ftopt/models/llama.hpp>
#include <ftopt/models/llama_pretrained.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/peft/files/lora.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/peft/qlora.hpp>
#include <ftopt/storage/ggml.hpp>
#include <ftopt/storage/ggml_blocks.hpp>
#include <ftopt/storage/q4_1.hpp>
#include <ftopt/text/bpe_files.hpp>
#include <ftopt/text/chat_template.hpp>
#include <ftopt/text/gguf_tokenizer.hpp>
#include <ftopt/text/sentencepiece.hpp>
#include <ftopt/weights/gguf.hpp>

#include "lora_adapter.hpp"
#include "peer.hpp"

namespace {
using namespace ftopt;

/// The seven projections PEFT users adapt in a Llama.
const nn::NamePatterns seven = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

models::Llama load_source(const std::filesystem::path& source) {
  return source.extension() == ".gguf" ? models::load_llama_gguf(source).model : models::load_llama(source).model;
}

/// The logits of the model (eval, no gradients) on input.safetensors (ids and attention mask).
at::Tensor eval_logits(models::Llama& model, const std::filesystem::path& work) {
  model->eval();
  torch::NoGradGuard no_grad;
  auto input = peer::load(work, "input.safetensors");
  return model(torch::stack({input["input_ids"], input["attention_mask"]}, 1));
}

void save_logits(models::Llama& model, const std::filesystem::path& work, const std::string& name) {
  weights::StateDict out;
  out.insert("logits", eval_logits(model, work));
  peer::save(work, name + ".ftopt.safetensors", out);
}
} // namespace

int main(int argc, char** argv) {
  return peer::main(argc, argv, {
    {"tokenize", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 3) throw std::runtime_error("tokenize needs GGUF TOKENIZER_JSON TEXTS");
       const auto from_gguf = text::bpe_from_gguf(weights::Gguf(args[0]));
       const auto from_json = text::bpe_from_tokenizer_json(args[1]);
       std::vector<std::int64_t> gguf_ids, json_ids, lengths, json_lengths, decoded_ok;
       for (const auto& t : peer::read_json_lines(work / args[2])) {
         const auto a = from_gguf.encode(t, "texts"), b = from_json.encode(t, "texts");
         gguf_ids.insert(gguf_ids.end(), a.begin(), a.end());
         json_ids.insert(json_ids.end(), b.begin(), b.end());
         lengths.push_back(static_cast<std::int64_t>(a.size()));
         json_lengths.push_back(static_cast<std::int64_t>(b.size()));
         decoded_ok.push_back(from_gguf.decode(a) == t ? 1 : 0);
       }
       weights::StateDict out;
       out.insert("gguf", torch::tensor(gguf_ids, torch::kLong));
       out.insert("json", torch::tensor(json_ids, torch::kLong));
       out.insert("lengths", torch::tensor(lengths, torch::kLong));
       out.insert("json_lengths", torch::tensor(json_lengths, torch::kLong));
       out.insert("decoded_ok", torch::tensor(decoded_ok, torch::kLong));
       peer::save(work, "tokenize.ftopt.safetensors", out);
     }},
    {"sp-tokenize", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 2) throw std::runtime_error("sp-tokenize needs GGUF TEXTS");
       const auto sp = text::sentencepiece_from_gguf(weights::Gguf(args[0]));
       std::vector<std::int64_t> ids, lengths, decoded_ok;
       for (const auto& t : peer::read_json_lines(work / args[1])) {
         const auto a = sp.encode(t, "texts");
         ids.insert(ids.end(), a.begin(), a.end());
         lengths.push_back(static_cast<std::int64_t>(a.size()));
         const auto body = std::span<const std::int64_t>(a).subspan(!a.empty() && a[0] == sp.bos_id() ? 1 : 0);
         decoded_ok.push_back(sp.decode(body) == t ? 1 : 0);
       }
       weights::StateDict out;
       out.insert("ids", torch::tensor(ids, torch::kLong));
       out.insert("lengths", torch::tensor(lengths, torch::kLong));
       out.insert("decoded_ok", torch::tensor(decoded_ok, torch::kLong));
       peer::save(work, "sp-tokenize.ftopt.safetensors", out);
     }},
    {"sp-generate", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("sp-generate needs GGUF");
       const auto sp = text::sentencepiece_from_gguf(weights::Gguf(args[0]));
       const auto ids = sp.encode(peer::read_json_lines(work / "generate.jsonl").at(0), "the prompt");
       auto [model, report] = models::load_llama_gguf(args[0]);
       const auto answer = models::generate(*model, ids, {.max_new_tokens = 32});  // no stop token: all 32
       weights::StateDict out;
       out.insert("prompt", torch::tensor(ids, torch::kLong));
       out.insert("answer", torch::tensor(answer, torch::kLong));
       peer::save(work, "sp-generate.ftopt.safetensors", out);
     }},
    {"chat", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       // Each line of CONVERSATIONS: [add_generation_prompt, [role, content], ...] as JSON.
       if (args.size() != 3) throw std::runtime_error("chat needs GGUF TEMPLATE CONVERSATIONS");
       const weights::Gguf file(args[0]);
       const text::GgufTokenizer tokenizer(file);
       const auto chat = args[1] == "file" ? text::ChatTemplate::of(file.string("tokenizer.chat_template"))
                                           : text::ChatTemplate::named(args[1]);
       std::ifstream in(work / args[2], std::ios::binary);
       std::ofstream rendered(work / ("chat." + args[1] + ".jsonl"), std::ios::binary);
       std::vector<std::int64_t> ids, lengths;
       for (std::string line; std::getline(in, line);) {
         const auto j = nlohmann::json::parse(line);
         std::vector<text::ChatMessage> messages;
         for (std::size_t m = 1; m < j.size(); ++m)
           messages.push_back({j[m][0].get<std::string>(), j[m][1].get<std::string>()});
         const std::string prompt = chat.render(messages, j[0].get<bool>());
         rendered << nlohmann::json(prompt).dump() << '\n';
         const auto encoded = tokenizer.encode(prompt, "the conversation");
         ids.insert(ids.end(), encoded.begin(), encoded.end());
         lengths.push_back(static_cast<std::int64_t>(encoded.size()));
       }
       weights::StateDict out;
       out.insert("ids", torch::tensor(ids, torch::kLong));
       out.insert("lengths", torch::tensor(lengths, torch::kLong));
       peer::save(work, "chat." + args[1] + ".ftopt.safetensors", out);
     }},
    {"tensors", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("tensors needs GGUF");
       const weights::Gguf file(args[0]);
       peer::save(work, "tensors.ftopt.safetensors",
                  models::llama_state_from_gguf(file, models::llama_options_from_gguf(file)));
     }},
    {"q4_1", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("q4_1 needs GGUF");
       const weights::Gguf file(args[0]);
       std::int64_t tensors = 0, same = 0;
       for (const auto& t : file.tensors()) {
         if (t.type != storage::ggml::Type::Q4_1) continue;
         ++tensors;
         const auto packed = storage::Q4_1::from_blocks(file.bytes(t), t.shape);
         same += at::equal(storage::Q4_1().quantize(storage::Q4_1::dequantize(packed, at::kFloat)).data, packed.data);
       }
       weights::StateDict out;
       const auto w = peer::load(work, "q4_1.input.safetensors")["w"];
       out.insert("blocks", storage::Q4_1().quantize(w).data);
       using storage::ggml::Type;
       for (const auto& [key, type] : {std::pair{"q8_0", Type::Q8_0}, {"q4_0", Type::Q4_0}, {"q5_0", Type::Q5_0},
                                       {"q5_1", Type::Q5_1}})
         out.insert(key, storage::ggml::quantize(w, type));
       out.insert("same", torch::tensor(same));
       out.insert("tensors", torch::tensor(tensors));
       peer::save(work, "q4_1.ftopt.safetensors", out);
     }},
    {"fused-loss", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (!args.empty()) throw std::runtime_error("fused-loss takes no arguments");
       auto in = peer::load(work, "fused.input.safetensors");
       auto h = in["h"].requires_grad_(true), w = in["w"].requires_grad_(true);
       const auto value = loss::linear_cross_entropy(h, w, in["labels"]);
       value.backward();
       weights::StateDict out;
       out.insert("loss", value.detach());
       out.insert("grad_h", h.grad());
       out.insert("grad_w", w.grad());
       auto h_only = in["h"].detach().clone().requires_grad_(true);  // a frozen head: the one-sweep path
       const auto frozen = loss::linear_cross_entropy(h_only, in["w"].detach(), in["labels"]);
       frozen.backward();
       out.insert("frozen_loss", frozen.detach());
       out.insert("frozen_grad_h", h_only.grad());
       peer::save(work, "fused.ftopt.safetensors", out);
     }},
    {"generate", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("generate needs GGUF");
       const weights::Gguf file(args[0]);
       const auto bpe = text::bpe_from_gguf(file);
       const std::string prompt = text::chatml({{"user", peer::read_json_lines(work / "generate.jsonl").at(0)}}, true,
                                               text::chatml_default_system(file.string("tokenizer.chat_template")));
       std::ofstream(work / "generate.prompt.txt", std::ios::binary) << prompt;
       const auto ids = bpe.encode(prompt, "the prompt");
       auto [model, report] = models::load_llama_gguf(args[0]);
       const auto answer = models::generate(*model, ids, {.max_new_tokens = 32});  // no stop token: all 32
       weights::StateDict out;
       out.insert("prompt", torch::tensor(ids, torch::kLong));
       out.insert("answer", torch::tensor(answer, torch::kLong));
       peer::save(work, "generate.ftopt.safetensors", out);
     }},
    {"logits", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("logits needs SOURCE (a .gguf file or a folder)");
       const std::filesystem::path source = args[0];
       auto model = load_source(source);
       save_logits(model, work, source.filename().string());
     }},
    {"lora-load", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 2) throw std::runtime_error("lora-load needs FOLDER DIR");
       auto model = models::load_llama(args[0]).model;
       peer::load_peft_lora(*model, work / args[1]);
       save_logits(model, work, args[1]);
     }},
    {"lora-save", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 2) throw std::runtime_error("lora-save needs FOLDER DIR");
       auto model = models::load_llama(args[0]).model;
       peft::Lora lora({.r = 8, .alpha = 16, .targets = seven});
       lora.validate();
       lora.attach(*model);
       peer::perturb_trainable(*model);  // B starts at zero: give every adapter tensor a value
       peft::save_adapter(*model, lora, work / args[1]);
       save_logits(model, work, args[1]);
     }},
    {"qlora-save", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       // QLoRA over the file's own blocks of every type (storage::Ggml): the bases' bytes against
       // the file's tensors', the adapter as PEFT's files, the logits.
       if (args.size() != 2) throw std::runtime_error("qlora-save needs GGUF DIR");
       auto [model, report, packed] = models::load_llama_gguf_packed(args[0], seven);
       const weights::Gguf file(args[0]);
       std::int64_t file_bytes = 0;
       std::map<std::string, std::int64_t> types;
       for (const auto& t : file.tensors()) {
         const auto name = models::llama_name_of_gguf(t.name);
         if (!packed.contains(name)) continue;
         file_bytes += static_cast<std::int64_t>(t.bytes);
         ++types[storage::ggml::name_of(t.type)];
       }
       peft::QLora<storage::Ggml> qlora({.r = 8, .alpha = 16, .targets = seven});
       qlora.use_packed(std::move(packed));
       torch::manual_seed(0);  // A's initialisation
       qlora.attach(*model);
       peer::perturb_trainable(*model, 0.01);  // B away from zero, the model still a language model
       peft::save_adapter(*model, qlora, work / args[1]);
       weights::StateDict out;
       out.insert("logits", eval_logits(model, work));
       out.insert("base_bytes", torch::tensor(qlora.base_bytes()));
       out.insert("file_bytes", torch::tensor(file_bytes));
       out.insert("bases", torch::tensor(static_cast<std::int64_t>(qlora.bases().size())));
       for (const auto& [type, count] : types) out.insert("type." + type, torch::tensor(count));
       peer::save(work, args[1] + ".ftopt.safetensors", out);
     }},
    {"merge-save", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 2) throw std::runtime_error("merge-save needs SOURCE DIR");
       const std::filesystem::path source = args[0];
       auto model = load_source(source);
       weights::StateDict out;
       out.insert("base", eval_logits(model, work));
       auto adapt_merge_save = [&](auto&& policy) {
         policy.validate();
         policy.attach(*model);
         peer::perturb_trainable(*model);
         out.insert("adapted", eval_logits(model, work));
         policy.merge(*model);
         out.insert("merged", eval_logits(model, work));
         models::save_llama(*model, work / args[1]);
       };
       const peft::LoraOptions options{.r = 8, .alpha = 16, .targets = seven};
       if (source.extension() == ".gguf") adapt_merge_save(peft::QLora<storage::Ggml>(options));
       else adapt_merge_save(peft::Lora(options));
       peer::save(work, args[1] + ".ftopt.safetensors", out);
     }},
    {"packed", [](const std::vector<std::string>& args, const std::filesystem::path& work) {
       if (args.size() != 1) throw std::runtime_error("packed needs GGUF");
       auto model = models::load_llama_gguf(args[0]).model;
       auto in = peer::load(work, "packed.input.safetensors");
       const auto ids = in["ids"].contiguous();
       const auto lengths = in["lengths"].contiguous();
       std::vector<data::TokenSequence> docs;
       std::int64_t at = 0;
       for (std::int64_t d = 0; d < lengths.numel(); ++d) {
         const auto n = lengths[d].item<std::int64_t>();
         std::vector<std::int64_t> doc(ids.data_ptr<std::int64_t>() + at, ids.data_ptr<std::int64_t>() + at + n);
         docs.push_back({doc, doc});
         at += n;
       }
       const auto packed = data::pack_sequences(docs, {.length = at});
       model->eval();
       torch::NoGradGuard no_grad;
       weights::StateDict out;
       out.insert("input", packed.input);
       out.insert("labels", packed.labels);
       out.insert("logits", model(packed.input));
       peer::save(work, "packed.ftopt.safetensors", out);
     }},
    {"blocks", [](const std::vector<std::string>&, const std::filesystem::path& work) {
       using storage::ggml::Type;
       auto in = peer::load(work, "blocks.input.safetensors");
       weights::StateDict out;
       for (const auto& [name, type] : {std::pair{"q4_k", Type::Q4_K}, {"q6_k", Type::Q6_K}, {"q5_0", Type::Q5_0},
                                        {"q5_1", Type::Q5_1}, {"q8_0", Type::Q8_0}, {"q4_0", Type::Q4_0},
                                        {"q4_1", Type::Q4_1}}) {
         const auto kind = *storage::ggml::layout(static_cast<std::uint32_t>(type));
         const at::Tensor& raw = in[name];
         out.insert(name, storage::ggml::dequantize(raw, type, {raw.numel() / kind.block_bytes * kind.block_values},
                                                    at::kFloat));
       }
       peer::save(work, "blocks.ftopt.safetensors", out);
     }},
  });
}
