// Tests for include/ftopt/storage/q4_1.hpp: quantize_row_q4_1_ref's formula written out here on a
// block, the round trip of a file's blocks (dequantized, quantized again: the same bytes), the
// error bound, and peft::QLora over Q4_1 on a Llama's seven projections: LoRA's formula over the
// dequantized base, the adapters the only weights that learn. The real SmolLM2 file's 210 Q4_1
// tensors round-trip in tests/peer/llama.py.
#include <catch2/catch.hpp>

#include <cstring>

#include <torch/torch.h>

#include <ftopt/models/llama.hpp>
#include <ftopt/peft/qlora.hpp>
#include <ftopt/storage/q4_1.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

TEST_CASE("Q4_1: a block as quantize_row_q4_1_ref computes it", "[storage][gguf]") {
  auto w = torch::arange(32, torch::kFloat).mul(0.1).sub(1.0).view({1, 32});
  w[0][5] = 0.333F;
  const auto packed = storage::Q4_1().quantize(w);
  REQUIRE(packed.data.sizes() == std::vector<std::int64_t>{1, 20});
  const auto* bytes = packed.data.data_ptr<std::uint8_t>();
  // min = -1, max = 2.1: d = 3.1 / 15, m = -1, each stored as fp16; q = (int)((w - min) / d + 0.5).
  const float d = (2.1F - -1.0F) / 15.0F;
  std::uint16_t d16, m16;
  std::memcpy(&d16, bytes, 2);
  std::memcpy(&m16, bytes + 2, 2);
  CHECK(d16 == c10::Half(d).x);
  CHECK(m16 == c10::Half(-1.0F).x);
  for (int j = 0; j < 32; ++j) {
    const int q = std::min(15, static_cast<int>((w[0][j].item<float>() + 1.0F) * (1.0F / d) + 0.5F));
    const int stored = j < 16 ? bytes[4 + j] & 0x0F : bytes[4 + j - 16] >> 4;
    CHECK(stored == q);
  }
  const auto back = storage::Q4_1::dequantize(packed, at::kFloat);
  CHECK((back - w).abs().max().item<float>() <= static_cast<float>(c10::Half(d)) / 2 + 1e-3F);
  CHECK(packed.bytes() == 20);
}

TEST_CASE("Q4_1: a file's blocks come back as they were, at 5 bits a weight", "[storage][gguf]") {
  const auto w = torch::randn({24, 96}) * 0.05;
  const auto packed = storage::Q4_1().quantize(w);
  const auto again = storage::Q4_1().quantize(storage::Q4_1::dequantize(packed, at::kFloat));
  CHECK(torch::equal(again.data, packed.data));
  CHECK(packed.bytes() * 32 == w.numel() * 20);  // 20 bytes per 32 weights: 15.6% of float32
  const auto view = storage::Q4_1::from_blocks(packed.data.flatten(), {24, 96});
  CHECK(view.data.data_ptr() == packed.data.data_ptr());  // a view of the bytes, not a copy
  CHECK(torch::equal(storage::Q4_1::dequantize(view, at::kFloat), storage::Q4_1::dequantize(packed, at::kFloat)));
  CHECK_THAT(test::message_of([] { storage::Q4_1().check(torch::zeros({4, 40}), "model.layers.0.mlp.up_proj"); }),
             Contains("the weight of 'model.layers.0.mlp.up_proj' is [4, 40]; Q4_1 holds [out, in] weights with in a "
                      "multiple of 32"));
}

TEST_CASE("Q4_1: QLoRA over a Llama's seven projections is LoRA over the dequantized base", "[storage][gguf][qlora]") {
  torch::manual_seed(5);
  models::Llama model({.vocab_size = 50, .hidden = 64, .intermediate = 96, .layers = 2, .heads = 4, .kv_heads = 2});
  models::Llama reference({.vocab_size = 50, .hidden = 64, .intermediate = 96, .layers = 2, .heads = 4, .kv_heads = 2});
  const peft::LoraOptions options{.r = 4, .alpha = 8, .targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                   "up_proj", "down_proj"}};
  {
    torch::NoGradGuard no_grad;
    for (auto& item : reference->named_parameters()) {
      at::Tensor w = model->named_parameters()[item.key()].detach();
      const bool target = item.key().ends_with("proj.weight");
      item.value().copy_(target ? storage::Q4_1::dequantize(storage::Q4_1().quantize(w), at::kFloat) : w);
    }
  }
  peft::QLora<storage::Q4_1> qlora(options);
  qlora.attach(*model);
  peft::Lora lora(options);
  lora.attach(*reference);
  CHECK(qlora.bases().size() == 14);
  CHECK(qlora.base_bytes() * 32 == qlora.float_base_bytes() / 4 * 20);
  {
    torch::NoGradGuard no_grad;  // the same adapters on both, B away from zero
    for (std::size_t i = 0; i < qlora.branches().size(); ++i) {
      auto& mine = qlora.branches()[i].second;
      auto& theirs = lora.branches()[i].second;
      mine->b()->weight.normal_();
      theirs->a()->weight.copy_(mine->a()->weight);
      theirs->b()->weight.copy_(mine->b()->weight);
    }
  }
  const auto ids = torch::randint(0, 50, {2, 9}, torch::kLong);
  const auto got = model(ids), want = reference(ids);
  CHECK(torch::allclose(got, want, 1e-4, 1e-5));
  got.logsumexp(-1).sum().backward();
  want.logsumexp(-1).sum().backward();
  std::size_t learning = 0;
  for (const auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    ++learning;
    CHECK(item.key().find("lora_") != std::string::npos);
    CHECK(torch::allclose(item.value().grad(), reference->named_parameters()[item.key()].grad(), 1e-3, 1e-5));
  }
  CHECK(learning == 14 * 2);
}
