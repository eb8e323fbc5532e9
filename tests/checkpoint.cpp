// Tests for Trainer::save_checkpoint / load_checkpoint (include/ftopt/trainer.hpp,
// include/ftopt/detail/checkpoint_state.hpp).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "support.hpp"

using namespace ftopt;

namespace {
struct StopAfterEpoch {
  std::int64_t epoch;
  Signal on_epoch_end(const FitState& s, const EpochStats&) { return s.epoch == epoch ? Signal::Stop : Signal::Continue; }
};

std::filesystem::path scratch() {
  auto dir = std::filesystem::temp_directory_path() / ("ftopt-ckpt-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}
} // namespace

TEST_CASE("A resumed run continues the same loss curve as an uninterrupted one", "[trainer][checkpoint]") {
  // Dropout (RNG), AdamW moments (optimizer state), a warmup-cosine schedule (progress) and a
  // shuffled range (epoch-seeded order): all must be restored for the curves to agree exactly.
  auto batches_for = [] {
    torch::manual_seed(11);
    return data::TensorBatches(torch::randn({96, 6}), torch::randint(0, 3, {96}), {.batch_size = 16, .seed = 4});
  };
  const auto dir = scratch();
  const auto path = dir / "run.ckpt";
  TrainerOptions options{.epochs = 4, .schedule = schedule::WarmupCosine{.warmup_steps = 3},
                         .device = torch::kCPU, .report_hardware = false};

  std::vector<double> uninterrupted;
  {
    auto model = test::small_mlp(1, /*dropout=*/0.3);
    Trainer<> trainer(options);
    torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
    auto batches = batches_for();
    torch::manual_seed(99);
    for (const auto& e : trainer.fit(model, optimizer, batches).epochs) uninterrupted.push_back(e.loss);
  }
  std::vector<double> resumed;
  {
    auto model = test::small_mlp(1, 0.3);
    auto with_checkpoints = options;
    with_checkpoints.checkpoint = CheckpointOptions{.path = path};
    Trainer<> trainer(with_checkpoints);
    torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
    auto batches = batches_for();
    torch::manual_seed(99);
    for (const auto& e : trainer.fit(model, optimizer, batches, StopAfterEpoch{1}).epochs) resumed.push_back(e.loss);
    CHECK(trainer.progress().epochs == 2);
  }
  REQUIRE(std::filesystem::exists(path));
  {
    auto model = test::small_mlp(7, 0.3);  // other initial weights: the checkpoint must replace them
    Trainer<> trainer(options);
    torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-2));
    auto batches = batches_for();
    torch::manual_seed(12345);             // another RNG state: the checkpoint must restore it
    trainer.load_checkpoint(path, model, optimizer);
    CHECK(trainer.progress().epochs == 2);
    auto rest = trainer.fit(model, optimizer, batches);
    CHECK(rest.epochs.size() == 2);
    CHECK(rest.epochs.front().epoch == 2);
    for (const auto& e : rest.epochs) resumed.push_back(e.loss);
  }
  REQUIRE(resumed.size() == uninterrupted.size());
  for (std::size_t i = 0; i < resumed.size(); ++i) CHECK(resumed[i] == uninterrupted[i]);
  std::filesystem::remove_all(dir);
}

TEST_CASE("load_checkpoint names a bad file and leaves the model alone", "[trainer][checkpoint][errors]") {
  const auto dir = scratch();
  auto model = test::small_mlp();
  Trainer<> trainer({.device = torch::kCPU, .report_hardware = false});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));
  CHECK_THAT(test::message_of([&] { trainer.load_checkpoint(dir / "none.ckpt", model, optimizer); }),
             Catch::Contains("none.ckpt: no such file"));
  { std::ofstream(dir / "junk.ckpt") << "not a checkpoint"; }
  CHECK_THAT(test::message_of([&] { trainer.load_checkpoint(dir / "junk.ckpt", model, optimizer); }),
             Catch::Contains("junk.ckpt: not a checkpoint"));
  // A checkpoint of another model: every mismatch named, nothing copied.
  models::Mlp other({.in = 6, .hidden = {8}, .out = 3});
  Trainer<> other_trainer({.device = torch::kCPU, .report_hardware = false});
  torch::optim::SGD other_optimizer(other_trainer.prepare(other), torch::optim::SGDOptions(0.1));
  other_trainer.save_checkpoint(dir / "other.ckpt", other, other_optimizer);
  auto before = test::snapshot(*model);
  CHECK_THAT(test::message_of([&] { trainer.load_checkpoint(dir / "other.ckpt", model, optimizer); }),
             Catch::Contains("layers.0.weight: model [16, 6], file [8, 6]"));
  CHECK(test::same_values(before, test::snapshot(*model)));
  std::filesystem::remove_all(dir);
}
