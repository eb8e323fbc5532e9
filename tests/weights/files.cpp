// Tests for include/ftopt/weights/: torch.save and safetensors files made by real PyTorch
// (tests/fixtures/make_fixtures.py), state-dict loading and its errors, atomic writes.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <torch/torch.h>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/weights/files.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace {
std::filesystem::path fixture(const std::string& name) { return std::filesystem::path(FTOPT_FIXTURES) / name; }

std::filesystem::path scratch() {
  auto dir = std::filesystem::temp_directory_path() / ("ftopt-weights-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

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

TEST_CASE("load_state_dict reports every problem at once and changes nothing on error", "[weights][errors]") {
  torch::manual_seed(0);
  torch::nn::Sequential model(nn::Linear(3, 4), nn::Linear(4, 2));
  auto before = test::snapshot(*model);
  weights::StateDict file;
  file.insert("0.weight", torch::ones({4, 3}));   // fine
  file.insert("1.weight", torch::ones({3, 4}));   // wrong shape
  file.insert("1.bias", torch::ones({2}, torch::kLong));  // wrong kind of dtype
  file.insert("2.weight", torch::ones({1}));      // unexpected
  // "0.bias" missing
  auto message = test::message_of([&] { weights::load_state_dict(*model, file); });
  CHECK_THAT(message, Contains("1 missing key: 0.bias") && Contains("1 unexpected key: 2.weight") &&
                          Contains("2 mismatches: 1.weight: model [2, 4], file [3, 4], 1.bias: model Float, file Long"));
  CHECK(test::same_values(before, test::snapshot(*model)));

  SECTION("non-strict loads what matches; shape mismatches still fail") {
    weights::StateDict partial;
    partial.insert("0.weight", torch::ones({4, 3}, torch::kHalf));
    partial.insert("extra", torch::ones({1}));
    auto report = weights::load_state_dict(*model, partial, {.strict = false});
    CHECK(report.loaded == 1);
    CHECK(report.missing.size() == 3);
    CHECK(report.unexpected == std::vector<std::string>{"extra"});
    CHECK(report.converted == std::vector<std::string>{"0.weight"});
    CHECK(torch::equal(model->parameters()[0], torch::ones({4, 3})));
  }
  SECTION("a prefix maps a backbone's names into a bigger model") {
    weights::StateDict backbone;
    backbone.insert("weight", torch::full({4, 3}, 2.0));
    backbone.insert("bias", torch::full({4}, 3.0));
    auto report = weights::load_state_dict(*model, backbone, {.strict = false, .prefix = "0."});
    CHECK(report.loaded == 2);
    CHECK(torch::equal(model->parameters()[1], torch::full({4}, 3.0)));
  }
}

TEST_CASE("Saved files load back, in both formats", "[weights]") {
  const auto dir = scratch();
  auto sd = weights::load_torch_file(fixture("state_dict_ordereddict.pt"));
  for (auto name : {"again.pt", "again.safetensors"}) {
    INFO(name);
    weights::save_file(dir / name, sd, weights::format_for(name));
    auto back = weights::load_file(dir / name);
    REQUIRE(back.keys() == sd.keys());
    for (const auto& item : sd) {
      CHECK(back[item.key()].scalar_type() == item.value().scalar_type());
      CHECK(torch::equal(back[item.key()], item.value()));
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("safetensors files made from the format's specification load", "[weights]") {
  auto vit = weights::load_safetensors(fixture("hf_vit_tiny.safetensors"));
  auto same = weights::load_torch_file(fixture("hf_vit_tiny.pt"));  // the same tensors via torch.save
  REQUIRE(vit.keys() == same.keys());
  for (const auto& item : vit) CHECK(torch::equal(item.value(), same[item.key()]));

  const auto dir = scratch();
  auto write = [&](const std::string& name, std::uint64_t header_size, const std::string& header, std::size_t data) {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&header_size), 8);
    out << header << std::string(data, '\0');
  };
  write("big.safetensors", 1u << 30, "{}", 0);
  CHECK_THAT(test::message_of([&] { weights::load_safetensors(dir / "big.safetensors"); }),
             Contains("the header size 1073741824 does not fit a file of"));
  write("json.safetensors", 5, "{oops", 0);
  CHECK_THAT(test::message_of([&] { weights::load_safetensors(dir / "json.safetensors"); }),
             Contains("json.safetensors: the header is not valid JSON"));
  const std::string short_header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  write("short.safetensors", short_header.size(), short_header, 8);
  CHECK_THAT(test::message_of([&] { weights::load_safetensors(dir / "short.safetensors"); }),
             Contains("tensor w has data_offsets outside the file's 8 data bytes"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("A write that fails leaves the old file whole and no temporary behind", "[weights][errors]") {
  const auto dir = scratch();
  const auto path = dir / "weights.pt";
  { std::ofstream(path) << "the last good file"; }
  CHECK_THROWS(ftopt::detail::write_atomically(path, "test", [](std::ostream& out) {
    out << "half of a new fi";
    throw std::runtime_error("interrupted");
  }));
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text == "the last good file");
  CHECK(std::distance(std::filesystem::directory_iterator(dir), {}) == 1);
  CHECK_THAT(test::message_of([&] { weights::save_file(dir / "no" / "such" / "folder.pt", weights::StateDict{}, weights::Format::Torch); }),
             Contains("does not exist"));
  std::filesystem::remove_all(dir);
}
