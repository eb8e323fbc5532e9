#pragma once
/// State dicts: a module's tensors by name, in PyTorch's order, and loading them back with
/// every problem reported at once.
///
///   ftopt::weights::StateDict sd = ftopt::weights::state_dict(*model);
///   auto report = ftopt::weights::load_state_dict(*model, sd, {.strict = false});

#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <torch/nn/module.h>
#include <torch/ordered_dict.h>
#include <torch/utils.h>

#include <ftopt/error.hpp>

namespace ftopt::weights {

/// Tensors by name, in insertion order (Python's OrderedDict).
using StateDict = torch::OrderedDict<std::string, at::Tensor>;

/// The module's parameters and buffers, named and ordered as Python's Module.state_dict():
/// each module's own parameters, then its own buffers, then its children, depth first.
/// Undefined tensors (a bias that is off) are left out.
inline StateDict state_dict(const torch::nn::Module& module) {
  StateDict out;
  for (const auto& item : module.named_modules()) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false))
      if (p.value().defined()) out.insert(prefix + p.key(), p.value());
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false))
      if (b.value().defined()) out.insert(prefix + b.key(), b.value());
  }
  return out;
}

struct LoadOptions {
  /// Like PyTorch's load_state_dict(strict=): missing or unexpected keys are errors. Shape
  /// mismatches are errors either way (as in PyTorch).
  bool strict = true;
  /// Prepended to every name of the file before matching (e.g. "backbone.").
  std::string prefix;
};

/// What load_state_dict found. `converted` lists tensors copied across floating-point types
/// (float16 file into float32 model, say), which PyTorch also does silently.
struct LoadReport {
  std::vector<std::string> missing, unexpected, mismatched, converted;
  std::size_t loaded = 0;

  std::string summary() const {
    std::ostringstream s;
    auto list = [&](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      s << (s.tellp() > 0 ? "; " : "") << names.size() << ' ' << what << ": ";
      for (std::size_t i = 0; i < names.size(); ++i) s << (i ? ", " : "") << names[i];
    };
    list(missing.size() == 1 ? "missing key" : "missing keys", missing);
    list(unexpected.size() == 1 ? "unexpected key" : "unexpected keys", unexpected);
    list(mismatched.size() == 1 ? "mismatch" : "mismatches", mismatched);
    return s.str();
  }
};

/// Copies the tensors of `state` into the module's parameters and buffers, by name. Everything
/// is checked before anything is copied: on error the module is untouched and the message
/// names every missing key, unexpected key and shape or dtype mismatch at once.
inline LoadReport load_state_dict(torch::nn::Module& module, const StateDict& state,
                                  const LoadOptions& options = {}, std::string_view where = "load_state_dict") {
  LoadReport report;
  StateDict own = state_dict(module);
  std::unordered_map<std::string, const at::Tensor*> file;
  for (const auto& s : state) file.emplace(options.prefix + s.key(), &s.value());
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  for (const auto& item : own) {
    auto found = file.find(item.key());
    if (found == file.end()) {
      report.missing.push_back(item.key());
      continue;
    }
    const at::Tensor* given = found->second;
    const auto& mine = item.value();
    std::ostringstream problem;
    if (given->sizes() != mine.sizes())
      problem << item.key() << ": model " << mine.sizes() << ", file " << given->sizes();
    else if (given->is_floating_point() != mine.is_floating_point() ||
             (!mine.is_floating_point() && given->scalar_type() != mine.scalar_type()))
      problem << item.key() << ": model " << at::toString(mine.scalar_type()) << ", file "
              << at::toString(given->scalar_type());
    if (problem.tellp() > 0) {
      report.mismatched.push_back(problem.str());
      continue;
    }
    if (given->scalar_type() != mine.scalar_type() && mine.is_floating_point())
      report.converted.push_back(item.key());
    copies.emplace_back(mine, *given);
  }
  for (const auto& s : state)
    if (!own.contains(options.prefix + s.key())) report.unexpected.push_back(options.prefix + s.key());

  const bool fatal = !report.mismatched.empty() ||
                     (options.strict && (!report.missing.empty() || !report.unexpected.empty()));
  ftopt::detail::check(!fatal, where, ": ", report.summary());
  torch::NoGradGuard no_grad;
  for (auto& [mine, given] : copies) mine.copy_(given);
  report.loaded = copies.size();
  return report;
}

} // namespace ftopt::weights
