#pragma once
/// JPEG through libjpeg-turbo's TurboJPEG API: decode_jpeg() as a Pipeline stage, and
/// decode / encode of single images.
///
///   auto samples = from(ImageFolder("train")) | decode_jpeg({.channels = 3, .min_size = 64});
///
/// Reduced-size decoding: with min_size > 0 the decoder scales by the smallest of TurboJPEG's
/// factors (1/8, 1/4, 3/8, 1/2, ...) that keeps both sides >= min_size, skipping most of the
/// IDCT work when the images are much larger than what training uses.
/// A file that is not a JPEG, is corrupt or is cut short is an ftopt::Error naming the file and
/// the decoder's reason; with `.on_error = OnError::Skip` it is left out of its batch instead
/// and counted (stats()->skipped).

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <turbojpeg.h>

#include <ATen/ATen.h>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/error.hpp>
#include <ftopt/pipeline/order.hpp>
#include <ftopt/pipeline/stage.hpp>

namespace ftopt::pipeline {

enum class OnError { Throw, Skip };

struct DecodeOptions {
  int channels = 0;          ///< 1 (gray) or 3 (RGB); 0: 1 for grayscale files, else 3
  std::int64_t min_size = 0; ///< > 0: decode at the smallest scale keeping both sides >= this
  OnError on_error = OnError::Throw;
};

namespace detail {

/// One TurboJPEG handle per thread and direction (handles are not thread-safe).
class TurboHandle {
public:
  explicit TurboHandle(bool compress) : compress_(compress), handle_(compress ? tjInitCompress() : tjInitDecompress()) {
    ftopt::detail::check(handle_ != nullptr, "pipeline: TurboJPEG could not start: ", tjGetErrorStr2(nullptr));
  }
  ~TurboHandle() { tjDestroy(handle_); }
  TurboHandle(const TurboHandle&) = delete;
  TurboHandle& operator=(const TurboHandle&) = delete;
  tjhandle get() const { return handle_; }
  std::string error() const { return tjGetErrorStr2(handle_); }
  /// The handle's error, then the handle made anew: after some bad streams (a bogus quantization
  /// table) TurboJPEG's handle keeps state that fails every later decode on it.
  std::string error_and_reset() {
    std::string message = error();
    tjDestroy(handle_);
    handle_ = compress_ ? tjInitCompress() : tjInitDecompress();
    ftopt::detail::check(handle_ != nullptr, "pipeline: TurboJPEG could not start again: ", tjGetErrorStr2(nullptr));
    return message;
  }

private:
  bool compress_;
  tjhandle handle_;
};

inline TurboHandle& decoder() {
  thread_local TurboHandle handle(false);
  return handle;
}
inline TurboHandle& encoder() {
  thread_local TurboHandle handle(true);
  return handle;
}

inline std::vector<unsigned char> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  ftopt::detail::check(static_cast<bool>(in), "cannot open ", path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace detail

/// Decodes JPEG bytes into uint8 [C, H, W]. `source` names the bytes in errors.
inline at::Tensor decode_jpeg_bytes(const std::vector<unsigned char>& bytes, const std::string& source,
                                    const DecodeOptions& options = {}) {
  ftopt::detail::check(options.channels == 0 || options.channels == 1 || options.channels == 3,
                       "pipeline::decode_jpeg: channels must be 0, 1 or 3, got ", options.channels);
  auto& handle = detail::decoder();
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (bytes.empty() || tjDecompressHeader3(handle.get(), bytes.data(), static_cast<unsigned long>(bytes.size()),
                                           &width, &height, &subsampling, &colorspace) != 0)
    ftopt::detail::fail("pipeline::decode_jpeg: ", source, " is not a readable JPEG (",
                        bytes.empty() ? std::string("empty file") : handle.error_and_reset(), ")");
  // A header's sizes are not to be trusted before the data is decoded: a 16-bit width and height
  // could ask for gigabytes. Beyond 2^28 pixels (16384 x 16384) is refused.
  ftopt::detail::check(width > 0 && height > 0 && static_cast<std::int64_t>(width) * height <= (std::int64_t{1} << 28),
                       "pipeline::decode_jpeg: ", source, " is ", width, " x ", height,
                       " pixels, more than decode_jpeg takes (2^28 pixels)");
  const int channels = options.channels != 0 ? options.channels : (colorspace == TJCS_GRAY ? 1 : 3);
  int w = width, h = height;
  if (options.min_size > 0) {
    int count = 0;
    const tjscalingfactor* factors = tjGetScalingFactors(&count);
    for (int i = 0; i < count; ++i) {  // keep the smallest scale whose sides stay >= min_size
      const int sw = TJSCALED(width, factors[i]), sh = TJSCALED(height, factors[i]);
      if (sw >= options.min_size && sh >= options.min_size && static_cast<std::int64_t>(sw) * sh < static_cast<std::int64_t>(w) * h) {
        w = sw;
        h = sh;
      }
    }
  }
  at::Tensor out = at::empty({h, w, channels}, at::kByte);
  // TJFLAG_STOPONWARNING: a truncated file is an error, not a gray-padded image.
  if (tjDecompress2(handle.get(), bytes.data(), static_cast<unsigned long>(bytes.size()), out.data_ptr<std::uint8_t>(),
                    w, 0, h, channels == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING) != 0)
    ftopt::detail::fail("pipeline::decode_jpeg: ", source, " is corrupt or cut short (", handle.error_and_reset(), ")");
  return out.permute({2, 0, 1}).contiguous();
}

/// Decodes a JPEG file into uint8 [C, H, W].
inline at::Tensor decode_jpeg_file(const std::filesystem::path& path, const DecodeOptions& options = {}) {
  std::vector<unsigned char> bytes;
  try {
    bytes = detail::read_bytes(path);
  } catch (const Error&) {
    ftopt::detail::fail("pipeline::decode_jpeg: cannot read ", path.string());
  }
  return decode_jpeg_bytes(bytes, path.string(), options);
}

/// Encodes uint8 [C, H, W] (C 1 or 3) as JPEG bytes at `quality` (1-100).
inline std::vector<unsigned char> encode_jpeg(const at::Tensor& image, int quality = 90) {
  ftopt::detail::check(image.scalar_type() == at::kByte && image.dim() == 3 && (image.size(0) == 1 || image.size(0) == 3),
                       "pipeline::encode_jpeg: needs uint8 [1 or 3, H, W], got ", image.scalar_type(), " ",
                       image.sizes());
  const at::Tensor hwc = image.permute({1, 2, 0}).contiguous();
  const int channels = static_cast<int>(image.size(0)), h = static_cast<int>(image.size(1)),
            w = static_cast<int>(image.size(2));
  auto& handle = detail::encoder();
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(handle.get(), hwc.data_ptr<std::uint8_t>(), w, 0, h, channels == 1 ? TJPF_GRAY : TJPF_RGB,
                             &buffer, &size, channels == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(buffer, [](unsigned char* p) { tjFree(p); });
  if (rc != 0) ftopt::detail::fail("pipeline::encode_jpeg: ", handle.error_and_reset());
  return {buffer, buffer + size};
}

/// Writes `image` as a JPEG file, atomically (no half-written file on failure).
inline void write_jpeg(const std::filesystem::path& path, const at::Tensor& image, int quality = 90) {
  const auto bytes = encode_jpeg(image, quality);
  ftopt::detail::write_atomically(path, "pipeline::write_jpeg", [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  });
}

/// Writes images uint8 [N, H, W] or [N, C, H, W] with labels [N] as an ImageFolder:
/// root/<class name>/<index>.jpg, class names from `classes` (by label). Each file is written
/// atomically; returns the number written.
inline std::int64_t write_image_folder(const std::filesystem::path& root, const at::Tensor& images,
                                       const at::Tensor& labels, const std::vector<std::string>& classes,
                                       int quality = 90) {
  ftopt::detail::check(images.dim() == 3 || images.dim() == 4, "pipeline::write_image_folder: images must be [N, H, W] "
                       "or [N, C, H, W], got ", images.sizes());
  ftopt::detail::check(labels.dim() == 1 && labels.size(0) == images.size(0), "pipeline::write_image_folder: ",
                       images.size(0), " images but labels ", labels.sizes());
  for (const auto& name : classes) std::filesystem::create_directories(root / name);
  const auto label = labels.to(at::kLong).contiguous();
  for (std::int64_t i = 0; i < images.size(0); ++i) {
    const auto c = label.data_ptr<std::int64_t>()[i];
    ftopt::detail::check(c >= 0 && c < static_cast<std::int64_t>(classes.size()), "pipeline::write_image_folder: label ",
                         c, " of image ", i, " has no class name (", classes.size(), " given)");
    const at::Tensor image = images.dim() == 3 ? images[i].unsqueeze(0) : images[i];
    write_jpeg(root / classes[static_cast<std::size_t>(c)] / (std::to_string(i) + ".jpg"), image, quality);
  }
  return images.size(0);
}

namespace detail {

template <class Up>
class Decoded : public Over<Up, Decoded<Up>> {
public:
  static constexpr Kind kind = Kind::Samples;

  Decoded() = default;
  Decoded(Up up, DecodeOptions options) : Over<Up, Decoded<Up>>(std::move(up)), options_(options) {}
  Sample at(std::int64_t k) const {
    const File file = this->up_.at(k);
    at::Tensor target = at::scalar_tensor(file.label, at::kLong);
    try {
      at::Tensor image = decode_jpeg_file(file.path, options_);
      ++this->stats()->decoded;
      return {std::move(image), std::move(target)};
    } catch (const Error&) {
      if (options_.on_error == OnError::Throw) throw;
      ++this->stats()->skipped;
      return {at::Tensor(), std::move(target)};
    }
  }

private:
  DecodeOptions options_;
};

} // namespace detail

/// Files -> uint8 [C, H, W] samples with their class index as target.
inline auto decode_jpeg(DecodeOptions options = {}) {
  return detail::adaptor([options]<class R>(R&& range) {
    using Up = detail::Held<R>;
    static_assert(detail::Traits<Up>::kind == Kind::Files, "ftopt::pipeline: decode_jpeg() decodes files: put it "
                                                           "right after an ImageFolder source (and its shuffle/shard)");
    static_assert(detail::Traits<Up>::indexed, "ftopt::pipeline: decode_jpeg() decodes files by index, on the "
                                               "workers: put it before prefetch() and before any range view");
    return detail::Decoded<Up>(detail::hold(std::forward<R>(range)), options);
  });
}

} // namespace ftopt::pipeline
