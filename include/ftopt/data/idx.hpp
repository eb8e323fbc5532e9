#pragma once
/// read_idx: the IDX format of (Fashion-)MNIST, plain or gzip-compressed, into a tensor.
///
/// Layout (LeCun's MNIST page, and torchvision's read_sn3_pascalvincent_tensor): the magic is
/// four bytes 0x00 0x00 <type> <ndims>; then ndims big-endian int32 sizes; then the values,
/// big-endian, row-major. Types: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
/// 0x0E float64. A wrong magic, a truncated file or bytes past the end raise ftopt::Error
/// naming the file and what was wrong.
///
///   torch::Tensor images = ftopt::data::read_idx("/usr/share/datasets/fashion-mnist/"
///                                                "t10k-images-idx3-ubyte.gz");  // [10000, 28, 28]

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include <ftopt/error.hpp>

namespace ftopt::data {

namespace detail {

/// A gzip or plain file read through zlib (gzread passes plain files through unchanged).
class GzFile {
public:
  explicit GzFile(const std::filesystem::path& path) : path_(path) {
    ftopt::detail::check(std::filesystem::is_regular_file(path), "read_idx: ", path.string(),
                         ": no such file");
    file_ = gzopen(path.c_str(), "rb");
    ftopt::detail::check(file_ != nullptr, "read_idx: ", path.string(), ": cannot open");
  }
  ~GzFile() {
    if (file_) gzclose(file_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  /// Reads up to `size` bytes; returns how many were read.
  std::size_t read(void* out, std::size_t size) {
    auto* bytes = static_cast<unsigned char*>(out);
    std::size_t done = 0;
    while (done < size) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(size - done, 1u << 30));
      const int got = gzread(file_, bytes + done, chunk);
      if (got < 0) {
        int code = 0;
        const char* why = gzerror(file_, &code);
        ftopt::detail::fail("read_idx: ", path_.string(), ": cannot decompress (zlib: ", why, ")");
      }
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return done;
  }

  /// True when the file has no bytes left.
  bool at_end() {
    unsigned char extra;
    return read(&extra, 1) == 0;
  }

private:
  std::filesystem::path path_;
  gzFile file_ = nullptr;
};

struct IdxType {
  at::ScalarType dtype;
  std::size_t bytes;
};

inline std::optional<IdxType> idx_type(std::uint8_t code) {
  switch (code) {
    case 0x08: return IdxType{at::kByte, 1};
    case 0x09: return IdxType{at::kChar, 1};
    case 0x0B: return IdxType{at::kShort, 2};
    case 0x0C: return IdxType{at::kInt, 4};
    case 0x0D: return IdxType{at::kFloat, 4};
    case 0x0E: return IdxType{at::kDouble, 8};
    default: return std::nullopt;
  }
}

inline std::string hex32(std::uint32_t value) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) out += digits[(value >> shift) & 0xF];
  return out;
}

/// Swaps each `width`-byte element of `data` from big-endian to the host's order.
inline void from_big_endian(unsigned char* data, std::size_t count, std::size_t width) {
  if constexpr (std::endian::native == std::endian::big) return;
  if (width == 1) return;
  for (std::size_t i = 0; i < count; ++i) std::reverse(data + i * width, data + (i + 1) * width);
}

} // namespace detail

/// Reads an IDX file (plain or .gz) into a contiguous CPU tensor of the file's type and shape.
inline at::Tensor read_idx(const std::filesystem::path& path) {
  using ftopt::detail::check;
  detail::GzFile file(path);
  const std::string where = "read_idx: " + path.string() + ": ";

  std::array<unsigned char, 4> magic{};
  check(file.read(magic.data(), 4) == 4, where, "truncated: shorter than the 4-byte magic");
  const std::uint32_t magic_value = (std::uint32_t{magic[0]} << 24) | (std::uint32_t{magic[1]} << 16) |
                                    (std::uint32_t{magic[2]} << 8) | std::uint32_t{magic[3]};
  const auto type = detail::idx_type(magic[2]);
  check(magic[0] == 0 && magic[1] == 0 && type.has_value() && magic[3] >= 1, where,
        "wrong magic ", detail::hex32(magic_value),
        " (an IDX file starts 0x0000TTNN: TT a type code 08, 09, 0B, 0C, 0D or 0E, NN >= 1 dims)");

  const int ndims = magic[3];
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(ndims));
  std::size_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    std::array<unsigned char, 4> b{};
    check(file.read(b.data(), 4) == 4, where, "truncated in the header: ", ndims,
          " dimension sizes announced, ", d, " present");
    const std::uint32_t size = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                               (std::uint32_t{b[2]} << 8) | std::uint32_t{b[3]};
    check(size <= static_cast<std::uint32_t>(INT32_MAX), where, "dimension ", d, " has size ",
          size, ", more than an int32 holds");
    sizes[static_cast<std::size_t>(d)] = size;
    check(size == 0 || count <= (std::size_t{1} << 48) / size, where, "the header announces more than 2^48 values");
    count *= size;
  }

  // The values read in pieces before the tensor is made, so that a header announcing more than
  // the file holds costs no more memory than the file.
  const std::size_t bytes = count * type->bytes;
  std::vector<unsigned char> buffer;
  for (std::size_t got = 0; got < bytes;) {
    buffer.resize(std::min(bytes, got + (std::size_t{1} << 24)));
    const std::size_t n = file.read(buffer.data() + got, buffer.size() - got);
    got += n;
    check(got == buffer.size(), where, "truncated: the header announces ", count, " values (", bytes,
          " bytes) but the file holds ", got, " bytes of data");
  }
  check(file.at_end(), where, "has bytes past the ", count, " values its header announces");
  at::Tensor values = at::empty(sizes, at::TensorOptions().dtype(type->dtype));
  auto* data = static_cast<unsigned char*>(values.data_ptr());
  if (bytes > 0) std::memcpy(data, buffer.data(), bytes);
  detail::from_big_endian(data, count, type->bytes);
  return values;
}

} // namespace ftopt::data
