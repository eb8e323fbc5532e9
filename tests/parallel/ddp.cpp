// Tests for include/ftopt/parallel/ddp.hpp: parallel::Ddp with real processes on localhost over
// Gloo (the worker is tests/parallel/ddp_worker.cpp). The environment, launch and the backends'
// registration: tests/parallel/support/.
//
// The reference for every multi-process check is DDP's contract (PyTorch docs, "DistributedData
// Parallel"): with the loss a mean over each rank's batch, the all-reduced gradient is the mean
// over ranks, so W ranks on B samples each train exactly as one process on the W*B samples.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <ftopt/detail/scope_exit.hpp>
#include <ftopt/parallel/ddp.hpp>
#include <ftopt/parallel/support/launch.hpp>
#include <ftopt/pipeline.hpp>
#include <ftopt/precision/bf16_mixed.hpp>
#include <ftopt/trainer.hpp>

#include "../support.hpp"
#include "ddp_data.hpp"
#include "ranks.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using ftopt::test::ScratchDir;

namespace ddp_test {

struct Reference {
  std::map<std::string, torch::Tensor> params;
  double epoch_loss = 0;
  std::int64_t trainable = 0;
};

/// One process on the whole batch of kBatch per step: what the ranks together must equal.
template <class Precision, class Peft, class Workload = test::ddp::MlpWorkload>
Reference train_alone(Peft peft, std::int64_t steps, std::int64_t epochs = 1, Workload workload = {}) {
  namespace fp = ftopt::pipeline;
  auto model = workload.model(1);
  Trainer<Precision, Peft> trainer(test::ddp::trainer_options(epochs), {}, std::move(peft));
  auto& params = trainer.prepare(model);
  auto optimizer = test::ddp::optimizer(params);
  auto [x, y] = workload.data(steps);
  auto batches = fp::from(x, y) | fp::batch(test::ddp::kBatch);
  auto summary = trainer.fit(model, *optimizer, batches);
  Reference ref;
  for (const auto& item : model->named_parameters()) ref.params["param." + item.key()] = item.value().detach().clone();
  ref.epoch_loss = summary.epochs.back().loss;
  for (const auto& p : params) ref.trainable += p.numel();
  return ref;
}

/// Both ranks hold bit-identical parameters, equal to the reference within `tolerance`.
void check_against(const ScratchDir& dir, const Ranks& ranks, const Reference& ref, double tolerance) {
  INFO("rank 0 log:\n" << ranks.logs[0] << "\nrank 1 log:\n" << ranks.logs[1]);
  REQUIRE(ranks.result.code() == 0);
  auto rank0 = load(dir.path / "rank0.pt");
  auto rank1 = load(dir.path / "rank1.pt");
  for (const auto& [name, expected] : ref.params) {
    INFO(name);
    REQUIRE(rank0.count(name) == 1);
    CHECK(torch::equal(rank0[name], rank1[name]));
    CHECK((rank0[name] - expected).abs().max().item<double>() <= tolerance);
  }
  CHECK(rank0["epoch_loss"].item<double>() == Approx(ref.epoch_loss).epsilon(tolerance * 10 + 1e-6));
  CHECK(rank0["epoch_loss"].item<double>() == rank1["epoch_loss"].item<double>());
}

} // namespace ddp_test

using namespace ddp_test;

/// Ddp as rank 0 of 1 on `device` against parallel::Single: the same weights after 3 steps.
static void check_alone_equals_single(torch::Device device) {
  auto [x, y] = test::ddp::data(3);
  auto run = [&](auto trainer) {
    auto model = test::ddp::model(1);
    auto& params = trainer.prepare(model);
    auto optimizer = test::ddp::optimizer(params);
    for (std::int64_t s = 0; s < 3; ++s) {
      auto rows = torch::indexing::Slice(s * 32, (s + 1) * 32);
      trainer.train_step(model, *optimizer, std::pair{x.index({rows}), y.index({rows})});
    }
    return test::snapshot(*model);
  };
  auto options = test::ddp::trainer_options(1);
  options.device = device;
  auto single = run(Trainer<precision::Fp32, peft::Full>(options));
  auto ddp = run(Trainer<precision::Fp32, peft::Full, memory::None, parallel::Ddp>(
      options, {}, {}, {}, parallel::Ddp({.environment = parallel::Environment{}})));
  CHECK(test::same_values(single, ddp));
}

TEST_CASE("Ddp alone (WORLD_SIZE 1) trains exactly as Single", "[parallel][ddp]") {
  if (!have_gloo()) return;
  check_alone_equals_single(torch::kCPU);
}

TEST_CASE("CUDA: Ddp over NCCL on one GPU trains exactly as Single", "[cuda][ddp]") {
  if (!torch::cuda::is_available()) {
    test::skip("no CUDA device");
    return;
  }
  if (!parallel::has_backend(parallel::Backend::Nccl)) {
    test::skip("this build has no NCCL backend");
    return;
  }
  check_alone_equals_single(torch::kCUDA);
}

TEST_CASE("Ddp: a wrong WORLD_SIZE or an unreachable MASTER_ADDR is a clear error in bounded time",
          "[parallel][ddp]") {
  if (!have_gloo()) return;
  auto model = test::ddp::model(1);
  parallel::Environment env;
  env.world_size = 2;
  env.master_port = parallel::free_port();
  const auto start = std::chrono::steady_clock::now();
  SECTION("rank 0 waits for a second process that never comes") {
    env.rank = 0;
    Trainer<precision::Fp32, peft::Full, memory::None, parallel::Ddp> trainer(
        test::ddp::trainer_options(1), {}, {}, {},
        parallel::Ddp({.timeout = std::chrono::milliseconds(1500), .environment = env}));
    CHECK_THAT(test::message_of([&] { trainer.prepare(model); }),
               Contains("not all WORLD_SIZE=2 processes joined within 1500 ms"));
  }
  SECTION("rank 1 finds nobody at MASTER_ADDR:MASTER_PORT") {
    env.rank = 1;
    Trainer<precision::Fp32, peft::Full, memory::None, parallel::Ddp> trainer(
        test::ddp::trainer_options(1), {}, {}, {},
        parallel::Ddp({.timeout = std::chrono::milliseconds(1500), .environment = env}));
    CHECK_THAT(test::message_of([&] { trainer.prepare(model); }),
               Contains("rank 1 could not reach the store at MASTER_ADDR:MASTER_PORT=127.0.0.1:" +
                        std::to_string(env.master_port)));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("Ddp: a constant buffer the model lacks is named", "[parallel][ddp][errors]") {
  if (!have_gloo()) return;
  auto model = test::ddp::model(1);
  Trainer<precision::Fp32, peft::Full, memory::None, parallel::Ddp> trainer(
      test::ddp::trainer_options(1), {}, {}, {},
      parallel::Ddp({.constant_buffers = {"position_table"}, .environment = parallel::Environment{}}));
  CHECK_THAT(test::message_of([&] { trainer.prepare(model); }),
             Contains("DdpOptions::constant_buffers names 'position_table', which is not a buffer of the model"));
}

TEST_CASE("Ddp options are checked", "[parallel][ddp]") {
  CHECK_THAT(test::message_of([] { parallel::Ddp({.bucket_cap_mb = 0}).validate(); }),
             Contains("bucket_cap_mb must be > 0, got 0"));
  CHECK_THAT(test::message_of([] { parallel::Ddp({.timeout = std::chrono::milliseconds(0)}).validate(); }),
             Contains("timeout must be positive, got 0 ms"));
}

TEST_CASE("Ddp, 2 processes x 16 samples = 1 process x 32 (Gloo, real processes)", "[parallel][ddp][processes]") {
  if (!have_gloo()) return;
  ScratchDir dir("ddp");
  constexpr std::int64_t steps = 4;
  const std::vector<std::string> common{"--steps", std::to_string(steps)};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };

  SECTION("fp32, full fine-tuning, several buckets") {
    // 0.0005 MB buckets: the 16x16 layer's gradients alone fill one, so there are several.
    auto ranks = run_workers(dir, with({"--bucket-mb", "0.0005"}));
    check_against(dir, ranks, train_alone<precision::Fp32>(peft::Full{}, steps), 1e-5);
  }
  SECTION("static graph, gradients as bucket views") {
    auto ranks = run_workers(dir, with({"--static-graph", "--bucket-view"}));
    check_against(dir, ranks, train_alone<precision::Fp32>(peft::Full{}, steps), 1e-5);
  }
  SECTION("find_unused_parameters") {
    auto ranks = run_workers(dir, with({"--find-unused"}));
    check_against(dir, ranks, train_alone<precision::Fp32>(peft::Full{}, steps), 1e-5);
  }
  SECTION("LoRA: only the adapters' gradients are reduced") {
    auto ranks = run_workers(dir, with({"--peft", "lora"}));
    auto ref = train_alone<precision::Fp32>(test::ddp::lora(), steps);
    check_against(dir, ranks, ref, 1e-5);
    auto rank0 = load(dir.path / "rank0.pt");
    CHECK(rank0["reduced_elements"].item<std::int64_t>() == ref.trainable);
    std::int64_t all = 0;
    for (const auto& [name, p] : ref.params) all += p.numel();
    CHECK(ref.trainable < all / 4);
  }
  SECTION("accumulation: local gradients until the window closes (no_sync)") {
    auto ranks = run_workers(dir, with({"--accumulate", "2"}));
    check_against(dir, ranks, train_alone<precision::Fp32>(peft::Full{}, steps), 1e-5);
    auto rank0 = load(dir.path / "rank0.pt");
    auto rank1 = load(dir.path / "rank1.pt");
    REQUIRE(rank0.count("local_grad.0") == 1);
    // After the first micro-batch each rank holds its own samples' gradients: no reduction yet.
    CHECK_FALSE(torch::allclose(rank0["local_grad.0"], rank1["local_grad.0"]));
  }
  SECTION("broadcast_buffers: rank 0's buffers before each forward, the constant ones only at setup") {
    auto ranks = run_workers(dir, with({"--peft", "qlora", "--perturb-buffers"}));
    INFO("rank 0 log:\n" << ranks.logs[0] << "\nrank 1 log:\n" << ranks.logs[1]);
    REQUIRE(ranks.result.code() == 0);
    auto rank0 = load(dir.path / "rank0.pt");
    auto rank1 = load(dir.path / "rank1.pt");
    REQUIRE(rank1.count("buffer.probe") == 1);
    CHECK(torch::equal(rank1["buffer.probe"], rank0["buffer.probe"]));  // rank 1's change overwritten
    CHECK(rank0["buffer.constant_probe"].sum().item<float>() == 0);     // named constant: kept
    CHECK(rank1["buffer.constant_probe"].sum().item<float>() == 2);
    int packed = 0;
    for (const auto& [name, value] : rank1) {
      if (!name.ends_with("weight_packed")) continue;
      INFO(name);
      ++packed;
      CHECK(value.eq(0).all().item<bool>());  // a QLora base: sent at setup only
      CHECK_FALSE(torch::equal(value, rank0[name]));
    }
    CHECK(packed == 2);
  }
  SECTION("a BERT on padded token sequences ([B, 2, T]), full fine-tuning and LoRA on query and value") {
    const test::ddp::BertWorkload bert;
    auto full = run_workers(dir, with({"--model", "bert"}));
    check_against(dir, full, train_alone<precision::Fp32>(peft::Full{}, steps, 1, bert), 1e-5);
    auto lora = run_workers(dir, with({"--model", "bert", "--peft", "lora"}));
    auto ref = train_alone<precision::Fp32>(test::ddp::bert_lora(), steps, 1, bert);
    check_against(dir, lora, ref, 1e-5);
    CHECK(load(dir.path / "rank0.pt")["reduced_elements"].item<std::int64_t>() == ref.trainable);
  }
  SECTION("Bf16Mixed") {
    auto ranks = run_workers(dir, with({"--precision", "bf16"}));
    // bf16 rounds each rank's half-batch products as the whole batch's; tolerance of bf16's
    // 8-bit mantissa on O(1) weights after 4 steps.
    check_against(dir, ranks, train_alone<precision::Bf16Mixed>(peft::Full{}, steps), 2e-2);
  }
}

TEST_CASE("Ddp: rank 0's checkpoint resumes every rank on the uninterrupted curve", "[parallel][ddp][processes]") {
  if (!have_gloo()) return;
  ScratchDir dir("ddp-resume");
  const std::string checkpoint = (dir.path / "ckpt.pt").string();
  auto ranks = run_workers(dir, {"--steps", "3", "--epochs", "1", "--checkpoint", checkpoint});
  REQUIRE(ranks.result.code() == 0);
  REQUIRE(std::filesystem::exists(checkpoint));
  ranks = run_workers(dir, {"--steps", "3", "--epochs", "2", "--resume", checkpoint});
  check_against(dir, ranks, train_alone<precision::Fp32>(peft::Full{}, 3, 2), 1e-5);
}

TEST_CASE("Ddp: a killed rank is named by the others, without waiting for the timeout",
          "[parallel][ddp][processes][faults]") {
  if (!have_gloo()) return;
  ScratchDir dir("ddp-kill");
  // Timeout 60 s: finding the lost rank must not depend on it.
  SECTION("rank 1 dies") {
    auto ranks = run_workers(dir, {"--steps", "6", "--die-at", "3"});
    INFO("rank 0 log:\n" << ranks.logs[0]);
    CHECK(ranks.result.first_failed == 1);
    CHECK(ranks.result.status[1] == 128 + SIGKILL);
    CHECK(ranks.result.status[0] == 1);  // its own error, not the launcher's SIGTERM
    CHECK_THAT(ranks.logs[0], Contains("lost rank 1 (its heartbeat in the store stopped)"));
    CHECK(ranks.seconds < 20);
  }
  SECTION("rank 0, the store's host, dies") {
    auto ranks = run_workers(dir, {"--steps", "6", "--die-at", "3", "--victim", "0"});
    INFO("rank 1 log:\n" << ranks.logs[1]);
    CHECK(ranks.result.first_failed == 0);
    CHECK(ranks.result.status[1] == 1);
    CHECK_THAT(ranks.logs[1], Contains("lost rank 0 (the store it hosts at 127.0.0.1:"));
    CHECK(ranks.seconds < 20);
  }
}

TEST_CASE("Ddp: a hung rank makes the others fail after the timeout", "[parallel][ddp][processes][faults]") {
  if (!have_gloo()) return;
  ScratchDir dir("ddp-hang");
  auto ranks = run_workers(dir, {"--steps", "6", "--hang-at", "2", "--timeout-ms", "3000"}, 2, std::chrono::seconds(2));
  INFO("rank 0 log:\n" << ranks.logs[0]);
  CHECK(ranks.result.first_failed == 0);
  CHECK(ranks.result.status[0] == 1);
  CHECK_THAT(ranks.logs[0], Contains("hung") && Contains("3000 ms"));
  CHECK(ranks.seconds < 30);
}
