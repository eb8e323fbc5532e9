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
/// The axes not given hold one policy: parallel::Single and quant::None. An axis entry
/// grid::Variants<P, "a", "b"> is one policy type under several names, each a setting of it that
/// grid::Settings gives by name (run.hpp): one combination per name, all on the same Trainer
/// type, so a variant of a policy's settings adds no Trainer to compile.
///   grid::Axis<peft::Full, grid::Variants<peft::Lora, "lora", "dora">>

#include <algorithm>
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

/// A policy name fixed at compile time: a string literal as a template argument.
template <std::size_t N>
struct Name {
  char text[N]{};
  constexpr Name(const char (&literal)[N]) { std::copy_n(literal, N, text); }
};

/// Policy type P under the names given, each a setting of P (grid::Named in grid::Settings).
template <class P, Name... Names>
struct Variants {
  static_assert(sizeof...(Names) > 0, "grid::Variants needs at least one name");
};

namespace detail {

/// An axis entry: a policy type under its own name, or grid::Variants under several.
template <class E>
struct entry {
  using policy = E;
  static constexpr std::size_t count = 1;
  static std::vector<std::string> names() { return {name_of<E>()}; }
};
template <class P, Name... Names>
struct entry<Variants<P, Names...>> {
  using policy = P;
  static constexpr std::size_t count = sizeof...(Names);
  static std::vector<std::string> names() { return {std::string(Names.text)...}; }
};

} // namespace detail

/// The policies of one axis, in the order the grid runs them.
template <class... Entries>
struct Axis {
  static constexpr auto entries = boost::hana::tuple_t<Entries...>;
  static std::vector<std::string> names() {
    std::vector<std::string> out;
    for (const auto& list : {detail::entry<Entries>::names()...}) out.insert(out.end(), list.begin(), list.end());
    return out;
  }
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

/// The combinations of one tuple of axis entries: the product of their names, the first axis
/// varying slowest.
template <class... Es>
std::vector<Combination> combinations_of() {
  std::vector<std::vector<std::string>> keys{{}};
  for (const auto& axis : {entry<Es>::names()...}) {
    std::vector<std::vector<std::string>> longer;
    for (const auto& key : keys)
      for (const auto& name : axis) {
        longer.push_back(key);
        longer.back().push_back(name);
      }
    keys = std::move(longer);
  }
  std::vector<Combination> out;
  for (const auto& k : keys) out.push_back({k[0], k[1], k[2], k[3], k[4]});
  return out;
}

/// How many combinations a hana tuple of entry tuples names.
constexpr std::size_t count(auto entry_tuples) {
  return boost::hana::unpack(entry_tuples, [](auto... tuple) {
    return (std::size_t{0} + ... + boost::hana::unpack(tuple, [](auto... e) {
              return (std::size_t{1} * ... * entry<typename decltype(e)::type>::count);
            }));
  });
}

} // namespace detail

template <class Precisions, class Pefts, class Memories, class Parallels = Axis<parallel::Single>,
          class Quants = Axis<quant::None>>
struct Grid {
  /// Every tuple of axis entries, valid or not: hana tuples of five hana types.
  static constexpr auto all() {
    return boost::hana::cartesian_product(boost::hana::make_tuple(
        Precisions::entries, Pefts::entries, Memories::entries, Parallels::entries, Quants::entries));
  }

  /// The combinations the rules allow for model M (void: the model-independent rules only).
  template <class M = void>
  static constexpr auto valid() {
    return boost::hana::filter(all(), [](auto c) {
      return boost::hana::unpack(c, [](auto... t) {
        return boost::hana::bool_c<detail::broken<M, typename detail::entry<typename decltype(t)::type>::policy...>() ==
                                   nullptr>;
      });
    });
  }

  /// How many combinations the grid names (a Variants entry counts once per name).
  static constexpr std::size_t size() { return detail::count(all()); }
  template <class M = void>
  static constexpr std::size_t valid_size() { return detail::count(valid<M>()); }
  /// How many Trainer types the valid combinations instantiate.
  template <class M = void>
  static constexpr std::size_t valid_trainers() { return decltype(boost::hana::length(valid<M>()))::value; }

  /// Calls `f.template operator()<Trainer<...>>(combination)` for each valid combination, in
  /// grid order (the first axis varies slowest).
  template <class M = void, class F>
  static void for_each(F&& f) {
    boost::hana::for_each(valid<M>(), [&](auto c) {
      boost::hana::unpack(c, [&](auto... t) {
        using T = Trainer<typename detail::entry<typename decltype(t)::type>::policy...>;
        for (const auto& combination : detail::combinations_of<typename decltype(t)::type...>())
          f.template operator()<T>(combination);
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
        constexpr const char* rule = detail::broken<M, typename detail::entry<typename decltype(t)::type>::policy...>();
        if constexpr (rule != nullptr)
          for (const auto& combination : detail::combinations_of<typename decltype(t)::type...>())
            out.push_back({combination, rule});
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
