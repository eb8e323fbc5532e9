#pragma once
/// Where a Pipeline starts: tensors in memory, a labelled image set (Fashion-MNIST's IDX files
/// through data::load_fashion_mnist), or an ImageFolder of JPEG files (one sub-folder per class,
/// as torchvision's ImageFolder).
///
///   auto a = ftopt::pipeline::from(images, labels);                  // [N, ...] and [N]
///   auto b = ftopt::pipeline::from(ftopt::data::load_fashion_mnist(ftopt::data::Split::Train));
///   auto c = ftopt::pipeline::from(ftopt::pipeline::ImageFolder("photos/train"));

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <ATen/ATen.h>

#include <ftopt/data/fashion_mnist.hpp>
#include <ftopt/error.hpp>
#include <ftopt/pipeline/stage.hpp>

namespace ftopt::pipeline {

/// Samples from tensors in memory: sample k is (data[k], targets[k]).
class Tensors : public detail::IndexedRange<Tensors> {
public:
  static constexpr Kind kind = Kind::Samples;
  static constexpr Place place = Place::Host;
  static constexpr bool indexed = true;

  Tensors() = default;
  Tensors(at::Tensor data, at::Tensor targets) : data_(std::move(data)), targets_(std::move(targets)) {
    ftopt::detail::check(data_.dim() >= 1 && targets_.dim() >= 1 && data_.size(0) == targets_.size(0),
                         "pipeline::from: data and targets need the same first dimension, got ", data_.sizes(),
                         " and ", targets_.sizes());
  }
  std::int64_t size() const { return data_.size(0); }
  Sample at(std::int64_t k) const { return {data_[k], targets_[k]}; }
  std::int64_t key(std::int64_t k) const { return k; }
  void prepare_pass(std::uint64_t) {}
  std::shared_ptr<Stats> stats() const { return stats_; }

private:
  at::Tensor data_, targets_;
  std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
};

/// The JPEG files under a folder with one sub-folder per class: classes are the sub-folders'
/// names in sorted order (torchvision's ImageFolder), files are sorted by path. Files ending in
/// .jpg or .jpeg (any case) count; others are ignored.
class ImageFolder : public detail::IndexedRange<ImageFolder> {
public:
  static constexpr Kind kind = Kind::Files;
  static constexpr Place place = Place::Host;
  static constexpr bool indexed = true;

  ImageFolder() = default;
  explicit ImageFolder(const std::filesystem::path& root) {
    namespace fs = std::filesystem;
    std::error_code ec;
    ftopt::detail::check(fs::is_directory(root, ec), "pipeline::ImageFolder: ", root.string(), " is not a folder");
    for (const auto& entry : fs::directory_iterator(root))
      if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
    std::sort(classes_.begin(), classes_.end());
    ftopt::detail::check(!classes_.empty(), "pipeline::ImageFolder: ", root.string(),
                         " has no class sub-folders (expected root/<class>/<image>.jpg)");
    for (std::size_t c = 0; c < classes_.size(); ++c) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::recursive_directory_iterator(root / classes_[c]))
        if (entry.is_regular_file() && is_jpeg_name(entry.path())) found.push_back(entry.path());
      ftopt::detail::check(!found.empty(), "pipeline::ImageFolder: class folder ", (root / classes_[c]).string(),
                           " has no .jpg or .jpeg files");
      std::sort(found.begin(), found.end());
      for (auto& path : found) files_->push_back({std::move(path), static_cast<std::int64_t>(c)});
    }
  }

  std::int64_t size() const { return static_cast<std::int64_t>(files_->size()); }
  File at(std::int64_t k) const { return (*files_)[static_cast<std::size_t>(k)]; }
  std::int64_t key(std::int64_t k) const { return k; }
  void prepare_pass(std::uint64_t) {}
  std::shared_ptr<Stats> stats() const { return stats_; }
  const std::vector<std::string>& classes() const { return classes_; }

private:
  static bool is_jpeg_name(const std::filesystem::path& path) {
    std::string ext = path.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    return ext == ".jpg" || ext == ".jpeg";
  }

  std::vector<std::string> classes_;
  std::shared_ptr<std::vector<File>> files_ = std::make_shared<std::vector<File>>();
  std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
};

/// Samples from tensors: data [N, ...], targets [N].
inline Tensors from(at::Tensor data, at::Tensor targets) { return {std::move(data), std::move(targets)}; }

/// Samples from a labelled image set (uint8 [N, H, W]): each sample [1, H, W] uint8.
inline Tensors from(const data::LabelledImages& set) { return {set.images.unsqueeze(1), set.labels}; }

/// The files of an ImageFolder (decode them with decode_jpeg()).
inline ImageFolder from(ImageFolder folder) { return folder; }

} // namespace ftopt::pipeline
