// Tests for include/ftopt/models/vit.hpp: a Hugging Face-named ViT checkpoint loads and gives
// transformers' logits (fixtures from tests/fixtures/make_fixtures.py).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/models/vit.hpp>
#include <ftopt/weights/files.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::fixture;

TEST_CASE("ViT loads a Hugging Face-named checkpoint and gives its logits", "[models][vit]") {
  models::ViT vit({.image_size = 28, .patch_size = 7, .channels = 1, .hidden = 32, .layers = 2,
                   .heads = 4, .intermediate = 64, .num_labels = 10});
  auto report = weights::load(*vit, fixture("hf_vit_tiny.safetensors"));  // strict: every name matches
  CHECK(report.loaded == weights::state_dict(*vit).size());
  auto io = weights::load_safetensors(fixture("hf_vit_tiny_io.safetensors"));
  vit->eval();
  torch::NoGradGuard no_grad;
  CHECK(torch::allclose(vit->forward(io["pixels"]), io["logits"], 1e-4, 1e-5));
  CHECK(torch::allclose(vit->forward(io["pixels"].squeeze(1)), io["logits"], 1e-4, 1e-5));  // [B, H, W] too
}
