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
  check(in.good() && header_size > 0 && 8 + header_size <= file_size, where,
        ": the header size ", header_size, " does not fit a file of ", file_size, " bytes");
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
  std::vector<std::pair<std::uint64_t, std::string>> order;
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__")
      order.emplace_back(it.value().at("data_offsets").at(0).template get<std::uint64_t>(), it.key());
  std::sort(order.begin(), order.end());

  StateDict out;
  for (const auto& [offset, name] : order) {
    const auto& info = header[name];
    const auto dtype_name = info.at("dtype").template get<std::string>();
    auto dtype = detail::safetensors_dtypes().find(dtype_name);
    check(dtype != detail::safetensors_dtypes().end(), where, ": tensor ", name, " has unsupported dtype ", dtype_name);
    auto shape = info.at("shape").template get<std::vector<std::int64_t>>();
    auto offsets = info.at("data_offsets").template get<std::vector<std::uint64_t>>();
    check(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_size, where, ": tensor ",
          name, " has data_offsets outside the file's ", data_size, " data bytes");
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype->second));
    check(t.nbytes() == offsets[1] - offsets[0], where, ": tensor ", name, " of shape ", t.sizes(), " and dtype ",
          dtype_name, " needs ", t.nbytes(), " bytes, its data_offsets span ", offsets[1] - offsets[0]);
    std::memcpy(t.data_ptr(), data.data() + offsets[0], t.nbytes());
    out.insert(name, t);
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
