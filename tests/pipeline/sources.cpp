// Tests for include/ftopt/pipeline/sources.hpp: where a Pipeline starts. Tensors give sample k as
// (data[k], targets[k]); a labelled image set gives [1, H, W] uint8 samples; an ImageFolder lists
// the .jpg/.jpeg files (any case, at any depth) under one sub-folder per class, classes in sorted
// order and files sorted by path, as torchvision's ImageFolder does (decoding is jpeg.hpp's).
#include "stages.hpp"

#include <filesystem>
#include <fstream>

TEST_CASE("from(tensors) and from(a labelled image set): sample k is (data[k], targets[k])", "[pipeline]") {
  const auto values = torch::arange(24, torch::kFloat).view({4, 2, 3});
  const auto targets = torch::tensor({3, 1, 4, 1}, torch::kLong);
  const Tensors source = from(values, targets);
  CHECK(source.size() == 4);
  for (std::int64_t k = 0; k < 4; ++k) {
    CHECK(torch::equal(source.at(k).data, values[k]));
    CHECK(source.at(k).target.item<std::int64_t>() == targets[k].item<std::int64_t>());
    CHECK(source.key(k) == k);
  }
  CHECK_THAT(test::message_of([&] { from(values, torch::zeros({3}, torch::kLong)); }),
             Contains("pipeline::from: data and targets need the same first dimension, got [4, 2, 3] and [3]"));

  const ftopt::data::LabelledImages images{torch::randint(0, 256, {5, 28, 28}, torch::kByte), torch::arange(5)};
  const Tensors samples = from(images);
  REQUIRE(samples.size() == 5);
  CHECK(samples.at(2).data.sizes() == at::IntArrayRef({1, 28, 28}));
  CHECK(samples.at(2).data.scalar_type() == torch::kByte);
  CHECK(torch::equal(samples.at(2).data[0], images.images[2]));
  CHECK(samples.at(2).target.item<std::int64_t>() == 2);
}

TEST_CASE("ImageFolder: sorted classes, their JPEG files sorted by path, other files ignored", "[pipeline]") {
  ScratchDir dir("sources");
  const auto touch = [&](const std::filesystem::path& relative) {
    std::filesystem::create_directories((dir.path / relative).parent_path());
    std::ofstream(dir.path / relative) << "not decoded here";
  };
  // Classes "cat" and "ant" (sorted: ant = 0, cat = 1); a nested folder counts, a README does not.
  for (const char* name : {"cat/b.jpg", "cat/a.JPEG", "cat/inner/c.jpeg", "cat/README.txt", "ant/z.Jpg", "ant/y.png"})
    touch(name);
  ImageFolder folder(dir.path);
  CHECK(folder.classes() == std::vector<std::string>{"ant", "cat"});
  REQUIRE(folder.size() == 4);
  std::vector<std::string> files;
  std::vector<std::int64_t> labels;
  for (std::int64_t k = 0; k < folder.size(); ++k) {
    files.push_back(std::filesystem::relative(folder.at(k).path, dir.path).string());
    labels.push_back(folder.at(k).label);
  }
  CHECK(files == std::vector<std::string>{"ant/z.Jpg", "cat/a.JPEG", "cat/b.jpg", "cat/inner/c.jpeg"});
  CHECK(labels == std::vector<std::int64_t>{0, 1, 1, 1});
  // from(folder) is the folder, shared: the same files in the same order.
  const auto source = from(folder);
  CHECK(source.size() == 4);
  CHECK(source.at(3).path == folder.at(3).path);
}
