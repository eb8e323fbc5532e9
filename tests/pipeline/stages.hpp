#pragma once
// Helpers shared by the Pipeline's tests (one file per stage header): numbered samples, the
// targets a pass delivers, an indexed probe stage, and an ImageFolder of noise JPEGs. Each of
// those tests includes this first: <torch/torch.h> before Catch, as LibTorch defines a CHECK macro
// of its own that Catch's must replace (the other tests get this order from the precompiled
// header; the TSan build has none).
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <ftopt/pipeline.hpp>

#include "../support.hpp"

namespace ftopt::test {

using namespace ftopt::pipeline;


/// Samples whose data is their own index: [N, 1] floats, targets = index.
inline Tensors numbered(std::int64_t n) {
  auto index = at::arange(n, at::kLong);
  return from(index.to(at::kFloat).unsqueeze(1), index);
}

/// The targets of a pass over batches, in delivery order.
template <class R>
std::vector<std::int64_t> targets_of(R& range) {
  std::vector<std::int64_t> out;
  for (const auto& b : range) {
    auto t = b.second.contiguous();
    out.insert(out.end(), t.template data_ptr<std::int64_t>(), t.template data_ptr<std::int64_t>() + t.numel());
  }
  return out;
}

/// An indexed stage that counts the elements computed and throws at one position.
struct Probe : pipeline::detail::IndexedRange<Probe> {
  static constexpr Kind kind = Kind::Samples;
  static constexpr Place place = Place::Host;
  static constexpr bool indexed = true;
  std::int64_t n = 0, fail_at = -1;
  std::shared_ptr<std::atomic<int>> computed = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<Stats> counters = std::make_shared<Stats>();
  std::int64_t size() const { return n; }
  std::int64_t key(std::int64_t k) const { return k; }
  void prepare_pass(std::uint64_t) {}
  std::shared_ptr<Stats> stats() const { return counters; }
  Sample at(std::int64_t k) const {
    ++*computed;
    ftopt::detail::check(k != fail_at, "probe: sample ", k, " is broken");
    return {at::full({1}, static_cast<double>(k)), at::scalar_tensor(k, at::kLong)};
  }
};

/// An ImageFolder of `per_class` gray 28x28 JPEGs in classes "a" and "b", made from noise.
inline void write_folder(const std::filesystem::path& root, int per_class) {
  torch::manual_seed(21);
  for (std::string c : {"a", "b"}) {
    std::filesystem::create_directories(root / c);
    for (int i = 0; i < per_class; ++i)
      write_jpeg(root / c / (std::to_string(i) + ".jpg"), torch::randint(0, 256, {1, 28, 28}, torch::kByte), 95);
  }
}

} // namespace ftopt::test

using namespace ftopt;
using namespace ftopt::pipeline;
using Catch::Matchers::Contains;
using ftopt::test::numbered;
using ftopt::test::Probe;
using ftopt::test::ScratchDir;
using ftopt::test::targets_of;
using ftopt::test::write_folder;
