// Tests for include/ftopt/nn/checkpoint.hpp, and the ViT with nn::chunked_attention.
// Reference semantics: torch.utils.checkpoint (PyTorch 2.x docs: "the output and gradients
// match the non-checkpointed run", preserve_rng_state) and checkpoint_sequential's split.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/memory/support/peak.hpp>
#include <ftopt/models/resnet.hpp>
#include <ftopt/models/vit.hpp>
#include <ftopt/nn/checkpoint.hpp>
#include <ftopt/nn/chunked_attention.hpp>
#include <ftopt/nn/linear.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {

/// Three residual-free MLP blocks with dropout, as one Sequential of 9 modules.
torch::nn::Sequential dropout_mlp(std::uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::Sequential seq;
  for (int i = 0; i < 3; ++i) {
    seq->push_back(nn::Linear(16, 16));
    seq->push_back(torch::nn::ReLU());
    seq->push_back(torch::nn::Dropout(0.3));
  }
  return seq;
}

/// The gradients of `module`'s parameters (and of the input, last) after sum(f(x)^2).backward().
template <class F>
std::vector<torch::Tensor> grads_of(torch::nn::Module& module, F&& f, const torch::Tensor& input,
                                    std::uint64_t rng_seed = 7) {
  for (auto& p : module.parameters()) p.mutable_grad() = torch::Tensor();
  auto x = input.detach().clone().requires_grad_(input.requires_grad());
  torch::manual_seed(rng_seed);
  f(x).pow(2).sum().backward();
  std::vector<torch::Tensor> out;
  for (auto& p : module.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  if (x.requires_grad()) out.push_back(x.grad().clone());
  return out;
}

double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].defined() == b[i].defined());
    if (a[i].defined()) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

} // namespace

TEST_CASE("checkpoint_sequential gives the plain run's gradients exactly, dropout included", "[nn][checkpoint]") {
  auto seq = dropout_mlp(1);
  const auto x = torch::randn({8, 16}).requires_grad_(true);
  const auto plain = grads_of(*seq, [&](const torch::Tensor& in) { return seq->forward(in); }, x);
  for (std::int64_t segments : {1, 2, 3, 4}) {
    const auto recomputed =
        grads_of(*seq, [&](const torch::Tensor& in) { return nn::checkpoint_sequential(seq, segments, in); }, x);
    INFO("segments " << segments);
    CHECK(max_difference(plain, recomputed) == 0.0);
  }
  // Negative control: without the RNG state put back, the recompute draws other dropout masks.
  const auto drifted = grads_of(
      *seq, [&](const torch::Tensor& in) { return nn::checkpoint_sequential(seq, 3, in, {.preserve_rng_state = false}); },
      x);
  CHECK(max_difference(plain, drifted) > 1e-3);
}

TEST_CASE("checkpoint_sequential rejects a segment count the Sequential cannot split into", "[nn][checkpoint]") {
  auto seq = dropout_mlp(1);
  const auto x = torch::randn({2, 16});
  CHECK_THAT(test::message_of([&] { nn::checkpoint_sequential(seq, 10, x); }),
             Contains("segments must be in [1, 9] for this Sequential of 9 modules, got 10"));
  CHECK_THAT(test::message_of([&] { nn::checkpoint_sequential(seq, 0, x); }), Contains("got 0"));
}

TEST_CASE("checkpoint trains parameters whose segment input needs no gradient (frozen embedding + LoRA)",
          "[nn][checkpoint]") {
  // PyTorch's reentrant checkpoint returns an output that does not require grad here, so the
  // parameters silently get nothing; ftopt's passes them as inputs of the recompute node.
  torch::manual_seed(3);
  nn::Linear layer(16, 16);
  const auto x = torch::randn({4, 16});  // requires no grad
  auto* impl = layer.get();
  const auto plain = grads_of(*layer, [&](const torch::Tensor& in) { return layer(in); }, x);
  const auto recomputed = grads_of(
      *layer, [&](const torch::Tensor& in) { return nn::checkpoint(*layer, [impl](const torch::Tensor& t) { return impl->forward(t); }, in); },
      x);
  REQUIRE(recomputed.front().defined());
  CHECK(max_difference(plain, recomputed) == 0.0);
}

TEST_CASE("checkpoint passes the input's gradient through a frozen segment", "[nn][checkpoint]") {
  torch::manual_seed(4);
  nn::Linear layer(16, 16);
  for (auto& p : layer->parameters()) p.requires_grad_(false);
  const auto x = torch::randn({4, 16}).requires_grad_(true);
  auto* impl = layer.get();
  const auto plain = grads_of(*layer, [&](const torch::Tensor& in) { return torch::tanh(layer(in)); }, x);
  const auto recomputed = grads_of(*layer, [&](const torch::Tensor& in) {
    return nn::checkpoint(*layer, [impl](const torch::Tensor& t) { return torch::tanh(impl->forward(t)); }, in);
  }, x);
  REQUIRE(plain.back().defined());
  CHECK(max_difference(plain, recomputed) == 0.0);
}

TEST_CASE("checkpoint neither copies nor writes a buffer its forward leaves alone", "[nn][checkpoint]") {
  // A QLoRA base's packed blocks are such buffers, and may view a read-only file mapping.
  torch::manual_seed(5);
  nn::Linear layer(16, 16);
  auto kept = layer->register_buffer("kept", torch::randn({16}));
  auto counted = layer->register_buffer("counted", torch::zeros({1}));
  const auto x = torch::randn({4, 16}).requires_grad_(true);
  auto* impl = layer.get();
  const auto kept_version = kept._version();
  const auto y = nn::checkpoint(*layer, [impl](const torch::Tensor& t) {
    impl->named_buffers()["counted"].add_(1);  // a statistic the forward updates, as BatchNorm's
    return impl->forward(t) * impl->named_buffers()["kept"];
  }, x);
  y.sum().backward();
  CHECK(kept._version() == kept_version);
  CHECK(counted.item<float>() == 1.0F);  // updated once: the recompute's update was undone
  REQUIRE(x.grad().defined());
}

TEST_CASE("checkpoint names a trainable tensor the segment uses but does not own", "[nn][checkpoint]") {
  torch::manual_seed(5);
  nn::Linear layer(4, 4);
  auto stray = torch::randn({4}).requires_grad_(true);  // not registered on `layer`
  auto* impl = layer.get();
  const auto x = torch::randn({2, 4}).requires_grad_(true);
  auto y = nn::checkpoint(*layer, [impl, stray](const torch::Tensor& t) { return impl->forward(t) * stray; }, x);
  CHECK_THAT(test::message_of([&] { y.sum().backward(); }),
             Contains("uses a trainable tensor of shape [4] that is not among its module's parameters"));
  // Passed in `params`, it gets its gradient.
  auto z = nn::checkpoint(*layer, [impl, stray](const torch::Tensor& t) { return impl->forward(t) * stray; }, x,
                          {stray});
  z.sum().backward();
  CHECK(stray.grad().defined());
}

TEST_CASE("Checkpointed ViT blocks give the plain gradients exactly, with dropout", "[nn][checkpoint][vit]") {
  torch::manual_seed(6);
  models::ViT vit({.image_size = 28, .patch_size = 7, .channels = 1, .hidden = 16, .layers = 3, .heads = 2,
                   .intermediate = 32, .num_labels = 10, .dropout = 0.2, .attention_dropout = 0.1});
  const auto x = torch::randn({4, 1, 28, 28});
  auto run = [&](const torch::Tensor& in) { return vit->forward(in); };
  const auto plain = grads_of(*vit, run, x);
  for (std::int64_t every : {1, 2}) {
    vit->vit->set_checkpointing({.every = every});
    INFO("every " << every);
    CHECK(max_difference(plain, grads_of(*vit, run, x)) == 0.0);
  }
  vit->vit->set_checkpointing({.every = 1, .options = {.preserve_rng_state = false}});
  CHECK(max_difference(plain, grads_of(*vit, run, x)) > 1e-4);
}

TEST_CASE("Checkpointed ResNet blocks give the plain gradients and update BatchNorm statistics once",
          "[nn][checkpoint][resnet]") {
  auto make = [] {
    torch::manual_seed(8);
    return models::ResNet({.layers = {1, 1}, .widths = {4, 8}, .in_channels = 1, .num_classes = 3,
                           .stem = models::ResNetStem::Small});
  };
  auto plain_model = make(), recomputed_model = make();
  recomputed_model->set_checkpointing({.every = 1});
  const auto x = torch::randn({4, 1, 12, 12});
  const auto plain = grads_of(*plain_model, [&](const torch::Tensor& in) { return plain_model->forward(in); }, x);
  const auto recomputed =
      grads_of(*recomputed_model, [&](const torch::Tensor& in) { return recomputed_model->forward(in); }, x);
  CHECK(max_difference(plain, recomputed) == 0.0);
  // Running means, variances and num_batches_tracked: one update each, as without checkpointing.
  CHECK(test::same_values(plain_model->buffers(), recomputed_model->buffers()));
}

TEST_CASE("A ViT with chunked attention gives the Sdpa ViT's logits and gradients", "[nn][attention][vit]") {
  auto make = [](models::AttnImplementation kind) {
    torch::manual_seed(11);
    return models::ViT({.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 16, .layers = 2, .heads = 2,
                        .intermediate = 32, .num_labels = 10, .attn_implementation = kind, .attention_chunk = 16});
  };
  auto sdpa = make(models::AttnImplementation::Sdpa), chunked = make(models::AttnImplementation::Chunked);
  const auto x = torch::randn({3, 1, 28, 28});
  const auto a = grads_of(*sdpa, [&](const torch::Tensor& in) { return sdpa->forward(in); }, x);
  const auto b = grads_of(*chunked, [&](const torch::Tensor& in) { return chunked->forward(in); }, x);
  CHECK(max_difference(a, b) < 1e-4);
  torch::NoGradGuard no_grad;
  CHECK(torch::allclose(sdpa->forward(x), chunked->forward(x), 1e-5, 1e-5));
  CHECK_THAT(test::message_of([] {
               models::ViT({.attention_dropout = 0.1, .attn_implementation = models::AttnImplementation::Chunked});
             }),
             Contains("attn_implementation Chunked applies no attention dropout, but attention_dropout is 0.1"));
}
