#pragma once
/// Naming modules by pattern, and freezing by name, on any torch::nn::Module.
///
/// A NamePattern reads like an entry of PEFT's `target_modules` list: "query" matches a module
/// named `query` at any depth (".attention.attention.query"), "attention.output.dense" matches
/// that dotted suffix, and nn::regex("layer\\.[01]\\..*") full-matches the whole name. A
/// parameter is under a pattern when its own name or one of its modules' names matches.
///
///   ftopt::nn::freeze(*model, {"embeddings", "encoder.layer.0"});   // those stop training
///   ftopt::nn::train_only(*model, {"classifier"});                  // everything else stops

#include <algorithm>
#include <initializer_list>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <torch/nn/module.h>

#include <ftopt/error.hpp>

namespace ftopt::nn {

struct NamePattern {
  NamePattern(std::string text) : text(std::move(text)) {}           // NOLINT: implicit on purpose
  NamePattern(const char* text) : text(text) {}                      // NOLINT

  /// Does `name` (a dotted module or parameter name) match?
  bool matches(std::string_view name) const {
    if (full_match) return full_match(text, name);
    if (name == text) return true;
    return name.size() > text.size() && name.ends_with(text) &&
           name[name.size() - text.size() - 1] == '.';
  }
  /// Made by nn::regex: `text` is a regular expression that must match the whole name.
  bool is_regex() const { return full_match != nullptr; }

  std::string text;
  /// Set by nn::regex: whether `name` full-matches the regular expression `expression`.
  bool (*full_match)(const std::string& expression, std::string_view name) = nullptr;
};

namespace detail {
template <class Regex>
bool regex_full_match(const std::string& expression, std::string_view name) {
  return std::regex_match(name.begin(), name.end(), Regex(expression));
}
} // namespace detail

/// A pattern that full-matches names as a regular expression (PEFT's string target_modules).
/// A template only so that std::regex's compiler and matcher are compiled in the source files
/// that make a regex pattern, not in every one that includes ftopt (docs/build.md, "Compile
/// time"); the pattern carries its matcher as a function pointer.
template <class Regex = std::regex>
NamePattern regex(std::string expression) {
  try {
    Regex check(expression);
  } catch (const std::regex_error& e) {
    ftopt::detail::fail("nn::regex: '", expression, "' is not a valid regular expression (",
                        e.what(), ")");
  }
  NamePattern pattern(std::move(expression));
  pattern.full_match = &detail::regex_full_match<Regex>;
  return pattern;
}

using NamePatterns = std::vector<NamePattern>;

namespace detail {

/// Does a parameter (or module) name fall under the pattern: the name itself, or any module
/// path it lies in ("a", "a.b" for "a.b.weight")?
inline bool under(const NamePattern& pattern, std::string_view name) {
  if (pattern.matches(name)) return true;
  for (auto dot = name.find('.'); dot != std::string_view::npos; dot = name.find('.', dot + 1))
    if (pattern.matches(name.substr(0, dot))) return true;
  return false;
}

/// The distinct last components of the module names, for "did you mean" messages.
inline std::string module_names_hint(const torch::nn::Module& module) {
  std::set<std::string> leaves;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    const auto& key = item.key();
    leaves.insert(key.substr(key.rfind('.') + 1));
  }
  std::ostringstream out;
  std::size_t shown = 0;
  for (const auto& leaf : leaves) {
    if (shown++ == 24) {
      out << ", ...";
      break;
    }
    out << (shown > 1 ? ", " : "") << leaf;
  }
  return out.str();
}

/// Throws when a pattern matches no parameter of the module.
inline void require_matches(torch::nn::Module& module, const NamePatterns& patterns,
                            std::string_view who) {
  const auto named = module.named_parameters();
  for (const auto& pattern : patterns) {
    const bool hit = std::any_of(named.begin(), named.end(),
                                 [&](const auto& item) { return under(pattern, item.key()); });
    ftopt::detail::check(hit, who, ": pattern '", pattern.text, "' matches no module or parameter;",
                         " module names here: ", module_names_hint(module));
  }
}

} // namespace detail

/// Names of the parameters under any of the patterns, in the module's order.
inline std::vector<std::string> parameters_under(torch::nn::Module& module, const NamePatterns& patterns) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters())
    for (const auto& pattern : patterns)
      if (detail::under(pattern, item.key())) {
        names.push_back(item.key());
        break;
      }
  return names;
}

/// Stops the parameters under the patterns from training (requires_grad false). Every pattern
/// must match something. Returns how many parameters it froze.
inline std::size_t freeze(torch::nn::Module& module, const NamePatterns& patterns) {
  detail::require_matches(module, patterns, "nn::freeze");
  std::size_t count = 0;
  for (const auto& name : parameters_under(module, patterns)) {
    module.named_parameters()[name].requires_grad_(false);
    ++count;
  }
  return count;
}

/// Trains only the parameters under the patterns; every other parameter is frozen. Returns how
/// many parameters train.
inline std::size_t train_only(torch::nn::Module& module, const NamePatterns& patterns) {
  detail::require_matches(module, patterns, "nn::train_only");
  const auto chosen = parameters_under(module, patterns);
  const std::set<std::string> keep(chosen.begin(), chosen.end());
  for (auto& item : module.named_parameters()) item.value().requires_grad_(keep.count(item.key()) > 0);
  return chosen.size();
}

} // namespace ftopt::nn
