#pragma once
/// The registry of decoder families: one line per family (models/decoder_family.hpp says what a
/// family is). The loaders find a config.json's family by its model_type and a GGUF file's by its
/// general.architecture; save_llama finds the family whose config can hold a model's options.
/// A name the registry lacks is an error listing the names it has.
///
///   ftopt::models::visit_family_of_gguf("gemma3", where, [&](auto family) {
///     using Family = decltype(family);   // families::Gemma3
///   });

#include <algorithm>
#include <span>
#include <string>
#include <string_view>

#include <ftopt/error.hpp>
#include <ftopt/models/decoder_family.hpp>
#include <ftopt/models/gemma3/family.hpp>
#include <ftopt/models/llama/family.hpp>
#include <ftopt/models/mistral/family.hpp>
#include <ftopt/models/qwen2/family.hpp>

namespace ftopt::models {

template <class... Families>
struct FamilyList {
  /// Calls visit(Family{}) for the first family `pred` accepts; false where none does.
  template <class Pred, class Visit>
  static bool visit_first(const Pred& pred, const Visit& visit) {
    return ((pred(Families{}) ? (visit(Families{}), true) : false) || ...);
  }
  /// The names `of` gives each family, comma-separated, empty ones left out.
  template <class Of>
  static std::string names(const Of& of) {
    std::string out;
    for (const std::string_view n : {std::string_view(of(Families{}))...})
      if (!n.empty()) out += (out.empty() ? "" : ", ") + std::string(n);
    return out;
  }
};

/// The registry: add a family here (and its folder).
using DecoderFamilies = FamilyList<families::Llama, families::Mistral, families::Qwen2, families::Gemma3>;

/// Calls visit(Family{}) for the family whose config.json model_type is `model_type`.
template <class Visit>
void visit_family_of_model_type(std::string_view model_type, const std::string& where, const Visit& visit) {
  const bool found = DecoderFamilies::visit_first(
      [&](auto f) { return std::ranges::find(decltype(f)::model_types, model_type) != decltype(f)::model_types.end(); },
      visit);
  check(found, where, ": model_type is '", model_type, "', not one of the decoder families ftopt has (model_type ",
        DecoderFamilies::names([](auto f) { return decltype(f)::model_types.front(); }), ")");
}

/// Calls visit(Family{}) for the family of a GGUF file's general.architecture.
template <class Visit>
void visit_family_of_gguf(std::string_view architecture, const std::string& where, const Visit& visit) {
  const bool found = DecoderFamilies::visit_first(
      [&](auto f) { return !architecture.empty() && decltype(f)::gguf_architecture == architecture; }, visit);
  check(found, where, ": general.architecture is '", architecture, "', not one of the decoder families ftopt has "
        "(GGUF architectures ", DecoderFamilies::names([](auto f) { return decltype(f)::gguf_architecture; }), ")");
}

/// Calls visit(Family{}) for the family whose models these options describe.
template <class Visit>
void visit_family_of_options(const LlamaOptions& o, const std::string& where, const Visit& visit) {
  const bool found = DecoderFamilies::visit_first([&](auto f) { return decltype(f)::holds(o); }, visit);
  check(found, where, ": the options describe a model of none of the decoder families ftopt has (",
        DecoderFamilies::names([](auto f) { return decltype(f)::name; }), ")");
}

/// How a GGUF architecture names and stores a layer's tensors.
struct GgufLayout {
  std::span<const GgufTensorName> layer_tensors;
  GgufRows rows = GgufRows::AsIs;
};

inline GgufLayout gguf_layout_of(std::string_view architecture, const std::string& where) {
  GgufLayout layout;
  visit_family_of_gguf(architecture, where, [&](auto f) {
    using Family = decltype(f);
    layout = {Family::gguf_layer_tensors, Family::gguf_rows};
  });
  return layout;
}

} // namespace ftopt::models
