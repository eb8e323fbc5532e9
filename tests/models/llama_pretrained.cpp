// Tests for include/ftopt/models/llama_pretrained.hpp: a model written out as llama.cpp's
// converter writes a GGUF (the q/k rows permuted by convert_hf_to_gguf.py's LlamaModel.permute,
// written here) and as transformers writes a folder (config.json, safetensors shards and their
// index) loads back into the same model; configs and files it cannot be are errors naming them.
// The real SmolLM2 GGUF and transformers-written folders: tests/peer/llama.py.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include <torch/torch.h>

#include <ftopt/json.hpp>
#include <ftopt/models/llama_pretrained.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/peft/qlora.hpp>
#include <ftopt/weights/safetensors.hpp>

#include "../support.hpp"
#include "../weights/gguf_builder.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {
/// Wide enough that every row is whole 32-value blocks.
models::LlamaOptions blocks_llama_options() {
  return {.vocab_size = 48, .hidden = 64, .intermediate = 96, .layers = 2, .heads = 4, .kv_heads = 2,
          .max_position_embeddings = 128, .rms_norm_eps = 1e-6, .rope_theta = 50000.0};
}
models::LlamaOptions tiny_llama_options(bool qwen = false) {
  return {.vocab_size = 48, .hidden = 16, .intermediate = 24, .layers = 2, .heads = 4, .kv_heads = 2,
          .max_position_embeddings = 128, .rms_norm_eps = 1e-6, .rope_theta = 50000.0, .qkv_bias = qwen,
          .tie_word_embeddings = !qwen};
}
/// Gemma 3's parts, the first layer sliding over 3 tokens, scores scaled by 1/sqrt(32) (head_dim 8).
models::LlamaOptions tiny_gemma_options() {
  auto o = tiny_llama_options();
  o.head_dim = 8;
  o.norm_unit_offset = o.qk_norm = o.sandwich_norms = o.scale_embeddings = true;
  o.activation = models::GateActivation::GeluTanh;
  o.sliding_window = 3;
  o.sliding_layers = {true, false};
  o.rope_local_theta = 100.0;
  o.query_pre_attn_scalar = 32;
  return o;
}

/// convert_hf_to_gguf.py, LlamaModel.permute:
///   w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
at::Tensor converter_permute(const at::Tensor& w, std::int64_t n_head) {
  std::vector<std::int64_t> shape = {n_head, 2, w.size(0) / n_head / 2};
  for (std::int64_t d = 1; d < w.dim(); ++d) shape.push_back(w.size(d));
  return w.reshape(shape).transpose(1, 2).reshape(w.sizes());
}

/// The model as llama.cpp's converter writes it (float32 tensors, GGUF names).
/// `blocks`: the modules ("self_attn.q_proj", ...) whose weights it writes in ggml blocks, and the type.
test::GgufBuilder gguf_of(models::Llama& model, const std::string& arch, const std::string& leave_out = "",
                          const std::map<std::string, storage::ggml::Type>& blocks = {}) {
  const auto& o = model->options();
  test::GgufBuilder g;
  g.string("general.architecture", arch)
      .u32(arch + ".block_count", static_cast<std::uint32_t>(o.layers))
      .u32(arch + ".embedding_length", static_cast<std::uint32_t>(o.hidden))
      .u32(arch + ".feed_forward_length", static_cast<std::uint32_t>(o.intermediate))
      .u32(arch + ".attention.head_count", static_cast<std::uint32_t>(o.heads))
      .u32(arch + ".attention.head_count_kv", static_cast<std::uint32_t>(o.kv_heads))
      .u32(arch + ".context_length", static_cast<std::uint32_t>(o.max_position_embeddings))
      .f32(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(o.rms_norm_eps))
      .f32(arch + ".rope.freq_base", static_cast<float>(o.rope_theta));
  const std::map<std::string, std::string> names = {
      {"input_layernorm", "attn_norm"}, {"post_attention_layernorm", "ffn_norm"}, {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},   {"self_attn.v_proj", "attn_v"},           {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},    {"mlp.up_proj", "ffn_up"},                {"mlp.down_proj", "ffn_down"}};
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    at::Tensor w = item.value().detach();
    std::string out;
    if (name == "model.embed_tokens.weight") out = "token_embd.weight";
    else if (name == "model.norm.weight") out = "output_norm.weight";
    else if (name == "lm_head.weight") out = "output.weight";
    else {
      const auto layer = name.substr(13, name.find('.', 13) - 13);  // model.layers.N.
      const auto rest = name.substr(13 + layer.size() + 1);
      const auto module = rest.substr(0, rest.rfind('.'));
      out = "blk." + layer + "." + names.at(module) + rest.substr(rest.rfind('.'));
      if (arch == "llama" && module == "self_attn.q_proj") w = converter_permute(w, o.heads);
      if (arch == "llama" && module == "self_attn.k_proj") w = converter_permute(w, o.kv_heads);
    }
    if (!leave_out.empty() && out.starts_with(leave_out)) continue;
    const auto dot = name.rfind('.');
    const auto module = name.substr(0, dot);
    const auto typed = std::ranges::find_if(blocks, [&](const auto& m) { return module.ends_with("." + m.first); });
    if (name.substr(dot) == ".weight" && typed != blocks.end()) {
      const auto bytes = storage::ggml::quantize(w, typed->second);
      g.tensor(out, w.sizes().vec(), typed->second, std::string(static_cast<const char*>(bytes.data_ptr()), bytes.nbytes()));
    } else {
      g.f32_tensor(out, w);
    }
  }
  return g;
}

void randomize(models::Llama& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.uniform_(-0.5, 0.5);
}
} // namespace

TEST_CASE("Llama from GGUF: llama's permuted q/k rows and qwen2's biases load back as they were", "[models][llama][gguf]") {
  const test::ScratchDir scratch("llama-gguf");
  for (const std::string arch : {"llama", "qwen2"}) {
    models::Llama original(tiny_llama_options(arch == "qwen2"));
    randomize(original);
    gguf_of(original, arch).write(scratch.path / (arch + ".gguf"));
    const weights::Gguf file(scratch.path / (arch + ".gguf"));
    const auto options = models::llama_options_from_gguf(file);
    CHECK(options.tie_word_embeddings == (arch == "llama"));
    CHECK(options.qkv_bias == (arch == "qwen2"));
    CHECK(options.rms_norm_eps == Approx(1e-6));
    auto [loaded, report] = models::load_llama_gguf(scratch.path / (arch + ".gguf"));
    CHECK(report.loaded == original->parameters().size());
    const auto mine = loaded->named_parameters();
    for (const auto& item : original->named_parameters()) CHECK(torch::equal(mine[item.key()], item.value()));
    torch::NoGradGuard no_grad;
    const auto ids = torch::randint(0, 48, {1, 5}, torch::kLong);
    CHECK(torch::equal(loaded(ids), original(ids)));
  }
}

TEST_CASE("Llama from GGUF for QLoRA: the file's Q4_1 blocks become the bases as they are", "[models][llama][gguf]") {
  const test::ScratchDir scratch("llama-gguf-packed");
  const auto path = scratch.path / "q4_1.gguf";
  models::Llama original(blocks_llama_options());
  randomize(original);
  using storage::ggml::Type;
  gguf_of(original, "llama", "", {{"self_attn.q_proj", Type::Q4_1}, {"self_attn.k_proj", Type::Q4_1},
                                  {"self_attn.v_proj", Type::Q4_1}, {"mlp.down_proj", Type::Q4_1}})
      .write(path);
  const nn::NamePatterns targets = {"q_proj", "k_proj", "down_proj"};
  auto [full, full_report] = models::load_llama_gguf(path);
  auto [model, report, packed] = models::load_llama_gguf_packed<storage::Q4_1>(path, targets);
  // The targets' Q4_1 weights, and no others (v_proj is Q4_1 but not a target): their values are
  // the dequantized load's, q's and k's rows back in Hugging Face's order, and their float
  // weights are empty.
  REQUIRE(packed.size() == 6);
  const auto dequantized = full->named_parameters();
  const auto kept = model->named_parameters();
  for (const auto& [name, weight] : packed) {
    INFO(name);
    CHECK((name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos ||
           name.find("down_proj") != std::string::npos));
    CHECK(torch::equal(storage::Q4_1::dequantize(weight, at::kFloat), dequantized[name]));
    CHECK(kept[name].numel() == 0);
  }
  CHECK(kept["model.layers.1.self_attn.v_proj.weight"].numel() == 64 * 32);
  CHECK(report.missing.size() == 6);
  // QLoRA over the given blocks is QLoRA over the dequantized base packed again: the same bytes
  // (quantizing Q4_1's values gives its blocks back), the same logits.
  using QLora = peft::QLora<storage::Q4_1>;
  QLora given({.r = 4, .targets = targets}), requantized({.r = 4, .targets = targets});
  given.use_packed(packed);
  given.attach(*model);
  requantized.attach(*full);
  REQUIRE(given.bases().size() == requantized.bases().size());
  for (std::size_t i = 0; i < given.bases().size(); ++i)
    CHECK(torch::equal(given.bases()[i].second->packed().data, requantized.bases()[i].second->packed().data));
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(0, 48, {2, 7}, torch::kLong);
  CHECK(torch::allclose(model(ids), full(ids), 1e-5, 1e-5));

  // Packed bases the targets do not take, none given, or nothing to keep: errors that say so.
  auto again = models::load_llama_gguf_packed(path, targets);
  QLora narrower({.r = 4, .targets = {"q_proj"}});
  narrower.use_packed(again.packed);
  CHECK_THAT(test::message_of([&] { narrower.attach(*again.model); }),
             Contains("a packed base was given for 'model.layers.0.mlp.down_proj.weight', which the targets do not "
                      "adapt"));
  auto bare = models::load_llama_gguf_packed(path, targets);
  CHECK_THAT(test::message_of([&] { QLora({.r = 4, .targets = targets}).attach(*bare.model); }),
             Contains("'model.layers.0.self_attn.q_proj' has an empty weight and no packed base was given for it"));
  CHECK_THAT(test::message_of([&] { models::load_llama_gguf_packed(path, {"o_proj"}); }),
             Contains("no weight of a layer the targets match is in blocks lora-ggml keeps"));
}

TEST_CASE("Llama from GGUF for QLoRA: weights in several block types become storage::Ggml bases as they are",
          "[models][llama][gguf]") {
  const test::ScratchDir scratch("llama-gguf-mixed");
  const auto path = scratch.path / "mixed.gguf";
  models::Llama original(blocks_llama_options());
  randomize(original);
  using storage::ggml::Type;
  const std::map<std::string, Type> types = {{"self_attn.q_proj", Type::Q5_0}, {"self_attn.k_proj", Type::Q8_0},
                                             {"self_attn.v_proj", Type::Q5_1}, {"mlp.down_proj", Type::Q4_0},
                                             {"mlp.up_proj", Type::Q4_1}};
  gguf_of(original, "llama", "", types).write(path);
  const nn::NamePatterns targets = {"q_proj", "k_proj", "v_proj", "down_proj", "up_proj"};
  auto [full, full_report] = models::load_llama_gguf(path);
  auto [model, report, packed] = models::load_llama_gguf_packed(path, targets);
  // Each in its own type, q's and k's rows of blocks back in Hugging Face's order, the bytes the
  // file's own (a view of it where no rows move).
  REQUIRE(packed.size() == 10);
  const weights::Gguf file(path);
  const auto dequantized = full->named_parameters();
  for (const auto& [name, weight] : packed) {
    INFO(name);
    const auto module = name.substr(name.find('.', 13) + 1, name.size() - 7 - name.find('.', 13) - 1);
    CHECK(static_cast<Type>(weight.block_type) == types.at(module));
    CHECK(torch::equal(storage::Ggml::dequantize(weight, at::kFloat), dequantized[name]));
    CHECK(model->named_parameters()[name].numel() == 0);
  }
  for (const auto& t : file.tensors())
    if (t.name == "blk.0.attn_v.weight")
      CHECK(packed.at("model.layers.0.self_attn.v_proj.weight").bytes() == static_cast<std::int64_t>(t.bytes));
  peft::QLora<storage::Ggml> qlora({.r = 4, .targets = targets});
  qlora.use_packed(packed);
  qlora.attach(*model);
  std::int64_t kept = 0;
  for (const auto& [name, weight] : packed) kept += weight.bytes();
  CHECK(qlora.base_bytes() == kept);
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(0, 48, {2, 7}, torch::kLong);
  CHECK(torch::allclose(model(ids), full(ids), 1e-5, 1e-5));
  // QLoRA over Q4_1 keeps none of these but the Q4_1 ones
  auto q4 = models::load_llama_gguf_packed<storage::Q4_1>(path, targets);
  CHECK(q4.packed.size() == 2);
}

TEST_CASE("Llama from GGUF: rope_freqs.weight (Llama 3.1's factors) loads as Llama 3's rope scaling",
          "[models][llama][gguf]") {
  const test::ScratchDir scratch("llama-gguf-rope-freqs");
  auto options = tiny_llama_options();
  options.hidden = 64;  // 16 dimensions a head: 8 frequencies
  options.rope_theta = 500000.0;
  options.max_position_embeddings = 131072;
  options.rope_scaling = models::Llama3RopeScaling{.factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                                                   .original_max_position_embeddings = 8192};
  models::Llama original(options);
  randomize(original);
  // convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors for rope_type llama3, written out:
  // 1 where the wavelength is short, the factor where long, 1 / ((1 - smooth) / factor + smooth) between.
  auto factors_of = [](const models::LlamaOptions& o, double factor) {
    const auto d = o.dim_of_head();
    std::vector<float> out;
    for (std::int64_t i = 0; i < d; i += 2) {
      const double freq = 1.0 / std::pow(o.rope_theta, static_cast<double>(i) / static_cast<double>(d));
      const double wavelen = 2 * M_PI / freq, low = 8192.0 / 1.0, high = 8192.0 / 4.0;
      if (wavelen < high) out.push_back(1.0F);
      else if (wavelen > low) out.push_back(static_cast<float>(factor));
      else {
        const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
        out.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
      }
    }
    return torch::tensor(out);
  };
  const auto factors = factors_of(options, 8.0);
  REQUIRE(factors.gt(1).any().item<bool>());  // the three bands all occur at this theta and width
  REQUIRE((factors.gt(1) & factors.lt(8)).any().item<bool>());
  auto g = gguf_of(original, "llama");
  g.f32_tensor("rope_freqs.weight", factors).write(scratch.path / "llama31.gguf");
  auto [loaded, report] = models::load_llama_gguf(scratch.path / "llama31.gguf");
  REQUIRE(loaded->options().rope_scaling);
  CHECK(loaded->options().rope_scaling->factor == 8.0);
  CHECK(loaded->options().rope_scaling->original_max_position_embeddings == 8192);
  // llama.cpp divides each frequency by its factor: the same frequencies, the same logits.
  auto plain = options;
  plain.rope_scaling.reset();
  CHECK(torch::allclose(models::rope_inverse_frequencies(loaded->options()),
                        models::rope_inverse_frequencies(plain) / factors, 1e-6, 0.0));
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(0, 48, {1, 6}, torch::kLong);
  CHECK(torch::equal(loaded(ids), original(ids)));
  // Factors no Llama 3 scaling gives: an error naming them.
  auto bad = gguf_of(original, "llama");
  bad.f32_tensor("rope_freqs.weight", torch::linspace(1, 3, factors.numel())).write(scratch.path / "bad.gguf");
  CHECK_THAT(test::message_of([&] { models::load_llama_gguf(scratch.path / "bad.gguf"); }),
             Contains("rope_freqs.weight's factors (from 1 to 3) are not Llama 3's rope scaling"));
}

TEST_CASE("Llama from GGUF: GGUF names map to transformers' names", "[models][llama][gguf]") {
  CHECK(models::llama_name_of_gguf("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight");
  CHECK(models::llama_name_of_gguf("blk.0.attn_k.bias") == "model.layers.0.self_attn.k_proj.bias");
  CHECK(models::llama_name_of_gguf("blk.3.ffn_down.weight") == "model.layers.3.mlp.down_proj.weight");
  CHECK(models::llama_name_of_gguf("blk.3.ffn_norm.weight") == "model.layers.3.post_attention_layernorm.weight");
  CHECK(models::llama_name_of_gguf("output.weight") == "lm_head.weight");
  CHECK(models::llama_name_of_gguf("blk.x.attn_q.weight").empty());
  CHECK(models::llama_name_of_gguf("rope_freqs.weight").empty());
  // gemma3's table: ffn_norm is the norm before the MLP, and the norms Gemma adds
  CHECK(models::llama_name_of_gguf("blk.3.ffn_norm.weight", "gemma3") == "model.layers.3.pre_feedforward_layernorm.weight");
  CHECK(models::llama_name_of_gguf("blk.3.post_attention_norm.weight", "gemma3") ==
        "model.layers.3.post_attention_layernorm.weight");
  CHECK(models::llama_name_of_gguf("blk.3.post_ffw_norm.weight", "gemma3") ==
        "model.layers.3.post_feedforward_layernorm.weight");
  CHECK(models::llama_name_of_gguf("blk.0.attn_q_norm.weight", "gemma3") == "model.layers.0.self_attn.q_norm.weight");
  CHECK(models::llama_name_of_gguf("blk.0.attn_q_norm.weight").empty());  // not llama's
  const auto rows = torch::arange(24).view({12, 2});
  CHECK(torch::equal(models::unpermute_rotary_rows(converter_permute(rows, 3), 3), rows));
}

TEST_CASE("Llama from GGUF: another architecture, a missing layer or a stray tensor is an error", "[models][llama][gguf]") {
  const test::ScratchDir scratch("llama-gguf-bad");
  const auto path = scratch.path / "bad.gguf";
  auto other = test::GgufBuilder();
  other.string("general.architecture", "gpt2");
  other.write(path);
  CHECK_THAT(test::message_of([&] { models::load_llama_gguf(path); }),
             Contains("bad.gguf: general.architecture is 'gpt2', not one of the decoder families ftopt has "
                      "(GGUF architectures llama, qwen2, gemma3)"));

  models::Llama original(tiny_llama_options());
  auto stray = gguf_of(original, "llama");
  stray.f32_tensor("blk.0.attn_q_norm.weight", torch::ones({4}));
  stray.write(path);
  CHECK_THAT(test::message_of([&] { models::load_llama_gguf(path); }),
             Contains("bad.gguf: tensors models::Llama has no place for: blk.0.attn_q_norm.weight"));

  auto three = tiny_llama_options();
  three.layers = 3;
  models::Llama deeper(three);
  gguf_of(deeper, "llama", "blk.2.").write(path);  // block_count says 3, the tensors stop at 2
  const auto missing = test::message_of([&] { models::load_llama_gguf(path); });
  CHECK_THAT(missing, Contains("bad.gguf: 9 missing keys: model.layers.2.self_attn.q_proj.weight"));
  CHECK_THAT(missing, Contains("model.layers.2.post_attention_layernorm.weight"));
}

TEST_CASE("Llama from a folder: config.json, safetensors shards and their index", "[models][llama]") {
  const test::ScratchDir scratch("llama-folder");
  const auto& dir = scratch.path;
  models::Llama original(tiny_llama_options(/*qwen=*/true));
  randomize(original);
  nlohmann::json config = {{"model_type", "qwen2"}, {"vocab_size", 48}, {"hidden_size", 16},
                           {"intermediate_size", 24}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                           {"num_key_value_heads", 2}, {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-6},
                           {"rope_theta", 50000.0}, {"tie_word_embeddings", false}, {"hidden_act", "silu"}};
  std::ofstream(dir / "config.json") << config.dump();
  weights::StateDict first, second;
  nlohmann::json map;
  for (const auto& item : weights::state_dict(*original)) {
    const bool one = item.key().find("layers.1.") == std::string::npos;
    (one ? first : second).insert(item.key(), item.value());
    map[item.key()] = one ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  weights::save_safetensors(dir / "model-00001-of-00002.safetensors", first);
  weights::save_safetensors(dir / "model-00002-of-00002.safetensors", second);
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"metadata", nlohmann::json::object()},
                                                                        {"weight_map", map}}.dump();
  auto [loaded, report] = models::load_llama(dir);
  CHECK(report.loaded == original->parameters().size());
  CHECK(loaded->options().qkv_bias);
  CHECK_FALSE(loaded->options().o_bias);
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(0, 48, {2, 5}, torch::kLong);
  CHECK(torch::equal(loaded(ids), original(ids)));
}

TEST_CASE("Llama from a folder: transformers 5's rope_parameters and the config fields it cannot be", "[models][llama]") {
  const test::ScratchDir scratch("llama-config");
  const auto path = scratch.path / "config.json";
  auto options_of = [&](const nlohmann::json& c) {
    std::ofstream(path) << c.dump();
    return models::llama_options_from_config(path);
  };
  nlohmann::json c = {{"model_type", "llama"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 1}, {"attention_bias", true}, {"tie_word_embeddings", true},
                      {"rope_parameters", {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 32.0},
                                           {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                                           {"original_max_position_embeddings", 8192}}}};
  const auto o = options_of(c);
  CHECK(o.rope_theta == 500000.0);
  REQUIRE(o.rope_scaling.has_value());
  CHECK(o.rope_scaling->factor == 32.0);
  CHECK((o.qkv_bias && o.o_bias && o.tie_word_embeddings && o.kv_heads == 1));
  c["rope_parameters"]["rope_type"] = "yarn";
  CHECK_THAT(test::message_of([&] { options_of(c); }),
             Contains("config.json: rope_parameters.rope_type is 'yarn'; models::Llama has 'default' and 'llama3'"));
  c.erase("rope_parameters");
  c["hidden_act"] = "gelu";
  CHECK_THAT(test::message_of([&] { options_of(c); }), Contains("hidden_act is 'gelu'"));
  c["hidden_act"] = "silu";
  c["model_type"] = "mistral3";
  CHECK_THAT(test::message_of([&] { options_of(c); }), Contains("model_type is 'mistral3', not one of the decoder families ftopt has "
                                                                  "(model_type llama, mistral, qwen2, gemma3_text)"));
  c["model_type"] = "llama";
  c["num_hidden_layers"] = "thirty";
  CHECK_THAT(test::message_of([&] { options_of(c); }), Contains("num_hidden_layers is \"thirty\", not an integer"));
  c["num_hidden_layers"] = 2;
  c["num_key_value_heads"] = 3;
  CHECK_THAT(test::message_of([&] { options_of(c); }), Contains("heads 4 must be a multiple of kv_heads 3"));
}

TEST_CASE("save_llama: the folder loads back with the same logits, and its config says what the model is",
          "[models][llama]") {
  const test::ScratchDir scratch("llama-save");
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(0, 48, {2, 5}, torch::kLong);
  for (const bool qwen : {false, true}) {
    auto options = tiny_llama_options(qwen);
    if (!qwen) options.rope_scaling = models::Llama3RopeScaling{.factor = 8.0, .original_max_position_embeddings = 16};
    models::Llama original(options);
    randomize(original);
    const auto dir = scratch.path / (qwen ? "qwen2" : "llama");
    models::save_llama(*original, dir);
    const auto config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    CHECK(config["model_type"] == (qwen ? "qwen2" : "llama"));
    CHECK(config["architectures"][0] == (qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"));
    CHECK(config["dtype"] == "float32");
    CHECK(config["rope_parameters"]["rope_type"] == (qwen ? "default" : "llama3"));
    const auto file = weights::load_safetensors(dir / "model.safetensors");
    CHECK(file.contains("lm_head.weight") == qwen);  // a tied head is left out, as save_pretrained does
    CHECK(file.size() == models::llama_tensor_names(options).size());
    auto [loaded, report] = models::load_llama(dir);
    CHECK(loaded->options().qkv_bias == qwen);
    CHECK(loaded->options().tie_word_embeddings == !qwen);
    CHECK(loaded->options().rope_scaling.has_value() == !qwen);
    CHECK(torch::equal(loaded(ids), original(ids)));
  }
}

TEST_CASE("save_llama: merged LoRA is saved as plain weights, an unmerged one is an error and writes nothing",
          "[models][llama][peft]") {
  const test::ScratchDir scratch("llama-save-lora");
  models::Llama model(tiny_llama_options());
  randomize(model);
  peft::Lora lora({.r = 4, .alpha = 8, .targets = {"q_proj", "v_proj", "down_proj"}});
  lora.attach(*model);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters())
      if (p.requires_grad()) p.normal_(0, 0.1);  // B starts at zero
  }
  model->eval();
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(0, 48, {2, 5}, torch::kLong);
  const auto adapted = model(ids);
  const auto dir = scratch.path / "merged";
  CHECK_THAT(test::message_of([&] { models::save_llama(*model, dir); }),
             Contains("layer model.layers.0.self_attn.q_proj still has an adapter in its forward"));
  CHECK_FALSE(std::filesystem::exists(dir));
  lora.merge(*model);
  models::save_llama(*model, dir, at::kBFloat16);
  const auto file = weights::load_safetensors(dir / "model.safetensors");
  for (const auto& item : file) {
    CHECK(item.key().find("lora") == std::string::npos);
    CHECK(item.value().scalar_type() == at::kBFloat16);
  }
  CHECK(nlohmann::json::parse(std::ifstream(dir / "config.json"))["dtype"] == "bfloat16");
  auto loaded = models::load_llama(dir).model;
  loaded->eval();
  // The merged weights rounded to bfloat16 (8 bits of mantissa): logits of order 1 within 5e-2.
  CHECK(torch::allclose(loaded(ids), adapted, 0, 5e-2));
}

TEST_CASE("save_llama: options neither config can hold and a dtype safetensors' models do not use are errors",
          "[models][llama]") {
  auto options = tiny_llama_options();
  options.o_bias = true;
  CHECK_THAT(test::message_of([&] { models::llama_config_json(options, at::kFloat); }),
             Contains("an o_proj bias without q/k/v biases"));
  options = tiny_llama_options(/*qwen=*/true);
  options.mlp_bias = true;
  CHECK_THAT(test::message_of([&] { models::llama_config_json(options, at::kFloat); }),
             Contains("Qwen2's, whose MLP has no biases"));
  CHECK_THAT(test::message_of([&] { models::llama_config_json(tiny_llama_options(), at::kInt); }),
             Contains("dtype Int is not float32, bfloat16 or float16"));
  options = tiny_llama_options();
  options.sliding_window = 4;
  options.sliding_layers = {true, false};  // sliding on some layers, without Gemma's parts
  CHECK_THAT(test::message_of([&] { models::llama_config_json(options, at::kFloat); }),
             Contains("the options describe a model of none of the decoder families ftopt has (llama, mistral, qwen2, "
                      "gemma3)"));
  options = tiny_gemma_options();
  options.sandwich_norms = false;
  CHECK_THAT(test::message_of([&] { models::llama_config_json(options, at::kFloat); }),
             Contains("1 + w norms are Gemma 3's"));
}

TEST_CASE("save_llama: Gemma 3 and Mistral folders carry their family's config and load back with the same logits",
          "[models][llama]") {
  const test::ScratchDir scratch("llama-save-families");
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(0, 48, {2, 7}, torch::kLong);
  auto mistral = tiny_llama_options();
  mistral.sliding_window = 3;
  mistral.sliding_layers = {true, true};
  for (const auto& [family, options] : {std::pair{"gemma3_text", tiny_gemma_options()}, {"mistral", mistral}}) {
    models::Llama original(options);
    randomize(original);
    const auto dir = scratch.path / family;
    models::save_llama(*original, dir);
    const auto config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    CHECK(config["model_type"] == family);
    CHECK(config["sliding_window"] == 3);
    const auto file = weights::load_safetensors(dir / "model.safetensors");
    CHECK(file.size() == models::llama_tensor_names(options).size());
    auto [loaded, report] = models::load_llama(dir);
    const auto& o = loaded->options();
    CHECK(o.sliding_layers == options.sliding_layers);
    CHECK(o.query_pre_attn_scalar == options.query_pre_attn_scalar);
    CHECK(o.rope_local_theta == options.rope_local_theta);
    CHECK(torch::equal(loaded(ids), original(ids)));
  }
  const auto gemma = nlohmann::json::parse(std::ifstream(scratch.path / "gemma3_text" / "config.json"));
  CHECK(gemma["architectures"][0] == "Gemma3ForCausalLM");
  CHECK(gemma["layer_types"] == nlohmann::json{"sliding_attention", "full_attention"});
  CHECK(gemma["rope_parameters"]["sliding_attention"]["rope_theta"] == 100.0);
  CHECK(gemma["query_pre_attn_scalar"] == 32);
}

TEST_CASE("Llama: query_pre_attn_scalar s scales the scores by 1/sqrt(s), as queries times sqrt(head_dim / s) do",
          "[models][llama]") {
  auto options = tiny_llama_options();
  options.query_pre_attn_scalar = 32;  // head_dim 4
  models::Llama scaled(options);
  randomize(scaled);
  models::Llama plain(tiny_llama_options());
  weights::load_state_dict(*plain, weights::state_dict(*scaled));
  torch::NoGradGuard no_grad;
  for (auto& item : plain->named_parameters())
    if (item.key().ends_with("self_attn.q_proj.weight")) item.value().mul_(std::sqrt(4.0 / 32.0));
  const auto ids = torch::randint(0, 48, {2, 5}, torch::kLong);
  CHECK(torch::allclose(scaled(ids), plain(ids), 1e-5, 1e-5));
  CHECK_FALSE(torch::allclose(scaled(ids), models::Llama(tiny_llama_options())(ids), 1e-2, 1e-2));
}

TEST_CASE("Llama from a folder: Gemma 3's config.json, old and new, and the fields it cannot be", "[models][llama]") {
  const test::ScratchDir scratch("gemma-config");
  const auto path = scratch.path / "config.json";
  auto options_of = [&](const nlohmann::json& c) {
    std::ofstream(path) << c.dump();
    return models::llama_options_from_config(path);
  };
  // As transformers 4.50 wrote Gemma 3 270M's: a layer pattern and two rope bases, no layer_types.
  nlohmann::json c = {{"model_type", "gemma3_text"}, {"vocab_size", 48}, {"hidden_size", 16},
                      {"intermediate_size", 24}, {"num_hidden_layers", 7}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 1}, {"head_dim", 8}, {"sliding_window", 5},
                      {"sliding_window_pattern", 6}, {"rope_theta", 1e6}, {"rope_local_base_freq", 1e4},
                      {"query_pre_attn_scalar", 8}, {"final_logit_softcapping", nullptr}};
  auto o = options_of(c);
  CHECK(o.sliding_layers == std::vector<bool>{true, true, true, true, true, false, true});
  CHECK((o.rope_theta == 1e6 && o.rope_local_theta == 1e4 && o.tie_word_embeddings && o.rms_norm_eps == 1e-6));
  CHECK((o.norm_unit_offset && o.qk_norm && o.sandwich_norms && o.scale_embeddings));
  CHECK(o.activation == models::GateActivation::GeluTanh);
  c["final_logit_softcapping"] = 30.0;
  CHECK_THAT(test::message_of([&] { options_of(c); }),
             Contains("config.json: final_logit_softcapping is 30.0; Gemma 3 has none"));
  c["final_logit_softcapping"] = nullptr;
  c["layer_types"] = {"sliding_attention", "chunked_attention"};
  CHECK_THAT(test::message_of([&] { options_of(c); }), Contains("layer_types holds \"chunked_attention\""));
  c["layer_types"] = {"sliding_attention", "full_attention"};
  CHECK_THAT(test::message_of([&] { options_of(c); }), Contains("2 layer types for 7 layers"));
  c.erase("layer_types");
  c["hidden_activation"] = "gelu";
  CHECK_THAT(test::message_of([&] { options_of(c); }), Contains("hidden_activation is 'gelu'"));
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}}},
                          {"sliding_attention", {{"rope_type", "default"}}}};
  CHECK_THAT(test::message_of([&] { options_of(c); }),
             Contains("rope_parameters.full_attention.rope_type is 'linear'"));
}
