// Tests for include/ftopt/weights/torch_file.hpp (and pickle.hpp): torch.save files made by real
// PyTorch (tests/fixtures/make_fixtures.py) load, and files that are no state dicts are named.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <sstream>

#include <torch/torch.h>

#include <ftopt/nn/linear.hpp>
#include <ftopt/weights/files.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using ftopt::test::fixture;

namespace {

/// The module make_fixtures.py saved (class Odd), rebuilt with the same registration order.
struct OddImpl : torch::nn::Module {
  OddImpl() {
    register_buffer("bf16", torch::zeros({2, 3}, torch::kBFloat16));
    register_buffer("transposed", torch::zeros({4, 3}));
    register_buffer("view_a", torch::zeros({4}));
    register_buffer("view_b", torch::zeros({2, 2}));
    register_buffer("f64", torch::zeros({2}, torch::kDouble));
    register_buffer("i32", torch::zeros({2}, torch::kInt));
    register_buffer("flags", torch::zeros({3}, torch::kBool));
    register_buffer("scalar", torch::zeros({}));
    register_module("linear", nn::Linear(3, 4));
    register_module("norm", torch::nn::BatchNorm1d(4));
  }
};

struct Expected {
  std::string dtype;
  std::vector<double> values;
};

std::map<std::string, Expected> expected_values() {
  std::ifstream in(fixture("state_dict_expected.txt"));
  std::map<std::string, Expected> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string name, dtype, shape;
    s >> name >> dtype >> shape;
    Expected e{dtype, {}};
    for (double v; s >> v;) e.values.push_back(v);
    out[name] = e;
  }
  return out;
}

void check_against_python(const weights::StateDict& sd) {
  auto expected = expected_values();
  REQUIRE(sd.size() == expected.size());
  for (const auto& item : sd) {
    INFO(item.key());
    REQUIRE(expected.count(item.key()));
    const auto& e = expected[item.key()];
    auto values = item.value().to(torch::kDouble).flatten();
    REQUIRE(values.numel() == static_cast<std::int64_t>(e.values.size()));
    for (std::int64_t i = 0; i < values.numel(); ++i) CHECK(values[i].item<double>() == e.values[static_cast<std::size_t>(i)]);
  }
}

} // namespace

TEST_CASE("torch.save(model.state_dict()) files load, OrderedDict and all", "[weights]") {
  // On LibTorch 1.13, torch::pickle_load fails on these (pytorch#100741); ours must not.
  auto sd = weights::load_torch_file(fixture("state_dict_ordereddict.pt"));
  check_against_python(sd);
  CHECK(sd["bf16"].scalar_type() == torch::kBFloat16);
  CHECK(sd["norm.num_batches_tracked"].scalar_type() == torch::kLong);
  CHECK(sd["flags"].scalar_type() == torch::kBool);
  CHECK(sd["transposed"].stride(0) == 1);  // non-contiguous, as saved
  // view_a and view_b were views of one storage in Python; they still are.
  CHECK(sd["view_a"].storage().data() == sd["view_b"].storage().data());
  check_against_python(weights::load_torch_file(fixture("state_dict_dict.pt")));

  torch::nn::ModuleHolder<OddImpl> odd;
  auto report = weights::load(*odd, fixture("state_dict_ordereddict.pt"));  // strict
  CHECK(report.loaded == 15);
  CHECK(report.missing.empty());
  // Our state_dict order is Python's: own tensors first, then children.
  std::vector<std::string> python_order;
  std::ifstream in(fixture("state_dict_expected.txt"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') python_order.push_back(line.substr(0, line.find(' ')));
  CHECK(weights::state_dict(*odd).keys() == python_order);
}

TEST_CASE("Files that are not state dicts get an error naming what they are", "[weights][errors]") {
  CHECK_THAT(test::message_of([] { weights::load_torch_file(fixture("state_dict_legacy.pt")); }),
             Contains("state_dict_legacy.pt: not a zip archive") && Contains("legacy format"));
  CHECK_THAT(test::message_of([] { weights::load_torch_file(fixture("whole_module.pt")); }),
             Contains("whole_module.pt: the pickle calls __main__.Odd") && Contains("save model.state_dict() instead"));
  CHECK_THAT(test::message_of([] { weights::load_file(fixture("nope.pt")); }), Contains("nope.pt: no such file"));
  CHECK_THAT(test::message_of([] { weights::load_torch_file(fixture("state_dict_dict.pt"), "model"); }),
             Contains("has no entry 'model'"));
}
