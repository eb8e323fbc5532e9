// Tests for include/ftopt/peft/freeze.hpp.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;

TEST_CASE("peft::Freeze trains only what it names, frozen weights get no gradient", "[peft][freeze]") {
  torch::manual_seed(0);
  models::ResNet model({.layers = {1, 1}, .widths = {4, 8}, .in_channels = 1, .num_classes = 3,
                        .stem = models::ResNetStem::Small});
  Trainer<precision::Fp32, peft::Freeze> trainer({.device = torch::kCPU, .report_hardware = false}, {},
                                                 peft::Freeze{.train = {"layer2", "fc"}});
  const auto& trainable = trainer.prepare(model);
  // layer2's one BasicBlock (4 -> 8 channels, stride 2): conv1, bn1 (2), conv2, bn2 (2) and the
  // downsample's conv and BatchNorm (3), 9 tensors; fc's weight and bias: 11 in all.
  CHECK(trainable.size() == 11);
  torch::optim::SGD optimizer(trainable, torch::optim::SGDOptions(0.1));
  auto before = weights::state_dict(*model);
  std::map<std::string, torch::Tensor> copies;
  for (const auto& item : before) copies[item.key()] = item.value().clone();
  // Look at the gradients right after backward, before the step sets them to none.
  auto x = torch::randn({4, 1, 8, 8});
  auto y = torch::randint(0, 3, {4});
  auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
  loss.backward();
  for (const auto& item : model->named_parameters()) {
    INFO(item.key());
    const bool trains = item.key().rfind("layer2", 0) == 0 || item.key().rfind("fc", 0) == 0;
    CHECK(item.value().grad().defined() == trains);
  }
  for (auto& p : model->parameters()) p.mutable_grad().reset();
  trainer.fit(model, optimizer, test::Batches{{x, y}});
  for (const auto& item : model->named_parameters()) {
    const bool trains = item.key().rfind("layer2", 0) == 0 || item.key().rfind("fc", 0) == 0;
    INFO(item.key());
    CHECK(torch::equal(item.value(), copies[item.key()]) == !trains);
  }
}

TEST_CASE("peft::Freeze names its mistakes", "[peft][freeze][errors]") {
  CHECK_THAT(test::message_of([] { Trainer<precision::Fp32, peft::Freeze>({}, {}, peft::Freeze{}); }),
             Catch::Contains("name what to train (.train, .last_blocks) or what to freeze (.freeze)"));
  auto model = test::small_mlp();
  Trainer<precision::Fp32, peft::Freeze> trainer({.device = torch::kCPU, .report_hardware = false}, {},
                                                 peft::Freeze{.train = {"head"}});
  CHECK_THAT(test::message_of([&] { trainer.prepare(model); }),
             Catch::Contains("pattern 'head' matches no module or parameter; module names here: 0, 1, 2, layers"));
}

TEST_CASE("peft::Freeze trains the last k blocks of a container", "[peft][freeze]") {
  torch::manual_seed(1);
  models::ViT vit({.image_size = 28, .patch_size = 7, .channels = 1, .hidden = 16, .layers = 3, .heads = 2,
                   .intermediate = 32, .num_labels = 10});
  Trainer<precision::Fp32, peft::Freeze> trainer(test::quiet(), {},
                                                 peft::Freeze{.train = {"classifier"}, .last_blocks = 2, .blocks = "encoder.layer"});
  trainer.prepare(vit);
  for (const auto& item : vit->named_parameters()) {
    INFO(item.key());
    const bool trains = item.key().rfind("vit.encoder.layer.1.", 0) == 0 || item.key().rfind("vit.encoder.layer.2.", 0) == 0 ||
                        item.key().rfind("classifier.", 0) == 0;
    CHECK(item.value().requires_grad() == trains);
  }
  auto other = vit;  // the same model: prepare is not run twice; check the errors on fresh trainers
  Trainer<precision::Fp32, peft::Freeze> too_many(test::quiet(), {}, peft::Freeze{.last_blocks = 4, .blocks = "encoder.layer"});
  CHECK_THAT(test::message_of([&] { too_many.prepare(other); }), Catch::Contains("last_blocks is 4 but vit.encoder.layer has 3 blocks"));
  CHECK_THAT(test::message_of([] { Trainer<precision::Fp32, peft::Freeze>(test::quiet(), {}, peft::Freeze{.last_blocks = 1}); }),
             Catch::Contains("last_blocks is 1 but .blocks names no container"));
}
