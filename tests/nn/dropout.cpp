// nn/dropout.hpp: torch.nn.functional.dropout's semantics (the share dropped, the survivors'
// scale, the gradient through the same mask, eval and p 0 and 1), and what ftopt's masks add:
// the same seed gives the same mask on any thread count, and memory::Checkpoint replays it.
#include <cmath>
#include <cstdint>
#include <limits>

#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/nn/checkpoint.hpp>
#include <ftopt/nn/dropout.hpp>

#include "../isa.hpp"
#include "../support.hpp"

using namespace ftopt;

TEST_CASE("nn::dropout: the share dropped is p, the rest scaled by 1 / (1 - p)", "[nn][dropout]") {
  for (const double p : {0.1, 0.5, 0.9}) {
    torch::manual_seed(1);
    const auto x = torch::rand({1000, 1000}) + 1;  // no zeros of its own
    const auto y = nn::dropout(x, p, true);
    const auto kept = y.ne(0);
    const double n = static_cast<double>(x.numel());
    const double share = 1.0 - kept.sum().item<double>() / n;
    // Binomial: the dropped share's standard deviation is sqrt(p (1 - p) / n); 6 of them.
    CHECK(std::abs(share - p) < 6 * std::sqrt(p * (1 - p) / n));
    CHECK(torch::allclose(y.masked_select(kept), x.masked_select(kept) / (1 - p)));
  }
}

TEST_CASE("nn::dropout: the gradient goes through the same mask", "[nn][dropout]") {
  torch::manual_seed(2);
  const auto x = (torch::rand({64, 33}) + 1).requires_grad_();
  const auto g = torch::randn({64, 33});
  const auto y = nn::dropout(x, 0.3, true);
  (y * g).sum().backward();
  const auto kept = y.ne(0).to(torch::kFloat);
  CHECK(torch::allclose(x.grad(), g * kept / 0.7));
}

TEST_CASE("nn::dropout: eval, p 0 and p 1, bf16, bad p", "[nn][dropout]") {
  const auto x = torch::rand({5, 7}) + 1;
  CHECK(nn::dropout(x, 0.5, false).is_same(x));
  CHECK(nn::dropout(x, 0.0, true).is_same(x));
  CHECK(nn::dropout(x, 1.0, true).eq(0).all().item<bool>());
  const auto h = nn::dropout(torch::ones({4096}, torch::kBFloat16), 0.5, true);
  CHECK(h.scalar_type() == torch::kBFloat16);
  CHECK(((h == 0) | (h == 2)).all().item<bool>());
  CHECK(test::message_of([&] { nn::dropout(x, 1.5, true); }).find("p must be in [0, 1], got 1.5") != std::string::npos);
  CHECK(test::message_of([] { nn::Dropout(torch::nn::DropoutOptions(0.1).inplace(true)); }).find("inplace is not supported") !=
        std::string::npos);
}

TEST_CASE("nn::dropout: a seed gives one mask, on any thread count, and each call draws anew", "[nn][dropout]") {
  const auto x = torch::rand({300, 301}) + 1;
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  torch::manual_seed(3);
  const auto one = nn::dropout(x, 0.2, true);
  at::set_num_threads(2);
  torch::manual_seed(3);
  const auto two = nn::dropout(x, 0.2, true);
  const auto next = nn::dropout(x, 0.2, true);
  at::set_num_threads(threads);
  CHECK(torch::equal(one, two));
  CHECK_FALSE(torch::equal(two, next));
}

TEST_CASE("nn::Dropout: memory::Checkpoint's recompute draws the forward's masks", "[nn][dropout]") {
  torch::nn::Sequential block(torch::nn::Linear(8, 8), nn::Dropout(0.5), torch::nn::Linear(8, 8));
  const auto x = torch::randn({16, 8});
  auto grads = [&](bool checkpointed) {
    block->zero_grad();
    torch::manual_seed(4);
    const auto out = checkpointed ? nn::checkpoint(*block, [&](const at::Tensor& in) { return block->forward(in); }, x)
                                  : block->forward(x);
    out.pow(2).sum().backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : block->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const auto plain = grads(false), recomputed = grads(true);
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(torch::equal(plain[i], recomputed[i]));
}

namespace {

/// The hash written out here, independently of the kernel's copy `isa` (its AVX-512 and AVX2
/// lanes, its scalar tail).
void check_dropout_draws(CpuIsa isa) {
  auto lowbias32 = [](std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7FEB352DU;
    x ^= x >> 15;
    x *= 0x846CA68BU;
    return x ^ (x >> 16);
  };
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
    const std::int64_t n = 1003;  // with AVX-512: 62 blocks of 16, one of 8 and a tail of 3
    const auto x = torch::ones({n}, dtype);
    torch::manual_seed(6);
    const auto seed = static_cast<std::uint64_t>(nn::detail::dropout_seed());
    torch::manual_seed(6);
    const auto y = nn::dropout(x, 0.25, true, isa).to(torch::kDouble);
    const auto threshold = static_cast<std::uint32_t>(0.25 * 4294967296.0);
    int wrong = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint32_t bits = lowbias32(lowbias32(static_cast<std::uint32_t>(i) ^ static_cast<std::uint32_t>(seed)) ^
                                           static_cast<std::uint32_t>(seed >> 32));
      const double expected = bits >= threshold ? 1.0 / 0.75 : 0.0;
      wrong += std::abs(y[i].item<double>() - expected) > 1e-2;
    }
    CHECK(wrong == 0);
  }
}

/// Copy `isa`'s bf16 rounding, NaN and infinity.
void check_dropout_bf16(CpuIsa isa) {
  torch::manual_seed(7);
  auto x = torch::randn({4096}).mul(1000).to(torch::kBFloat16);
  for (std::int64_t i = 0; i < 64; i += 4) {  // kept or dropped, whichever their draws say
    x[i] = std::numeric_limits<float>::quiet_NaN();
    x[i + 1] = std::numeric_limits<float>::infinity();
  }
  const auto y = nn::dropout(x, 0.3, true, isa);
  const auto finite = x.isfinite();
  const auto kept = y.ne(0) & finite;
  // A kept element is float(x) * (1 / 0.7) rounded to bf16 by ATen's own conversion.
  const auto expected = (x.to(torch::kFloat) * static_cast<float>(1.0 / 0.7)).to(torch::kBFloat16);
  CHECK(torch::equal(y.masked_select(kept), expected.masked_select(kept)));
  // NaN stays NaN; an infinity stays infinite where kept and becomes NaN (inf * 0) where dropped.
  CHECK(y.masked_select(x.isnan()).isnan().all().item<bool>());
  const auto infinite = y.masked_select(x.isinf());
  CHECK((infinite.isinf() | infinite.isnan()).all().item<bool>());
  CHECK(infinite.isinf().any().item<bool>());
  CHECK(infinite.isnan().any().item<bool>());
}

} // namespace

FTOPT_TEST_EACH_ISA("nn::dropout: element i's draw is lowbias32(lowbias32(i ^ seed_lo) ^ seed_hi)", "[nn][dropout]",
                    check_dropout_draws)
FTOPT_TEST_EACH_ISA("nn::dropout: bf16 rounds as c10::BFloat16 does, NaN and infinity as torch's input * mask",
                    "[nn][dropout]", check_dropout_bf16)
