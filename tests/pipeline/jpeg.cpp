// Tests for include/ftopt/pipeline/jpeg.hpp: ImageFolder (torchvision's sorted class folders),
// decode_jpeg on real JPEGs, bad files named or skipped.
#include "stages.hpp"

#include <filesystem>
#include <fstream>

TEST_CASE("ImageFolder and decode_jpeg: sorted classes, real JPEGs, reduced-size decode", "[pipeline][jpeg]") {
  ScratchDir dir("folder");
  write_folder(dir.path, 3);
  ImageFolder folder(dir.path);
  CHECK(folder.classes() == std::vector<std::string>{"a", "b"});
  CHECK(folder.size() == 6);
  auto samples = from(folder) | decode_jpeg();
  auto batches = std::move(samples) | batch(6);
  auto [x, y] = *batches.begin();
  CHECK(x.sizes() == at::IntArrayRef{6, 1, 28, 28});
  CHECK(x.scalar_type() == at::kByte);
  CHECK(targets_of(batches) == std::vector<std::int64_t>{0, 0, 0, 1, 1, 1});

  // Lossy, but close: a smooth RGB image decoded against what was encoded (quality 95).
  auto image = (torch::arange(3).view({3, 1, 1}) * 40 + torch::arange(64).view({1, 64, 1}) * 2 +
                torch::arange(48).view({1, 1, 48}))
                   .to(torch::kByte);
  const auto back = decode_jpeg_bytes(encode_jpeg(image, 95), "memory");
  CHECK(back.sizes() == image.sizes());
  CHECK((back.to(torch::kFloat) - image.to(torch::kFloat)).abs().mean().item<double>() < 3.0);
  // A 224 x 224 file decoded for a 56-pixel target: TurboJPEG's 1/4 scale.
  const auto big = decode_jpeg_bytes(encode_jpeg(torch::full({3, 224, 224}, 128, torch::kByte)), "memory",
                                     {.min_size = 56});
  CHECK(big.sizes() == at::IntArrayRef{3, 56, 56});
  const auto gray_as_rgb = decode_jpeg_bytes(encode_jpeg(torch::full({1, 8, 8}, 7, torch::kByte)), "m", {.channels = 3});
  CHECK(gray_as_rgb.size(0) == 3);
}

TEST_CASE("Bad image files are named, a lenient decode skips and counts them", "[pipeline][jpeg]") {
  ScratchDir dir("bad");
  CHECK_THAT(test::message_of([&] { ImageFolder{dir.path}; }), Contains("has no class sub-folders"));
  CHECK_THAT(test::message_of([&] { ImageFolder{dir.path / "missing"}; }), Contains("is not a folder"));
  std::filesystem::create_directories(dir.path / "empty");
  CHECK_THAT(test::message_of([&] { ImageFolder{dir.path}; }), Contains("empty has no .jpg or .jpeg files"));
  std::filesystem::remove_all(dir.path / "empty");

  write_folder(dir.path, 2);
  {  // not a JPEG at all
    std::ofstream(dir.path / "a" / "9-text.jpg") << "hello, I am not a picture";
  }
  const auto whole = pipeline::detail::read_bytes(dir.path / "b" / "0.jpg");
  {  // a JPEG cut in half
    std::ofstream out(dir.path / "b" / "9-half.jpg", std::ios::binary);
    out.write(reinterpret_cast<const char*>(whole.data()), static_cast<std::streamsize>(whole.size() / 2));
  }
  CHECK_THAT(test::message_of([&] { decode_jpeg_file(dir.path / "a" / "missing.jpg"); }),
             Contains("cannot read") && Contains("missing.jpg"));
  auto strict = from(ImageFolder(dir.path)) | decode_jpeg();
  CHECK_THAT(test::message_of([&] { strict.at(2); }), Contains("9-text.jpg is not a readable JPEG"));
  CHECK_THAT(test::message_of([&] { strict.at(5); }), Contains("9-half.jpg is corrupt or cut short"));

  auto lenient = from(ImageFolder(dir.path)) | decode_jpeg({.on_error = OnError::Skip}) | batch(3);
  const auto got = targets_of(lenient);
  CHECK(got == std::vector<std::int64_t>{0, 0, 1, 1});
  CHECK(lenient.stats()->skipped.load() == 2);
}
