// Writes Fashion-MNIST as an ImageFolder of JPEG files (one sub-folder per class, as
// torchvision's ImageFolder reads), for the Pipeline's benchmark and for trying decode_jpeg on
// real images.
//
//   build/examples/make_image_folder --out /tmp/fashion-jpeg [--split train|test] [--limit N]
//                                    [--quality Q] [--data DIR]
#include <iostream>
#include <string>

#include <ftopt/data/subsets.hpp>
#include <ftopt/pipeline/jpeg.hpp>

#include "args.hpp"

int main(int argc, char** argv) try {
  std::string out, split = "train", data = ftopt::data::default_fashion_mnist_dir().string();
  std::int64_t limit = 0, quality = 90;
  examples::parse("make_image_folder", argc, argv, {{"--out", &out}, {"--split", &split}, {"--limit", &limit},
                  {"--quality", &quality}, {"--data", &data}});
  ftopt::check(!out.empty(), "make_image_folder: --out DIR is required");
  ftopt::check(split == "train" || split == "test", "make_image_folder: --split must be train or test, got '",
                       split, "'");
  ftopt::check(quality >= 1 && quality <= 100, "make_image_folder: --quality must be in [1, 100], got ", quality);
  auto set = ftopt::data::load_fashion_mnist(split == "train" ? ftopt::data::Split::Train : ftopt::data::Split::Test, data);
  set = ftopt::data::first(set, limit);
  std::vector<std::string> classes;
  for (std::size_t c = 0; c < ftopt::data::fashion_mnist_classes.size(); ++c) {
    // "0-T-shirt_top": the index first keeps torchvision's sorted order equal to the labels.
    std::string name = std::to_string(c);
    name.append("-").append(ftopt::data::fashion_mnist_classes[c]);
    for (char& ch : name)
      if (ch == '/' || ch == ' ') ch = '_';
    classes.push_back(name);
  }
  const auto n = ftopt::pipeline::write_image_folder(out, set.images, set.labels, classes, static_cast<int>(quality));
  std::cout << "make_image_folder: wrote " << n << " JPEG files under " << out << '\n';
  return 0;
} catch (const std::exception& e) {
  std::cerr << e.what() << '\n';
  return 1;
}
