// The C++ side of tests/peer/quant.py: loads the Python MLP's state dict into models::Mlp, writes
// its float output, converts it with quant::DynamicInt8 (per tensor or per channel, on the
// engine Python names) and writes the int8 output and each layer's int8 weight and scales.
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include <ftopt/models/mlp.hpp>
#include <ftopt/quant/dynamic_int8.hpp>

#include "peer.hpp"

namespace {

ftopt::quant::Engine engine_named(const std::string& name) {
  using ftopt::quant::Engine;
  if (name == "x86") return Engine::X86;
  if (name == "fbgemm") return Engine::Fbgemm;
  if (name == "onednn") return Engine::Onednn;
  if (name == "qnnpack") return Engine::Qnnpack;
  throw std::runtime_error("unknown quantized engine " + name);
}

void quantize(const std::vector<std::string>& args, const std::filesystem::path& work) {
  using namespace ftopt;
  if (args.size() != 2) throw std::runtime_error("quantize needs: per_tensor|per_channel ENGINE");
  const auto granularity = args[0] == "per_tensor"    ? quant::Granularity::PerTensor
                           : args[0] == "per_channel" ? quant::Granularity::PerChannel
                                                      : throw std::runtime_error("unknown granularity " + args[0]);
  models::Mlp model({.in = 784, .hidden = {256, 128}, .out = 10});
  weights::load(*model, work / "mlp.safetensors");
  model->eval();
  torch::NoGradGuard no_grad;
  const auto x = peer::load(work, "input.safetensors")["x"];
  weights::StateDict out;
  out.insert("float", model->forward(x));

  quant::DynamicInt8 policy({.granularity = granularity, .engine = engine_named(args[1])});
  policy.convert(*model);
  out.insert("int8", model->forward(x));
  const auto modules = model->named_modules();
  for (const auto& name : policy.quantized()) {
    const auto* kernel =
        dynamic_cast<const quant::DynamicInt8Linear*>(modules[name]->as<nn::LinearImpl>()->extension().get());
    if (kernel == nullptr) throw std::runtime_error(name + " has no int8 kernel after convert");
    const auto& q = kernel->qweight();
    out.insert(name + ".int_repr", q.int_repr());
    out.insert(name + ".scales", granularity == quant::Granularity::PerTensor
                                     ? torch::tensor({q.q_scale()}, torch::kDouble)
                                     : q.q_per_channel_scales().to(torch::kDouble));
  }
  std::cout << "  ftopt quantized " << policy.quantized().size() << " layers on "
            << c10::toString(at::globalContext().qEngine()) << "\n";
  peer::save(work, args[0] + ".ftopt.safetensors", out);
}

} // namespace

int main(int argc, char** argv) { return ftopt::peer::main(argc, argv, {{"quantize", quantize}}); }
