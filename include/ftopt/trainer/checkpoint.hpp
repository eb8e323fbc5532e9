#pragma once
/// A training checkpoint: the model's state dict, the optimizer's state, the RNG states, each
/// policy's own state, and a TrainingState record (how far training came, the lrs a schedule
/// scales from, and which format and which ftopt wrote the file). Trainer::save_checkpoint and
/// Trainer::load_checkpoint call these; a program can call them to write the same file.
///
/// Formats: 1, files written before the format was recorded (ftopt 0.1, no "format" entry): the
/// same entries less "format" and "written_by"; 2 (this ftopt): adds them. A file of a newer
/// format is refused with its writer named.
///
///   ftopt::trainer::write_checkpoint(path, *model, optimizer, state, std::tie(precision, peft));

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/version.h>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/detail/checkpoint_state.hpp>
#include <ftopt/error.hpp>
#include <ftopt/version.hpp>
#include <ftopt/weights/state_dict.hpp>

namespace ftopt {

/// How far training has come: what a checkpoint restores.
struct Progress {
  std::int64_t epochs = 0;           ///< epochs completed
  std::int64_t optimizer_steps = 0;  ///< optimizer steps taken
};

/// What a checkpoint records of the training run besides tensors of the model and optimizer.
struct TrainingState {
  /// The format this ftopt writes (and the newest it reads).
  static constexpr std::int64_t current_format = 2;

  std::int64_t format = current_format;  ///< the format of the file it was read from
  std::string written_by;                ///< "ftopt 0.2.0, LibTorch 2.11.0"; empty for format 1
  Progress progress;
  std::vector<double> base_lrs;          ///< each parameter group's lr before any schedule

  /// The writer of a file this ftopt writes.
  static std::string this_writer() { return std::string("ftopt ") + version + ", LibTorch " + TORCH_VERSION; }
};

namespace trainer {

/// Writes the checkpoint atomically (a temporary file renamed into place: an interrupted save
/// leaves the last good checkpoint whole). `policies`: a tuple of references to the five
/// policies, in the Trainer's slot order; those that keep state (detail::KeepsState) save it.
template <class Policies>
void write_checkpoint(const std::filesystem::path& path, torch::nn::Module& module,
                      torch::optim::Optimizer& optimizer, const TrainingState& state, Policies policies) {
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(TrainingState::current_format));
  archive.write("written_by", c10::IValue(TrainingState::this_writer()));
  for (const auto& item : weights::state_dict(module))
    archive.write("model." + item.key(), item.value(), /*is_buffer=*/true);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("progress.epochs", torch::tensor(state.progress.epochs));
  archive.write("progress.optimizer_steps", torch::tensor(state.progress.optimizer_steps));
  archive.write("progress.base_lrs", torch::tensor(state.base_lrs, torch::kDouble));
  for (const auto& [name, rng] : detail::rng_states()) archive.write("rng." + name, rng);
  detail::for_each_policy_state(policies, [&](auto& policy, const std::string& axis) {
    torch::serialize::OutputArchive own;
    policy.save_state(own);
    archive.write("policy." + axis, own);
  });
  detail::write_atomically(path, "Trainer::save_checkpoint", [&](std::ostream& out) { archive.save_to(out); });
}

/// Restores what write_checkpoint wrote: the model (strictly, by name), the optimizer, the RNG
/// states and the policies' state; returns the TrainingState. Throws ftopt::Error naming the
/// file and what is missing or too new; the model is then loaded or untouched, never half.
template <class Policies>
TrainingState read_checkpoint(const std::filesystem::path& path, torch::nn::Module& module,
                              torch::optim::Optimizer& optimizer, Policies policies) {
  const std::string where = "Trainer::load_checkpoint: " + path.string();
  detail::check(std::filesystem::is_regular_file(path), where, ": no such file");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path.string());
  } catch (const c10::Error& e) {
    detail::fail(where, ": not a checkpoint (", e.what_without_backtrace(), ")");
  }
  TrainingState state;
  c10::IValue format, writer;
  state.format = archive.try_read("format", format) ? format.toInt() : 1;
  if (archive.try_read("written_by", writer)) state.written_by = writer.toStringRef();
  detail::check(state.format >= 1 && state.format <= TrainingState::current_format, where,
                ": checkpoint format ", state.format, " (written by ",
                state.written_by.empty() ? std::string("an unknown writer") : state.written_by, "); ",
                TrainingState::this_writer(), " reads formats 1 to ", TrainingState::current_format);

  torch::Tensor epochs, steps;
  detail::check(archive.try_read("progress.epochs", epochs) && archive.try_read("progress.optimizer_steps", steps),
                where, ": has no progress record");
  torch::serialize::InputArchive optimizer_archive;
  detail::check(archive.try_read("optimizer", optimizer_archive), where, ": has no optimizer state");
  std::vector<torch::serialize::InputArchive> policy_states;  // all found before anything loads
  detail::for_each_policy_state(policies, [&](auto&, const std::string& axis) {
    detail::check(archive.try_read("policy." + axis, policy_states.emplace_back()), where,
                  ": has no state for the ", axis, " policy");
  });
  weights::StateDict model_state;
  for (const auto& item : weights::state_dict(module)) {
    torch::Tensor t;
    if (archive.try_read("model." + item.key(), t, /*is_buffer=*/true)) model_state.insert(item.key(), t);
  }
  weights::load_state_dict(module, model_state, {}, where);
  optimizer.load(optimizer_archive);
  for (auto& [name, generator] : detail::rng_generators()) {
    torch::Tensor rng;
    if (archive.try_read("rng." + name, rng)) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng);
    }
  }
  std::size_t next = 0;
  detail::for_each_policy_state(policies, [&](auto& policy, const std::string&) { policy.load_state(policy_states[next++]); });
  state.progress = {epochs.item<std::int64_t>(), steps.item<std::int64_t>()};
  torch::Tensor base_lrs;
  if (archive.try_read("progress.base_lrs", base_lrs) && base_lrs.numel() > 0) {
    auto values = base_lrs.contiguous();
    state.base_lrs.assign(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
  }
  return state;
}

} // namespace trainer
} // namespace ftopt
