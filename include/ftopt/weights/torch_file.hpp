#pragma once
/// torch.save's zip format for state dicts, read and written without LibTorch's unpickler:
/// data.pkl (see pickle.hpp) plus one data/<key> record of raw little-endian bytes per storage.
/// Reads files written by `torch.save(model.state_dict(), path)` and `torch.save(dict(...))`;
/// writes files that `torch.load` reads back as an OrderedDict.

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/error.hpp>
#include <ftopt/weights/pickle.hpp>
#include <ftopt/weights/state_dict.hpp>

namespace ftopt::weights {

namespace detail {

/// Flattens a (possibly nested, with `key`) pickled dict of tensors into a StateDict.
inline StateDict to_state_dict(const pickle::ValuePtr& root, const std::string& key, const std::string& where) {
  using Kind = pickle::Value::Kind;
  pickle::ValuePtr dict = root;
  if (!key.empty()) {
    ftopt::detail::check(root->kind == Kind::Dict, where, ": holds no dict to take '", key, "' from");
    dict = nullptr;
    for (const auto& [k, v] : root->entries)
      if (k->kind == Kind::String && k->text == key) dict = v;
    ftopt::detail::check(dict != nullptr, where, ": has no entry '", key, "'");
  }
  ftopt::detail::check(dict->kind == Kind::Dict, where, ": holds no dict of tensors (a whole module "
                       "or another object?); save model.state_dict() instead");
  StateDict out;
  for (const auto& [k, v] : dict->entries) {
    ftopt::detail::check(k->kind == Kind::String, where, ": a key of the dict is not a string");
    ftopt::detail::check(out.find(k->text) == nullptr, where, ": the key '", k->text, "' appears twice");
    if (v->kind == Kind::Tensor) {
      out.insert(k->text, v->tensor);
      continue;
    }
    ftopt::detail::fail(where, ": entry '", k->text, "' is not a tensor",
                        v->kind == Kind::Dict ? " but a dict; pass its name as `key` to load it" : "");
  }
  return out;
}

} // namespace detail

/// Reads a state dict from a torch.save zip file. `key` picks a nested dict
/// (e.g. "state_dict" in a Lightning checkpoint). Tensors land on the CPU.
inline StateDict load_torch_file(const std::filesystem::path& path, const std::string& key = "") {
  const std::string where = "load_torch_file: " + path.string();
  ftopt::detail::check(std::filesystem::is_regular_file(path), where, ": no such file");
  {
    std::ifstream in(path, std::ios::binary);
    char magic[2] = {};
    in.read(magic, 2);
    ftopt::detail::check(magic[0] == 'P' && magic[1] == 'K', where,
                         ": not a zip archive; files saved with _use_new_zipfile_serialization=False "
                         "(the legacy format) are not supported: re-save with torch.save's default");
  }
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path.string());
  } catch (const std::exception& e) {
    ftopt::detail::fail(where, ": not a readable torch.save archive (", e.what(), ")");
  }
  // A record, or an ftopt::Error naming it when the archive cannot give it (a broken zip entry).
  auto record = [&](const std::string& name) {
    try {
      ftopt::detail::check(reader->hasRecord(name), where, ": record ", name, " is missing",
                           name == "data.pkl" ? " (not written by torch.save)" : "");
      return reader->getRecord(name);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      ftopt::detail::fail(where, ": record ", name, " cannot be read (", e.what(), ")");
    }
  };
  auto [pickle_data, pickle_size] = record("data.pkl");
  const std::string_view bytes(static_cast<const char*>(pickle_data.get()), pickle_size);
  auto load_storage = [&](const std::string& key, at::ScalarType dtype, std::int64_t numel) {
    const std::string name = "data/" + key;
    auto [data, size] = record(name);
    const auto element = c10::elementSize(dtype);
    ftopt::detail::check(numel >= 0 && static_cast<std::uint64_t>(numel) <= size / element, where, ": storage ", name,
                         " holds ", size, " bytes, ", numel, " elements of ", element, " bytes needed");
    at::Tensor storage = at::empty({numel}, at::TensorOptions().dtype(dtype));
    if (numel > 0) std::memcpy(storage.data_ptr(), data.get(), static_cast<std::size_t>(numel) * element);
    return storage;
  };
  return detail::to_state_dict(pickle::read(bytes, load_storage, where), key, where);
}

/// Writes a state dict as torch.save does (zip, OrderedDict), atomically. Tensors are saved
/// contiguous, from the CPU, each with its own storage.
inline void save_torch_file(const std::filesystem::path& path, const StateDict& state) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::vector<std::string> keys;
  for (const auto& item : state) {
    tensors.emplace_back(item.key(), item.value().detach().to(at::kCPU).contiguous());
    keys.push_back(std::to_string(keys.size()));
  }
  const std::string pickled = pickle::write_state_dict(tensors, keys);
  ftopt::detail::write_atomically(path, "save_torch_file", [&](std::ostream& out) {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
      return size;
    });
    writer.writeRecord("data.pkl", pickled.data(), pickled.size());
    for (std::size_t i = 0; i < tensors.size(); ++i)
      writer.writeRecord("data/" + keys[i], tensors[i].second.data_ptr(), tensors[i].second.nbytes());
    writer.writeEndOfFile();
  });
}

} // namespace ftopt::weights
