#pragma once
// IDX files written byte by byte (the format's big-endian header: two zero bytes, the type code,
// the number of dimensions, each size as a 32-bit big-endian integer), plain or gzipped, for the
// tests of data/idx.hpp and data/fashion_mnist.hpp.
#include <zlib.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ftopt::test::idx_files {

/// A fresh scratch folder per test case.
inline std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("ftopt-idx-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<unsigned char>& bytes, bool gzip = false) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
}

inline void put_be32(std::vector<unsigned char>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>(v >> shift));
}

/// An IDX header for `type` and `sizes`.
inline std::vector<unsigned char> header(unsigned char type, const std::vector<std::uint32_t>& sizes) {
  std::vector<unsigned char> out{0, 0, type, static_cast<unsigned char>(sizes.size())};
  for (auto s : sizes) put_be32(out, s);
  return out;
}

} // namespace ftopt::test::idx_files
