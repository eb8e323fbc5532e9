#pragma once
/// grid::Grid: lists of policies per axis, whose cartesian product Boost.Hana forms at compile
/// time; the combination rules (rules.hpp) filter it, so every valid Trainer<...> is
/// instantiated and every invalid one is skipped and listed with the rule that excluded it.
///
///   using Grid = ftopt::grid::Grid<ftopt::grid::Axis<precision::Fp32, precision::Bf16Mixed>,
///                                  ftopt::grid::Axis<peft::Full, peft::Lora, peft::Prefix>,
///                                  ftopt::grid::Axis<memory::None, memory::Checkpoint>>;
///   Grid::for_each<models::Mlp>([&]<class T>(const grid::Combination& c) { T trainer(options); ... });
///   Grid::excluded<models::Mlp>();   // fp32/prefix/... : "prefix tuning needs a model whose ..."
///   Grid::visit<models::ViT>(grid::Combination{"bf16", "lora", "checkpoint"}, f);   // by name, at run time
///
/// The axes not given hold one policy: parallel::Single and quant::None.

#include <cstddef>
#include <ostream>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <boost/hana/cartesian_product.hpp>
#include <boost/hana/filter.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>
#include <boost/hana/unpack.hpp>
#include <c10/util/Type.h>

#include <ftopt/error.hpp>
#include <ftopt/parallel/single.hpp>
#include <ftopt/quant/none.hpp>
#include <ftopt/rules.hpp>
#include <ftopt/trainer.hpp>

namespace ftopt::grid {

/// A policy's name in tables and flags: its `name` member, else its C++ type.
template <class P>
std::string name_of() {
  if constexpr (requires { P::name; }) return P::name;
  else return c10::demangle(typeid(P).name());
}

/// One combination by its policies' names, in the Trainer's axis order.
struct Combination {
  std::string precision = "fp32", peft = "full", memory = "none", parallel = "single", quant = "none";

  /// "bf16/lora/checkpoint/single/none".
  std::string key() const { return precision + "/" + peft + "/" + memory + "/" + parallel + "/" + quant; }
  /// The policies that differ from the baseline (fp32, full fine-tuning), "+"-joined;
  /// "baseline" for the baseline itself.
  std::string label() const {
    std::string out;
    const auto add = [&](const std::string& name, const char* plain) {
      if (name != plain) out += (out.empty() ? "" : "+") + name;
    };
    add(precision, "fp32"), add(peft, "full"), add(memory, "none"), add(parallel, "single"), add(quant, "none");
    return out.empty() ? "baseline" : out;
  }
  bool operator==(const Combination&) const = default;
};

inline std::ostream& operator<<(std::ostream& out, const Combination& c) { return out << c.key(); }

/// The policies of one axis, in the order the grid runs them.
template <class... Policies>
struct Axis {
  static constexpr auto types = boost::hana::tuple_t<Policies...>;
  static std::vector<std::string> names() { return {name_of<Policies>()...}; }
};

/// A combination the rules exclude, and the rule.
struct Excluded {
  Combination combination;
  std::string rule;
};

namespace detail {

/// The first rule the combination breaks for model M (nullptr: none).
template <class M, class Precision, class Peft, class Memory, class Parallel, class Quant>
constexpr const char* broken() {
  if (const char* r = rules::broken_rule<Precision, Peft, Memory, Parallel, Quant>()) return r;
  if constexpr (std::is_void_v<M>) return nullptr;
  else return rules::broken_model_rule<Peft, Memory, M>();
}

template <class... Ps>
Combination combination_of() {
  const std::vector<std::string> names{name_of<Ps>()...};
  return {names[0], names[1], names[2], names[3], names[4]};
}

} // namespace detail

template <class Precisions, class Pefts, class Memories, class Parallels = Axis<parallel::Single>,
          class Quants = Axis<quant::None>>
struct Grid {
  /// Every combination, valid or not: hana tuples of five hana types.
  static constexpr auto all() {
    return boost::hana::cartesian_product(boost::hana::make_tuple(
        Precisions::types, Pefts::types, Memories::types, Parallels::types, Quants::types));
  }

  /// The combinations the rules allow for model M (void: the model-independent rules only).
  template <class M = void>
  static constexpr auto valid() {
    return boost::hana::filter(all(), [](auto c) {
      return boost::hana::unpack(c, [](auto... t) {
        return boost::hana::bool_c<detail::broken<M, typename decltype(t)::type...>() == nullptr>;
      });
    });
  }

  static constexpr std::size_t size() { return decltype(boost::hana::length(all()))::value; }
  template <class M = void>
  static constexpr std::size_t valid_size() { return decltype(boost::hana::length(valid<M>()))::value; }

  /// Calls `f.template operator()<Trainer<...>>(combination)` for each valid combination, in
  /// grid order (the first axis varies slowest).
  template <class M = void, class F>
  static void for_each(F&& f) {
    boost::hana::for_each(valid<M>(), [&](auto c) {
      boost::hana::unpack(c, [&](auto... t) {
        using T = Trainer<typename decltype(t)::type...>;
        f.template operator()<T>(detail::combination_of<typename decltype(t)::type...>());
      });
    });
  }

  /// The combinations the rules exclude for model M, each with the rule; no Trainer of them is
  /// instantiated.
  template <class M = void>
  static std::vector<Excluded> excluded() {
    std::vector<Excluded> out;
    boost::hana::for_each(all(), [&](auto c) {
      boost::hana::unpack(c, [&](auto... t) {
        constexpr const char* rule = detail::broken<M, typename decltype(t)::type...>();
        if constexpr (rule != nullptr) out.push_back({detail::combination_of<typename decltype(t)::type...>(), rule});
      });
    });
    return out;
  }

  /// The valid combinations' names, in grid order.
  template <class M = void>
  static std::vector<Combination> combinations() {
    std::vector<Combination> out;
    for_each<M>([&]<class T>(const Combination& c) { out.push_back(c); });
    return out;
  }

  /// Runs `f.template operator()<Trainer<...>>(combination)` for the combination named at run
  /// time. A name no axis has, or a combination the rules exclude, is an ftopt::Error that says
  /// which, and what there is instead.
  template <class M = void, class F>
  static void visit(const Combination& wanted, F&& f) {
    check<M>(wanted);
    for_each<M>([&]<class T>(const Combination& c) {
      if (c == wanted) f.template operator()<T>(c);
    });
  }

  /// Whether `wanted` names a valid combination of this grid: an ftopt::Error naming the axis
  /// and its names, or the rule that excludes the combination, when it does not. visit()
  /// checks first; a program can check its flags before it loads any data.
  template <class M = void>
  static void check(const Combination& wanted) {
    check_axis("precision", wanted.precision, Precisions::names());
    check_axis("peft", wanted.peft, Pefts::names());
    check_axis("memory", wanted.memory, Memories::names());
    check_axis("parallel", wanted.parallel, Parallels::names());
    check_axis("quant", wanted.quant, Quants::names());
    for (const auto& e : excluded<M>())
      ftopt::detail::check(!(e.combination == wanted), "grid: ", wanted.key(), " is excluded: ", e.rule);
  }

private:
  static void check_axis(const char* axis, const std::string& name, const std::vector<std::string>& names) {
    std::string known;
    bool ok = false;
    for (const auto& n : names) {
      ok = ok || n == name;
      known += (known.empty() ? "" : ", ") + n;
    }
    ftopt::detail::check(ok, "grid: ", axis, " '", name, "' is not in this grid (", axis, ": ", known, ")");
  }
};

} // namespace ftopt::grid
