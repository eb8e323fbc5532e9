// Tests for include/ftopt/data/idx.hpp.
// Reference values for the real files were computed with Python's gzip module, independently
// of ftopt: labels[:10] and pixel sums of the decompressed bytes.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <ftopt/data/fashion_mnist.hpp>
#include <ftopt/data/idx.hpp>

#include "../support.hpp"
#include "idx_files.hpp"

namespace fs = std::filesystem;
using ftopt::test::message_of;
using Catch::Matchers::Contains;
using namespace ftopt::test::idx_files;

TEST_CASE("read_idx reads the real Fashion-MNIST files as Python's gzip sees them", "[data][idx]") {
  const fs::path dir = ftopt::data::default_fashion_mnist_dir();
  auto labels = ftopt::data::read_idx(dir / "train-labels-idx1-ubyte.gz");
  REQUIRE(labels.sizes() == torch::IntArrayRef{60000});
  REQUIRE(labels.scalar_type() == torch::kByte);
  auto first = labels.narrow(0, 0, 10).to(torch::kLong);
  CHECK(torch::equal(first, torch::tensor({9, 0, 0, 3, 0, 2, 7, 2, 5, 5}, torch::kLong)));

  auto images = ftopt::data::read_idx(dir / "train-images-idx3-ubyte.gz");
  REQUIRE(images.sizes() == torch::IntArrayRef({60000, 28, 28}));
  CHECK(images[0].sum().item<std::int64_t>() == 76247);
  CHECK(images[0].flatten().argmax().item<std::int64_t>() == 417);
  CHECK(images.sum(torch::kLong).item<std::int64_t>() == 3431114169LL);
}

TEST_CASE("read_idx decodes every IDX type from big-endian, plain or gzipped", "[data][idx]") {
  const auto dir = scratch("types");
  SECTION("int32") {
    auto bytes = header(0x0C, {2, 2});
    for (std::int32_t v : {1, -2, 65536, -2147483647}) put_be32(bytes, static_cast<std::uint32_t>(v));
    write_bytes(dir / "a.idx", bytes);
    write_bytes(dir / "a.idx.gz", bytes, true);
    auto expected = torch::tensor({1, -2, 65536, -2147483647}, torch::kInt).view({2, 2});
    CHECK(torch::equal(ftopt::data::read_idx(dir / "a.idx"), expected));
    CHECK(torch::equal(ftopt::data::read_idx(dir / "a.idx.gz"), expected));
  }
  SECTION("float32 and float64") {
    auto f32 = header(0x0D, {2});
    for (float v : {1.5f, -0.25f}) put_be32(f32, std::bit_cast<std::uint32_t>(v));
    write_bytes(dir / "f.idx", f32);
    CHECK(torch::equal(ftopt::data::read_idx(dir / "f.idx"), torch::tensor({1.5f, -0.25f})));
    auto f64 = header(0x0E, {1});
    const auto bits = std::bit_cast<std::uint64_t>(3.0e100);
    put_be32(f64, static_cast<std::uint32_t>(bits >> 32));
    put_be32(f64, static_cast<std::uint32_t>(bits));
    write_bytes(dir / "d.idx", f64);
    CHECK(ftopt::data::read_idx(dir / "d.idx").item<double>() == 3.0e100);
  }
  SECTION("int16 and int8") {
    auto s16 = header(0x0B, {2});
    for (unsigned char b : {0xFF, 0xFE, 0x01, 0x00}) s16.push_back(b);  // -2, 256
    write_bytes(dir / "s.idx", s16);
    CHECK(torch::equal(ftopt::data::read_idx(dir / "s.idx"), torch::tensor({-2, 256}, torch::kShort)));
    auto s8 = header(0x09, {1});
    s8.push_back(0x80);
    write_bytes(dir / "b.idx", s8);
    CHECK(ftopt::data::read_idx(dir / "b.idx").item<int>() == -128);
  }
  fs::remove_all(dir);
}

TEST_CASE("read_idx names the file and what is wrong with it", "[data][idx][errors]") {
  const auto dir = scratch("errors");
  const auto read = [&](const char* name) { return message_of([&] { ftopt::data::read_idx(dir / name); }); };

  write_bytes(dir / "magic.idx", {0x12, 0x34, 0x08, 0x01, 0, 0, 0, 0});
  CHECK_THAT(read("magic.idx"), Contains((dir / "magic.idx").string()) && Contains("wrong magic 0x12340801"));

  write_bytes(dir / "type.idx", {0x00, 0x00, 0x0A, 0x01, 0, 0, 0, 0});
  CHECK_THAT(read("type.idx"), Contains("wrong magic 0x00000A01"));

  write_bytes(dir / "short.idx", {0x00, 0x00});
  CHECK_THAT(read("short.idx"), Contains("shorter than the 4-byte magic"));

  auto dims = header(0x08, {3});
  dims[3] = 3;  // announces 3 dimension sizes, holds 1
  write_bytes(dir / "dims.idx", dims);
  CHECK_THAT(read("dims.idx"), Contains("3 dimension sizes announced, 1 present"));

  auto data = header(0x08, {10});
  for (int i = 0; i < 5; ++i) data.push_back(1);
  write_bytes(dir / "data.idx", data);
  write_bytes(dir / "data.idx.gz", data, true);
  CHECK_THAT(read("data.idx"), Contains("truncated: the header announces 10 values (10 bytes) but the file holds 5 bytes"));
  CHECK_THAT(read("data.idx.gz"), Contains("data.idx.gz: truncated"));

  auto extra = header(0x08, {1});
  extra.push_back(7);
  extra.push_back(8);
  write_bytes(dir / "extra.idx", extra);
  CHECK_THAT(read("extra.idx"), Contains("has bytes past the 1 values its header announces"));

  write_bytes(dir / "corrupt.gz", {0x1f, 0x8b, 0x08, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  CHECK_THAT(read("corrupt.gz"), Contains("corrupt.gz"));

  CHECK_THAT(read("missing.idx"), Contains("missing.idx: no such file"));
  fs::remove_all(dir);
}
