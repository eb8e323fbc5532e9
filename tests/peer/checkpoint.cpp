// The C++ side of tests/peer/checkpoint.py, on the Python side's weights and inputs:
//   peer_checkpoint net SEED WORK               stem -> nn::checkpoint(block) -> head: the plain
//                                               train-mode output, the checkpointed output, the
//                                               gradients and the next random draw after backward
//   peer_checkpoint sequential SEED SEGMENTS WORK    nn::checkpoint_sequential: gradients, buffers
//   peer_checkpoint trainer SEED SEGMENTS LR WORK    Trainer<Fp32, Full, memory::Checkpoint>, SGD
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/memory/checkpoint.hpp>
#include <ftopt/nn/checkpoint.hpp>
#include <ftopt/precision/fp32.hpp>
#include <ftopt/trainer.hpp>

#include "peer.hpp"

namespace {

constexpr double dropout_p = 0.25;

/// checkpoint.py's Net: stem, block (Linear, Tanh, Dropout, Linear), head.
struct NetImpl : torch::nn::Module {
  torch::nn::Linear stem{8, 16}, head{16, 4};
  torch::nn::Sequential block{torch::nn::Linear(16, 16), torch::nn::Tanh(), torch::nn::Dropout(dropout_p),
                              torch::nn::Linear(16, 16)};
  NetImpl() {
    register_module("stem", stem);
    register_module("block", block);
    register_module("head", head);
  }
  torch::Tensor forward(const torch::Tensor& x, bool checkpointed) {
    torch::Tensor h = torch::relu(stem(x));
    h = checkpointed ? ftopt::nn::checkpoint(*block, [b = block.get()](const at::Tensor& in) { return b->forward(in); }, h)
                     : block->forward(h);
    return head(h);
  }
};
TORCH_MODULE(Net);

/// checkpoint.py's sequential().
torch::nn::Sequential sequential() {
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 16), torch::nn::Dropout(dropout_p), torch::nn::Tanh(),
                               torch::nn::Linear(16, 16), torch::nn::ReLU(), torch::nn::Linear(16, 4));
}

/// The input's gradient as "x", then every parameter's by name.
ftopt::weights::StateDict grads_of(torch::nn::Module& module, const torch::Tensor& x) {
  ftopt::weights::StateDict out;
  out.insert("x", x.grad().clone());
  for (const auto& item : module.named_parameters()) out.insert(item.key(), item.value().grad().clone());
  return out;
}

void expect_args(const std::vector<std::string>& args, std::size_t n, const std::string& usage) {
  if (args.size() != n) throw std::runtime_error("expected arguments: " + usage);
}

void net(const std::vector<std::string>& args, const std::filesystem::path& work) {
  expect_args(args, 1, "SEED");
  const auto seed = std::stoull(args[0]);
  Net model;
  ftopt::weights::load(*model, work / "net.safetensors");
  model->train();
  const auto input = ftopt::peer::load(work, "input.safetensors");
  const torch::Tensor x = input["x"], probe = input["probe"];
  ftopt::weights::StateDict out;
  torch::manual_seed(seed);
  out.insert("plain", model->forward(x, false).detach());
  torch::manual_seed(seed);
  const torch::Tensor xg = x.clone().requires_grad_();
  const torch::Tensor y = model->forward(xg, true);
  (y * probe).sum().backward();
  out.insert("out", y.detach());
  for (const auto& item : grads_of(*model, xg)) out.insert(item.key(), item.value());
  out.insert("after", torch::rand({8}));
  ftopt::peer::save(work, "net.ftopt.safetensors", out);
}

void checkpointed_sequential(const std::vector<std::string>& args, const std::filesystem::path& work) {
  expect_args(args, 2, "SEED SEGMENTS");
  auto seq = sequential();
  ftopt::weights::load(*seq, work / "sequential.safetensors");
  seq->train();
  const auto input = ftopt::peer::load(work, "input.safetensors");
  torch::manual_seed(std::stoull(args[0]));
  const torch::Tensor xg = input["x"].clone().requires_grad_();
  (ftopt::nn::checkpoint_sequential(seq, std::stoll(args[1]), xg) * input["probe"]).sum().backward();
  auto out = grads_of(*seq, xg);
  for (const auto& item : seq->named_buffers()) out.insert(item.key(), item.value().clone());
  ftopt::peer::save(work, "sequential.ftopt.safetensors", out);
}

void trainer(const std::vector<std::string>& args, const std::filesystem::path& work) {
  using namespace ftopt;
  expect_args(args, 3, "SEED SEGMENTS LR");
  auto seq = sequential();
  weights::load(*seq, work / "sequential.safetensors");
  const auto file = peer::load(work, "batches.safetensors");
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (std::int64_t k = 0; k < file["x"].size(0); ++k) batches.emplace_back(file["x"][k], file["y"][k]);
  Trainer<precision::Fp32, peft::Full, memory::Checkpoint> trainer(
      {.device = torch::kCPU, .report_hardware = false}, {}, {}, memory::Checkpoint{.segments = std::stoll(args[1])});
  torch::optim::SGD optimizer(trainer.prepare(seq), torch::optim::SGDOptions(std::stod(args[2])));
  torch::manual_seed(std::stoull(args[0]));
  trainer.fit(seq, optimizer, batches);
  peer::save(work, "trainer.ftopt.safetensors", weights::state_dict(*seq));
}

} // namespace

int main(int argc, char** argv) {
  return ftopt::peer::main(argc, argv, {{"net", net}, {"sequential", checkpointed_sequential}, {"trainer", trainer}});
}
