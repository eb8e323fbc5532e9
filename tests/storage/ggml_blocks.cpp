// Tests for storage::ggml::quantize (include/ftopt/storage/ggml.hpp) and storage::Ggml
// (include/ftopt/storage/ggml_blocks.hpp): each 32-value type's block as quantize_row_*_ref
// computes it (its formula written out here, the bytes packed by tests/weights/gguf_builder.hpp),
// blocks of any type ftopt reads held as they are, and peft::QLora<storage::Ggml> over a Llama
// whose seven projections are each in another block type: LoRA's formula over the dequantized
// base, with the base's bytes the blocks' own. gguf-py's quantize on random weights and QLoRA over
// Qwen2.5's real mixed blocks: tests/peer/llama.py and tests/peer/families.py.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include <torch/torch.h>

#include <ftopt/models/llama.hpp>
#include <ftopt/peft/qlora.hpp>
#include <ftopt/storage/ggml_blocks.hpp>

#include "../support.hpp"
#include "../weights/gguf_builder.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using storage::ggml::Type;

namespace {
std::string bytes_of(const at::Tensor& t) {
  return std::string(reinterpret_cast<const char*>(t.data_ptr<std::uint8_t>()), t.nbytes());
}

/// 32 values with a negative extreme (so the signed-maximum types take d < 0), one of them 0.
std::vector<float> block_values() {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = std::sin(0.7F * static_cast<float>(j)) * 0.3F;
  x[9] = -0.45F;
  x[4] = 0.0F;
  return x;
}

/// Random blocks of `type` for an [out, in] weight: random bytes with each fp16 scale (at the
/// byte offsets of ggml-common.h's layouts) set to a small finite value.
at::Tensor random_blocks(Type type, std::int64_t out, std::int64_t in) {
  const auto kind = *storage::ggml::layout(static_cast<std::uint32_t>(type));
  const std::int64_t blocks = out * in / kind.block_values;
  at::Tensor raw = torch::randint(0, 256, {blocks, kind.block_bytes}, torch::kByte);
  std::vector<int> scales;
  switch (type) {
  case Type::Q4_1: case Type::Q5_1: case Type::Q4_K: scales = {0, 2}; break;
  case Type::Q6_K: scales = {208}; break;
  default: scales = {0};
  }
  for (std::int64_t b = 0; b < blocks; ++b)
    for (const int at : scales) {
      const std::string h = test::half_bytes(1e-4F + 1e-4F * static_cast<float>(b % 7));
      raw[b][at] = static_cast<std::uint8_t>(h[0]);
      raw[b][at + 1] = static_cast<std::uint8_t>(h[1]);
    }
  return raw.flatten();
}
} // namespace

TEST_CASE("ggml::quantize: each 32-value type's block as quantize_row_*_ref computes it", "[storage][gguf]") {
  const auto x = block_values();
  const at::Tensor w = torch::tensor(x).view({1, 32});
  float amax = 0, signed_max = 0, lo = x[0], hi = x[0];
  for (const float v : x) {
    if (std::fabs(v) > amax) amax = std::fabs(v), signed_max = v;
    lo = std::min(lo, v), hi = std::max(hi, v);
  }
  std::vector<int> q(32);
  SECTION("Q8_0: d = max |x| / 127, q = round(x / d)") {
    const float d = amax / 127.0F;
    for (int j = 0; j < 32; ++j) q[j] = static_cast<int>(std::roundf(x[j] * (1.0F / d)));
    CHECK(bytes_of(storage::ggml::quantize(w, Type::Q8_0)) == test::q8_0_block(d, q));
  }
  SECTION("Q4_0: d = the signed maximum / -8, q = min(15, (int8)(x / d + 8.5))") {
    const float d = signed_max / -8.0F;
    for (int j = 0; j < 32; ++j) q[j] = std::min(15, static_cast<int>(static_cast<std::int8_t>(x[j] * (1.0F / d) + 8.5F)));
    CHECK(bytes_of(storage::ggml::quantize(w, Type::Q4_0)) == test::q4_0_block(d, q));
  }
  SECTION("Q5_0: d = the signed maximum / -16, q = min(31, (int8)(x / d + 16.5))") {
    const float d = signed_max / -16.0F;
    for (int j = 0; j < 32; ++j) q[j] = std::min(31, static_cast<int>(static_cast<std::int8_t>(x[j] * (1.0F / d) + 16.5F)));
    CHECK(bytes_of(storage::ggml::quantize(w, Type::Q5_0)) == test::q5_0_block(d, q));
  }
  SECTION("Q5_1: d = (max - min) / 31, m = min, q = (uint8)((x - min) / d + 0.5)") {
    const float d = (hi - lo) / 31.0F;
    for (int j = 0; j < 32; ++j) q[j] = static_cast<int>(static_cast<std::uint8_t>((x[j] - lo) * (1.0F / d) + 0.5F));
    CHECK(bytes_of(storage::ggml::quantize(w, Type::Q5_1)) == test::q5_1_block(d, lo, q));
  }
  SECTION("Q4_1: d = (max - min) / 15, m = min, q = min(15, (int8)((x - min) / d + 0.5))") {
    const float d = (hi - lo) / 15.0F;
    for (int j = 0; j < 32; ++j)
      q[j] = std::min(15, static_cast<int>(static_cast<std::int8_t>((x[j] - lo) * (1.0F / d) + 0.5F)));
    CHECK(bytes_of(storage::ggml::quantize(w, Type::Q4_1)) == test::q4_1_block(d, lo, q));
  }
  SECTION("an all-zero block: d = 0, every value 0") {
    for (const Type t : {Type::Q8_0, Type::Q4_0, Type::Q5_0, Type::Q5_1, Type::Q4_1}) {
      const auto blocks = storage::ggml::quantize(torch::zeros({2, 64}), t);
      CHECK(torch::equal(storage::ggml::dequantize(blocks, t, {2, 64}, at::kFloat), torch::zeros({2, 64})));
    }
  }
  SECTION("within a step of each value, rows of several blocks") {
    // The error bound as a share of the block's largest magnitude a: half a step of a / 127
    // (Q8_0) or of the span <= 2a over 15 or 31 (Q4_1, Q5_1); a whole step of a / 8 or a / 16 for
    // Q4_0 and Q5_0, whose code for -max is clipped to the top; and fp16's rounding of d and m.
    const at::Tensor many = torch::randn({3, 96});
    for (const auto& [t, share] : std::map<Type, double>{{Type::Q8_0, 0.5 / 127}, {Type::Q4_0, 1.0 / 8},
                                                         {Type::Q5_0, 1.0 / 16}, {Type::Q4_1, 1.0 / 15},
                                                         {Type::Q5_1, 1.0 / 31}}) {
      CAPTURE(storage::ggml::name_of(t));
      const auto blocks = storage::ggml::quantize(many, t);
      CHECK(blocks.sizes() == std::vector<std::int64_t>{3, 3 * storage::ggml::layout(static_cast<std::uint32_t>(t))->block_bytes});
      const auto back = storage::ggml::dequantize(blocks, t, {3, 96}, at::kFloat);
      const auto a = many.view({-1, 32}).abs().amax(1, true);
      CHECK(((back - many).view({-1, 32}).abs() <= a * (share + 2e-3)).all().item<bool>());
    }
  }
  CHECK_THAT(test::message_of([&] { storage::ggml::quantize(w, Type::Q4_K); }),
             Contains("ftopt writes Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, not Q4_K"));
  CHECK_THAT(test::message_of([] { storage::ggml::quantize(torch::zeros({2, 40}), Type::Q8_0); }),
             Contains("a [2, 40] tensor's rows are not whole Q8_0 blocks of 32 values"));
}

TEST_CASE("Ggml: blocks of any type ftopt reads held as they are, each with its type", "[storage][gguf]") {
  torch::manual_seed(3);
  for (const Type t : {Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q8_0, Type::Q4_K, Type::Q6_K}) {
    CAPTURE(storage::ggml::name_of(t));
    const at::Tensor raw = random_blocks(t, 4, 512);
    const auto packed = storage::Ggml::from_blocks(raw, t, {4, 512});
    CHECK(packed.data.data_ptr() == raw.data_ptr());  // a view of the bytes, not a copy
    CHECK(packed.bytes() == static_cast<std::int64_t>(raw.nbytes()));
    CHECK(packed.block_type == static_cast<std::uint32_t>(t));
    const at::Tensor values = storage::Ggml::dequantize(packed, at::kFloat);
    CHECK(torch::equal(values, storage::ggml::dequantize(raw, t, {4, 512}, at::kFloat)));
    // bf16 and fp16 written block by block: each value rounded once, as float32's .to() rounds it.
    for (const auto dtype : {at::kBFloat16, at::kHalf}) {
      const at::Tensor low = storage::ggml::dequantize(raw, t, {4, 512}, dtype);
      CHECK(low.scalar_type() == dtype);
      CHECK(torch::equal(low, values.to(dtype)));
    }
    CHECK(storage::Ggml::keeps(t));
    const auto format = storage::format_of(t);
    format.validate();
    CHECK(format.type == (storage::ggml::is_writable(t) ? t : Type::Q8_0));
  }
  // A float weight goes into the format's own type; quantize and dequantize agree with ggml's.
  const at::Tensor w = torch::randn({8, 64});
  const auto q5 = storage::Ggml{.type = Type::Q5_0}.quantize(w);
  CHECK(q5.block_type == static_cast<std::uint32_t>(Type::Q5_0));
  CHECK(torch::equal(q5.data, storage::ggml::quantize(w, Type::Q5_0)));
  CHECK(torch::equal(storage::Ggml::dequantize(q5, at::kBFloat16),
                     storage::ggml::dequantize(q5.data, Type::Q5_0, {8, 64}, at::kBFloat16)));
  CHECK_FALSE(storage::Ggml::keeps(Type::F32));
  CHECK_FALSE(storage::Ggml::keeps(Type::Q5_K));
  CHECK(storage::Q4_1::keeps(Type::Q4_1));
  CHECK_FALSE(storage::Q4_1::keeps(Type::Q5_0));

  CHECK_THAT(test::message_of([] { storage::format_of(Type::Q5_K); }),
             Contains("storage::format_of: Q5_K is not a block type ftopt reads"));
  CHECK_THAT(test::message_of([] { storage::format_of(Type::F16); }), Contains("F16 is not a block type ftopt reads"));
  CHECK_THAT(test::message_of([] { storage::Ggml{.type = Type::Q6_K}.validate(); }),
             Contains("storage::Ggml: type Q6_K is not one ftopt quantizes into (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)"));
  CHECK_THAT(test::message_of([] { storage::Ggml::from_blocks(torch::zeros({143}, torch::kByte), Type::Q4_K, {1, 256}); }),
             Contains("storage::Ggml: 143 bytes are not the Q4_K blocks of a [1, 256] weight"));
  CHECK_THAT(test::message_of([] { storage::Ggml::from_blocks(torch::zeros({4}, torch::kByte), Type::F32, {1, 1}); }),
             Contains("storage::Ggml: F32 is not a block type ftopt reads"));
  CHECK_THAT(test::message_of([] { storage::Ggml{.type = Type::Q8_0}.check(torch::zeros({4, 40}), "model.layers.0.mlp.up_proj"); }),
             Contains("the weight of 'model.layers.0.mlp.up_proj' is [4, 40]; Q8_0 holds [out, in] weights with in a "
                      "multiple of 32"));
}

TEST_CASE("Ggml: QLoRA over seven projections in seven block types is LoRA over the dequantized base",
          "[storage][gguf][qlora]") {
  torch::manual_seed(7);
  const models::LlamaOptions shape{.vocab_size = 40, .hidden = 256, .intermediate = 512, .layers = 1, .heads = 4,
                                   .kv_heads = 2};
  models::Llama model(shape), reference(shape);
  const std::map<std::string, Type> types{{"q_proj", Type::Q5_0}, {"k_proj", Type::Q8_0}, {"v_proj", Type::Q4_K},
                                          {"o_proj", Type::Q6_K}, {"gate_proj", Type::Q4_0}, {"up_proj", Type::Q5_1},
                                          {"down_proj", Type::Q4_1}};
  std::map<std::string, storage::PackedWeight> given;
  std::int64_t file_bytes = 0;
  {
    torch::NoGradGuard no_grad;
    for (auto& item : reference->named_parameters()) {
      at::Tensor w = model->named_parameters()[item.key()];
      for (const auto& [proj, type] : types) {
        if (!item.key().ends_with(proj + ".weight")) continue;
        const auto raw = random_blocks(type, w.size(0), w.size(1));
        file_bytes += static_cast<std::int64_t>(raw.nbytes());
        given.emplace(item.key(), storage::Ggml::from_blocks(raw, type, w.sizes().vec()));
        w = storage::ggml::dequantize(raw, type, w.sizes(), at::kFloat);
      }
      item.value().copy_(w);
    }
  }
  const peft::LoraOptions options{.r = 4, .alpha = 8, .targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                   "up_proj", "down_proj"}};
  peft::QLora<storage::Ggml> qlora(options);
  qlora.use_packed(given);
  qlora.attach(*model);
  peft::Lora lora(options);
  lora.attach(*reference);
  REQUIRE(qlora.bases().size() == 7);
  CHECK(qlora.base_bytes() == file_bytes);  // the blocks as given, not packed again
  for (const auto& [name, base] : qlora.bases())
    CHECK(base->packed().data.data_ptr() == given.at(name + ".weight").data.data_ptr());
  {
    torch::NoGradGuard no_grad;  // the same adapters on both, B away from zero
    for (std::size_t i = 0; i < qlora.branches().size(); ++i) {
      auto& mine = qlora.branches()[i].second;
      auto& theirs = lora.branches()[i].second;
      mine->b()->weight.normal_(0, 0.1);
      theirs->a()->weight.copy_(mine->a()->weight);
      theirs->b()->weight.copy_(mine->b()->weight);
    }
  }
  const auto ids = torch::randint(0, 40, {2, 7}, torch::kLong);
  const auto got = model(ids), want = reference(ids);
  CHECK(torch::allclose(got, want, 1e-4, 1e-5));
  got.logsumexp(-1).sum().backward();
  want.logsumexp(-1).sum().backward();
  for (const auto& item : model->named_parameters())
    if (item.value().requires_grad())
      CHECK(torch::allclose(item.value().grad(), reference->named_parameters()[item.key()].grad(), 1e-3, 1e-5));

  SECTION("merge_quantized keeps a writable type and puts a K-quant sum in the format's type") {
    qlora.merge_quantized(*model);
    std::map<std::string, Type> now;
    for (const auto& [name, base] : qlora.bases()) now[name] = static_cast<Type>(base->packed().block_type);
    CHECK(now.at("model.layers.0.self_attn.q_proj") == Type::Q5_0);
    CHECK(now.at("model.layers.0.self_attn.v_proj") == Type::Q8_0);  // was Q4_K
    CHECK(now.at("model.layers.0.self_attn.o_proj") == Type::Q8_0);  // was Q6_K
    CHECK(torch::allclose(model(ids), want, 0.05, 0.05));
  }
  SECTION("QLora<storage::Q4_1> refuses a base in another type") {
    peft::QLora<storage::Q4_1> q4(options);
    CHECK_THAT(test::message_of([&] { q4.use_packed(given); }),
               Contains("QLora: the packed base given for 'model.layers.0.mlp.gate_proj.weight' is Q4_0 blocks, which "
                        "lora-q4_1 does not hold; peft::QLora<storage::Ggml> takes every block type ftopt reads"));
  }
}
