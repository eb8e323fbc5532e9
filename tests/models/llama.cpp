// Tests for include/ftopt/models/llama.hpp: transformers' LlamaForCausalLM names; the logits
// against the model written out here from modeling_llama.py's equations (rotary pairs (i, i + d/2),
// grouped heads, causal softmax, SwiGLU); causality and padding; Llama 3's frequency scaling
// against _compute_llama3_parameters written as a loop. Real weights against transformers:
// tests/peer/llama.py. Gemma 3's parts (1 + w norms, q/k norms, sandwich norms, sliding windows)
// on tiny models here; Gemma 3 270M against transformers: tests/peer/families.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include <torch/torch.h>

#include <ftopt/data/packing.hpp>
#include <ftopt/models/llama.hpp>
#include <ftopt/nn/names.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {
models::LlamaOptions tiny(bool tied = true, bool bias = false) {
  return {.vocab_size = 40, .hidden = 16, .intermediate = 24, .layers = 2, .heads = 4, .kv_heads = 2,
          .max_position_embeddings = 64, .rms_norm_eps = 1e-5, .rope_theta = 10000.0, .qkv_bias = bias,
          .o_bias = bias, .tie_word_embeddings = tied};
}

/// LlamaForCausalLM's forward, one equation at a time, over the model's own weights by name.
at::Tensor written_out_logits(models::Llama& model, const at::Tensor& ids) {
  torch::NoGradGuard no_grad;
  const auto& o = model->options();
  auto w = [&](const std::string& name) { return model->named_parameters()[name]; };
  auto rms = [&](const at::Tensor& x, const std::string& name) {
    return w(name) * x / torch::sqrt(x.pow(2).mean(-1, true) + o.rms_norm_eps);
  };
  auto linear = [&](const at::Tensor& x, const std::string& name, bool bias) {
    auto y = torch::matmul(x, w(name + ".weight").t());
    return bias ? y + w(name + ".bias") : y;
  };
  const auto B = ids.size(0), T = ids.size(1), d = o.hidden / o.heads;
  // Rotary: the pair (i, i + d/2) of a head turns by t * theta^(-2i/d) at position t.
  auto rotate = [&](const at::Tensor& x) {  // [B, n, T, d]
    auto out = x.clone();
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t i = 0; i < d / 2; ++i) {
        const double angle = static_cast<double>(t) * std::pow(o.rope_theta, -2.0 * static_cast<double>(i) / d);
        auto a = x.select(2, t).select(2, i), b = x.select(2, t).select(2, i + d / 2);
        out.select(2, t).select(2, i).copy_(a * std::cos(angle) - b * std::sin(angle));
        out.select(2, t).select(2, i + d / 2).copy_(b * std::cos(angle) + a * std::sin(angle));
      }
    return out;
  };
  at::Tensor h = w("model.embed_tokens.weight").index_select(0, ids.flatten()).view({B, T, o.hidden});
  const at::Tensor future = torch::ones({T, T}).triu(1).to(torch::kBool);
  for (std::int64_t l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const at::Tensor x = rms(h, p + "input_layernorm.weight");
    auto heads = [&](const at::Tensor& y, std::int64_t n) { return y.view({B, T, n, d}).transpose(1, 2); };
    const at::Tensor q = rotate(heads(linear(x, p + "self_attn.q_proj", o.qkv_bias), o.heads));
    const at::Tensor k = rotate(heads(linear(x, p + "self_attn.k_proj", o.qkv_bias), o.kv_heads));
    const at::Tensor v = heads(linear(x, p + "self_attn.v_proj", o.qkv_bias), o.kv_heads);
    std::vector<at::Tensor> outs;
    for (std::int64_t head = 0; head < o.heads; ++head) {
      const auto g = head / (o.heads / o.kv_heads);  // the key/value head this head shares
      auto scores = torch::matmul(q.select(1, head), k.select(1, g).transpose(-1, -2)) / std::sqrt(double(d));
      scores = scores.masked_fill(future, -INFINITY);
      outs.push_back(torch::matmul(torch::softmax(scores, -1), v.select(1, g)));
    }
    const at::Tensor attn = torch::stack(outs, 2).reshape({B, T, o.hidden});
    h = h + linear(attn, p + "self_attn.o_proj", o.o_bias);
    const at::Tensor y = rms(h, p + "post_attention_layernorm.weight");
    const at::Tensor gate = linear(y, p + "mlp.gate_proj", false), up = linear(y, p + "mlp.up_proj", false);
    h = h + linear(gate * torch::sigmoid(gate) * up, p + "mlp.down_proj", false);
  }
  h = rms(h, "model.norm.weight");
  return torch::matmul(h, (o.tie_word_embeddings ? w("model.embed_tokens.weight") : w("lm_head.weight")).t());
}
} // namespace

TEST_CASE("Llama: transformers' names, tied or with its own head, with Qwen2's biases", "[models][llama]") {
  models::Llama tied(tiny(true, false));
  std::vector<std::string> expected = {"model.embed_tokens.weight"};
  for (const std::string l : {"0", "1"})
    for (const std::string n : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"})
      expected.push_back("model.layers." + l + "." + n);
  expected.push_back("model.norm.weight");
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  CHECK(sorted(test::state_dict_names(*tied)) == sorted(expected));
  CHECK(tied->head_weight().data_ptr() == tied->model->embed_tokens->weight.data_ptr());

  auto qwen = tiny(false, false);
  qwen.qkv_bias = true;
  models::Llama untied(qwen);
  const auto names = test::state_dict_names(*untied);
  CHECK(std::count(names.begin(), names.end(), "lm_head.weight") == 1);
  CHECK(std::count(names.begin(), names.end(), "model.layers.1.self_attn.k_proj.bias") == 1);
  CHECK(std::count(names.begin(), names.end(), "model.layers.1.self_attn.o_proj.bias") == 0);
}

TEST_CASE("Llama: logits equal modeling_llama.py's equations, with padding and without", "[models][llama]") {
  for (const bool tied : {true, false}) {
    models::Llama model(tiny(tied, !tied));
    model->eval();
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters())  // not their ones and zeros
      if (item.key().ends_with("norm.weight") || item.key().ends_with(".bias")) item.value().uniform_(0.5, 1.5);
    const auto ids = torch::randint(0, 40, {2, 7}, torch::kLong);
    const auto logits = model(ids);
    CHECK(logits.sizes() == std::vector<std::int64_t>{2, 7, 40});
    CHECK(torch::allclose(logits, written_out_logits(model, ids), 1e-4, 1e-5));

    // Right padding: the real positions of a padded row are those of the row alone.
    const auto mask = torch::ones({2, 7}, torch::kLong);
    mask[1].slice(0, 4).fill_(0);
    const auto padded = model(torch::stack({ids, mask}, 1));
    CHECK(torch::allclose(padded[0], logits[0], 1e-5, 1e-5));
    CHECK(torch::allclose(padded[1].slice(0, 0, 4), model(ids.slice(0, 1, 2).slice(1, 0, 4))[0], 1e-5, 1e-5));
    // Left padding: rows of padding attend to nothing real and stay finite.
    const auto left = torch::ones({2, 7}, torch::kLong);
    left[0].slice(0, 0, 3).fill_(0);
    CHECK(torch::isfinite(model(torch::stack({ids, left}, 1))).all().item<bool>());
  }
}

TEST_CASE("Llama: a token changes no logits before it", "[models][llama]") {
  models::Llama model(tiny());
  model->eval();
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(0, 40, {1, 9}, torch::kLong);
  const auto before = model(ids);
  ids[0][5] = (ids[0][5].item<std::int64_t>() + 1) % 40;
  const auto after = model(ids);
  CHECK(torch::equal(before.slice(1, 0, 5), after.slice(1, 0, 5)));
  CHECK_FALSE(torch::allclose(before.slice(1, 5), after.slice(1, 5)));
}

TEST_CASE("Llama: gradients reach every weight, checkpointed or not, alike", "[models][llama]") {
  torch::manual_seed(3);
  models::Llama plain(tiny()), checkpointed(tiny());
  for (std::size_t i = 0; i < plain->parameters().size(); ++i) {
    torch::NoGradGuard no_grad;
    checkpointed->parameters()[i].copy_(plain->parameters()[i]);
  }
  checkpointed->model->set_checkpointing({.every = 1});
  const auto ids = torch::randint(0, 40, {2, 6}, torch::kLong);
  plain(ids).logsumexp(-1).sum().backward();
  checkpointed(ids).logsumexp(-1).sum().backward();
  for (std::size_t i = 0; i < plain->parameters().size(); ++i) {
    const auto& g = plain->parameters()[i].grad();
    REQUIRE(g.defined());
    CHECK(g.abs().sum().item<double>() > 0);
    CHECK(torch::allclose(g, checkpointed->parameters()[i].grad(), 1e-5, 1e-6));
  }
}

TEST_CASE("Llama: rope frequencies, with Llama 3's scaling as _compute_llama3_parameters computes it", "[models][llama]") {
  auto o = tiny();
  o.head_dim = 16;
  o.rope_theta = 500000.0;
  const auto plain = models::rope_inverse_frequencies(o);
  for (std::int64_t i = 0; i < 8; ++i)
    CHECK(plain[i].item<float>() == Approx(std::pow(500000.0, -2.0 * i / 16.0)).epsilon(1e-6));
  o.rope_scaling = models::Llama3RopeScaling{.factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                                             .original_max_position_embeddings = 64};
  const auto scaled = models::rope_inverse_frequencies(o);
  int low = 0, medium = 0, high = 0;
  for (std::int64_t i = 0; i < 8; ++i) {
    const double f = plain[i].item<float>(), wavelen = 2 * std::numbers::pi / f;
    double expected;
    if (wavelen < 64.0 / 4.0) expected = f, ++high;            // short wavelengths keep their frequency
    else if (wavelen > 64.0 / 1.0) expected = f / 8.0, ++low;  // long ones are divided by the factor
    else {
      const double smooth = (64.0 / wavelen - 1.0) / (4.0 - 1.0);
      expected = (1 - smooth) * f / 8.0 + smooth * f, ++medium;
    }
    CHECK(scaled[i].item<float>() == Approx(expected).epsilon(1e-5));
  }
  CHECK((low > 0 && medium > 0 && high > 0));  // the example covers all three bands
}

TEST_CASE("Llama: options and inputs it cannot take are errors that name them", "[models][llama]") {
  auto o = tiny();
  o.kv_heads = 3;
  CHECK_THAT(test::message_of([&] { o.validate(); }), Contains("heads 4 must be a multiple of kv_heads 3"));
  o = tiny();
  o.hidden = 18;
  CHECK_THAT(test::message_of([&] { o.validate(); }), Contains("hidden 18 is not a multiple of heads 4"));
  models::Llama model(tiny());
  CHECK_THAT(test::message_of([&] { model(torch::zeros({2, 3})); }), Contains("integer token ids, got Float"));
  CHECK_THAT(test::message_of([&] { model(torch::zeros({2, 4, 4}, torch::kLong)); }),
             Contains("ids [B, T], [B, 2, T] (ids, attention_mask) or [B, 3, T] (ids, attention_mask, position_ids), "
                      "got [2, 4, 4]"));
}

TEST_CASE("Llama: a packed row computes each of its documents as if alone", "[models][llama][packing]") {
  models::Llama model(tiny(/*tied=*/false, /*bias=*/true));
  model->eval();
  torch::NoGradGuard no_grad;
  const std::vector<std::int64_t> lengths = {5, 3, 7, 2};
  std::vector<data::TokenSequence> docs;
  for (const auto n : lengths) {
    const auto ids = torch::randint(0, 40, {n}, torch::kLong);
    docs.push_back({std::vector<std::int64_t>(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + n),
                    std::vector<std::int64_t>(static_cast<std::size_t>(n), 1)});
  }
  const auto packed = data::pack_sequences(docs, {.length = 10, .pad_id = 0});
  REQUIRE(packed.input.size(0) == 2);  // [5, 3, 2] and [7, padding 3]
  const auto logits = model(packed.input);
  // Where each document sits: row, first column.
  const std::vector<std::pair<std::int64_t, std::int64_t>> at = {{0, 0}, {0, 5}, {1, 0}, {0, 8}};
  for (std::size_t d = 0; d < docs.size(); ++d) {
    const auto alone = model(torch::tensor(docs[d].ids, torch::kLong).view({1, -1}))[0];
    const auto [row, column] = at[d];
    INFO("document " << d << ": max diff " << (logits[row].narrow(0, column, lengths[d]) - alone).abs().max().item<double>());
    CHECK(torch::allclose(logits[row].narrow(0, column, lengths[d]), alone, 1e-5, 1e-5));
  }
  // The same positions and no packing (one document per row): the plain causal path.
  const auto one = data::pack_sequences(std::span(docs).subspan(2, 1), {.length = 7});
  CHECK(torch::allclose(model(one.input), model(one.input.select(1, 0)), 1e-5, 1e-5));
}

namespace {
/// Gemma 3's parts on a tiny model: all but the last of `layers` sliding over `window` tokens.
models::LlamaOptions tiny_gemma(std::int64_t layers, std::int64_t window) {
  auto o = tiny();
  o.layers = layers;
  o.head_dim = 8;
  o.norm_unit_offset = o.qk_norm = o.sandwich_norms = o.scale_embeddings = true;
  o.activation = models::GateActivation::GeluTanh;
  o.sliding_window = window;
  for (std::int64_t i = 0; i < layers; ++i) o.sliding_layers.push_back(i + 1 < layers);
  o.rope_local_theta = 100.0;
  return o;
}
} // namespace

TEST_CASE("Llama with Gemma 3's parts: transformers' Gemma3ForCausalLM names and 1 + w norms", "[models][llama]") {
  models::Llama model(tiny_gemma(2, 3));
  const auto params = model->named_parameters();
  for (const char* name : {"model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.k_norm.weight",
                           "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
                           "model.layers.0.pre_feedforward_layernorm.weight",
                           "model.layers.0.post_feedforward_layernorm.weight", "model.norm.weight"}) {
    INFO(name);
    REQUIRE(params.contains(name));
    CHECK(torch::equal(params[name], torch::zeros_like(params[name])));  // 1 + w: zeros are the identity scale
  }
  CHECK(params["model.layers.0.self_attn.q_norm.weight"].numel() == 8);  // the head dimension
  // Gemma3RMSNorm: x / rms(x) * (1 + w).
  nn::RmsNorm norm(4, 1e-6, true, CpuIsa::Widest, /*unit_offset=*/true);
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(torch::tensor({0.5F, -0.25F, 0.0F, 1.0F}));
  }
  const auto x = torch::tensor({{1.0F, -2.0F, 3.0F, 0.5F}});
  const auto want = x / torch::sqrt(x.pow(2).mean(-1, true) + 1e-6) * torch::tensor({1.5F, 0.75F, 1.0F, 2.0F});
  CHECK(torch::allclose(norm(x), want, 1e-5, 1e-6));
}

TEST_CASE("Llama with Gemma 3's parts: sliding layers see only the last tokens of their window", "[models][llama]") {
  // Two layers, both sliding over 3 tokens: a position sees at most 2 back per layer, so token 0
  // reaches the logits at positions 0..4 and no later one.
  auto o = tiny_gemma(2, 3);
  o.sliding_layers = {true, true};
  models::Llama model(o);
  model->eval();
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters())
    if (item.key().ends_with("norm.weight")) item.value().uniform_(-0.5, 0.5);
  auto ids = torch::randint(1, 40, {1, 9}, torch::kLong);
  const auto before = model(ids);
  ids[0][0] = (ids[0][0].item<std::int64_t>() + 7) % 40;
  const auto after = model(ids);
  CHECK_FALSE(torch::allclose(before[0][4], after[0][4]));
  CHECK(torch::equal(before.slice(1, 5), after.slice(1, 5)));
  // Padding and the window together: the padded row's real positions as the row alone.
  const auto mask = torch::ones({1, 9}, torch::kLong);
  mask[0].slice(0, 7).fill_(0);
  CHECK(torch::allclose(model(torch::stack({ids, mask}, 1))[0].slice(0, 0, 7), model(ids.slice(1, 0, 7))[0], 1e-5, 1e-5));
}

TEST_CASE("Llama with Gemma 3's parts: the cache's steps give the whole sequence's logits past the window",
          "[models][llama]") {
  models::Llama model(tiny_gemma(3, 4));  // two sliding layers, one global
  model->eval();
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters())
    if (item.key().ends_with("norm.weight")) item.value().uniform_(-0.5, 0.5);
  const auto ids = torch::randint(0, 40, {1, 11}, torch::kLong);
  const auto whole = model(ids);
  auto cache = models::LlamaImpl::cache(16);
  std::vector<at::Tensor> steps{model->forward_cached(ids.slice(1, 0, 5), cache)};  // a prompt longer than the window
  for (std::int64_t t = 5; t < 11; ++t) steps.push_back(model->forward_cached(ids.slice(1, t, t + 1), cache));
  CHECK(torch::allclose(torch::cat(steps, 1), whole, 1e-5, 1e-5));
}
