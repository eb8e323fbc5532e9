#pragma once
/// Activation checkpointing: run a segment of a model without keeping its activations, and
/// recompute them in the backward (PyTorch's torch.utils.checkpoint; LibTorch has none,
/// pytorch#52744).
///
///   auto y = ftopt::nn::checkpoint(*block, [&](const at::Tensor& x) { return block->forward(x); }, h);
///   auto y = ftopt::nn::checkpoint_sequential(sequential, /*segments=*/2, x);
///
/// How it differs from a plain forward, and from PyTorch's two implementations:
///   - exact: the CPU generator's state (and the CUDA generator's, for CUDA inputs) is saved
///     before the forward and put back for the recompute, so dropout draws the same masks
///     (PyTorch's preserve_rng_state); the recompute runs under the forward's autocast state;
///     buffers the recompute changes (BatchNorm's running statistics, and any whose version
///     counter the forward moves) are put back afterwards, so they are updated once per step, as
///     without checkpointing; other buffers (a QLoRA base's blocks) are neither copied nor written;
///   - the segment's trainable parameters are explicit inputs of the recompute node, so the
///     output requires grad when they do even if the segment's input does not (a frozen
///     embedding feeding LoRA layers: the case where PyTorch's reentrant checkpoint silently
///     trains nothing), and their gradients reach them through the autograd engine as usual;
///   - a trainable tensor the segment uses but does not own (not among the module's parameters)
///     is an ftopt::Error in the backward, naming its shape, instead of a missing gradient;
///   - no double backward (create_graph), one tensor in and one out, as blocks have.
/// In eval mode or under NoGradGuard the segment simply runs: nothing is kept anyway.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/error.hpp>
#include <ftopt/nn/attention_prefix.hpp>

namespace ftopt::nn {

struct CheckpointOptions {
  /// Save and restore the RNG states so the recompute draws what the forward drew (PyTorch's
  /// preserve_rng_state). Off only to show what it is for.
  bool preserve_rng_state = true;
};

namespace detail {

/// The state a recompute must reproduce: the generators' states and the autocast settings.
class ForwardState {
public:
  ForwardState(const at::Tensor& input, bool with_rng) {
    if (with_rng) {
      save(c10::Device(c10::DeviceType::CPU));
      if (input.is_cuda()) save(input.device());
    }
    for (auto type : {c10::DeviceType::CPU, c10::DeviceType::CUDA})
      autocast_.push_back({type, compat::autocast_enabled(type), compat::autocast_dtype(type)});
  }

  /// Runs `fn` with the saved generator and autocast states, then puts the current generator
  /// states back (the recompute must not change what later random draws give).
  template <class F>
  auto replay(F&& fn) const {
    std::vector<at::Tensor> now;
    for (const auto& [device, state] : rng_) now.push_back(exchange(device, state));
    struct Restore {
      const ForwardState& self;
      std::vector<at::Tensor>& states;
      ~Restore() {
        for (std::size_t i = 0; i < states.size(); ++i) exchange(self.rng_[i].first, states[i]);
      }
    } restore{*this, now};
    std::optional<compat::AutocastScope> cpu, cuda;
    if (autocast_[0].enabled) cpu.emplace(autocast_[0].device, autocast_[0].dtype);
    if (autocast_[1].enabled) cuda.emplace(autocast_[1].device, autocast_[1].dtype);
    return fn();
  }

private:
  struct Autocast {
    c10::DeviceType device;
    bool enabled;
    at::ScalarType dtype;
  };

  void save(c10::Device device) {
    at::Generator generator = at::globalContext().defaultGenerator(device);  // a handle: copy
    std::lock_guard<std::mutex> lock(generator.mutex());
    rng_.emplace_back(device, generator.get_state());
  }
  /// Sets the device's generator to `state`; returns the state it had.
  static at::Tensor exchange(c10::Device device, const at::Tensor& state) {
    at::Generator generator = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(generator.mutex());
    at::Tensor previous = generator.get_state();
    generator.set_state(state);
    return previous;
  }

  std::vector<std::pair<c10::Device, at::Tensor>> rng_;
  std::vector<Autocast> autocast_;
};

/// What the recompute node keeps between forward and backward besides the saved tensors.
struct Segment : torch::CustomClassHolder {
  /// `statistics`: buffers kept whatever their version counter says (BatchNorm's running
  /// statistics, which ATen updates without moving it).
  Segment(std::function<at::Tensor(const at::Tensor&)> fn, std::vector<at::Tensor> buffers,
          std::vector<bool> statistics, const at::Tensor& input, bool preserve_rng)
      : fn(std::move(fn)), buffers(std::move(buffers)), statistics(std::move(statistics)),
        state(input, preserve_rng) {}

  /// use(fn(x)), fn run with the forward's RNG and autocast state and grad mode on. Buffers get
  /// back the values they had before the recompute once `use` is done with its graph (the
  /// forward already updated them once; BatchNorm's backward reads them unchanged): `buffers`
  /// holds, after the forward, only those it changed.
  template <class Use>
  void recompute(const at::Tensor& x, Use&& use) const {
    std::vector<at::Tensor> kept;
    kept.reserve(buffers.size());
    for (const auto& b : buffers) kept.push_back(b.clone());
    use(state.replay([&] {
      torch::AutoGradMode grad(true);
      return fn(x);
    }));
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(kept[i]);
  }

  std::function<at::Tensor(const at::Tensor&)> fn;
  std::vector<at::Tensor> buffers;
  std::vector<bool> statistics;
  ForwardState state;
};

/// Fails when the recomputed graph reaches a trainable leaf that is not among the node's inputs:
/// its gradient would be lost.
inline void check_declared(const at::Tensor& y, const std::vector<at::Tensor>& declared) {
  std::unordered_set<const c10::TensorImpl*> known;
  for (const auto& t : declared) known.insert(t.unsafeGetTensorImpl());
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{y.grad_fn().get()};
  while (!todo.empty()) {
    auto* node = todo.back();
    todo.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      const auto& v = leaf->variable;
      ftopt::detail::check(known.count(v.unsafeGetTensorImpl()) > 0,
                           "nn::checkpoint: the checkpointed segment uses a trainable tensor of shape ",
                           v.sizes(), " that is not among its module's parameters, so its gradient "
                           "would be lost; register it on the module, or pass it in `params`");
      continue;
    }
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function.get());
  }
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  /// inputs: {x, trainable parameters...}
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<Segment> segment, at::TensorList inputs) {
    ctx->save_for_backward(inputs.vec());
    std::vector<std::int64_t> versions;
    for (const auto& b : segment->buffers) versions.push_back(static_cast<std::int64_t>(b._version()));
    at::Tensor y;
    {
      torch::NoGradGuard no_grad;
      y = segment->fn(inputs[0]);
    }
    // Only the buffers the forward changes in place need their values back after the recompute:
    // BatchNorm's statistics, and any whose version counter moved. The rest (a QLoRA base's
    // packed blocks, which may view the model's file) are left alone, neither cloned nor written.
    std::vector<at::Tensor> changed;
    for (std::size_t i = 0; i < versions.size(); ++i)
      if (segment->statistics[i] || static_cast<std::int64_t>(segment->buffers[i]._version()) != versions[i])
        changed.push_back(segment->buffers[i]);
    segment->buffers = std::move(changed);
    ctx->saved_data["segment"] = c10::IValue::make_capsule(std::move(segment));
    return {y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto inputs = ctx->get_saved_variables();
    torch::autograd::variable_list grads(inputs.size() + 1);  // [0]: the segment (no gradient)
    if (!grad_outputs[0].defined()) return grads;
    const auto segment = c10::static_intrusive_pointer_cast<Segment>(ctx->saved_data["segment"].toCapsule());
    at::Tensor x = inputs[0].detach();
    x.set_requires_grad(inputs[0].requires_grad());
    std::vector<at::Tensor> wanted;
    std::vector<std::size_t> slots;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& t = i == 0 ? x : inputs[i];
      if (!t.requires_grad()) continue;
      wanted.push_back(t);
      slots.push_back(i + 1);
    }
    torch::autograd::variable_list computed;
    segment->recompute(x, [&](const at::Tensor& y) {
      if (!y.requires_grad() || wanted.empty()) return;
      check_declared(y, wanted);
      computed = torch::autograd::grad({y}, wanted, {grad_outputs[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    });
    if (computed.empty()) return grads;
    for (std::size_t j = 0; j < slots.size(); ++j) grads[slots[j]] = std::move(computed[j]);
    return grads;
  }
};

/// The trainable tensors a group of modules computes with: their parameters (each once) and
/// the parameters behind attached prefixes (peft::Prefix keeps its encoder on the model).
inline std::vector<at::Tensor> trainable_parameters(const std::vector<torch::nn::Module*>& modules) {
  std::vector<at::Tensor> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  auto add = [&](const at::Tensor& p) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  };
  for (auto* module : modules) {
    for (const auto& p : module->parameters()) add(p);
    for (const auto& sub : module->modules(/*include_self=*/true))
      if (auto* attention = dynamic_cast<PrefixAttention*>(sub.get()); attention && attention->prefix())
        for (const auto& p : attention->prefix()->parameters()) add(p);
  }
  return out;
}

/// The modules' buffers, each with whether it is a normalization's running statistic (a
/// BatchNorm or InstanceNorm module's, by LibTorch's class name).
inline std::pair<std::vector<at::Tensor>, std::vector<bool>> buffers_of(const std::vector<torch::nn::Module*>& modules) {
  std::pair<std::vector<at::Tensor>, std::vector<bool>> out;
  for (auto* module : modules)
    for (const auto& item : module->named_modules()) {
      const std::string type = item.value()->name();
      const bool statistics = type.find("BatchNorm") != std::string::npos || type.find("InstanceNorm") != std::string::npos;
      for (const auto& b : item.value()->buffers(/*recurse=*/false)) {
        out.first.push_back(b);
        out.second.push_back(statistics);
      }
    }
  return out;
}

inline at::Tensor run_checkpointed(std::function<at::Tensor(const at::Tensor&)> fn, const at::Tensor& input,
                                   const std::vector<torch::nn::Module*>& modules, std::vector<at::Tensor> extra,
                                   const CheckpointOptions& options) {
  auto params = trainable_parameters(modules);
  for (auto& t : extra)
    if (t.requires_grad()) params.push_back(std::move(t));
  if (!torch::GradMode::is_enabled() || (!input.requires_grad() && params.empty())) return fn(input);
  auto [buffers, statistics] = buffers_of(modules);
  auto segment = c10::make_intrusive<Segment>(std::move(fn), std::move(buffers), std::move(statistics), input,
                                              options.preserve_rng_state);
  std::vector<at::Tensor> inputs{input};
  inputs.insert(inputs.end(), params.begin(), params.end());
  return CheckpointFunction::apply(std::move(segment), at::TensorList(inputs))[0];
}

} // namespace detail

/// fn(input), its activations recomputed in the backward. `module` is what fn computes with:
/// its parameters get gradients, its buffers are restored after the recompute. `params`: more
/// trainable tensors fn uses that are not the module's. fn runs again in the backward, so what
/// it captures must outlive the backward: capture modules by pointer, not locals by reference.
template <class F>
at::Tensor checkpoint(torch::nn::Module& module, F&& fn, const at::Tensor& input, std::vector<at::Tensor> params = {},
                      CheckpointOptions options = {}) {
  if (!module.is_training()) return fn(input);
  return detail::run_checkpointed(std::forward<F>(fn), input, {&module}, std::move(params), options);
}

/// PyTorch's checkpoint_sequential(functions, segments, input): the modules split into
/// `segments` runs of size(modules) / segments; all but the last run are checkpointed, the last
/// (with any remainder) runs plainly, its activations kept for the backward.
inline at::Tensor checkpoint_sequential(torch::nn::Sequential& sequential, std::int64_t segments,
                                        const at::Tensor& input, CheckpointOptions options = {}) {
  const auto n = static_cast<std::int64_t>(sequential->size());
  ftopt::detail::check(segments >= 1 && segments <= n, "nn::checkpoint_sequential: segments must be in [1, ", n,
                       "] for this Sequential of ", n, " modules, got ", segments);
  auto run = [impl = sequential.get()](std::int64_t begin, std::int64_t end) {
    return [impl, begin, end](const at::Tensor& x) {
      at::Tensor h = x;
      for (auto i = begin; i < end; ++i) h = impl->begin()[i].forward(h);
      return h;
    };
  };
  const std::int64_t size = n / segments;
  at::Tensor h = input;
  std::int64_t start = 0;
  for (; start < size * (segments - 1); start += size) {
    if (!sequential->is_training()) break;
    std::vector<torch::nn::Module*> modules;
    for (auto i = start; i < start + size; ++i) modules.push_back(sequential->ptr(static_cast<std::size_t>(i)).get());
    h = detail::run_checkpointed(run(start, start + size), h, modules, {}, options);
  }
  return run(start, n)(h);
}

/// How a model with CheckpointableBlocks recomputes its blocks: blocks 0, every, 2 * every, ...
/// are checkpointed; every == 0 turns checkpointing off.
struct BlockCheckpointing {
  std::int64_t every = 0;
  CheckpointOptions options = {};
};

/// A model part made of blocks run one after another (a ViT's encoder, a ResNet's stages),
/// whose blocks can be checkpointed: memory::Checkpoint finds it and sets how. Models with one
/// declare `static constexpr bool has_checkpointable_blocks = true;` in their module class.
class CheckpointableBlocks {
public:
  virtual ~CheckpointableBlocks() = default;
  void set_checkpointing(BlockCheckpointing checkpointing) {
    ftopt::detail::check(checkpointing.every >= 0, "nn::CheckpointableBlocks: every must be >= 0, got ",
                         checkpointing.every);
    checkpointing_ = checkpointing;
  }
  const BlockCheckpointing& checkpointing() const { return checkpointing_; }

protected:
  /// forward(x) for block number `index`, checkpointed (over `block`'s parameters) when its turn comes.
  template <class Block, class Forward>
  at::Tensor run_block(std::int64_t index, Block& block, const at::Tensor& x, Forward forward) const {
    if (checkpointing_.every > 0 && index % checkpointing_.every == 0)
      return checkpoint(block, forward, x, {}, checkpointing_.options);
    return forward(x);
  }
  /// block.forward(x) for block number `index`, checkpointed when its turn comes.
  template <class Block>
  at::Tensor run_block(std::int64_t index, Block& block, const at::Tensor& x) const {
    return run_block(index, block, x, [b = &block](const at::Tensor& in) { return b->forward(in); });
  }

private:
  BlockCheckpointing checkpointing_;
};

} // namespace ftopt::nn
