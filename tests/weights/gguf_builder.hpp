#pragma once
// test::GgufBuilder: writes GGUF files byte by byte from the layout in llama.cpp's docs/gguf.md,
// so that the reader's tests hold files whose every byte the test chose (and can break).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Half.h>

#include <ftopt/storage/ggml.hpp>
#include <ftopt/weights/gguf.hpp>

namespace ftopt::test {

class GgufBuilder {
public:
  using Type = ftopt::weights::GgufType;

  std::uint32_t magic = 0x46554747U;
  std::uint32_t version = 3;
  std::uint64_t alignment = 32;

  template <class T>
  GgufBuilder& scalar(const std::string& key, Type type, T value) {
    key_(key);
    put(static_cast<std::uint32_t>(type));
    put(value);
    ++pairs_;
    return *this;
  }
  GgufBuilder& u32(const std::string& key, std::uint32_t v) { return scalar(key, Type::UInt32, v); }
  GgufBuilder& f32(const std::string& key, float v) { return scalar(key, Type::Float32, v); }
  GgufBuilder& boolean(const std::string& key, bool v) { return scalar(key, Type::Bool, std::uint8_t{v}); }
  GgufBuilder& string(const std::string& key, const std::string& v) {
    key_(key);
    put(static_cast<std::uint32_t>(Type::String));
    str(v);
    ++pairs_;
    return *this;
  }
  GgufBuilder& strings(const std::string& key, const std::vector<std::string>& v) {
    key_(key);
    put(static_cast<std::uint32_t>(Type::Array));
    put(static_cast<std::uint32_t>(Type::String));
    put(static_cast<std::uint64_t>(v.size()));
    for (const auto& s : v) str(s);
    ++pairs_;
    return *this;
  }
  GgufBuilder& i32s(const std::string& key, const std::vector<std::int32_t>& v) {
    key_(key);
    put(static_cast<std::uint32_t>(Type::Array));
    put(static_cast<std::uint32_t>(Type::Int32));
    put(static_cast<std::uint64_t>(v.size()));
    for (const auto x : v) put(x);
    ++pairs_;
    return *this;
  }
  GgufBuilder& f32s(const std::string& key, const std::vector<float>& v) {
    key_(key);
    put(static_cast<std::uint32_t>(Type::Array));
    put(static_cast<std::uint32_t>(Type::Float32));
    put(static_cast<std::uint64_t>(v.size()));
    for (const auto x : v) put(x);
    ++pairs_;
    return *this;
  }
  /// A tensor of torch shape `shape` and ggml type `type` holding `data` (its raw bytes).
  GgufBuilder& tensor(const std::string& name, const std::vector<std::int64_t>& shape, std::uint32_t type,
                      const std::string& data) {
    infos_.push_back({name, shape, type, data});
    return *this;
  }
  GgufBuilder& tensor(const std::string& name, const std::vector<std::int64_t>& shape,
                      ftopt::storage::ggml::Type type, const std::string& data) {
    return tensor(name, shape, static_cast<std::uint32_t>(type), data);
  }
  /// A float32 tensor with the values of `t`.
  GgufBuilder& f32_tensor(const std::string& name, const at::Tensor& t) {
    const at::Tensor c = t.to(at::kFloat).contiguous();
    return tensor(name, c.sizes().vec(), ftopt::storage::ggml::Type::F32,
                  std::string(static_cast<const char*>(c.data_ptr()), c.nbytes()));
  }

  /// The whole file.
  std::string bytes() const {
    std::string out;
    auto put_to = [&out](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    put_to(magic);
    put_to(version);
    put_to(static_cast<std::uint64_t>(infos_.size()));
    put_to(pairs_);
    out += kv_;
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> offsets;
    for (const auto& t : infos_) {
      put_to(static_cast<std::uint64_t>(t.name.size()));
      out += t.name;
      put_to(static_cast<std::uint32_t>(t.shape.size()));
      for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put_to(static_cast<std::uint64_t>(*d));
      put_to(t.type);
      put_to(offset);
      offsets.push_back(offset);
      offset += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    out.append((alignment - out.size() % alignment) % alignment, '\0');
    for (const auto& t : infos_) {
      out += t.data;
      out.append((alignment - t.data.size() % alignment) % alignment, '\0');
    }
    return out;
  }
  void write(const std::filesystem::path& path) const { write_bytes(path, bytes()); }
  static void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

private:
  template <class T>
  void put(const T& v) {
    kv_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void str(const std::string& s) {
    put(static_cast<std::uint64_t>(s.size()));
    kv_ += s;
  }
  void key_(const std::string& k) { str(k); }

  struct Info {
    std::string name;
    std::vector<std::int64_t> shape;
    std::uint32_t type;
    std::string data;
  };
  std::string kv_;
  std::uint64_t pairs_ = 0;
  std::vector<Info> infos_;
};

/// fp16 bits of `x`, as two bytes.
inline std::string half_bytes(float x) {
  const std::uint16_t bits = c10::Half(x).x;
  return std::string(reinterpret_cast<const char*>(&bits), 2);
}

/// One Q4_1 block: d, m and 32 codes (0..15), value j in the low nibble of byte j % 16 for
/// j < 16, in the high nibble for j >= 16 (ggml-common.h, block_q4_1).
inline std::string q4_1_block(float d, float m, const std::vector<int>& codes) {
  std::string b = half_bytes(d) + half_bytes(m);
  for (int j = 0; j < 16; ++j) b += static_cast<char>(codes[j] | (codes[j + 16] << 4));
  return b;
}
/// One Q4_0 block: d and 32 codes (0..15), laid out as Q4_1's.
inline std::string q4_0_block(float d, const std::vector<int>& codes) {
  std::string b = half_bytes(d);
  for (int j = 0; j < 16; ++j) b += static_cast<char>(codes[j] | (codes[j + 16] << 4));
  return b;
}
/// The 20 bytes a 5-bit block holds after its scales, for 32 codes (0..31): a little-endian
/// word whose bit j is code j's fifth bit, then the low nibbles laid out as Q4_1's
/// (ggml-common.h, block_q5_0 and block_q5_1).
inline std::string q5_bits(const std::vector<int>& codes) {
  std::uint32_t fifth = 0;
  for (int j = 0; j < 32; ++j) fifth |= static_cast<std::uint32_t>(codes[j] >> 4) << j;
  std::string b;
  for (int i = 0; i < 4; ++i) b += static_cast<char>((fifth >> (8 * i)) & 0xFF);
  for (int j = 0; j < 16; ++j) b += static_cast<char>((codes[j] & 0xF) | ((codes[j + 16] & 0xF) << 4));
  return b;
}
/// One Q5_0 block: d and 32 codes (0..31).
inline std::string q5_0_block(float d, const std::vector<int>& codes) { return half_bytes(d) + q5_bits(codes); }
/// One Q5_1 block: d, m and 32 codes (0..31).
inline std::string q5_1_block(float d, float m, const std::vector<int>& codes) {
  return half_bytes(d) + half_bytes(m) + q5_bits(codes);
}
/// One Q8_0 block: d and 32 int8 values.
inline std::string q8_0_block(float d, const std::vector<int>& q) {
  std::string b = half_bytes(d);
  for (int j = 0; j < 32; ++j) b += static_cast<char>(static_cast<std::int8_t>(q[j]));
  return b;
}

/// A small file with metadata of each kind and one tensor of each readable type (the K-quants
/// aside): the GGUF reader's tests and its fuzz test start from it.
inline GgufBuilder sample_gguf() {
  using Meta = GgufBuilder::Type;
  using Tensor = ftopt::storage::ggml::Type;
  GgufBuilder g;
  g.string("general.architecture", "llama")
      .u32("llama.block_count", 2)
      .f32("llama.rope.freq_base", 10000.0F)
      .boolean("tokenizer.ggml.add_bos_token", false)
      .scalar("neg", Meta::Int8, std::int8_t{-5})
      .scalar("big", Meta::UInt64, std::uint64_t{1} << 40)
      .scalar("wide", Meta::Float64, 0.125)
      .strings("tokenizer.ggml.tokens", {"a", "b", "\xC3\xA9"})
      .i32s("tokenizer.ggml.token_type", {1, 3, -1});
  const at::Tensor f = at::arange(8, at::kFloat).view({2, 4}) - 3;
  g.f32_tensor("f32", f);
  const at::Tensor h = f.to(at::kHalf), bf = f.to(at::kBFloat16);
  g.tensor("f16", {2, 4}, Tensor::F16, std::string(static_cast<const char*>(h.data_ptr()), h.nbytes()));
  g.tensor("bf16", {2, 4}, Tensor::BF16, std::string(static_cast<const char*>(bf.data_ptr()), bf.nbytes()));
  std::vector<int> codes(32), q(32);
  for (int j = 0; j < 32; ++j) codes[j] = (j * 7) % 16, q[j] = j * 8 - 128;
  g.tensor("q4_1", {2, 32}, Tensor::Q4_1, q4_1_block(0.5F, -2.0F, codes) + q4_1_block(0.25F, 1.0F, codes));
  g.tensor("q4_0", {1, 32}, Tensor::Q4_0, q4_0_block(0.5F, codes));
  g.tensor("q8_0", {32}, Tensor::Q8_0, q8_0_block(0.125F, q));
  return g;
}

} // namespace ftopt::test
