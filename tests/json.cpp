// Tests for include/ftopt/json.hpp: with it a source file has nlohmann::json whole, so the file
// functions compile there and read and write JSON: a safetensors header as the format's
// specification lays it out (8-byte little-endian length, then the JSON object), and a JSON file
// read back or named when it is missing or broken.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <string>

#include <torch/torch.h>

#include <ftopt/json.hpp>
#include <ftopt/weights/files.hpp>

#include "support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

TEST_CASE("With <ftopt/json.hpp> the file functions write JSON that nlohmann reads back", "[json]") {
  STATIC_REQUIRE(ftopt::detail::JsonIncluded<nlohmann::json>::value);
  STATIC_REQUIRE(ftopt::detail::JsonIncluded<nlohmann::ordered_json>::value);
  const test::ScratchDir dir("json");
  weights::StateDict state;
  state.insert("w", torch::arange(6, torch::kFloat).view({2, 3}));
  state.insert("b", torch::tensor({1, 2}, torch::kLong));
  weights::save_safetensors(dir.path / "two.safetensors", state, {{"format", "pt"}});

  // The header, read by hand: its length (u64, little-endian), then that many bytes of JSON.
  std::ifstream in(dir.path / "two.safetensors", std::ios::binary);
  unsigned char size_bytes[8];
  in.read(reinterpret_cast<char*>(size_bytes), 8);
  std::uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = size << 8 | size_bytes[i];
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  const auto header = nlohmann::json::parse(text);
  CHECK(header["__metadata__"] == nlohmann::json({{"format", "pt"}}));
  CHECK(header["w"] == nlohmann::json({{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}));
  CHECK(header["b"] == nlohmann::json({{"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {24, 40}}}));

  const auto back = weights::load_safetensors(dir.path / "two.safetensors");
  CHECK(torch::equal(back["w"], state["w"]));
  CHECK(torch::equal(back["b"], state["b"]));
}

TEST_CASE("read_json_file: the value in a file, or an error that starts with where it came from", "[json][errors]") {
  const test::ScratchDir dir("json-read");
  std::ofstream(dir.path / "good.json") << R"({"r": 4, "target_modules": ["query", "value"]})";
  const auto good = ftopt::detail::read_json_file<nlohmann::json>(dir.path / "good.json", "cfg");
  CHECK(good["r"] == 4);
  CHECK(good["target_modules"] == nlohmann::json({"query", "value"}));

  std::ofstream(dir.path / "bad.json") << R"({"r": 4,)";
  CHECK_THAT(test::message_of([&] { ftopt::detail::read_json_file<nlohmann::json>(dir.path / "bad.json", "cfg"); }),
             Catch::StartsWith("cfg: not valid JSON ("));
  CHECK_THAT(test::message_of([&] { ftopt::detail::read_json_file<nlohmann::json>(dir.path / "none.json", "cfg"); }),
             Catch::Equals("cfg: no such file"));
}
