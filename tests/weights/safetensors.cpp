// Tests for include/ftopt/weights/safetensors.hpp: files made from the format's specification
// load, and broken ones are named.
#include <catch2/catch.hpp>

#include <fstream>

#include <torch/torch.h>

#include <ftopt/weights/files.hpp>

#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;
using ftopt::test::fixture;

TEST_CASE("safetensors files made from the format's specification load", "[weights]") {
  auto vit = weights::load_safetensors(fixture("hf_vit_tiny.safetensors"));
  auto same = weights::load_torch_file(fixture("hf_vit_tiny.pt"));  // the same tensors via torch.save
  REQUIRE(vit.keys() == same.keys());
  for (const auto& item : vit) CHECK(torch::equal(item.value(), same[item.key()]));

  const test::ScratchDir scratch("safetensors");
  const auto& dir = scratch.path;
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
}
