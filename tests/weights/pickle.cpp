// Tests for include/ftopt/weights/pickle.hpp: the pickle VM reads what Python's pickle writes
// (the bytes below are pickle.dumps of one OrderedDict at protocols 2 and 4, and the data.pkl
// torch.save wrote for a state dict, made by Python 3.11 and torch 2.11 as in the comments), with
// tensors rebuilt on the storages a loader gives (views of one storage share it, as in Python);
// write_state_dict's pickle reads back to the same tensors; anything a state dict never holds is
// named.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <ftopt/weights/pickle.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using weights::pickle::Value;

namespace {

std::string from_hex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return out;
}

// values = OrderedDict([("int", 7), ("neg", -300), ("big", 2**40), ("neg_big", -2**40), ("real", 2.5),
//                       ("text", "h\u00e9llo"), ("flags", (True, False, None)), ("list", [1, 2, 3]),
//                       ("nested", {"a": 1})])
// pickle.dumps(values, protocol=2).hex()
const std::string values_protocol_2 = from_hex(
    "800263636f6c6c656374696f6e730a4f726465726564446963740a710029527101285803000000696e7471024b075803"
    "0000006e656771034ad4feffff580300000062696771048a0600000000000158070000006e65675f62696771058a0600"
    "00000000ff58040000007265616c71064740040000000000005804000000746578747107580600000068c3a96c6c6f71"
    "085805000000666c616773710988894e87710a58040000006c697374710b5d710c284b014b024b036558060000006e65"
    "73746564710d7d710e580100000061710f4b0173752e");
// pickle.dumps(values, protocol=4).hex()
const std::string values_protocol_4 = from_hex(
    "800495a7000000000000008c0b636f6c6c656374696f6e73948c0b4f72646572656444696374949394295294288c0369"
    "6e74944b078c036e6567944ad4feffff8c03626967948a060000000000018c076e65675f626967948a060000000000ff"
    "8c047265616c944740040000000000008c0474657874948c0668c3a96c6c6f948c05666c6167739488894e87948c046c"
    "697374945d94284b014b024b03658c066e6573746564947d948c0161944b0173752e");
// base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
// torch.save(OrderedDict([("w", base.t()), ("row", base[1]), ("b", torch.tensor([7, -8]))]), f):
// the archive's data.pkl (storage "0": base's 6 floats, "1": the 2 int64 of b)
const std::string torch_state_dict = from_hex(
    "800263636f6c6c656374696f6e730a4f726465726564446963740a71002952710128580100000077710263746f726368"
    "2e5f7574696c730a5f72656275696c645f74656e736f725f76320a71032828580700000073746f72616765710463746f"
    "7263680a466c6f617453746f726167650a71055801000000307106580300000063707571074b06747108514b004b034b"
    "028671094b014b0386710a8968002952710b74710c52710d5803000000726f77710e6803282868046805680668074b06"
    "74710f514b034b038571104b0185711189680029527112747113527114580100000062711568032828680463746f7263"
    "680a4c6f6e6753746f726167650a7116580100000031711768074b02747118514b004b028571194b0185711a89680029"
    "52711b74711c52711d752e");

const Value& entry(const Value& dict, const std::string& key) {
  for (const auto& [k, v] : dict.entries)
    if (k->kind == Value::Kind::String && k->text == key) return *v;
  static const Value none;
  FAIL_CHECK("no entry " << key);
  return none;
}

/// A loader that serves `storages` by key and counts its calls.
struct Storages {
  std::map<std::string, at::Tensor> storages;
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  weights::pickle::StorageLoader loader() const {
    return [this, calls = calls](const std::string& key, at::ScalarType dtype, std::int64_t numel) {
      ++*calls;
      const auto& t = storages.at(key);
      REQUIRE(t.scalar_type() == dtype);
      REQUIRE(t.numel() == numel);
      return t;
    };
  }
};

} // namespace

TEST_CASE("pickle::read: Python's values at protocols 2 and 4", "[weights]") {
  for (const auto* bytes : {&values_protocol_2, &values_protocol_4}) {
    INFO("protocol " << (bytes == &values_protocol_2 ? 2 : 4));
    const auto value = weights::pickle::read(*bytes, nullptr, "values.pkl");
    REQUIRE(value->kind == Value::Kind::Dict);
    REQUIRE(value->entries.size() == 9);
    CHECK(value->entries[0].first->text == "int");  // insertion order
    CHECK(entry(*value, "int").integer == 7);
    CHECK(entry(*value, "neg").integer == -300);
    CHECK(entry(*value, "big").integer == 1099511627776LL);
    CHECK(entry(*value, "neg_big").integer == -1099511627776LL);
    CHECK(entry(*value, "real").kind == Value::Kind::Float);
    CHECK(entry(*value, "real").real == 2.5);
    CHECK(entry(*value, "text").text == "h\xc3\xa9llo");  // UTF-8
    const auto& flags = entry(*value, "flags");
    REQUIRE(flags.kind == Value::Kind::Tuple);
    REQUIRE(flags.items.size() == 3);
    CHECK((flags.items[0]->kind == Value::Kind::Bool && flags.items[0]->boolean));
    CHECK((flags.items[1]->kind == Value::Kind::Bool && !flags.items[1]->boolean));
    CHECK(flags.items[2]->kind == Value::Kind::None);
    const auto& list = entry(*value, "list");
    REQUIRE(list.kind == Value::Kind::List);
    REQUIRE(list.items.size() == 3);
    CHECK(list.items[2]->integer == 3);
    CHECK(entry(entry(*value, "nested"), "a").integer == 1);
  }
}

TEST_CASE("pickle::read: torch.save's state dict, views sharing their storage", "[weights]") {
  const Storages storages{{{"0", torch::arange(6, torch::kFloat)}, {"1", torch::tensor({7, -8}, torch::kLong)}}};
  const auto value = weights::pickle::read(torch_state_dict, storages.loader(), "data.pkl");
  REQUIRE(value->kind == Value::Kind::Dict);
  const auto& w = entry(*value, "w").tensor;
  const auto& row = entry(*value, "row").tensor;
  const auto& b = entry(*value, "b").tensor;
  const auto base = torch::arange(6, torch::kFloat).view({2, 3});
  CHECK(torch::equal(w, base.t()));  // [[0, 3], [1, 4], [2, 5]]
  CHECK(w.strides() == at::IntArrayRef({1, 3}));
  CHECK(torch::equal(row, base[1]));  // [3, 4, 5]: offset 3 into the same storage
  CHECK(row.storage().data() == w.storage().data());
  CHECK(*storages.calls == 2);  // storage "0" loaded once for both views
  CHECK(torch::equal(b, torch::tensor({7, -8}, torch::kLong)));
}

TEST_CASE("pickle::write_state_dict reads back to the same tensors", "[weights]") {
  const auto w = torch::randn({3, 4}), ids = torch::tensor({1, -2, 3}, torch::kInt), flags = torch::tensor({true, false});
  const auto bytes = weights::pickle::write_state_dict({{"w", w}, {"ids", ids}, {"flags", flags}}, {"s0", "s1", "s2"});
  const Storages storages{{{"s0", w.flatten()}, {"s1", ids}, {"s2", flags}}};
  const auto value = weights::pickle::read(bytes, storages.loader(), "written.pkl");
  REQUIRE(value->entries.size() == 3);
  CHECK(value->entries[0].first->text == "w");
  CHECK(torch::equal(entry(*value, "w").tensor, w));
  CHECK(entry(*value, "ids").tensor.scalar_type() == torch::kInt);
  CHECK(torch::equal(entry(*value, "ids").tensor, ids));
  CHECK(torch::equal(entry(*value, "flags").tensor, flags));
  CHECK_THAT(test::message_of([] {
               weights::pickle::write_state_dict({{"z", torch::zeros({2}, torch::kComplexFloat)}}, {"0"});
             }),
             Equals("save: tensor z has dtype ComplexFloat, which torch.save files do not hold here"));
}

TEST_CASE("pickle::read names what a state dict never holds", "[weights][errors]") {
  const auto read = [](const std::string& bytes) {
    return test::message_of([&] { weights::pickle::read(bytes, nullptr, "x.pkl"); });
  };
  CHECK_THAT(read(std::string("\x80\x02") + "c__main__\nOdd\n)R."),
             Equals("x.pkl: the pickle calls __main__.Odd, which a state dict never does (was a whole module or "
                    "another object saved? save model.state_dict() instead)"));
  CHECK_THAT(read("\x80\x02\xff"), Equals("x.pkl: unsupported pickle opcode 0xff at byte 2 (not a state dict "
                                          "written by torch.save?)"));
  CHECK_THAT(read(values_protocol_2.substr(0, 40)), Contains("x.pkl: the pickle ends early, at byte "));
  std::string quantized = torch_state_dict;
  const std::string float_storage = "torch\nFloatStorage\n";
  quantized.replace(quantized.find(float_storage), float_storage.size(), "torch\nQInt8Storage\n");
  CHECK_THAT(read(quantized), Equals("x.pkl: unsupported storage type torch.QInt8Storage"));
}
