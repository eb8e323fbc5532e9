// Tests for include/ftopt/trainer/checkpoint.hpp through Trainer::save_checkpoint and
// load_checkpoint (and include/ftopt/detail/checkpoint_state.hpp's RNG and policy states).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include <ftopt.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {
struct StopAfterEpoch {
  std::int64_t epoch;
  Signal on_epoch_end(const FitState& s, const EpochStats&) { return s.epoch == epoch ? Signal::Stop : Signal::Continue; }
};

std::filesystem::path checkpoint_scratch() {
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
  const auto dir = checkpoint_scratch();
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
  const auto dir = checkpoint_scratch();
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

namespace {

/// A checkpoint of `model` in the layout of format 1 (before formats were recorded), written
/// here entry by entry; `format` and `writer`, when given, are added as a later ftopt would.
void write_by_hand(const std::filesystem::path& path, models::Mlp& model, torch::optim::Optimizer& optimizer,
                   std::optional<std::int64_t> format = {}, std::string writer = {}) {
  torch::serialize::OutputArchive archive;
  if (format) archive.write("format", c10::IValue(*format));
  if (!writer.empty()) archive.write("written_by", c10::IValue(writer));
  for (const auto& item : model->named_parameters()) archive.write("model." + item.key(), item.value(), true);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("progress.epochs", torch::tensor(std::int64_t{3}));
  archive.write("progress.optimizer_steps", torch::tensor(std::int64_t{21}));
  archive.write("progress.base_lrs", torch::tensor(std::vector<double>{0.25}, torch::kDouble));
  archive.save_to(path.string());
}

} // namespace

TEST_CASE("A checkpoint records its format and writer, and reads the formats before it",
          "[trainer][checkpoint]") {
  const auto dir = checkpoint_scratch();
  auto model = test::small_mlp();
  Trainer<> trainer({.device = torch::kCPU, .report_hardware = false});
  torch::optim::SGD optimizer(trainer.prepare(model), torch::optim::SGDOptions(0.1));

  SECTION("this ftopt writes format 2 and names itself") {
    trainer.save_checkpoint(dir / "now.ckpt", model, optimizer);
    torch::serialize::InputArchive raw;
    raw.load_from((dir / "now.ckpt").string());
    c10::IValue format, writer;
    REQUIRE(raw.try_read("format", format));
    REQUIRE(raw.try_read("written_by", writer));
    CHECK(format.toInt() == 2);
    CHECK_THAT(writer.toStringRef(), Catch::StartsWith(std::string("ftopt ") + ftopt::version) &&
                                         Catch::Contains(std::string("LibTorch ") + TORCH_VERSION));
    const TrainingState state = trainer.load_checkpoint(dir / "now.ckpt", model, optimizer);
    CHECK(state.format == 2);
    CHECK(state.written_by == writer.toStringRef());
  }
  SECTION("a format-1 file (no format entry) loads as before") {
    auto saved = test::small_mlp(5);
    write_by_hand(dir / "old.ckpt", saved, optimizer);
    const TrainingState state = trainer.load_checkpoint(dir / "old.ckpt", model, optimizer);
    CHECK(state.format == 1);
    CHECK(state.written_by.empty());
    CHECK(state.progress.epochs == 3);
    CHECK(state.progress.optimizer_steps == 21);
    CHECK(state.base_lrs == std::vector<double>{0.25});
    CHECK(trainer.progress().epochs == 3);
    CHECK(test::same_values(test::snapshot(*saved), test::snapshot(*model)));
  }
  SECTION("a newer format is refused with its writer named, and the model is left alone") {
    auto saved = test::small_mlp(5);
    write_by_hand(dir / "new.ckpt", saved, optimizer, 3, "ftopt 9.0.0, LibTorch 9.9");
    const auto before = test::snapshot(*model);
    CHECK_THAT(test::message_of([&] { trainer.load_checkpoint(dir / "new.ckpt", model, optimizer); }),
               Catch::Contains("new.ckpt: checkpoint format 3 (written by ftopt 9.0.0, LibTorch 9.9); ftopt ") &&
                   Catch::Contains("reads formats 1 to 2"));
    CHECK(test::same_values(before, test::snapshot(*model)));
  }
  std::filesystem::remove_all(dir);
}
