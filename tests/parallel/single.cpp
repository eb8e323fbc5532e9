// Tests for include/ftopt/parallel/single.hpp: one process, no communication. The hooks leave
// the weights and gradients alone (the gradients are bit for bit those of a plain backward),
// reduce_sum is the identity on the tensor itself, and the process is rank 0 of 1.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/parallel/single.hpp>
#include <ftopt/rules.hpp>

#include "../support.hpp"

using namespace ftopt;

TEST_CASE("parallel::Single: no communication, gradients as autograd gives them, rank 0 of 1", "[parallel]") {
  STATIC_REQUIRE(parallel::Policy<parallel::Single>);
  STATIC_REQUIRE(PolicyOf<parallel::Single, axis::Parallel>);
  STATIC_REQUIRE_FALSE(rules::reduces_gradients<parallel::Single>);
  auto model = test::small_mlp(15), plain = test::small_mlp(15);
  const auto x = torch::randn({4, 6});
  const auto y = torch::randint(0, 3, {4});

  parallel::Single single;
  single.setup(*model, {});
  CHECK(test::same_values(test::snapshot(*model), test::snapshot(*plain)));
  for (const bool sync : {false, true}) {  // inside an accumulation window, then at its end
    single.before_forward(sync);
    const auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    single.before_backward(loss, sync);
    loss.backward();
    single.after_backward(sync);
    torch::nn::functional::cross_entropy(plain->forward(x), y).backward();
  }
  const auto got = model->parameters(), want = plain->parameters();
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(torch::equal(got[i].grad(), want[i].grad()));

  const auto t = torch::tensor({1.5, 2.5});
  CHECK(single.reduce_sum(t).is_same(t));
  CHECK(single.rank() == 0);
  CHECK(single.world_size() == 1);
}
