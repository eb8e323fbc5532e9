// Tests for include/ftopt/peft/qlora.hpp: LoRA over an int8 or NF4 frozen base. The expected
// values are peft::Lora's formula over the base the format's definition gives
// (tests/storage/formats_by_definition.hpp: the formats written out element by element), written
// out here.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>
#include <ftopt/parallel/ddp.hpp>  // the rules over parallel::Ddp (<ftopt.hpp> leaves it out)

#include "../storage/formats_by_definition.hpp"
#include "../support.hpp"

using namespace ftopt;

namespace {

using Int8Lora = peft::QLora<storage::Int8PerChannel>;
using Nf4Lora = peft::QLora<storage::Nf4>;


/// Two Linears named "0" and "1", both adapted.
struct Net {
  torch::nn::Sequential net;
  Net(std::uint64_t seed)
      : net((torch::manual_seed(seed), torch::nn::Sequential(nn::Linear(32, 64), torch::nn::ReLU(), nn::Linear(64, 32)))) {}
  nn::LinearImpl& layer(int i) { return *net[static_cast<std::size_t>(2 * i)]->as<nn::LinearImpl>(); }
};

} // namespace

TEMPLATE_TEST_CASE("QLora computes deq(Q(W)) x + b + s B A x, and trains A and B alone", "[peft][qlora]",
                   storage::Int8PerChannel, storage::Nf4) {
  Net n(7);
  const auto w0 = n.layer(0).weight.detach().clone();
  peft::QLora<TestType> qlora({.r = 4, .alpha = 8, .targets = {"0", "2"}}, test::small_format<TestType>(8));
  qlora.attach(*n.net);
  REQUIRE(qlora.bases().size() == 2);
  auto& layer = n.layer(0);
  // The float weight is gone; the packed base lives in the layer's buffers.
  CHECK(layer.weight.numel() == 0);
  CHECK(layer.named_buffers(false).contains("weight_packed"));
  const auto& packed = qlora.bases()[0].second->packed();
  const auto deq = TestType::dequantize(packed, at::kFloat);
  CHECK(torch::allclose(deq, test::dequantized_by_definition(w0, test::small_format<TestType>(8)), 1e-6, 1e-6));
  // Within the format's step: int8's half step of 1/127.5 of a row's largest value; NF4's widest
  // gap (-1 to -0.6962) over two, 0.152 of a block's largest, plus the scaler's rounding.
  const double step = std::is_same_v<TestType, storage::Nf4> ? 0.16 : 0.5 / 127.5 + 1e-6;
  CHECK((deq - w0).abs().max().item().toDouble() <= step * w0.abs().max().item().toDouble());

  auto& branch = *qlora.branches()[0].second;
  {
    torch::NoGradGuard no_grad;
    branch.b()->weight.normal_();
  }
  const double s = 2.0;
  auto a = branch.a()->weight.detach().clone().requires_grad_();
  auto b = branch.b()->weight.detach().clone().requires_grad_();
  auto x = torch::randn({5, 32});
  const auto got = layer.forward(x);
  const auto expected = torch::linear(x, deq, layer.bias.detach()) + s * torch::matmul(torch::matmul(x, a.t()), b.t());
  CHECK(torch::allclose(got, expected, 1e-5, 1e-5));
  const auto g = torch::randn_like(expected);
  (got * g).sum().backward();
  (expected * g).sum().backward();
  CHECK(torch::allclose(branch.a()->weight.grad(), a.grad(), 1e-4, 1e-5));
  CHECK(torch::allclose(branch.b()->weight.grad(), b.grad(), 1e-4, 1e-5));
  // Only the adapters require grad: the base is frozen and packed.
  for (const auto& p : qlora.trainable_parameters(*n.net)) CHECK(p.dim() == 2);
  CHECK(qlora.trainable_parameters(*n.net).size() == 4);
}

TEMPLATE_TEST_CASE("QLora's bases take <= 30% (int8) and <= 16% (NF4) of their float32 bytes", "[peft][qlora]",
                   storage::Int8PerChannel, storage::Nf4) {
  // The d-256 ViT of the main job, LoRA on every block Linear.
  torch::manual_seed(1);
  models::ViT vit({.image_size = 28, .patch_size = 7, .channels = 1, .hidden = 256, .layers = 2, .heads = 4,
                   .intermediate = 512, .num_labels = 10});
  peft::QLora<TestType> qlora({.r = 8, .targets = {"query", "key", "value", "dense"}});
  qlora.attach(*vit);
  const double ratio = static_cast<double>(qlora.base_bytes()) / static_cast<double>(qlora.float_base_bytes());
  INFO("base " << qlora.base_bytes() << " bytes of " << qlora.float_base_bytes());
  CHECK(ratio <= (std::is_same_v<TestType, storage::Nf4> ? 0.16 : 0.30));
  // The float weights of the adapted layers are freed.
  std::int64_t float_left = 0;
  for (const auto& [name, base] : qlora.bases()) float_left += vit->named_parameters()[name + ".weight"].numel();
  CHECK(float_left == 0);
}

TEMPLATE_TEST_CASE("QLora merges into a float base or keeps it quantized", "[peft][qlora]", storage::Int8PerChannel,
                   storage::Nf4) {
  Net n(8);
  peft::QLora<TestType> qlora({.r = 4, .alpha = 4, .targets = {"0", "2"}}, test::small_format<TestType>(8));
  qlora.attach(*n.net);
  for (auto& [name, branch] : qlora.branches()) {
    torch::NoGradGuard no_grad;
    branch->b()->weight.normal_(0, 0.1);
  }
  const auto x = torch::randn({6, 32});
  torch::NoGradGuard no_grad;
  const auto before = n.net->forward(x);
  const auto deq = TestType::dequantize(qlora.bases()[0].second->packed(), at::kFloat);
  const auto delta = qlora.branches()[0].second->delta();

  SECTION("merge: float W = deq(Q(W)) + s B A, the same outputs") {
    qlora.merge(*n.net);
    CHECK(qlora.bases().empty());
    CHECK(torch::allclose(n.layer(0).weight, deq + delta, 1e-5, 1e-6));
    CHECK(n.layer(0).named_buffers(false)["weight_packed"].numel() == 0);
    CHECK(torch::allclose(n.net->forward(x), before, 1e-4, 1e-5));
    qlora.unmerge(*n.net);
    CHECK(torch::allclose(n.layer(0).weight, deq, 1e-5, 1e-6));
    CHECK(torch::allclose(n.net->forward(x), before, 1e-4, 1e-5));
  }
  SECTION("merge_quantized: the base holds Q(deq(Q(W)) + s B A); unmerge takes s B A back out") {
    const auto format = test::small_format<TestType>(8);
    const auto deq2 = TestType::dequantize(qlora.bases()[1].second->packed(), at::kFloat);
    const auto delta2 = qlora.branches()[1].second->delta();
    qlora.merge_quantized(*n.net);
    CHECK(n.layer(0).weight.numel() == 0);
    const auto merged = TestType::dequantize(qlora.bases()[0].second->packed(), at::kFloat);
    const auto expected = test::dequantized_by_definition(deq + delta, format);
    CHECK(torch::allclose(merged, expected, 1e-6, 1e-6));
    // The network now computes relu(x M0^T + b0) M1^T + b1 over the requantized merged bases alone.
    const auto hidden = torch::relu(torch::linear(x, expected, n.layer(0).bias));
    const auto out = torch::linear(hidden, test::dequantized_by_definition(deq2 + delta2, format), n.layer(1).bias);
    CHECK(torch::allclose(n.net->forward(x), out, 1e-5, 1e-5));
    qlora.unmerge(*n.net);
    CHECK_FALSE(qlora.branches()[0].second->merged());
    const auto back = TestType::dequantize(qlora.bases()[0].second->packed(), at::kFloat);
    CHECK(torch::allclose(back, test::dequantized_by_definition(merged - delta, format), 1e-6, 1e-6));
  }

}

TEMPLATE_TEST_CASE("QLora's layers sharing an input run as one GEMM over their bases under autocast, from one copy "
                   "of the input", "[peft][qlora]", storage::Int8PerChannel, storage::Nf4) {
  // Three layers on one input, as a ViT's query, key and value (nn::shared_input_linears); the
  // expected values are the same layers run one by one (KernelOptions::shared_input off), each checked against
  // LoRA's formula over its dequantized base in the tests above.
  torch::manual_seed(9);
  torch::nn::Sequential net(nn::Linear(32, 64), nn::Linear(32, 64), nn::Linear(32, 64));
  const double dropout = GENERATE(0.0, 0.1);
  peft::QLora<TestType> qlora({.r = 4, .alpha = 8, .dropout = dropout, .targets = {"0", "1", "2"}},
                              test::small_format<TestType>(8));
  qlora.attach(*net);
  {
    torch::NoGradGuard no_grad;  // B away from its zero start, so that A's gradient is not zero
    for (auto& item : net->named_parameters())
      if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.1);
  }
  const std::array<nn::LinearImpl*, 3> layers{net[0]->as<nn::LinearImpl>(), net[1]->as<nn::LinearImpl>(),
                                              net[2]->as<nn::LinearImpl>()};
  const auto x = torch::randn({16, 32});
  // What the graph holds after the forward (the saved tensors, the outputs) in bytes, then the
  // outputs and the gradients of the input and of every adapter.
  const auto run = [&](bool shared) {
    peft::set_kernel(*net, {.shared_input = shared});
    const auto input = x.clone().requires_grad_(true);
    const auto before = memory::PeakMemory::current();
    std::array<torch::Tensor, 3> out;
    {
      compat::AutocastScope autocast(torch::kCPU, torch::kBFloat16);
      torch::manual_seed(4);  // the same dropout masks either way
      out = nn::shared_input_linears<3>(layers, input);
    }
    const auto held = static_cast<double>(memory::PeakMemory::current() - before);
    // One GEMM's output, split: the outputs themselves, or (with dropout) what each branch's
    // output is added to.
    const auto split_from = [](const torch::Tensor& t) {
      auto fn = t.grad_fn();
      if (fn && fn->name().find("Add") != std::string::npos) fn = fn->next_edges()[0].function;
      return fn && fn->name().find("SplitWithSizes") != std::string::npos;
    };
    const bool together = split_from(out[0]) && split_from(out[1]) && split_from(out[2]);
    net->zero_grad();
    return std::tuple{held, together, test::outputs_and_gradients({out.begin(), out.end()}, input, *net)};
  };
  const auto [held_once, together, once] = run(true);
  const auto [held_each, apart, each] = run(false);
  CHECK_FALSE(apart);
  // One GEMM over the three bases, with or without dropout (then each branch's output is added to
  // its base's).
  CHECK(together);
  REQUIRE(once.size() == each.size());
  for (std::size_t i = 0; i < once.size(); ++i) {
    INFO("output or gradient " << i);
    CHECK(torch::allclose(once[i].to(torch::kFloat), each[i].to(torch::kFloat), 2e-2, 2e-2));  // bf16, other orders
  }
  // Each layer alone keeps its own bf16 copy of the input for the input's gradient (and without
  // dropout for its adapter's): two more than together.
  const double copy = static_cast<double>(x.numel()) * 2;
  INFO("held together " << held_once << " bytes, one by one " << held_each);
  CHECK(held_each - held_once >= 2 * copy);
}

TEST_CASE("QLora with PiSSA quantizes the residual W - s B A", "[peft][qlora]") {
  Net n(9);
  const auto w0 = n.layer(1).weight.detach().clone();
  Int8Lora qlora({.r = 4, .alpha = 4, .targets = {"2"}, .init = peft::LoraInit::Pissa});
  qlora.attach(*n.net);
  const auto residual = storage::Int8PerChannel::dequantize(qlora.bases()[0].second->packed(), at::kFloat);
  const auto delta = qlora.branches()[0].second->delta();
  // deq(Q(residual)) + s B A is W, up to int8's rounding of the residual (half a step per row).
  const auto scales = qlora.bases()[0].second->packed().scales.unsqueeze(1);
  CHECK(((residual + delta - w0).abs() <= scales / 2 + 1e-6).all().item<bool>());
}

TEST_CASE("QLora trains under Bf16Mixed through the Trainer and finalizes into DynamicInt8", "[peft][qlora]") {
  auto model = test::tiny_vit(42, 32);
  using T = Trainer<precision::Bf16Mixed, Nf4Lora, memory::None, parallel::Single, quant::DynamicInt8>;
  T trainer(test::quiet(), {}, Nf4Lora({.r = 4, .targets = {"query", "value"}, .modules_to_save = {"classifier"}},
                                     storage::Nf4{.block_size = 64, .scaler_block_size = 16}));
  test::Batches vit_batches;
  for (int i = 0; i < 3; ++i) vit_batches.emplace_back(torch::randn({8, 1, 28, 28}), torch::randint(0, 10, {8}));
  const auto& trainable = trainer.prepare(model);
  const auto before = test::snapshot(*model);
  torch::optim::AdamW optimizer(trainable, torch::optim::AdamWOptions(1e-2));
  const auto result = trainer.fit(model, optimizer, vit_batches);
  CHECK(std::isfinite(result.epochs[0].loss));
  CHECK_FALSE(test::same_values(before, test::snapshot(*model)));
  model->eval();
  torch::NoGradGuard no_grad;
  const auto x = vit_batches[0].first;
  const auto trained = model->forward(x);
  trainer.finalize(model);  // the bases to float, the adapters folded in, then int8 kernels
  const auto converted = model->forward(x);
  CHECK(((converted - trained).norm() / trained.norm()).item<double>() < 0.1);
}

TEST_CASE("QLora refuses DoRA, convolutions and NF4 blocks that do not fit, before changing the model",
          "[peft][qlora][bad-input]") {
  Net n(10);
  const auto before = test::snapshot(*n.net);
  CHECK_THAT(test::message_of([&] { Nf4Lora({.targets = {"0"}, .dora = true}).attach(*n.net); }),
             Catch::Contains("QLora: use_dora is not supported over a quantized base"));
  // 32 x 64 = 2048 values in blocks of 64: 32 blocks, which 256 does not divide.
  CHECK_THAT(test::message_of([&] { Nf4Lora({.r = 4, .targets = {"0", "2"}}).attach(*n.net); }),
             Catch::Contains("scaler_block_size = 256 does not divide the 32 blocks of '0'"));
  CHECK_THAT(test::message_of([&] {
               Nf4Lora({.r = 4, .targets = {"0"}}, storage::Nf4{.block_size = 96, .scaler_block_size = 1}).attach(*n.net);
             }),
             Catch::Contains("block_size = 96 does not divide the 2048 values of '0'"));
  CHECK(test::same_values(before, test::snapshot(*n.net)));
  CHECK_FALSE(n.layer(0).extension());
  CHECK(n.layer(0).named_buffers(false).is_empty());

  torch::nn::Sequential conv(nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3)));
  CHECK_THAT(test::message_of([&] { Int8Lora({.r = 2, .targets = {"0"}}).attach(*conv); }),
             Catch::Contains("QLora: target '0' is not an ftopt::nn::Linear"));
}

TEST_CASE("The rules: a quantized base combines with every precision policy, not with fake-quant training",
          "[peft][qlora][rules]") {
  using rules::broken_rule;
  STATIC_REQUIRE(rules::quantizes_frozen_base<Nf4Lora>);
  STATIC_REQUIRE(broken_rule<precision::Fp32, Nf4Lora, memory::None, parallel::Single, quant::None>() == nullptr);
  STATIC_REQUIRE(broken_rule<precision::Bf16Mixed, Int8Lora, memory::Checkpoint, parallel::Single, quant::None>() ==
                 nullptr);
  STATIC_REQUIRE(broken_rule<precision::Fp16Mixed, Nf4Lora, memory::None, parallel::Ddp, quant::None>() == nullptr);
  STATIC_REQUIRE(broken_rule<precision::Bf16True, Nf4Lora, memory::None, parallel::Single, quant::DynamicInt8>() ==
                 nullptr);
  STATIC_REQUIRE(broken_rule<precision::Fp32, Nf4Lora, memory::None, parallel::Single, quant::StaticInt8>() == nullptr);
  STATIC_REQUIRE(broken_rule<precision::Fp32, Int8Lora, memory::None, parallel::Single, quant::Qat>() ==
                 rules::rule::fake_quant_over_quantized_base);
  // compile-fail test: tests/compile_fail/fake_quant_over_quantized_base.cpp
}
