#pragma once
/// parallel::Ddp: PyTorch's DistributedDataParallel for the Trainer, on c10d's own Reducer.
///
///   ftopt::Trainer<ftopt::precision::Fp32, ftopt::peft::Lora, ftopt::memory::None,
///                  ftopt::parallel::Ddp> trainer(options, {}, lora, {}, parallel::Ddp({.bucket_cap_mb = 25}));
///   auto batches = fp::from(images, labels) | fp::shuffle(1)
///                | fp::shard(trainer.parallel()) | fp::batch(64);
///
/// Started by a launcher (ftopt-launch, torchrun, an srun/mpirun script) that sets MASTER_ADDR,
/// MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK (parallel::Environment); alone, it is rank 0 of 1.
///
/// What it does, as torch.nn.parallel.DistributedDataParallel (1.13-2.x) does:
///   - setup: joins the group, checks that every rank has the same parameter shapes
///     (c10d::verify_params_across_processes), broadcasts all parameters and buffers from rank
///     0, and builds a c10d::Reducer over the *trainable* parameters only (LoRA sends adapter
///     gradients only): one bucket for the first iteration, then buckets of bucket_cap_mb (the
///     first 1 MiB) in the order gradients arrived, as DDP rebuilds them;
///   - each synchronizing micro-batch: prepare_for_forward, rebuild_buckets, buffers broadcast
///     from rank 0 (broadcast_buffers; not the constant ones, DdpOptions::constant_buffers and a
///     QLora layer's packed base, which Python holds as frozen parameters), prepare_for_backward;
///     the Reducer's autograd hooks all-reduce each bucket as soon as its gradients are ready,
///     while backward still runs, and average them (sum / world size);
///   - the other micro-batches of an accumulation window run like DDP's no_sync(): gradients
///     stay local and add up, and the closing micro-batch reduces the sum;
///   - static_graph: on its first iteration the reduction is delayed to the end of backward
///     (Python's _DDPSink queue_callback(_delay_all_reduce)).
/// Where ftopt differs: docs/parallel.md.

#include <chrono>
#include <cstdint>
#include <limits>
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <torch/nn/module.h>

#include <ftopt/detail/dependent_false.hpp>
#include <ftopt/parallel/concept.hpp>
#include <ftopt/parallel/support/group.hpp>

namespace ftopt::parallel {

/// DistributedDataParallel's settings, with its names and defaults.
struct DdpOptions {
  double bucket_cap_mb = 25;              ///< gradient bucket size (the first bucket is 1 MiB, as DDP's)
  bool gradient_as_bucket_view = false;   ///< gradients alias the buckets: one copy and its memory saved
  bool static_graph = false;              ///< the set of used parameters never changes
  bool find_unused_parameters = false;    ///< walk the graph for parameters the forward did not use
  bool broadcast_buffers = true;          ///< rank 0's buffers (BatchNorm stats) before each forward
  /// Buffers, by name in the model, that never change after setup (a position table): broadcast
  /// from rank 0 at setup only, not before each forward. Those the Peft policy names (a QLora
  /// layer's packed base: QLora::constant_buffers) need not be named; the Trainer passes them.
  std::vector<std::string> constant_buffers;
  /// Bounds joining and every collective; a lost or hung rank is an error after at most this.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  Backend backend = Backend::Auto;        ///< Auto: NCCL for a CUDA model, else Gloo
  std::optional<Environment> environment; ///< unset: Environment::from_env()

  void validate() const {
    ftopt::detail::check(bucket_cap_mb > 0, "DdpOptions: bucket_cap_mb must be > 0, got ", bucket_cap_mb);
    ftopt::detail::check(timeout.count() > 0, "DdpOptions: timeout must be positive, got ", timeout.count(), " ms");
    if (environment) environment->validate();
  }
};

namespace detail {

/// A c10d::Reducer on LibTorch 1.13-2.5 (per-bucket size limits), 2.7+ (none, two flags) or
/// later main (a list of caps too), chosen by which constructor exists.
template <class R = c10d::Reducer>
std::unique_ptr<R> make_reducer(std::vector<at::Tensor> params, std::vector<std::vector<std::size_t>> buckets,
                                std::vector<std::size_t> limits, c10::intrusive_ptr<c10d::ProcessGroup> group,
                                std::int64_t bucket_bytes, bool find_unused, bool bucket_view,
                                std::unordered_map<std::size_t, std::string> names, std::int64_t first_bucket_bytes) {
  std::vector<bool> sparse(params.size(), false);
  using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
  using Names = std::unordered_map<std::size_t, std::string>;
  using Params = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<std::size_t>>;
  if constexpr (std::is_constructible_v<R, Params, Buckets, std::vector<std::size_t>, Group, std::vector<bool>,
                                        std::int64_t, bool, bool, Names, std::int64_t>) {
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(limits), std::move(group),
                               std::move(sparse), bucket_bytes, find_unused, bucket_view, std::move(names),
                               first_bucket_bytes);
  } else if constexpr (std::is_constructible_v<R, Params, Buckets, Group, std::vector<bool>, std::int64_t, bool,
                                               bool, Names, std::int64_t, bool, bool>) {
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse),
                               bucket_bytes, find_unused, bucket_view, std::move(names), first_bucket_bytes,
                               /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false);
  } else if constexpr (std::is_constructible_v<R, Params, Buckets, Group, std::vector<bool>, std::int64_t, bool,
                                               bool, Names, std::int64_t, bool, bool, std::vector<std::int64_t>>) {
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(group), std::move(sparse),
                               bucket_bytes, find_unused, bucket_view, std::move(names), first_bucket_bytes,
                               false, false, /*bucket_bytes_cap_list=*/std::vector<std::int64_t>{});
  } else {
    static_assert(ftopt::detail::dependent_false<R>,
                  "parallel::Ddp: this LibTorch's c10d::Reducer constructor is not one ftopt knows");
  }
}

} // namespace detail

class Ddp {
public:
  using axis = ftopt::axis::Parallel;
  static constexpr const char* name = "ddp";  ///< in grids, tables and flags
  /// Gradients are all-reduced once complete (rules.hpp: no optimizer step inside the backward).
  static constexpr bool reduces_gradients = true;

  Ddp() : Ddp(DdpOptions{}) {}
  explicit Ddp(DdpOptions options)
      : options_(std::move(options)), env_(options_.environment ? *options_.environment : Environment::from_env()) {}

  void validate() const { options_.validate(); }
  const DdpOptions& options() const { return options_; }

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const Environment& environment() const { return env_; }
  /// The joined group (after setup); null before.
  const std::shared_ptr<Group>& group() const { return state_->group; }

  /// Joins the group, makes every rank's parameters and buffers rank 0's, and hooks the
  /// gradient reduction onto the trainable parameters.
  /// `constant`: buffers known constant besides DdpOptions::constant_buffers (the Peft policy's).
  void setup(torch::nn::Module& module, const std::vector<torch::Tensor>& trainable,
             const std::vector<std::string>& constant_names = {}) {
    const torch::Device device = trainable.front().device();
    Backend backend = options_.backend;
    if (backend == Backend::Auto) backend = device.is_cuda() ? Backend::Nccl : Backend::Gloo;
    auto& s = *state_;
    s.group = Group::join(env_, {.backend = backend, .timeout = options_.timeout});
    s.group->guard("checking that the ranks' models agree", [&] {
      c10d::verify_params_across_processes(s.group->get(), trainable, {});
    });
    std::vector<torch::Tensor> states;
    for (const auto& p : module.parameters()) states.push_back(p.detach());
    // Every buffer now; before each forward only those that may change.
    std::set<std::string> unseen(options_.constant_buffers.begin(), options_.constant_buffers.end());
    const std::set<std::string> constant(constant_names.begin(), constant_names.end());
    for (const auto& item : module.named_buffers()) {
      states.push_back(item.value());
      if (!unseen.erase(item.key()) && !constant.contains(item.key())) s.buffers.push_back(item.value());
    }
    ftopt::detail::check(unseen.empty(), "parallel::Ddp: DdpOptions::constant_buffers names '",
                         unseen.empty() ? "" : *unseen.begin(), "', which is not a buffer of the model");
    s.group->broadcast(states, 0);
    build_reducer(module, trainable);
  }

  void before_forward(bool sync) {
    auto& s = *state_;
    const bool grad = torch::GradMode::is_enabled();
    s.group->guard("preparing the forward", [&] {
      if (grad && sync) {
        ++s.iterations;
        s.reducer->prepare_for_forward();
      }
      if (grad) s.reducer->rebuild_buckets();
      if (options_.broadcast_buffers && s.forward_param_sync && !s.buffers.empty()) s.group->broadcast(s.buffers, 0);
    });
  }

  void before_backward(const torch::Tensor& output, bool sync) {
    auto& s = *state_;
    if (!torch::GradMode::is_enabled()) return;
    s.forward_param_sync = sync;
    if (!sync) return;  // no_sync: the Reducer's hooks see no pending reduction and do nothing
    s.group->guard("preparing the backward", [&] {
      if (options_.find_unused_parameters && !options_.static_graph) s.reducer->prepare_for_backward({output});
      else s.reducer->prepare_for_backward({});
    });
    if (options_.static_graph && s.iterations == 1 && output.requires_grad()) {
      // The first iteration of a static graph reduces at the end of backward, when the Reducer
      // has seen which parameters were used (Python: _DDPSink).
      c10d::Reducer* reducer = s.reducer.get();
      output.register_hook([reducer](const torch::Tensor& grad) {
        torch::autograd::Engine::get_default_engine().queue_callback([reducer] { reducer->delay_all_reduce(); });
        return grad;
      });
    }
  }

  void after_backward(bool) {}

  /// Runs the backward (or any collective-raising step); a lost rank becomes an ftopt::Error
  /// that names it.
  template <class F>
  void guard(F&& f) {
    state_->group->guard("gradient all-reduce during backward", std::forward<F>(f));
  }

  /// With gradient_as_bucket_view the gradients are the buckets: zero them, do not drop them.
  bool zero_grads_in_place() const { return options_.gradient_as_bucket_view; }

  torch::Tensor reduce_sum(const torch::Tensor& t) {
    if (world_size() == 1) return t;
    std::vector<torch::Tensor> tensors{t.detach().clone().contiguous()};
    state_->group->allreduce_sum(tensors);
    return tensors.front();
  }

  /// DDP's register_comm_hook: `hook` communicates each bucket instead of the built-in
  /// all-reduce (compression, timing, ...). After setup (Trainer::prepare), before training.
  void register_comm_hook(std::unique_ptr<c10d::CommHookInterface> hook) {
    ftopt::detail::check(state_->reducer != nullptr, "parallel::Ddp::register_comm_hook: call Trainer::prepare first");
    state_->reducer->register_comm_hook(std::move(hook));
  }

  /// Elements in the Reducer's buckets: what each synchronizing step all-reduces.
  std::int64_t reduced_elements() const { return state_->reduced_elements; }

private:
  void build_reducer(torch::nn::Module& module, const std::vector<torch::Tensor>& trainable) {
    auto& s = *state_;
    std::unordered_map<const void*, std::string> name_of;
    for (const auto& item : module.named_parameters()) name_of[item.value().unsafeGetTensorImpl()] = item.key();
    std::unordered_map<std::size_t, std::string> names;
    for (std::size_t i = 0; i < trainable.size(); ++i) {
      auto found = name_of.find(trainable[i].unsafeGetTensorImpl());
      if (found != name_of.end()) names[i] = found->second;
      s.reduced_elements += trainable[i].numel();
    }
    const auto bucket_bytes = static_cast<std::int64_t>(options_.bucket_cap_mb * 1024 * 1024);
    const std::int64_t first_bucket_bytes = std::min<std::int64_t>(1024 * 1024, bucket_bytes);  // dist._DEFAULT_FIRST_BUCKET_BYTES
    // As DDP: without unused-parameter search, the first iteration runs with one bucket and the
    // Reducer rebuilds the buckets by bucket_cap_mb in the order the gradients arrived.
    std::vector<std::size_t> caps{static_cast<std::size_t>(first_bucket_bytes), static_cast<std::size_t>(bucket_bytes)};
    if (options_.static_graph || !options_.find_unused_parameters) caps = {std::numeric_limits<std::size_t>::max()};
    auto [buckets, limits] =
        c10d::compute_bucket_assignment_by_size(trainable, caps, std::vector<bool>(trainable.size(), false));
    // Parameters are registered input-first and gradients arrive output-first: DDP reverses.
    std::reverse(buckets.begin(), buckets.end());
    std::reverse(limits.begin(), limits.end());
    s.reducer = detail::make_reducer(trainable, std::move(buckets), std::move(limits), s.group->get(), bucket_bytes,
                                     options_.find_unused_parameters, options_.gradient_as_bucket_view,
                                     std::move(names), first_bucket_bytes);
    if (options_.static_graph) s.reducer->set_static_graph();
  }

  /// What setup builds; behind a pointer so the policy stays movable (the Reducer is not).
  struct State {
    std::shared_ptr<Group> group;
    std::unique_ptr<c10d::Reducer> reducer;
    std::vector<torch::Tensor> buffers;
    std::int64_t reduced_elements = 0;
    std::int64_t iterations = 0;
    bool forward_param_sync = true;
  };

  DdpOptions options_;
  Environment env_;
  std::unique_ptr<State> state_ = std::make_unique<State>();
};

static_assert(Policy<Ddp>);

} // namespace ftopt::parallel
