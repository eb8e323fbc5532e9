// One rank of the DDP tests (tests/parallel/ddp.cpp starts it through parallel::launch).
// It trains the tests' small MLP (or with --model bert a small BERT on token sequences) with
// parallel::Ddp on its shard of a fixed data set and writes
// what the test compares into <out>/rank<r>.pt:
//   param.<name>       the parameters after training
//   local_grad.<i>     the trainable gradients after the first micro-batch of an accumulation
//                      window (before any reduction), when --accumulate > 1
//   epoch_loss         the Trainer's epoch loss (averaged over all ranks)
//   reduced_elements   what each synchronizing step all-reduces
//   buffer.<name>      the buffers after training
// --perturb-buffers adds the buffers "probe" and "constant_probe" (named in
// DdpOptions::constant_buffers) and, after setup, rank 1 changes them and zeroes every quantized
// base (--peft qlora): what broadcast_buffers sends before each forward comes back as rank 0's.
// --laws instead measures the Parallel laws (laws.hpp) on parallel::Ddp and writes the distances
// (broadcast, local, synced, reduce) with rank and world.
// Faults: --die-at K kills rank --victim (1) with SIGKILL at its K-th loss evaluation,
// --hang-at K makes it sleep there instead.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <utility>

#include <torch/torch.h>

#include <ftopt/parallel/ddp.hpp>
#include <ftopt/parallel/gloo.hpp>
#include <ftopt/parallel/nccl.hpp>
#include <ftopt/pipeline.hpp>
#include <ftopt/precision/bf16_mixed.hpp>
#include <ftopt/trainer.hpp>

#include "ddp_data.hpp"
#include "laws.hpp"

namespace {

struct Args {
  std::string out;
  std::string model = "mlp";  ///< mlp or bert (ddp_data.hpp)
  std::string peft = "full";
  std::string precision = "fp32";
  std::int64_t steps = 4;
  std::int64_t epochs = 1;
  std::int64_t accumulate = 1;
  ftopt::parallel::DdpOptions ddp;
  int die_at = 0;
  int victim = 1;  ///< the rank --die-at / --hang-at apply to
  int hang_at = 0;
  std::string checkpoint;
  std::string resume;
  bool laws = false;
  bool perturb_buffers = false;
};

Args parse(int argc, char** argv) {
  Args args;
  args.ddp.timeout = std::chrono::seconds(60);
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--static-graph") { args.ddp.static_graph = true; continue; }
    if (flag == "--bucket-view") { args.ddp.gradient_as_bucket_view = true; continue; }
    if (flag == "--find-unused") { args.ddp.find_unused_parameters = true; continue; }
    if (flag == "--laws") { args.laws = true; continue; }
    if (flag == "--perturb-buffers") {
      args.perturb_buffers = true;
      args.ddp.constant_buffers = {"constant_probe"};
      continue;
    }
    ftopt::detail::check(i + 1 < argc, "ddp_worker: ", flag, " needs a value");
    const std::string value = argv[++i];
    if (flag == "--out") args.out = value;
    else if (flag == "--model") args.model = value;
    else if (flag == "--peft") args.peft = value;
    else if (flag == "--precision") args.precision = value;
    else if (flag == "--steps") args.steps = std::stoll(value);
    else if (flag == "--epochs") args.epochs = std::stoll(value);
    else if (flag == "--accumulate") args.accumulate = std::stoll(value);
    else if (flag == "--bucket-mb") args.ddp.bucket_cap_mb = std::stod(value);
    else if (flag == "--timeout-ms") args.ddp.timeout = std::chrono::milliseconds(std::stoll(value));
    else if (flag == "--die-at") args.die_at = std::stoi(value);
    else if (flag == "--hang-at") args.hang_at = std::stoi(value);
    else if (flag == "--victim") args.victim = std::stoi(value);
    else if (flag == "--checkpoint") args.checkpoint = value;
    else if (flag == "--resume") args.resume = value;
    else ftopt::detail::fail("ddp_worker: unknown flag ", flag);
  }
  return args;
}

template <class Precision, class Peft, class Workload>
int train(const Args& args, Peft peft, Workload workload) {
  namespace fp = ftopt::pipeline;
  using ftopt::test::ddp::kBatch;
  const int rank = ftopt::parallel::Environment::from_env().rank;
  // Each rank starts from other weights: DDP's broadcast from rank 0 must make them agree.
  auto model = workload.model(1 + static_cast<std::uint64_t>(rank));
  if (args.perturb_buffers)
    for (const char* name : {"probe", "constant_probe"}) model->register_buffer(name, torch::zeros({2}));
  ftopt::TrainerOptions options = ftopt::test::ddp::trainer_options(args.epochs);
  auto calls = std::make_shared<int>(0);
  options.loss = [&args, rank, calls](const torch::Tensor& out, const torch::Tensor& y) {
    ++*calls;
    if (rank == args.victim && args.die_at == *calls) std::raise(SIGKILL);
    if (rank == args.victim && args.hang_at == *calls) std::this_thread::sleep_for(std::chrono::minutes(10));
    return torch::nn::functional::cross_entropy(out, y);
  };
  if (!args.checkpoint.empty()) options.checkpoint = ftopt::CheckpointOptions{.path = args.checkpoint};
  ftopt::Trainer<Precision, Peft, ftopt::memory::None, ftopt::parallel::Ddp> trainer(
      options, {}, std::move(peft), {.accumulate = args.accumulate}, ftopt::parallel::Ddp(args.ddp));
  auto& params = trainer.prepare(model);
  auto optimizer = ftopt::test::ddp::optimizer(params);
  if (!args.resume.empty()) trainer.load_checkpoint(args.resume, model, *optimizer);
  if (args.perturb_buffers && rank == 1) {
    torch::NoGradGuard no_grad;
    for (const auto& item : model->named_buffers()) {
      if (item.key().ends_with("probe")) item.value().fill_(1);
      if (item.key().ends_with("weight_packed")) item.value().zero_();
    }
  }

  const auto& ddp = trainer.parallel();
  auto [x, y] = workload.data(args.steps);
  const std::int64_t micro = kBatch / ddp.world_size() / args.accumulate;
  auto batches = fp::from(x, y) | fp::shard(ddp) | fp::batch(micro);
  torch::serialize::OutputArchive archive;
  // The gradients after the first micro-batch of the first window: local, not yet reduced.
  struct RecordFirst {
    const std::vector<torch::Tensor>* params;
    torch::serialize::OutputArchive* archive;
    bool done = false;
    void on_step_end(const ftopt::FitState&) {
      if (std::exchange(done, true)) return;
      for (std::size_t i = 0; i < params->size(); ++i)
        if ((*params)[i].grad().defined())
          archive->write("local_grad." + std::to_string(i), (*params)[i].grad().clone());
    }
  };
  auto summary = trainer.fit(model, *optimizer, batches, RecordFirst{&params, &archive});
  for (const auto& item : model->named_parameters()) archive.write("param." + item.key(), item.value().detach());
  for (const auto& item : model->named_buffers()) archive.write("buffer." + item.key(), item.value());
  archive.write("epoch_loss", torch::tensor(summary.epochs.back().loss, torch::kDouble));
  archive.write("reduced_elements", torch::tensor(ddp.reduced_elements()));
  archive.save_to(args.out + "/rank" + std::to_string(ddp.rank()) + ".pt");
  return 0;
}

int laws(const Args& args) {
  ftopt::parallel::Ddp ddp(args.ddp);
  const auto d = ftopt::test::laws::measure(ddp);
  torch::serialize::OutputArchive archive;
  archive.write("rank", torch::tensor(d.rank));
  archive.write("world", torch::tensor(d.world));
  for (const auto& [name, value] : {std::pair{"broadcast", d.broadcast}, std::pair{"local", d.local},
                                    std::pair{"synced", d.synced}, std::pair{"reduce", d.reduce}})
    archive.write(name, torch::tensor(value, torch::kDouble));
  archive.save_to(args.out + "/rank" + std::to_string(d.rank) + ".pt");
  return 0;
}

} // namespace

int main(int argc, char** argv) try {
  const Args args = parse(argc, argv);
  if (args.laws) return laws(args);
  if (args.model == "bert") {
    ftopt::detail::check(args.peft == "full" || args.peft == "lora", "ddp_worker: --model bert takes --peft full or lora");
    const ftopt::test::ddp::BertWorkload bert;
    return args.peft == "lora" ? train<ftopt::precision::Fp32>(args, ftopt::test::ddp::bert_lora(), bert)
                               : train<ftopt::precision::Fp32>(args, ftopt::peft::Full{}, bert);
  }
  ftopt::detail::check(args.model == "mlp", "ddp_worker: --model is mlp or bert, got ", args.model);
  const ftopt::test::ddp::MlpWorkload mlp;
  const bool lora = args.peft == "lora";
  if (args.peft == "qlora") return train<ftopt::precision::Fp32>(args, ftopt::test::ddp::qlora(), mlp);
  if (args.precision == "bf16")
    return lora ? train<ftopt::precision::Bf16Mixed>(args, ftopt::test::ddp::lora(), mlp)
                : train<ftopt::precision::Bf16Mixed>(args, ftopt::peft::Full{}, mlp);
  return lora ? train<ftopt::precision::Fp32>(args, ftopt::test::ddp::lora(), mlp)
              : train<ftopt::precision::Fp32>(args, ftopt::peft::Full{}, mlp);
} catch (const std::exception& e) {
  std::cerr << "ddp_worker: " << e.what() << "\n";
  return 1;
}
