#pragma once
/// GGUF files (llama.cpp's docs/gguf.md, versions 2 and 3, little-endian): the magic "GGUF", a
/// uint32 version, uint64 counts of tensors and of metadata pairs; the pairs (a string key, a
/// uint32 value type, the value; strings are a uint64 length and UTF-8 bytes; arrays a uint32
/// element type, a uint64 count and the elements); the tensor infos (name, uint32 dimension count,
/// uint64 dimensions innermost first, uint32 ggml type, uint64 offset); then, at the next multiple
/// of `general.alignment` (32 unless given), the tensors' bytes at their offsets.
///
/// weights::Gguf maps the file into memory and checks every count, length and offset against
/// the file's size before it reads, so a corrupt or truncated file is an error naming the file,
/// what was read and where, never a read past the end. A tensor's bytes are a view of the
/// mapping (`bytes`): a weight that stays quantized is never copied.
///
///   weights::Gguf file("SmolLM2-135M-Instruct.Q4_1.gguf");
///   file.string("general.architecture");               // "llama"
///   at::Tensor w = file.dequantize("blk.0.attn_q.weight");  // float32 [576, 576]

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <ftopt/error.hpp>
#include <ftopt/storage/ggml.hpp>

namespace ftopt::weights {

/// GGUF's metadata value types.
enum class GgufType : std::uint32_t {
  UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5, Float32 = 6, Bool = 7, String = 8,
  Array = 9, UInt64 = 10, Int64 = 11, Float64 = 12,
};

/// One metadata value: a scalar (one item) or an array of scalars (its items). Integers keep their
/// sign; an array of arrays is kept as its type with no items (no model ftopt reads has one).
struct GgufValue {
  using Item = std::variant<std::uint64_t, std::int64_t, double, bool, std::string>;
  GgufType type = GgufType::UInt8;  ///< the scalar's type, or the elements' type of an array
  bool array = false;
  std::vector<Item> items;
};

/// Where a tensor is and what it holds.
struct GgufTensor {
  std::string name;
  std::vector<std::int64_t> shape;  ///< torch's order, outermost first (GGUF lists innermost first)
  storage::ggml::Type type = storage::ggml::Type::F32;
  std::uint64_t offset = 0;         ///< from the start of the file
  std::uint64_t bytes = 0;
};

namespace detail {
/// A read-only memory mapping of a whole file, unmapped with its last owner.
class Mapping {
public:
  explicit Mapping(const std::filesystem::path& path) {
    const std::string where = "weights::Gguf: " + path.string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ftopt::detail::check(fd >= 0, where, ": cannot open (", std::strerror(errno), ")");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      ftopt::detail::fail(where, ": not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      // Private and writable: a tensor viewing the file (a QLoRA base kept in its blocks) may be
      // written in place like any other, which copies the pages it touches and never the file.
      void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      ::close(fd);
      ftopt::detail::check(p != MAP_FAILED, where, ": cannot map its ", size_, " bytes (", std::strerror(errno), ")");
      data_ = static_cast<const std::uint8_t*>(p);
    } else {
      ::close(fd);
    }
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

private:
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Reads little-endian values from the mapping, each checked against its end.
class GgufCursor {
public:
  GgufCursor(const Mapping& file, const std::string& where) : file_(file), where_(where) {}

  template <class T>
  T scalar(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, file_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string string(const char* what) {
    const auto length = scalar<std::uint64_t>(what);
    need(length, what);
    std::string s(reinterpret_cast<const char*>(file_.data() + at_), length);
    at_ += length;
    return s;
  }
  /// Fails unless `count` items of at least `least` bytes each fit in what is left.
  void fits(std::uint64_t count, std::uint64_t least, const std::string& what) const {
    const std::uint64_t left = file_.size() - at_;
    ftopt::detail::check(count <= left / least, where_, ": ", what, " counts ", count, " items at byte ", at_,
                         ", more than the ", left, " bytes left can hold");
  }
  std::uint64_t at() const { return at_; }

private:
  void need(std::uint64_t n, const char* what) const {
    ftopt::detail::check(n <= file_.size() - at_, where_, ": truncated: ", what, " at byte ", at_, " needs ", n,
                         " bytes, the file has ", file_.size() - at_, " left");
  }
  const Mapping& file_;
  const std::string& where_;
  std::uint64_t at_ = 0;
};
} // namespace detail

/// A GGUF file, mapped: its version, metadata and tensors.
class Gguf {
public:
  explicit Gguf(const std::filesystem::path& path)
      : path_(path), where_("weights::Gguf: " + path.string()),
        file_(std::make_shared<detail::Mapping>(path)) {
    detail::GgufCursor in(*file_, where_);
    const auto magic = in.scalar<std::uint32_t>("the magic");
    ftopt::detail::check(magic == 0x46554747U, where_, ": wrong magic 0x", std::hex, magic, std::dec,
                         " (a GGUF file starts with the bytes 'GGUF')");
    version_ = in.scalar<std::uint32_t>("the version");
    ftopt::detail::check(version_ != 0x03000000U && version_ != 0x02000000U, where_,
                         ": a big-endian GGUF file; ftopt reads little-endian ones");
    ftopt::detail::check(version_ == 2 || version_ == 3, where_, ": GGUF version ", version_,
                         " is not one ftopt reads (2 or 3)");
    const auto tensor_count = in.scalar<std::uint64_t>("the tensor count");
    const auto pair_count = in.scalar<std::uint64_t>("the metadata count");
    in.fits(pair_count, 13, "the header's metadata count");  // key length, type, a 1-byte value
    for (std::uint64_t i = 0; i < pair_count; ++i) {
      std::string key = in.string("a metadata key");
      GgufValue value = read_value(in, key);
      ftopt::detail::check(metadata_.emplace(key, std::move(value)).second, where_, ": metadata key '", key,
                           "' appears twice");
    }
    in.fits(tensor_count, 24, "the header's tensor count");  // name length, dims, type, offset
    std::map<std::string, std::size_t> seen;
    for (std::uint64_t i = 0; i < tensor_count; ++i) tensors_.push_back(read_tensor_info(in));
    std::uint64_t alignment = 32;
    if (has("general.alignment")) {
      alignment = static_cast<std::uint64_t>(integer("general.alignment"));
      ftopt::detail::check(alignment > 0 && alignment <= (1U << 30) && (alignment & (alignment - 1)) == 0, where_,
                           ": general.alignment = ", alignment, " is not a power of two up to 2^30");
    }
    const std::uint64_t data_start = (in.at() + alignment - 1) / alignment * alignment;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      auto& t = tensors_[i];
      ftopt::detail::check(seen.emplace(t.name, i).second, where_, ": tensor '", t.name, "' appears twice");
      ftopt::detail::check(t.offset % alignment == 0, where_, ": tensor '", t.name, "' starts at data offset ",
                           t.offset, ", not a multiple of the alignment ", alignment);
      const std::uint64_t size = file_->size();
      ftopt::detail::check(data_start <= size && t.offset <= size - data_start &&
                               t.bytes <= size - data_start - t.offset,
                           where_, ": truncated: tensor '", t.name, "' needs ", t.bytes, " bytes at data offset ",
                           t.offset, ", the file has ", size > data_start ? size - data_start : 0, " data bytes");
      t.offset += data_start;
    }
    index_ = std::move(seen);
  }

  const std::filesystem::path& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  bool has(const std::string& key) const { return metadata_.count(key) > 0; }
  /// A scalar value: an error names the file and the key when it is missing or of another type.
  std::int64_t integer(const std::string& key) const { return integer_of(scalar(key), key); }
  double real(const std::string& key) const { return real_of(scalar(key), key); }
  bool boolean(const std::string& key) const { return get<bool>(scalar(key), key, "a bool"); }
  const std::string& string(const std::string& key) const { return get<std::string>(scalar(key), key, "a string"); }
  /// An array of strings (tokenizer.ggml.tokens) or of integers (tokenizer.ggml.token_type).
  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> out;
    for (const auto& item : array(key).items) out.push_back(get<std::string>(item, key, "an array of strings"));
    return out;
  }
  /// An array of numbers (tokenizer.ggml.scores), as doubles.
  std::vector<double> reals(const std::string& key) const {
    std::vector<double> out;
    for (const auto& item : array(key).items) out.push_back(real_of(item, key));
    return out;
  }
  std::vector<std::int64_t> integers(const std::string& key) const {
    std::vector<std::int64_t> out;
    for (const auto& item : array(key).items) out.push_back(integer_of(item, key));
    return out;
  }

  /// The tensor named `name`; an error names the file and the tensor when it has none.
  const GgufTensor& tensor(const std::string& name) const {
    const auto found = index_.find(name);
    ftopt::detail::check(found != index_.end(), where_, ": no tensor '", name, "'");
    return tensors_[found->second];
  }
  bool has_tensor(const std::string& name) const { return index_.count(name) > 0; }

  /// The tensor's bytes, a uint8 view of the mapping that keeps the file mapped while it lives
  /// (writes to it copy the pages they touch; the file never changes).
  at::Tensor bytes(const GgufTensor& t) const {
    auto keep = file_;
    return at::from_blob(const_cast<std::uint8_t*>(file_->data() + t.offset), {static_cast<std::int64_t>(t.bytes)},
                         [keep](void*) {}, at::TensorOptions().dtype(at::kByte));
  }
  /// The tensor's values as `dtype`, in its torch shape.
  at::Tensor dequantize(const std::string& name, at::ScalarType dtype = at::kFloat) const {
    const auto& t = tensor(name);
    try {
      return storage::ggml::dequantize(bytes(t), t.type, t.shape, dtype);
    } catch (const Error& e) {
      ftopt::detail::fail(where_, ": tensor '", name, "': ", e.what());
    }
  }

private:
  GgufValue read_value(detail::GgufCursor& in, const std::string& key) {
    GgufValue value;
    const auto type = in.scalar<std::uint32_t>("a metadata type");
    if (type == static_cast<std::uint32_t>(GgufType::Array)) {
      value.array = true;
      const auto element = in.scalar<std::uint32_t>("an array's element type");
      const auto count = in.scalar<std::uint64_t>("an array's length");
      check_type(element, key);
      value.type = static_cast<GgufType>(element);
      in.fits(count, item_size(value.type), "metadata '" + key + "'");
      if (value.type == GgufType::Array) {  // arrays of arrays: skipped, with their items
        for (std::uint64_t i = 0; i < count; ++i) read_value_of(in, GgufType::Array, key, 1);
        return value;
      }
      value.items.reserve(count);
      for (std::uint64_t i = 0; i < count; ++i) value.items.push_back(read_item(in, value.type, key));
      return value;
    }
    check_type(type, key);
    value.type = static_cast<GgufType>(type);
    value.items.push_back(read_item(in, value.type, key));
    return value;
  }
  /// Reads and drops one value of `type` (the items of an array of arrays).
  void read_value_of(detail::GgufCursor& in, GgufType type, const std::string& key, int depth) {
    if (type != GgufType::Array) {
      read_item(in, type, key);
      return;
    }
    ftopt::detail::check(depth < 8, where_, ": metadata '", key, "' nests arrays more than 8 deep");
    const auto element = in.scalar<std::uint32_t>("an array's element type");
    const auto count = in.scalar<std::uint64_t>("an array's length");
    check_type(element, key);
    in.fits(count, item_size(static_cast<GgufType>(element)), "metadata '" + key + "'");
    for (std::uint64_t i = 0; i < count; ++i) read_value_of(in, static_cast<GgufType>(element), key, depth + 1);
  }
  GgufValue::Item read_item(detail::GgufCursor& in, GgufType type, const std::string& key) {
    switch (type) {
    case GgufType::UInt8: return std::uint64_t{in.scalar<std::uint8_t>("a uint8")};
    case GgufType::Int8: return std::int64_t{in.scalar<std::int8_t>("an int8")};
    case GgufType::UInt16: return std::uint64_t{in.scalar<std::uint16_t>("a uint16")};
    case GgufType::Int16: return std::int64_t{in.scalar<std::int16_t>("an int16")};
    case GgufType::UInt32: return std::uint64_t{in.scalar<std::uint32_t>("a uint32")};
    case GgufType::Int32: return std::int64_t{in.scalar<std::int32_t>("an int32")};
    case GgufType::UInt64: return in.scalar<std::uint64_t>("a uint64");
    case GgufType::Int64: return in.scalar<std::int64_t>("an int64");
    case GgufType::Float32: return double{in.scalar<float>("a float32")};
    case GgufType::Float64: return in.scalar<double>("a float64");
    case GgufType::Bool: {
      const auto b = in.scalar<std::uint8_t>("a bool");
      ftopt::detail::check(b <= 1, where_, ": metadata '", key, "' holds the bool byte ", int{b}, ", not 0 or 1");
      return b == 1;
    }
    case GgufType::String: return in.string("a string");
    case GgufType::Array: break;
    }
    ftopt::detail::fail(where_, ": metadata '", key, "': an array inside an array");
  }
  void check_type(std::uint32_t type, const std::string& key) const {
    ftopt::detail::check(type <= static_cast<std::uint32_t>(GgufType::Float64), where_, ": metadata '", key,
                         "' has value type ", type, ", not a GGUF type (0 to 12)");
  }
  static std::uint64_t item_size(GgufType type) {
    switch (type) {
    case GgufType::UInt8: case GgufType::Int8: case GgufType::Bool: return 1;
    case GgufType::UInt16: case GgufType::Int16: return 2;
    case GgufType::UInt32: case GgufType::Int32: case GgufType::Float32: return 4;
    case GgufType::Array: return 12;  // its element type and length
    default: return 8;  // 64-bit values, and a string's length
    }
  }

  GgufTensor read_tensor_info(detail::GgufCursor& in) {
    GgufTensor t;
    t.name = in.string("a tensor name");
    const auto dims = in.scalar<std::uint32_t>("a tensor's dimension count");
    ftopt::detail::check(dims >= 1 && dims <= 4, where_, ": tensor '", t.name, "' has ", dims,
                         " dimensions; ggml's tensors have 1 to 4");
    std::uint64_t numel = 1;
    for (std::uint32_t d = 0; d < dims; ++d) {
      const auto n = in.scalar<std::uint64_t>("a tensor dimension");
      ftopt::detail::check(n > 0 && n < (std::uint64_t{1} << 40) && numel <= (std::uint64_t{1} << 40) / n, where_,
                           ": tensor '", t.name, "' has dimension ", n, ", or more than 2^40 values");
      numel *= n;
      t.shape.insert(t.shape.begin(), static_cast<std::int64_t>(n));
    }
    const auto code = in.scalar<std::uint32_t>("a tensor type");
    const auto kind = storage::ggml::layout(code);
    ftopt::detail::check(kind.has_value(), where_, ": tensor '", t.name, "' has ggml type ", code,
                         ", not one ggml defines");
    ftopt::detail::check(t.shape.back() % kind->block_values == 0, where_, ": tensor '", t.name, "' has rows of ",
                         t.shape.back(), " values, not whole ", kind->name, " blocks of ", kind->block_values);
    t.type = static_cast<storage::ggml::Type>(code);
    t.bytes = numel / static_cast<std::uint64_t>(kind->block_values) * static_cast<std::uint64_t>(kind->block_bytes);
    t.offset = in.scalar<std::uint64_t>("a tensor offset");
    return t;
  }

  const GgufValue& value(const std::string& key) const {
    const auto found = metadata_.find(key);
    ftopt::detail::check(found != metadata_.end(), where_, ": no metadata '", key, "'");
    return found->second;
  }
  const GgufValue::Item& scalar(const std::string& key) const {
    const auto& v = value(key);
    ftopt::detail::check(!v.array && v.items.size() == 1, where_, ": metadata '", key, "' is an array, not a value");
    return v.items.front();
  }
  const GgufValue& array(const std::string& key) const {
    const auto& v = value(key);
    ftopt::detail::check(v.array, where_, ": metadata '", key, "' is a value, not an array");
    return v;
  }
  std::int64_t integer_of(const GgufValue::Item& item, const std::string& key) const {
    if (const auto* u = std::get_if<std::uint64_t>(&item)) {
      ftopt::detail::check(*u <= static_cast<std::uint64_t>(INT64_MAX), where_, ": metadata '", key, "' = ", *u,
                           " is out of range");
      return static_cast<std::int64_t>(*u);
    }
    return get<std::int64_t>(item, key, "an integer");
  }
  double real_of(const GgufValue::Item& item, const std::string& key) const {
    if (const auto* d = std::get_if<double>(&item)) return *d;
    return static_cast<double>(integer_of(item, key));
  }
  template <class T>
  const T& get(const GgufValue::Item& item, const std::string& key, const char* what) const {
    const auto* v = std::get_if<T>(&item);
    ftopt::detail::check(v != nullptr, where_, ": metadata '", key, "' is not ", what);
    return *v;
  }

  std::filesystem::path path_;
  std::string where_;
  std::shared_ptr<detail::Mapping> file_;
  std::uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, std::size_t> index_;
};

} // namespace ftopt::weights
