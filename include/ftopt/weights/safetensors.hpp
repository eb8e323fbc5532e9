#pragma once
/// safetensors (huggingface/safetensors, docs "Format"): an 8-byte little-endian header size N,
/// N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {}},
/// then the tensors' raw little-endian bytes, offsets relative to the end of the header.
///
/// The functions that touch JSON are templates over the JSON type, defaulted and never named by a
/// caller, so that nlohmann::json is compiled only in a translation unit that reads or writes a
/// file; that TU includes <ftopt/json.hpp> (docs/build.md, "Compile time").

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/detail/json.hpp>
#include <ftopt/error.hpp>
#include <ftopt/weights/state_dict.hpp>

namespace ftopt::weights {

namespace detail {
inline const std::map<std::string, at::ScalarType>& safetensors_dtypes() {
  static const std::map<std::string, at::ScalarType> types = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16},
      {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},    {"BOOL", at::kBool}};
  return types;
}
} // namespace detail

/// Reads every tensor of a safetensors file (onto the CPU, in the header's order).
template <class Json = nlohmann::json>
StateDict load_safetensors(const std::filesystem::path& path) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  using ftopt::detail::check;
  const std::string where = "load_safetensors: " + path.string();
  check(std::filesystem::is_regular_file(path), where, ": no such file");
  const auto file_size = std::filesystem::file_size(path);
  std::ifstream in(path, std::ios::binary);
  std::uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  check(in.good() && header_size > 0 && file_size >= 8 && header_size <= file_size - 8, where, ": the header size ",
        header_size, " does not fit a file of ", file_size, " bytes");
  std::string text(header_size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_size));
  Json header;
  try {
    header = Json::parse(text);
  } catch (const typename Json::exception& e) {
    ftopt::detail::fail(where, ": the header is not valid JSON (", e.what(), ")");
  }
  check(header.is_object(), where, ": the header is not a JSON object");
  const std::uint64_t data_size = file_size - 8 - header_size;
  std::string data(data_size, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data_size));

  // The header's own order is the JSON object's; keep the file's byte order instead, as
  // safetensors writers lay tensors out in their order.
  // Each entry read whole before anything is allocated: its dtype, shape and offsets, every field
  // of the right JSON type, the bytes the shape needs equal to the span the offsets give.
  struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    std::string dtype_name;
    Entry e{name, at::kFloat, {}, 0, 0};
    std::vector<std::uint64_t> offsets;
    try {
      dtype_name = it.value().at("dtype").template get<std::string>();
      e.shape = it.value().at("shape").template get<std::vector<std::int64_t>>();
      offsets = it.value().at("data_offsets").template get<std::vector<std::uint64_t>>();
    } catch (const typename Json::exception& error) {
      ftopt::detail::fail(where, ": tensor ", name, " needs dtype (a string), shape (a list of sizes) and "
                          "data_offsets (two byte offsets) in the header (", error.what(), ")");
    }
    const auto dtype = detail::safetensors_dtypes().find(dtype_name);
    check(dtype != detail::safetensors_dtypes().end(), where, ": tensor ", name, " has unsupported dtype ", dtype_name);
    e.dtype = dtype->second;
    check(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_size, where, ": tensor ",
          name, " has data_offsets outside the file's ", data_size, " data bytes");
    e.begin = offsets[0], e.end = offsets[1];
    // The bytes the shape needs, without overflow: no more than the span can hold.
    std::uint64_t bytes = at::elementSize(e.dtype);
    for (const auto size : e.shape) {
      check(size >= 0, where, ": tensor ", name, " has a negative size ", size, " in its shape");
      check(size == 0 || bytes <= (e.end - e.begin) / static_cast<std::uint64_t>(size), where,
            ": tensor ", name, " of dtype ", dtype_name, " needs more bytes than its data_offsets span (",
            e.end - e.begin, ")");
      bytes *= static_cast<std::uint64_t>(size);
    }
    check(bytes == e.end - e.begin, where, ": tensor ", name, " of shape ", at::IntArrayRef(e.shape), " and dtype ",
          dtype_name, " needs ", bytes, " bytes, its data_offsets span ", e.end - e.begin);
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.name) < std::tie(b.begin, b.name); });

  StateDict out;
  for (const auto& e : entries) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    if (t.nbytes() > 0) std::memcpy(t.data_ptr(), data.data() + e.begin, t.nbytes());
    out.insert(e.name, t);
  }
  return out;
}

/// Writes a state dict as safetensors, atomically, with optional string metadata.
template <class Json = nlohmann::ordered_json>
void save_safetensors(const std::filesystem::path& path, const StateDict& state,
                      const std::map<std::string, std::string>& metadata = {}) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  Json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> tensors;
  std::uint64_t offset = 0;
  for (const auto& item : state) {
    at::Tensor t = item.value().detach().to(at::kCPU).contiguous();
    std::string dtype;
    for (const auto& [name, type] : detail::safetensors_dtypes())
      if (type == t.scalar_type()) dtype = name;
    ftopt::detail::check(!dtype.empty(), "save_safetensors: tensor ", item.key(), " has dtype ",
                         at::toString(t.scalar_type()), ", which safetensors cannot hold");
    header[item.key()] = {{"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
    tensors.push_back(t);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  ftopt::detail::write_atomically(path, "save_safetensors", [&](std::ostream& out) {
    const std::uint64_t size = text.size();
    out.write(reinterpret_cast<const char*>(&size), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : tensors)
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  });
}

} // namespace ftopt::weights
