#pragma once
/// The part of Python's pickle that torch.save writes for state dicts, read and written here so
/// that `torch.save(model.state_dict(), path)` files load on every LibTorch: 1.13's own
/// unpickler turns the OrderedDict they hold into None (pytorch#100741).
///
/// Reading runs the pickle VM over the opcodes of protocols 2-5 that appear in such files; the
/// only callables it evaluates are collections.OrderedDict and torch._utils' tensor rebuilders.
/// Anything else (a pickled class, a whole module) is an error naming it. Tensor storages come
/// from a callback (the zip archive's data/<key> records).

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/ATen.h>

#include <ftopt/error.hpp>

namespace ftopt::weights::pickle {

/// A Python value, as far as state dicts need.
struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  enum class Kind { None, Bool, Int, Float, String, Tuple, List, Dict, Global, Tensor, Mark };
  Kind kind = Kind::None;
  bool boolean = false;
  std::int64_t integer = 0;
  double real = 0;
  std::string text;                                   ///< String, or "module.name" of a Global
  std::vector<ValuePtr> items;                        ///< Tuple, List
  std::vector<std::pair<ValuePtr, ValuePtr>> entries; ///< Dict, in insertion order
  at::Tensor tensor;

  static ValuePtr make(Kind kind) {
    auto v = std::make_shared<Value>();
    v->kind = kind;
    return v;
  }
};

/// Gives the storage for a persistent id ('storage', <storage type>, key, location, numel):
/// a 1-D tensor of `dtype` with `numel` elements.
using StorageLoader = std::function<at::Tensor(const std::string& key, at::ScalarType dtype, std::int64_t numel)>;

namespace detail {

/// The dtype a legacy storage class name stands for ("torch.FloatStorage" -> float32).
inline at::ScalarType storage_dtype(const std::string& global, std::string_view where) {
  static const std::map<std::string, at::ScalarType, std::less<>> types = {
      {"torch.FloatStorage", at::kFloat},   {"torch.DoubleStorage", at::kDouble},
      {"torch.HalfStorage", at::kHalf},     {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},     {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},   {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},     {"torch.BoolStorage", at::kBool},
      {"torch.ComplexFloatStorage", at::kComplexFloat}, {"torch.ComplexDoubleStorage", at::kComplexDouble}};
  auto it = types.find(global);
  ftopt::detail::check(it != types.end(), where, ": unsupported storage type ", global);
  return it->second;
}

inline std::vector<std::int64_t> int_list(const ValuePtr& tuple, std::string_view where) {
  ftopt::detail::check(tuple->kind == Value::Kind::Tuple || tuple->kind == Value::Kind::List, where,
                       ": expected a tuple of sizes");
  std::vector<std::int64_t> out;
  for (const auto& item : tuple->items) {
    ftopt::detail::check(item->kind == Value::Kind::Int, where, ": expected integer sizes");
    out.push_back(item->integer);
  }
  return out;
}

class Reader {
public:
  Reader(std::string_view bytes, StorageLoader load, std::string where)
      : bytes_(bytes), load_(std::move(load)), where_(std::move(where)) {}

  ValuePtr run() {
    while (true) {
      const auto op = static_cast<unsigned char>(take(1)[0]);
      switch (op) {
        case 0x80: take(1); break;                                    // PROTO
        case 0x95: take(8); break;                                    // FRAME
        case '.': return pop();                                       // STOP
        case '(': push(Value::make(Value::Kind::Mark)); break;        // MARK
        case 'N': push(Value::make(Value::Kind::None)); break;        // NONE
        case 0x88: push(boolean(true)); break;                        // NEWTRUE
        case 0x89: push(boolean(false)); break;                       // NEWFALSE
        case 'K': push(integer(u8())); break;                         // BININT1
        case 'M': push(integer(le<std::uint16_t>())); break;          // BININT2
        case 'J': push(integer(le<std::int32_t>())); break;           // BININT
        case 0x8a: push(integer(long1(u8()))); break;                 // LONG1
        case 'G': push(real(be_double())); break;                     // BINFLOAT
        case 'X': push(string(take(le<std::uint32_t>()))); break;     // BINUNICODE
        case 0x8c: push(string(take(u8()))); break;                   // SHORT_BINUNICODE
        case 0x8d: push(string(take(le<std::uint64_t>()))); break;    // BINUNICODE8
        case 'U': push(string(take(u8()))); break;                    // SHORT_BINSTRING
        case 'T': push(string(take(le<std::uint32_t>()))); break;     // BINSTRING
        case 'c': {                                                   // GLOBAL
          auto module = line();
          auto name = line();
          push(global(module + "." + name));
          break;
        }
        case 0x93: {                                                  // STACK_GLOBAL
          auto name = pop(), module = pop();
          push(global(module->text + "." + name->text));
          break;
        }
        case ')': push(Value::make(Value::Kind::Tuple)); break;       // EMPTY_TUPLE
        case 't': push(tuple(pop_to_mark())); break;                  // TUPLE
        case 0x85: push(tuple(pop_n(1))); break;                      // TUPLE1
        case 0x86: push(tuple(pop_n(2))); break;                      // TUPLE2
        case 0x87: push(tuple(pop_n(3))); break;                      // TUPLE3
        case ']': push(Value::make(Value::Kind::List)); break;        // EMPTY_LIST
        case 'l': {                                                   // LIST
          auto list = Value::make(Value::Kind::List);
          list->items = pop_to_mark();
          push(list);
          break;
        }
        case 'a': {                                                   // APPEND
          auto item = pop();
          top()->items.push_back(item);
          break;
        }
        case 'e': {                                                   // APPENDS
          auto items = pop_to_mark();
          auto& list = top()->items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        case '}': push(Value::make(Value::Kind::Dict)); break;        // EMPTY_DICT
        case 'd': {                                                   // DICT
          auto dict = Value::make(Value::Kind::Dict);
          auto items = pop_to_mark();
          for (std::size_t i = 0; i + 1 < items.size(); i += 2) dict->entries.emplace_back(items[i], items[i + 1]);
          push(dict);
          break;
        }
        case 's': {                                                   // SETITEM
          auto value = pop(), key = pop();
          dict_of(top())->entries.emplace_back(key, value);
          break;
        }
        case 'u': {                                                   // SETITEMS
          auto items = pop_to_mark();
          auto dict = dict_of(top());
          for (std::size_t i = 0; i + 1 < items.size(); i += 2) dict->entries.emplace_back(items[i], items[i + 1]);
          break;
        }
        case 'q': memo_[u8()] = top(); break;                         // BINPUT
        case 'r': memo_[le<std::uint32_t>()] = top(); break;          // LONG_BINPUT
        case 0x94: memo_[memo_.size()] = top(); break;                // MEMOIZE
        case 'h': push(memo(u8())); break;                            // BINGET
        case 'j': push(memo(le<std::uint32_t>())); break;             // LONG_BINGET
        case 'R': {                                                   // REDUCE
          auto args = pop(), callable = pop();
          push(reduce(callable, args));
          break;
        }
        case 0x81: {                                                  // NEWOBJ
          auto args = pop(), cls = pop();
          push(reduce(cls, args));
          break;
        }
        case 'b': pop(); break;  // BUILD: attributes (an OrderedDict's _metadata); not needed
        case 'Q': push(persistent(pop())); break;                     // BINPERSID
        default:
          ftopt::detail::fail(where_, ": unsupported pickle opcode 0x", hex(op), " at byte ", pos_ - 1,
                              " (not a state dict written by torch.save?)");
      }
    }
  }

private:
  static std::string hex(unsigned v) {
    static constexpr char d[] = "0123456789abcdef";
    return {d[(v >> 4) & 0xF], d[v & 0xF]};
  }
  std::string_view take(std::size_t n) {
    ftopt::detail::check(pos_ + n <= bytes_.size(), where_, ": the pickle ends early, at byte ", pos_);
    auto out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  template <class T>
  T le() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));  // the host is little-endian (x86, ARM)
    return v;
  }
  double be_double() {
    auto b = take(8);
    unsigned char r[8];
    for (int i = 0; i < 8; ++i) r[i] = static_cast<unsigned char>(b[7 - i]);
    double v;
    std::memcpy(&v, r, 8);
    return v;
  }
  std::int64_t long1(std::size_t n) {
    ftopt::detail::check(n <= 8, where_, ": integer wider than 64 bits");
    auto b = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t(static_cast<unsigned char>(b[i])) << (8 * i);
    if (n > 0 && n < 8 && (static_cast<unsigned char>(b[n - 1]) & 0x80)) v |= ~std::uint64_t(0) << (8 * n);
    return static_cast<std::int64_t>(v);
  }
  std::string line() {
    auto end = bytes_.find('\n', pos_);
    ftopt::detail::check(end != std::string_view::npos, where_, ": unterminated GLOBAL");
    std::string out(bytes_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }

  static ValuePtr boolean(bool b) { auto v = Value::make(Value::Kind::Bool); v->boolean = b; return v; }
  static ValuePtr integer(std::int64_t i) { auto v = Value::make(Value::Kind::Int); v->integer = i; return v; }
  static ValuePtr real(double d) { auto v = Value::make(Value::Kind::Float); v->real = d; return v; }
  static ValuePtr string(std::string_view s) { auto v = Value::make(Value::Kind::String); v->text = s; return v; }
  static ValuePtr global(std::string name) { auto v = Value::make(Value::Kind::Global); v->text = std::move(name); return v; }
  static ValuePtr tuple(std::vector<ValuePtr> items) {
    auto v = Value::make(Value::Kind::Tuple);
    v->items = std::move(items);
    return v;
  }

  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  ValuePtr pop() {
    ftopt::detail::check(!stack_.empty(), where_, ": malformed pickle (stack underflow at byte ", pos_, ")");
    auto v = stack_.back();
    stack_.pop_back();
    return v;
  }
  const ValuePtr& top() {
    ftopt::detail::check(!stack_.empty(), where_, ": malformed pickle (empty stack at byte ", pos_, ")");
    return stack_.back();
  }
  std::vector<ValuePtr> pop_n(std::size_t n) {
    std::vector<ValuePtr> out(n);
    for (std::size_t i = n; i-- > 0;) out[i] = pop();
    return out;
  }
  std::vector<ValuePtr> pop_to_mark() {
    std::vector<ValuePtr> out;
    while (true) {
      auto v = pop();
      if (v->kind == Value::Kind::Mark) break;
      out.push_back(v);
    }
    return {out.rbegin(), out.rend()};
  }
  ValuePtr memo(std::size_t key) {
    auto it = memo_.find(key);
    ftopt::detail::check(it != memo_.end(), where_, ": malformed pickle (memo ", key, " unset)");
    return it->second;
  }
  ValuePtr dict_of(const ValuePtr& v) {
    ftopt::detail::check(v->kind == Value::Kind::Dict, where_, ": malformed pickle (SETITEM on a non-dict)");
    return v;
  }

  /// A tensor's view of its storage (`numel` elements) stays inside it: sizes and strides of one
  /// length, none negative, and the last element it reaches before the storage's end.
  void check_view(std::int64_t numel, const std::vector<std::int64_t>& sizes, const std::vector<std::int64_t>& strides,
                  std::int64_t offset, const std::string& name) const {
    ftopt::detail::check(sizes.size() == strides.size() && offset >= 0, where_, ": malformed ", name,
                         " arguments (", sizes.size(), " sizes, ", strides.size(), " strides, offset ", offset, ")");
    std::int64_t last = offset;
    bool empty = false;
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      ftopt::detail::check(sizes[d] >= 0 && strides[d] >= 0, where_, ": malformed ", name,
                           " arguments (a negative size or stride)");
      empty = empty || sizes[d] == 0;
      if (sizes[d] > 0 && strides[d] > 0) {
        ftopt::detail::check(sizes[d] - 1 <= (numel - last) / strides[d], where_, ": a tensor's view (sizes and strides) "
                             "reaches past its storage of ", numel, " elements");
        last += (sizes[d] - 1) * strides[d];
      }
    }
    ftopt::detail::check(empty || last < numel, where_, ": a tensor's view starts at element ", offset,
                         " of a storage of ", numel);
  }

  ValuePtr reduce(const ValuePtr& callable, const ValuePtr& args) {
    ftopt::detail::check(callable->kind == Value::Kind::Global, where_, ": malformed pickle (REDUCE on a non-callable)");
    const auto& name = callable->text;
    const auto& a = args->items;
    if (name == "collections.OrderedDict" || name == "builtins.dict") {
      auto dict = Value::make(Value::Kind::Dict);
      if (!a.empty() && (a[0]->kind == Value::Kind::List || a[0]->kind == Value::Kind::Tuple))
        for (const auto& pair : a[0]->items)
          if (pair->items.size() == 2) dict->entries.emplace_back(pair->items[0], pair->items[1]);
      return dict;
    }
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      ftopt::detail::check(a.size() >= 4 && a[0]->kind == Value::Kind::Tensor && a[1]->kind == Value::Kind::Int,
                           where_, ": malformed ", name, " arguments");
      const auto sizes = int_list(a[2], where_), strides = int_list(a[3], where_);
      check_view(a[0]->tensor.numel(), sizes, strides, a[1]->integer, name);
      auto t = Value::make(Value::Kind::Tensor);
      t->tensor = a[0]->tensor.as_strided(sizes, strides, a[1]->integer);
      return t;
    }
    if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") {
      ftopt::detail::check(!a.empty() && a[0]->kind == Value::Kind::Tensor, where_, ": malformed ", name);
      return a[0];
    }
    ftopt::detail::fail(where_, ": the pickle calls ", name, ", which a state dict never does (was a whole ",
                        "module or another object saved? save model.state_dict() instead)");
  }

  ValuePtr persistent(const ValuePtr& pid) {
    ftopt::detail::check(pid->kind == Value::Kind::Tuple && pid->items.size() >= 5 &&
                             pid->items[0]->kind == Value::Kind::String && pid->items[0]->text == "storage",
                         where_, ": unsupported persistent id (not a tensor storage)");
    const auto& key = pid->items[2]->text;
    auto cached = storages_.find(key);
    if (cached == storages_.end()) {
      const auto dtype = storage_dtype(pid->items[1]->text, where_);
      cached = storages_.emplace(key, load_(key, dtype, pid->items[4]->integer)).first;
    }
    auto v = Value::make(Value::Kind::Tensor);
    v->tensor = cached->second;  // views of one storage share it, as in Python
    return v;
  }

  std::string_view bytes_;
  StorageLoader load_;
  std::string where_;
  std::size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::map<std::size_t, ValuePtr> memo_;
  std::map<std::string, at::Tensor> storages_;
};

} // namespace detail

/// Runs the pickle in `bytes`; `where` prefixes error messages (the file name).
inline ValuePtr read(std::string_view bytes, StorageLoader load, std::string where) {
  return detail::Reader(bytes, std::move(load), std::move(where)).run();
}

/// Writes a protocol-2 pickle of an OrderedDict of tensors, each as torch.save writes one:
/// _rebuild_tensor_v2(storage persistent id, offset 0, sizes, contiguous strides, False,
/// OrderedDict()). Storage i is named by `keys[i]`.
inline std::string write_state_dict(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                    const std::vector<std::string>& keys) {
  std::string out = "\x80\x02";
  auto global = [&](std::string_view module, std::string_view name) {
    out += 'c';
    out.append(module);
    out += '\n';
    out.append(name);
    out += '\n';
  };
  auto unicode = [&](std::string_view s) {
    out += 'X';
    const auto n = static_cast<std::uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out.append(s);
  };
  auto integer = [&](std::int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      out += 'J';
      const auto n = static_cast<std::int32_t>(v);
      out.append(reinterpret_cast<const char*>(&n), 4);
    } else {
      out += '\x8a';
      out += '\x08';
      out.append(reinterpret_cast<const char*>(&v), 8);
    }
  };
  auto ints = [&](at::IntArrayRef values) {
    out += '(';
    for (auto v : values) integer(v);
    out += 't';
  };
  static const std::map<at::ScalarType, std::string_view> storage = {
      {at::kFloat, "FloatStorage"}, {at::kDouble, "DoubleStorage"}, {at::kHalf, "HalfStorage"},
      {at::kBFloat16, "BFloat16Storage"}, {at::kLong, "LongStorage"}, {at::kInt, "IntStorage"},
      {at::kShort, "ShortStorage"}, {at::kChar, "CharStorage"}, {at::kByte, "ByteStorage"},
      {at::kBool, "BoolStorage"}};
  global("collections", "OrderedDict");
  out += ")R(";
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    auto type = storage.find(t.scalar_type());
    ftopt::detail::check(type != storage.end(), "save: tensor ", name, " has dtype ",
                         at::toString(t.scalar_type()), ", which torch.save files do not hold here");
    unicode(name);
    global("torch._utils", "_rebuild_tensor_v2");
    out += "((";
    unicode("storage");
    global("torch", type->second);
    unicode(keys[i]);
    unicode("cpu");
    integer(t.numel());
    out += "tQ";
    integer(0);
    ints(t.sizes());
    std::vector<std::int64_t> strides(t.sizes().size());
    for (std::int64_t d = static_cast<std::int64_t>(strides.size()) - 1, step = 1; d >= 0; --d) {
      strides[static_cast<std::size_t>(d)] = step;
      step *= t.size(d);
    }
    ints(strides);
    out += '\x89';
    global("collections", "OrderedDict");
    out += ")Rt";
    out += 'R';
  }
  out += "u.";
  return out;
}

} // namespace ftopt::weights::pickle
