// The C++ side of tests/peer/state_dicts.py: reads the Python side's tensors, adds views that are
// not contiguous and a tied entry, and writes them all with weights::save_file in both formats;
// and saves a models::resnet18 (with non-default batch-norm statistics) with weights::save in
// both formats, with its logits on the Python side's input.
#include <fstream>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include <ftopt/models/resnet.hpp>

#include "peer.hpp"

namespace {

using ftopt::weights::StateDict;

/// The tensors ftopt makes from the inputs, by name (state_dicts.py computes the same).
torch::Tensor made_by_ftopt(const std::string& name, const StateDict& in) {
  const auto& grid = in["grid"];
  if (name == "views.transposed") return grid.t();
  if (name == "views.strided") return grid.slice(1, 0, grid.size(1), 3);
  if (name == "views.offset") return grid.slice(0, 2);
  if (name == "views.expanded") return in["encoder.layer.2.attention.query.bias"].slice(0, 0, 4).expand({3, 4});
  if (name == "tied.decoder.weight") return in["encoder.layer.2.attention.query.weight"];
  throw std::runtime_error("no input and no view named " + name);
}

void write_all(const std::vector<std::string>& args, const std::filesystem::path& work) {
  using namespace ftopt;
  if (args.size() != 1) throw std::runtime_error("write needs the order file");
  const auto in = peer::load(work, "input.safetensors");
  std::ifstream order(work / args[0]);
  StateDict out;
  for (std::string name; std::getline(order, name);)
    if (!name.empty()) out.insert(name, in.contains(name) ? in[name] : made_by_ftopt(name, in));
  if (out["views.transposed"].is_contiguous() || out["views.strided"].is_contiguous() ||
      out["views.offset"].storage_offset() == 0 || out["views.expanded"].is_contiguous())
    throw std::runtime_error("the views meant to be non-contiguous are not");
  weights::save_file(work / "state.ftopt.pt", out, weights::Format::Torch);
  weights::save_file(work / "state.ftopt.safetensors", out, weights::Format::Safetensors);
  std::cout << "  ftopt wrote " << out.size() << " tensors in both formats\n";
}

void save_resnet18(const std::vector<std::string>& args, const std::filesystem::path& work) {
  using namespace ftopt;
  if (!args.empty()) throw std::runtime_error("resnet18 takes no arguments");
  torch::manual_seed(0);
  auto model = models::resnet18(10);
  {
    torch::NoGradGuard no_grad;
    for (auto& buffer : model->named_buffers()) {
      const auto& name = buffer.key();
      auto& t = buffer.value();
      if (name.ends_with("running_mean")) t.copy_(torch::randn_like(t) * 0.1);
      else if (name.ends_with("running_var")) t.copy_(torch::rand_like(t) + 0.5);
      else if (name.ends_with("num_batches_tracked")) t.fill_(42);
    }
  }
  model->eval();
  weights::save(*model, work / "resnet18.ftopt.pt");
  weights::save(*model, work / "resnet18.ftopt.safetensors");
  torch::NoGradGuard no_grad;
  StateDict logits;
  logits.insert("logits", model->forward(peer::load(work, "resnet_input.safetensors")["x"]));
  peer::save(work, "resnet18_logits.ftopt.safetensors", logits);
}

} // namespace

int main(int argc, char** argv) {
  return ftopt::peer::main(argc, argv, {{"write", write_all}, {"resnet18", save_resnet18}});
}
