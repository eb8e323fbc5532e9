#pragma once
/// Pretrained decoders into models::Llama, from the two places users keep them:
///   - a Hugging Face folder, as AutoModelForCausalLM.from_pretrained(folder) reads it:
///     config.json, read as its model_type's family reads it (models/decoder_families.hpp: llama,
///     mistral, qwen2, gemma3_text; anything models::Llama cannot be is an error naming the field
///     and its value), and model.safetensors, or the shards model.safetensors.index.json lists;
///   - a GGUF file, as transformers' GGUF loader reads it: the config from the metadata
///     (`<arch>.block_count`, `.embedding_length`, ...), the tensors dequantized and renamed by
///     the family's table (blk.N.attn_q -> model.layers.N.self_attn.q_proj, ...), and what
///     llama.cpp's converter changed undone: each head's q and k rows of a llama model
///     interleaved (convert_hf_to_gguf.py, LlamaModel.permute), Gemma's norms stored as 1 + w.
/// A tensor the model lacks, or one the file lacks, is an error naming the file and the names.
///
///   auto [llm, report] = ftopt::models::load_llama(folder);                    // uses JSON
///   auto [smol, _] = ftopt::models::load_llama_gguf("SmolLM2-135M-Instruct.Q4_1.gguf");
/// and back out as a folder transformers loads (after peft.merge(*model) folded the adapters in),
/// with the config of the model's family:
///   ftopt::models::save_llama(*smol, "smollm2-bbc");           // config.json + model.safetensors

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/detail/json.hpp>
#include <ftopt/error.hpp>
#include <ftopt/models/decoder_families.hpp>
#include <ftopt/models/llama.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/storage/ggml.hpp>
#include <ftopt/storage/ggml_blocks.hpp>
#include <ftopt/storage/q4_1.hpp>
#include <ftopt/weights/files.hpp>
#include <ftopt/weights/gguf.hpp>
#include <ftopt/weights/safetensors.hpp>

namespace ftopt::models {

/// A model and what loading it found.
struct LoadedLlama {
  Llama model;
  weights::LoadReport report;
};

/// load_llama_gguf_packed's result: the model, with the kept layers' float weights empty, what
/// loading found, and the weights kept in the file's blocks by Hugging Face name, for
/// peft::QLora<storage::Ggml>::use_packed (or QLora<storage::Q4_1>'s, over Q4_1 blocks).
struct PackedLlama {
  Llama model;
  weights::LoadReport report;
  std::map<std::string, storage::PackedWeight> packed;
};

/// LlamaOptions from a config.json: the family its model_type names (models/decoder_families.hpp)
/// reads it as transformers' config class of that family does.
template <class Json = nlohmann::json>
LlamaOptions llama_options_from_config(const std::filesystem::path& path) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const std::string where = "models::Llama: " + path.string();
  const Json c = ftopt::detail::read_json_file<Json>(path, where);
  check(c.is_object(), where, ": not a JSON object");
  LlamaOptions o;
  try {
    auto get = [&](const Json& from, const char* key, auto fallback) {
      return ftopt::detail::json_value_or(from, key, fallback, where);
    };
    visit_family_of_model_type(get(c, "model_type", std::string()), where,
                               [&](auto family) { decltype(family)::read_config(c, get, where, o); });
  } catch (const typename Json::exception& e) {  // a field of the wrong JSON type
    fail(where, ": ", e.what());
  }
  try {
    o.validate();
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  return o;
}

namespace detail {
/// Loads `state` into `model`: what a tied model does not have (lm_head.weight) and
/// transformers' rotary buffer are dropped, as transformers drops them; the rest must match, and
/// the names in `packed` (weights kept in the file's blocks) are the only ones allowed missing.
inline LoadedLlama load_llama_state(Llama model, weights::StateDict state, const std::string& where,
                                    const std::map<std::string, storage::PackedWeight>& packed = {}) {
  weights::StateDict kept;
  for (const auto& item : state) {
    if (item.key().ends_with("rotary_emb.inv_freq")) continue;
    if (model->options().tie_word_embeddings && item.key() == "lm_head.weight") continue;
    kept.insert(item.key(), item.value());
  }
  auto report = weights::load_state_dict(*model, kept, {.strict = packed.empty()}, where);
  if (!packed.empty()) {
    const bool only_packed_missing = std::ranges::all_of(report.missing, [&](const auto& n) { return packed.count(n) > 0; });
    check(report.unexpected.empty() && only_packed_missing, where, ": ", report.summary());
  }
  return {std::move(model), std::move(report)};
}
inline LoadedLlama load_llama_state(const LlamaOptions& options, weights::StateDict state, const std::string& where) {
  return load_llama_state(Llama(options), std::move(state), where);
}
} // namespace detail

/// models::Llama from a Hugging Face folder: config.json and model.safetensors, or the shards
/// model.safetensors.index.json names.
template <class Json = nlohmann::json>
LoadedLlama load_llama(const std::filesystem::path& folder) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  check(std::filesystem::is_directory(folder), "models::load_llama: ", folder.string(), " is not a folder");
  const LlamaOptions options = llama_options_from_config<Json>(folder / "config.json");
  weights::StateDict state;
  const auto index = folder / "model.safetensors.index.json";
  if (std::filesystem::is_regular_file(index)) {
    const std::string where = "models::load_llama: " + index.string();
    const Json j = ftopt::detail::read_json_file<Json>(index, where);
    check(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), where, ": no weight_map object");
    std::set<std::string> shards;
    for (const auto& file : j["weight_map"]) {
      check(file.is_string(), where, ": weight_map holds ", file.dump(), ", not a file name");
      shards.insert(file.template get<std::string>());
    }
    for (const auto& shard : shards)
      for (const auto& item : weights::load_file<Json>(folder / shard)) state.insert(item.key(), item.value());
  } else {
    const auto file = folder / "model.safetensors";
    check(std::filesystem::is_regular_file(file), "models::load_llama: ", folder.string(),
          " has neither model.safetensors nor model.safetensors.index.json");
    state = weights::load_file<Json>(file);
  }
  return detail::load_llama_state(options, std::move(state), "models::load_llama: " + folder.string());
}

namespace detail {
/// Llama 3's rope scaling from a GGUF's rope_freqs.weight: llama.cpp's converter writes the
/// scaling as one factor per frequency (each frequency divided by it: 1 for short wavelengths,
/// `factor` for long ones, blended between), not as parameters. The parameters are found again
/// by trying Llama 3's low and high frequency factors (1 and 4) with the usual original context
/// lengths; factors no such scaling gives are an error naming them.
inline Llama3RopeScaling llama3_scaling_of(const weights::Gguf& file, const LlamaOptions& o, const std::string& where) {
  const at::Tensor factors = file.dequantize("rope_freqs.weight").flatten();
  check(factors.numel() == o.dim_of_head() / 2, where, ": rope_freqs.weight holds ", factors.numel(),
        " factors; the head dimension ", o.dim_of_head(), " has ", o.dim_of_head() / 2, " frequencies");
  LlamaOptions plain = o;
  plain.rope_scaling.reset();
  const at::Tensor inverse = rope_inverse_frequencies(plain);
  for (const std::int64_t original : {8192, 4096, 2048, 16384, 32768, 65536, 131072}) {
    plain.rope_scaling = Llama3RopeScaling{.factor = factors.max().item<double>(), .low_freq_factor = 1.0,
                                           .high_freq_factor = 4.0, .original_max_position_embeddings = original};
    if (at::allclose(rope_inverse_frequencies(plain), inverse / factors, 1e-5, 0.0)) return *plain.rope_scaling;
  }
  fail(where, ": rope_freqs.weight's factors (from ", factors.min().item<double>(), " to ",
       factors.max().item<double>(), ") are not Llama 3's rope scaling (low and high frequency factors 1 and 4), "
       "the only per-frequency scaling models::Llama applies");
}
} // namespace detail

/// LlamaOptions from a GGUF file's metadata: the keys every architecture has
/// (`<arch>.block_count`, `.embedding_length`, ...), then those of the family its
/// general.architecture names (models/decoder_families.hpp). Tied when the file has no
/// output.weight, as llama.cpp's converter leaves it out for tied models. A rope_freqs.weight
/// tensor (Llama 3.1 and later) becomes Llama 3's rope scaling.
inline LlamaOptions llama_options_from_gguf(const weights::Gguf& file) {
  const std::string where = "models::Llama: " + file.path().string();
  const std::string arch = file.string("general.architecture");
  LlamaOptions o;
  visit_family_of_gguf(arch, where, [&](auto family) {
    auto key = [&](const char* name) { return arch + "." + name; };
    o.layers = file.integer(key("block_count"));
    o.hidden = file.integer(key("embedding_length"));
    o.intermediate = file.integer(key("feed_forward_length"));
    o.heads = file.integer(key("attention.head_count"));
    o.kv_heads = file.has(key("attention.head_count_kv")) ? file.integer(key("attention.head_count_kv")) : o.heads;
    o.max_position_embeddings = file.integer(key("context_length"));
    o.rms_norm_eps = file.real(key("attention.layer_norm_rms_epsilon"));
    o.rope_theta = file.has(key("rope.freq_base")) ? file.real(key("rope.freq_base")) : 10000.0;
    if (file.has(key("attention.key_length"))) o.head_dim = file.integer(key("attention.key_length"));
    o.vocab_size = file.has(key("vocab_size")) ? file.integer(key("vocab_size"))
                                               : file.tensor("token_embd.weight").shape.front();
    o.qkv_bias = file.has_tensor("blk.0.attn_q.bias");
    o.o_bias = file.has_tensor("blk.0.attn_output.bias");
    o.tie_word_embeddings = !file.has_tensor("output.weight");
    if (file.has_tensor("rope_freqs.weight")) o.rope_scaling = detail::llama3_scaling_of(file, o, where);
    decltype(family)::read_gguf(file, o);
  });
  try {
    o.validate();
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  return o;
}

/// The Hugging Face name of a GGUF tensor in a file of architecture `arch` (its family's tensor
/// table), or "" for one with none.
inline std::string llama_name_of_gguf(const std::string& name, const std::string& arch = "llama") {
  static const std::map<std::string, std::string> top = {
      {"token_embd.weight", "model.embed_tokens.weight"}, {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  if (const auto found = top.find(name); found != top.end()) return found->second;
  if (!name.starts_with("blk.")) return "";
  const auto dot = name.find('.', 4);
  const auto last = name.rfind('.');
  if (dot == std::string::npos || last <= dot) return "";
  const std::string layer = name.substr(4, dot - 4), part = name.substr(dot + 1, last - dot - 1);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return "";
  for (const auto& row : gguf_layout_of(arch, "models::llama_name_of_gguf").layer_tensors)
    if (row.gguf == part) return "model.layers." + layer + "." + std::string(row.hf) + name.substr(last);
  return "";
}

/// Undoes llama.cpp's rotary interleave of q or k rows (transformers' reverse_permute_weights):
/// per head, the rows [r0, r1, r2, r3, ...] of the file are [first half 0, second half 0, ...].
/// Works along dim 0 of weights, biases and raw rows of quantized blocks alike.
inline at::Tensor unpermute_rotary_rows(const at::Tensor& rows, std::int64_t heads) {
  std::vector<std::int64_t> shape = {heads, rows.size(0) / heads / 2, 2};
  for (std::int64_t d = 1; d < rows.dim(); ++d) shape.push_back(rows.size(d));
  return rows.reshape(shape).transpose(1, 2).reshape(rows.sizes());
}

namespace detail {
/// The Hugging Face name of GGUF tensor t where it stays in the file's blocks: a weight in blocks
/// `Format` keeps (storage::Q4_1: Q4_1's; storage::Ggml: any block type ftopt reads) of a layer
/// `packed_targets` matches; else "".
template <storage::BlockFormat Format>
std::string kept_packed(const weights::GgufTensor& t, const nn::NamePatterns& packed_targets, const std::string& arch) {
  const std::string name = llama_name_of_gguf(t.name, arch);
  if (!Format::keeps(t.type) || !name.ends_with(".weight")) return "";
  const std::string module = name.substr(0, name.size() - 7);
  return std::ranges::any_of(packed_targets, [&](const auto& p) { return p.matches(module); }) ? name : "";
}
} // namespace detail

/// A GGUF file's tensors under Hugging Face's names: dequantized, or kept in the file's blocks.
struct LlamaGgufState {
  weights::StateDict state;
  std::map<std::string, storage::PackedWeight> packed;
};

/// The tensors of a decoder's GGUF file under Hugging Face's names, dequantized to `dtype`,
/// except the weights in blocks `Format` keeps of the layers `packed_targets` matches (as a PEFT
/// policy's targets match), which stay the file's blocks: views of the mapped file, or for q and
/// k (whose rows llama.cpp reorders; a row is whole blocks) a copy in Hugging Face's row order.
template <storage::BlockFormat Format = storage::Ggml>
LlamaGgufState llama_gguf_state(const weights::Gguf& file, const LlamaOptions& options, at::ScalarType dtype,
                                const nn::NamePatterns& packed_targets) {
  const std::string where = "models::Llama: " + file.path().string();
  const std::string arch = file.string("general.architecture");
  const GgufRows rows = gguf_layout_of(arch, where).rows;
  const bool permuted = rows == GgufRows::InterleavedRotary;
  const bool offset_norms = rows == GgufRows::NormsPlusOne;
  LlamaGgufState out;
  std::vector<std::string> unknown;
  for (const auto& t : file.tensors()) {
    const std::string name = llama_name_of_gguf(t.name, arch);
    if (t.name == "rope_freqs.weight" && options.rope_scaling) continue;  // in the options
    if (name.empty()) {
      unknown.push_back(t.name);
      continue;
    }
    auto unpermuted = [&](at::Tensor rows) {
      if (permuted && name.find("self_attn.q_proj.") != std::string::npos) rows = unpermute_rotary_rows(rows, options.heads);
      if (permuted && name.find("self_attn.k_proj.") != std::string::npos)
        rows = unpermute_rotary_rows(rows, options.kv_heads);
      return rows.contiguous();
    };
    if (!detail::kept_packed<Format>(t, packed_targets, arch).empty()) {
      const auto blocks = Format::from_blocks(file.bytes(t), t.type, t.shape);
      out.packed.emplace(name, Format::from_blocks(unpermuted(blocks.data).flatten(), t.type, t.shape));
    } else if (offset_norms && t.name.ends_with("norm.weight")) {
      out.state.insert(name, (file.dequantize(t.name, at::kFloat) - 1).to(dtype));
    } else {
      out.state.insert(name, unpermuted(file.dequantize(t.name, dtype)));
    }
  }
  if (!unknown.empty()) {
    std::string names;
    for (const auto& n : unknown) names += (names.empty() ? "" : ", ") + n;
    fail(where, ": tensors models::Llama has no place for: ", names);
  }
  return out;
}

/// The tensors of a decoder's GGUF file under Hugging Face's names, dequantized to `dtype`.
inline weights::StateDict llama_state_from_gguf(const weights::Gguf& file, const LlamaOptions& options,
                                                at::ScalarType dtype = at::kFloat) {
  return llama_gguf_state(file, options, dtype, {}).state;
}

/// models::Llama from a GGUF file, every weight dequantized to float32.
inline LoadedLlama load_llama_gguf(const std::filesystem::path& path) {
  const weights::Gguf file(path);
  const LlamaOptions options = llama_options_from_gguf(file);
  return detail::load_llama_state(options, llama_state_from_gguf(file, options),
                                  "models::load_llama_gguf: " + path.string());
}

/// models::Llama from a GGUF file for QLoRA over the file's own blocks: the weights of the layers
/// `targets` matches (as a PEFT policy's targets do: pass the LoraOptions' `targets`) that are in
/// blocks `Format` keeps (storage::Ggml, the default: every block type ftopt reads, each weight in
/// its own; storage::Q4_1: Q4_1 blocks only) stay as the file holds them, in PackedLlama::packed,
/// and those layers' float weights are left empty, so the base is never dequantized to float32
/// and packed again; everything else is dequantized.
///
///   auto [model, report, packed] = ftopt::models::load_llama_gguf_packed(path, lora_options.targets);
///   ftopt::peft::QLora<ftopt::storage::Ggml> qlora(lora_options);
///   qlora.use_packed(std::move(packed));   // before the Trainer's prepare(model)
template <storage::BlockFormat Format = storage::Ggml>
PackedLlama load_llama_gguf_packed(const std::filesystem::path& path, const nn::NamePatterns& targets) {
  const weights::Gguf file(path);
  const LlamaOptions options = llama_options_from_gguf(file);
  const std::string where = "models::load_llama_gguf_packed: " + path.string();
  // The model first, and the kept layers' float weights freed before anything is dequantized.
  Llama model(options);
  auto modules = model->named_modules("", /*include_self=*/false);
  for (const auto& t : file.tensors()) {
    const std::string name = detail::kept_packed<Format>(t, targets, file.string("general.architecture"));
    if (name.empty()) continue;
    auto* found = modules.find(name.substr(0, name.size() - 7));
    auto* layer = found != nullptr ? (*found)->as<nn::LinearImpl>() : nullptr;
    check(layer != nullptr, where, ": ", name, " would stay packed but is not an nn::Linear's weight");
    torch::NoGradGuard no_grad;
    layer->weight.set_data(at::empty({0}, layer->weight.options()));
  }
  LlamaGgufState state = llama_gguf_state<Format>(file, options, at::kFloat, targets);
  check(!state.packed.empty(), where, ": no weight of a layer the targets match is in blocks ", Format::lora_name,
        " keeps");
  auto [loaded, report] = detail::load_llama_state(model, std::move(state.state), where, state.packed);
  return {std::move(loaded), std::move(report), std::move(state.packed)};
}

/// The Hugging Face names of a decoder's tensors with these options, in the order transformers
/// lists them; no lm_head.weight when tied, as save_pretrained leaves it out.
inline std::vector<std::string> llama_tensor_names(const LlamaOptions& o) {
  std::vector<std::string> names = {"model.embed_tokens.weight"};
  for (std::int64_t i = 0; i < o.layers; ++i) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      names.push_back(layer + "self_attn." + p + ".weight");
      if (std::string_view(p) == "o_proj" ? o.o_bias : o.qkv_bias) names.push_back(layer + "self_attn." + p + ".bias");
    }
    if (o.qk_norm)
      for (const char* p : {"q_norm", "k_norm"}) names.push_back(layer + "self_attn." + p + ".weight");
    for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
      names.push_back(layer + "mlp." + p + ".weight");
      if (o.mlp_bias) names.push_back(layer + "mlp." + p + ".bias");
    }
    names.push_back(layer + "input_layernorm.weight");
    names.push_back(layer + "post_attention_layernorm.weight");
    if (o.sandwich_norms)
      for (const char* p : {"pre_feedforward_layernorm", "post_feedforward_layernorm"})
        names.push_back(layer + p + ".weight");
  }
  names.push_back("model.norm.weight");
  if (!o.tie_word_embeddings) names.push_back("lm_head.weight");
  return names;
}

/// config.json's fields for these options, as transformers 5 writes the config of the family
/// whose models they describe (models/decoder_families.hpp); `dtype` names the saved tensors'
/// type. Options no family's config can hold are an error naming them.
template <class Json = nlohmann::ordered_json>
Json llama_config_json(const LlamaOptions& o, at::ScalarType dtype) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  check(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
        "models::save_llama: dtype ", at::toString(dtype), " is not float32, bfloat16 or float16");
  Json c;
  visit_family_of_options(o, "models::save_llama", [&](auto family) { decltype(family)::write_config(o, c); });
  c["dtype"] = dtype == at::kFloat ? "float32" : dtype == at::kBFloat16 ? "bfloat16" : "float16";
  return c;
}

/// Writes `model` into `folder` (created if needed) as transformers' save_pretrained does:
/// config.json and model.safetensors under Hugging Face's names, in `dtype`. Adapters must be
/// folded in first (peft.merge(*model)): a layer whose forward still differs from its weight is
/// an error naming it, and nothing is written; the adapters' own tensors are left out. Each file
/// appears whole or not at all (the tensors first, then the config that makes the folder
/// loadable). The tokenizer is not written: transformers reads it from the source model.
template <class Json = nlohmann::ordered_json>
void save_llama(const LlamaImpl& model, const std::filesystem::path& folder, at::ScalarType dtype = at::kFloat) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const std::string where = "models::save_llama: " + folder.string();
  const Json config = llama_config_json<Json>(model.options(), dtype);
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    if (const auto* layer = item.value()->as<nn::LinearImpl>())
      check(layer->effect() == nn::Effect::none, where, ": layer ", item.key(), " still has an adapter in its "
            "forward; fold it into the weights first (the Peft policy's merge)");
  const auto own = weights::state_dict(model);
  weights::StateDict state;
  for (const auto& name : llama_tensor_names(model.options())) {
    check(own.contains(name), where, ": the model has no tensor ", name);
    state.insert(name, own[name].detach().to(dtype));
  }
  std::filesystem::create_directories(folder);
  weights::save_safetensors<Json>(folder / "model.safetensors", state, {{"format", "pt"}});
  ftopt::detail::write_atomically(folder / "config.json", "models::save_llama",
                                  [&](std::ostream& out) { out << config.dump(2) << '\n'; });
}

} // namespace ftopt::models
