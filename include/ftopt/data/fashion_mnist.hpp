#pragma once
/// Fashion-MNIST (and MNIST, same layout) from its four IDX files, as Debian's
/// dataset-fashion-mnist installs them in /usr/share/datasets/fashion-mnist/ (gzipped; plain
/// files work too).
///
///   auto train = ftopt::data::load_fashion_mnist(ftopt::data::Split::Train);
///   // train.images: uint8 [60000, 28, 28], train.labels: int64 [60000] in 0..9

#include <array>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include <ATen/ATen.h>

#include <ftopt/data/idx.hpp>
#include <ftopt/error.hpp>

namespace ftopt::data {

enum class Split { Train, Test };

/// Images and their labels.
struct LabelledImages {
  at::Tensor images;  ///< uint8 [N, H, W]
  at::Tensor labels;  ///< int64 [N]
};

/// Fashion-MNIST's class names, by label.
inline constexpr std::array<std::string_view, 10> fashion_mnist_classes = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

/// Where Debian's dataset-fashion-mnist puts the files; FTOPT_FASHION_MNIST overrides it.
inline std::filesystem::path default_fashion_mnist_dir() {
  if (const char* dir = std::getenv("FTOPT_FASHION_MNIST")) return dir;
  return "/usr/share/datasets/fashion-mnist";
}

/// Reads an image file and a label file and checks that they belong together: images
/// [N, H, W] uint8, labels [N] uint8 below `classes`. Labels come back as int64.
inline LabelledImages load_idx_pair(const std::filesystem::path& images_path,
                                    const std::filesystem::path& labels_path, int classes = 10) {
  using ftopt::detail::check;
  at::Tensor images = read_idx(images_path);
  at::Tensor labels = read_idx(labels_path);
  check(images.dim() == 3 && images.scalar_type() == at::kByte, "load_idx_pair: ",
        images_path.string(), ": expected uint8 images [N, H, W], got ", images.dim(),
        " dims of ", at::toString(images.scalar_type()));
  check(labels.dim() == 1 && labels.scalar_type() == at::kByte, "load_idx_pair: ",
        labels_path.string(), ": expected uint8 labels [N], got ", labels.dim(), " dims of ",
        at::toString(labels.scalar_type()));
  check(images.size(0) == labels.size(0), "load_idx_pair: ", images_path.string(), " has ",
        images.size(0), " images but ", labels_path.string(), " has ", labels.size(0), " labels");
  if (labels.numel() > 0) {
    const auto max = labels.max().item<int>();
    check(max < classes, "load_idx_pair: ", labels_path.string(), ": label ", max,
          " at index ", labels.argmax().item<std::int64_t>(), " is not below ", classes, " classes");
  }
  return {images, labels.to(at::kLong)};
}

/// The files of a split in `dir`: "<prefix>-images-idx3-ubyte[.gz]" and "...-labels-idx1-...".
inline std::filesystem::path mnist_file(const std::filesystem::path& dir, Split split,
                                        std::string_view kind) {
  const std::string name = std::string(split == Split::Train ? "train" : "t10k") + "-" +
                           std::string(kind) + (kind == "images" ? "-idx3-ubyte" : "-idx1-ubyte");
  for (const auto& candidate : {dir / (name + ".gz"), dir / name})
    if (std::filesystem::exists(candidate)) return candidate;
  ftopt::detail::fail("load_fashion_mnist: ", (dir / name).string(),
                      "[.gz] not found; install Debian's dataset-fashion-mnist or set "
                      "FTOPT_FASHION_MNIST to a folder holding the IDX files");
}

/// One split of Fashion-MNIST (or MNIST) from `dir`.
inline LabelledImages load_fashion_mnist(Split split,
                                         const std::filesystem::path& dir = default_fashion_mnist_dir()) {
  const auto images = mnist_file(dir, split, "images");
  return load_idx_pair(images, mnist_file(dir, split, "labels"));
}

} // namespace ftopt::data
