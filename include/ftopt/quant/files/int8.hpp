#pragma once
/// Saving and loading int8 models (quant::DynamicInt8, quant::StaticInt8, quant::Qat after
/// convert) in safetensors or torch.save files:
///
///   quant::save_int8(*model, "model-int8.safetensors");
///   models::ViT fresh(options);                                  // same architecture, float
///   quant::load_int8(*fresh, "model-int8.safetensors");         // int8 kernels attached

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include <ftopt/quant/dynamic_int8.hpp>
#include <ftopt/quant/static_int8.hpp>
#include <ftopt/weights/files.hpp>
#include <ftopt/weights/state_dict.hpp>

namespace ftopt::quant {

namespace detail {
/// save_int8's state dict: the module's, with each int8 layer's values, scales and parameters.
inline weights::StateDict int8_state(const torch::nn::Module& module) {
  weights::StateDict state = weights::state_dict(module);
  auto& mutable_module = const_cast<torch::nn::Module&>(module);
  detail::for_each_quantizable(mutable_module, {}, [&]<class Layer>(const std::string& name, Layer* layer) {
    std::shared_ptr<DynamicInt8Linear> dynamic;
    if constexpr (std::is_same_v<Layer, nn::LinearImpl>)
      dynamic = std::dynamic_pointer_cast<DynamicInt8Linear>(layer->extension());
    auto fixed = std::dynamic_pointer_cast<StaticInt8Kernel<Layer>>(layer->extension());
    if (!dynamic && !fixed) return;
    const at::Tensor& q = dynamic ? dynamic->qweight() : fixed->qweight();
    state[name + ".weight"] = q.int_repr();
    state.insert(name + ".weight_scale", q.qscheme() == at::kPerTensorAffine ? at::full({1}, q.q_scale(), at::kDouble)
                                                                             : q.q_per_channel_scales().to(at::kDouble));
    if (!fixed) return;
    state.insert(name + ".input_scale", at::full({1}, fixed->input().scale, at::kDouble));
    state.insert(name + ".input_zero_point", at::full({1}, fixed->input().zero_point, at::kLong));
    state.insert(name + ".output_scale", at::full({1}, fixed->output().scale, at::kDouble));
    state.insert(name + ".output_zero_point", at::full({1}, fixed->output().zero_point, at::kLong));
    state.insert(name + ".quant_max", at::full({1}, fixed->quant_max(), at::kLong));
  });
  return state;
}

/// load_int8 once the file is read: `state` is its content, `path` names it in errors.
inline std::vector<std::string> load_int8_state(torch::nn::Module& module, const weights::StateDict& state,
                                                const std::filesystem::path& path, Engine engine) {
  const at::QEngine chosen = select_engine(engine);
  weights::StateDict floats;
  std::vector<std::string> int8_layers;
  for (const auto& item : state) {
    const std::string& key = item.key();
    const std::string suffix = ".weight_scale";
    if (key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0)
      int8_layers.push_back(key.substr(0, key.size() - suffix.size()));
  }
  auto modules = module.named_modules("", false);
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> qweights;
  std::vector<std::function<void()>> attach;  // run once the float tensors are in
  for (const auto& name : int8_layers) {
    const std::string where = "quant::load_int8: " + path.string() + ": '" + name + "'";
    torch::nn::Module* found = modules.contains(name) ? modules[name].get() : nullptr;
    auto* linear = found ? found->as<nn::LinearImpl>() : nullptr;
    auto* conv = found ? found->as<nn::Conv2dImpl>() : nullptr;
    ftopt::detail::check(linear || conv, where, " is not an nn::Linear or nn::Conv2d of this model");
    const at::Tensor* values = state.find(name + ".weight");
    ftopt::detail::check(values != nullptr && values->scalar_type() == at::kChar, where,
                         ".weight is missing or not int8");
    const at::Tensor scales = state[name + ".weight_scale"].to(at::kDouble);
    const at::Tensor& weight = linear ? linear->weight : conv->weight;
    ftopt::detail::check(values->sizes() == weight.sizes(), where, ".weight has shape ", values->sizes(),
                         ", the model's layer ", weight.sizes());
    at::Tensor q = scales.numel() == 1
                       ? at::_make_per_tensor_quantized_tensor(*values, scales.item<double>(), 0)
                       : at::_make_per_channel_quantized_tensor(*values, scales, at::zeros_like(scales, at::kLong), 0);
    qweights.push_back(q);
    const at::Tensor* in_scale = state.find(name + ".input_scale");
    ftopt::detail::check(in_scale != nullptr || linear, where, " is a convolution without activation parameters");
    if (in_scale == nullptr) {
      attach.push_back([linear, q, chosen] {
        linear->attach(std::make_shared<DynamicInt8Linear>(q, detail::float_bias(*linear), chosen));
      });
      continue;
    }
    const auto scalar = [&](const std::string& key) {
      const at::Tensor* t = state.find(name + key);
      ftopt::detail::check(t != nullptr && t->numel() == 1, where, key, " is missing");
      return *t;
    };
    const double input_scale = in_scale->item<double>(), output_scale = scalar(".output_scale").item<double>();
    const auto input_zero = scalar(".input_zero_point").item<std::int64_t>();
    const auto output_zero = scalar(".output_zero_point").item<std::int64_t>();
    const auto quant_max = scalar(".quant_max").item<std::int64_t>();
    const auto make = [=]<class Layer>(Layer* layer) {
      using Kernel = StaticInt8Kernel<Layer>;
      return [=] {
        layer->attach(std::make_shared<Kernel>(*layer, q, detail::float_bias(*layer),
                                               typename Kernel::QParams{input_scale, input_zero},
                                               typename Kernel::QParams{output_scale, output_zero}, quant_max));
      };
    };
    attach.push_back(linear ? std::function<void()>(make(linear)) : std::function<void()>(make(conv)));
  }
  const std::vector<std::string> int8_keys{".weight", ".weight_scale", ".input_scale", ".input_zero_point",
                                           ".output_scale", ".output_zero_point", ".quant_max"};
  for (const auto& item : state) {
    bool int8_key = false;
    for (const auto& name : int8_layers)
      for (const auto& suffix : int8_keys) int8_key = int8_key || item.key() == name + suffix;
    if (!int8_key) floats.insert(item.key(), item.value());
  }
  // The int8 layers' float weights are not in the file: their int8 values, dequantized, stand
  // in. Strict loading checks every key before it copies anything.
  for (std::size_t i = 0; i < qweights.size(); ++i) floats.insert(int8_layers[i] + ".weight", qweights[i].dequantize());
  weights::load_state_dict(module, floats, {}, "quant::load_int8: " + path.string());
  // Kernels built after the floats are in: the bias they pack is the file's.
  for (auto& f : attach) f();
  return int8_layers;
}
} // namespace detail

/// Saves a converted model: each int8 Linear or Conv2d as "<name>.weight" (int8 values),
/// "<name>.weight_scale" (float64, one per tensor or per row) and its float bias, plus for a
/// static kernel its activation parameters ("<name>.input_scale", ".input_zero_point",
/// ".output_scale", ".output_zero_point", ".quant_max"); everything else as in the float state
/// dict. The format follows the file's extension (.safetensors or
/// a torch.save zip), written atomically like every ftopt file.
template <class Json = nlohmann::ordered_json>  // a template: JSON is compiled where it is used (<ftopt/json.hpp>)
void save_int8(const torch::nn::Module& module, const std::filesystem::path& path) {
  weights::save_file<Json>(path, detail::int8_state(module), weights::format_for(path));
}

/// Loads a file save_int8 wrote into a float model of the same architecture: float tensors by
/// name, and for each Linear or Conv2d with a "<name>.weight_scale" its int8 kernel, rebuilt from the
/// stored values and scales (no re-quantization). Returns the names of the int8 layers.
template <class Json = nlohmann::json>  // a template: JSON is compiled where it is used (<ftopt/json.hpp>)
std::vector<std::string> load_int8(torch::nn::Module& module, const std::filesystem::path& path,
                                   Engine engine = Engine::Auto) {
  return detail::load_int8_state(module, weights::load_file<Json>(path), path, engine);
}

} // namespace ftopt::quant
