#pragma once
/// peft::QLora<Format>: LoRA over a frozen base held quantized (QLoRA, Dettmers et al. 2023).
/// peft::Lora's adapters, settings and adapter files, with the weight of each adapted nn::Linear
/// stored in `Format` instead of float: storage::Int8PerChannel (25% of float32), storage::Nf4
/// (block 64, double-quantized scalers: 12.9%), storage::Q4_1 (ggml's blocks, which a GGUF
/// file's Q4_1 tensors give back byte for byte: 15.6%) or storage::Ggml (ggml's blocks of any type
/// ftopt reads, each weight in its own: a GGUF file's mixed tensors as they are), all in storage/. The
/// forward dequantizes the base for its GEMM and again for the input's gradient, in the compute
/// dtype; the adapters train in float as under peft::Lora:
///     y = deq(Q(W)) x + b + scaling * B(A(dropout(x)))
/// PiSSA and OLoRA factor the float W first and quantize the residual (QPiSSA's order). DoRA and
/// Conv2d targets are refused before anything changes. While the base is quantized the layer's
/// `weight` is an empty tensor and the packed base lives in the layer's buffers
/// ("weight_packed", "weight_scales", and for NF4 "weight_factors", "weight_mean"), so it moves
/// and is checkpointed with the layer.
///
/// After training, either
///   merge(module)            the base dequantized into float and the adapters folded in (what
///                            Trainer::finalize calls; quant::DynamicInt8 can then convert it), or
///   merge_quantized(module)  the adapters folded in and the sum quantized again, the base kept in
///                            its format (PEFT's merge on a 4-bit layer); unmerge takes them back
///                            out the same way, each round adding the format's rounding;
/// or neither: save_adapter writes the adapters as for peft::Lora, and the base stays quantized.
///
/// Rules (rules.hpp, `quantizes_frozen_base`): every precision policy combines with it (the base
/// is dequantized in the compute dtype; under Bf16True its float scales are held in bf16). A Quant
/// policy that trains fake-quantized (quant::Qat) does not: it would fake-quantize the weights
/// that are already quantized and frozen. DynamicInt8 and StaticInt8 convert after merge().
///
///   using Nf4Lora = ftopt::peft::QLora<ftopt::storage::Nf4>;
///   ftopt::Trainer<ftopt::precision::Bf16Mixed, Nf4Lora> trainer(
///       {}, {}, Nf4Lora({.r = 8, .alpha = 16, .targets = {"query", "value"}}));
///   trainer.prepare(model);
///   trainer.peft().base_bytes();   // the packed bases' bytes (float_base_bytes(): as float32)

#include <array>
#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/accumulate.h>
#include <torch/nn/module.h>

#include <ftopt/error.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/peft/kernel/adapted.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/peft/support/lora_branch.hpp>
#include <ftopt/peft/support/targets.hpp>
#include <ftopt/storage/int8_per_channel.hpp>
#include <ftopt/storage/nf4.hpp>
#include <ftopt/storage/packed.hpp>
#include <ftopt/storage/ggml_blocks.hpp>
#include <ftopt/storage/q4_1.hpp>

namespace ftopt::peft {

/// What QLora attaches to an adapted layer: its packed base and its LoRA branch.
template <storage::Format Format>
class QuantizedBase : public Adapted {
public:
  /// The base is `given` where there is one (already in Format: QLora::use_packed), else the
  /// layer's float weight quantized.
  QuantizedBase(nn::LinearImpl& layer, std::shared_ptr<LoraBranch> branch, const Format& format,
                const storage::PackedWeight* given = nullptr)
      : Adapted(branch->kernel()), branch_(std::move(branch)), format_(format) {
    torch::NoGradGuard no_grad;
    packed_ = given ? *given : format_.quantize(layer.weight);
    for (const auto& [name, tensor] : buffers)
      if ((packed_.*tensor).defined()) packed_.*tensor = layer.register_buffer(name, packed_.*tensor);
    empty(layer.weight);
  }

  /// As a kernel part: the packed base, with the branch's term in the GEMM while it offers one
  /// (no dropout in training: one GEMM over deq(W) + s B A), else with its output added; nothing
  /// more once the branch is folded in. Always a part: the base exists only packed.
  std::optional<Part> part(const nn::LinearImpl& layer) const override {
    return branch_part(kernel::FrozenBase::packed<Format>(packed_), branch_->merged(), branch_->dropping(layer),
                       [&] { return branch_->low_rank(); });
  }
  at::Tensor added(nn::LinearImpl& layer, const at::Tensor& x) override { return branch_->added(layer, x); }
  nn::Effect effect() const override { return nn::Effect::changes; }

  /// The base back in float (the layer's dtype) with the branch attached in its place; the
  /// packed tensors are emptied.
  void to_float(nn::LinearImpl& layer) {
    torch::NoGradGuard no_grad;
    layer.weight.set_data(Format::dequantize(packed_, layer.weight.scalar_type()));
    for (auto* t : {&packed_.data, &packed_.scales, &packed_.factors, &packed_.mean})
      if (t->defined()) empty(*t);
    layer.attach(branch_);
  }

  /// Folds the branch into the base and quantizes the sum again.
  void merge_quantized(nn::LinearImpl& layer) {
    if (!branch_->merged()) requantized(layer, [&] { branch_->merge_into(layer); });
  }
  /// Takes a folded branch back out of the base, quantizing the difference again.
  void unmerge_quantized(nn::LinearImpl& layer) {
    if (branch_->merged()) requantized(layer, [&] { branch_->unmerge_from(layer); });
  }

  const storage::PackedWeight& packed() const { return packed_; }
  /// The names of the layer's buffers that hold the packed base.
  std::vector<std::string> buffer_names() const {
    std::vector<std::string> names;
    for (const auto& [name, tensor] : buffers)
      if ((packed_.*tensor).defined()) names.emplace_back(name);
    return names;
  }
  const std::shared_ptr<LoraBranch>& branch() const { return branch_; }

private:
  /// The layer's buffers that hold the packed base, by name ("weight_factors" and "weight_mean":
  /// NF4's only).
  static constexpr std::array<std::pair<const char*, at::Tensor storage::PackedWeight::*>, 4> buffers{
      {{"weight_packed", &storage::PackedWeight::data},
       {"weight_scales", &storage::PackedWeight::scales},
       {"weight_factors", &storage::PackedWeight::factors},
       {"weight_mean", &storage::PackedWeight::mean}}};

  static void empty(at::Tensor& t) { t.set_data(at::empty({0}, t.options())); }

  /// Runs `change` on the float base, then packs the result in place of the old base.
  void requantized(nn::LinearImpl& layer, const std::function<void()>& change) {
    torch::NoGradGuard no_grad;
    layer.weight.set_data(Format::dequantize(packed_, at::kFloat));
    change();
    const storage::PackedWeight fresh = [&] {
      if constexpr (requires { format_.quantize_like(layer.weight, packed_); })
        return format_.quantize_like(layer.weight, packed_);  // storage::Ggml: each base in its own type
      else
        return format_.quantize(layer.weight);
    }();
    packed_.data.set_data(fresh.data);
    packed_.block_type = fresh.block_type;
    if (fresh.scales.defined()) packed_.scales.set_data(fresh.scales.to(packed_.scales.scalar_type()));
    if (fresh.factors.defined()) packed_.factors.set_data(fresh.factors.to(packed_.factors.scalar_type()));
    if (fresh.mean.defined()) packed_.mean.set_data(fresh.mean.to(packed_.mean.scalar_type()));
    empty(layer.weight);
  }

  std::shared_ptr<LoraBranch> branch_;
  Format format_;
  storage::PackedWeight packed_;
};

template <storage::Format Format>
class QLora : public Lora {
public:
  static constexpr const char* name = Format::lora_name;  ///< "lora-int8", "lora-nf4"
  static constexpr bool quantizes_frozen_base = true;

  QLora(LoraOptions options = {}, Format format = {})  // NOLINT: implicit, for QLora({.r = 8})
      : Lora(std::move(options)), format_(std::move(format)) {}

  void validate() const {
    Lora::validate();
    format_.validate();
    ftopt::detail::check(!options().dora, "QLora: use_dora is not supported over a quantized base; "
                                          "use peft::Lora for DoRA");
  }
  const Format& format() const { return format_; }

  /// Bases as a GGUF file holds them (blocks of a type the format keeps), by weight name ("model.layers.0.self_attn.q_proj.weight"),
  /// as models::load_llama_gguf's `packed` gives them: attach takes these
  /// layers' bases as they are, where it would quantize their float weights (which the loader left
  /// empty). Every one must name a layer the targets adapt; the init must not need the float base.
  void use_packed(std::map<std::string, storage::PackedWeight> bases)
    requires storage::BlockFormat<Format>
  {
    for (const auto& [name, packed] : bases) {
      const auto type = static_cast<storage::ggml::Type>(packed.block_type);
      ftopt::detail::check(Format::keeps(type), "QLora: the packed base given for '", name, "' is ",
                           storage::ggml::name_of(type), " blocks, which ", Format::lora_name, " does not hold; "
                           "peft::QLora<storage::Ggml> takes every block type ftopt reads");
    }
    given_ = std::move(bases);
  }

  /// Checks every target (an nn::Linear whose weight the format can hold, or whose base was
  /// given), attaches LoRA as peft::Lora does, then packs each adapted layer's base.
  void attach(torch::nn::Module& module) {
    validate();
    std::set<std::string> adapted;
    for (const auto& [name, linear] : detail::target_linears(module, options().targets, "QLora")) {
      adapted.insert(name + ".weight");
      const auto given = given_.find(name + ".weight");
      if (given == given_.end()) {
        ftopt::detail::check(linear->weight.numel() > 0, "QLora: '", name, "' has an empty weight and no packed "
                             "base was given for it (QLora::use_packed)");
        format_.check(linear->weight, name);
        continue;
      }
      const std::vector<std::int64_t> shape = {linear->options.out_features(), linear->options.in_features()};
      ftopt::detail::check(given->second.shape == shape, "QLora: the packed base given for '", name, "' is ",
                           c10::IntArrayRef(given->second.shape), ", the layer's weight is ", c10::IntArrayRef(shape));
    }
    for (const auto& [name, packed] : given_)
      ftopt::detail::check(adapted.count(name) > 0, "QLora: a packed base was given for '", name,
                           "', which the targets do not adapt");
    ftopt::detail::check(given_.empty() || options().init == LoraInit::Default || options().init == LoraInit::Gaussian,
                         "QLora: PiSSA and OLoRA factor the float base, which packed bases given to use_packed do "
                         "not have");
    Lora::attach(module);
    bases_.clear();
    auto modules = module.named_modules("", /*include_self=*/false);
    for (const auto& [name, branch] : branches()) {
      auto& layer = *modules[name]->template as<nn::LinearImpl>();
      const auto given = given_.find(name + ".weight");
      auto base = std::make_shared<QuantizedBase<Format>>(layer, branch, format_,
                                                          given == given_.end() ? nullptr : &given->second);
      layer.attach(base);
      bases_.emplace_back(name, base);
    }
  }

  /// Dequantizes every base into float, then folds the adapters in as peft::Lora::merge does.
  void merge(torch::nn::Module& module) {
    for_each_base(module, [](nn::LinearImpl& layer, QuantizedBase<Format>& base) { base.to_float(layer); });
    bases_.clear();
    Lora::merge(module);
  }
  /// Folds the adapters into the quantized bases, which stay quantized.
  void merge_quantized(torch::nn::Module& module) {
    for_each_base(module, [](nn::LinearImpl& layer, QuantizedBase<Format>& base) { base.merge_quantized(layer); });
  }
  /// Takes the adapters back out: of the quantized bases (after merge_quantized) or of the float
  /// ones (after merge).
  void unmerge(torch::nn::Module& module) {
    if (bases_.empty()) return Lora::unmerge(module);
    for_each_base(module, [](nn::LinearImpl& layer, QuantizedBase<Format>& base) { base.unmerge_quantized(layer); });
  }

  /// The bytes of the quantized bases, and what they would take as float32.
  std::int64_t base_bytes() const {
    std::int64_t total = 0;
    for (const auto& [name, base] : bases_) total += base->packed().bytes();
    return total;
  }
  std::int64_t float_base_bytes() const {
    std::int64_t total = 0;
    for (const auto& [name, base] : bases_)
      total += c10::multiply_integers(base->packed().shape) * static_cast<std::int64_t>(sizeof(float));
    return total;
  }
  /// The packed bases' buffers by their names in the module ("encoder.0.query.weight_packed", ...):
  /// they change only by merging, the same on every rank, so parallel::Ddp sends them once, at
  /// setup, and not before each forward as it does other buffers.
  std::vector<std::string> constant_buffers() const {
    std::vector<std::string> names;
    for (const auto& [name, base] : bases_)
      for (const auto& buffer : base->buffer_names()) names.push_back(name + "." + buffer);
    return names;
  }
  /// The adapted layers' names and quantized bases, in module order (empty after merge).
  const std::vector<std::pair<std::string, std::shared_ptr<QuantizedBase<Format>>>>& bases() const { return bases_; }

private:
  template <class Fn>
  void for_each_base(torch::nn::Module& module, Fn fn) {
    auto modules = module.named_modules("", /*include_self=*/false);
    for (const auto& [name, base] : bases_) fn(*modules[name]->template as<nn::LinearImpl>(), *base);
  }

  Format format_;
  std::map<std::string, storage::PackedWeight> given_;
  std::vector<std::pair<std::string, std::shared_ptr<QuantizedBase<Format>>>> bases_;
};


static_assert(Policy<QLora<storage::Nf4>>);

} // namespace ftopt::peft
