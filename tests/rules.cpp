// Tests for include/ftopt/rules.hpp: each rule reads the properties policies and models declare
// (static members; an absent one reads as false), so it holds for any policy that declares them,
// ours or a user's; broken_rule and broken_model_rule name the first rule a combination breaks,
// in the order the header lists them, or give nullptr.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt.hpp>

using namespace ftopt;

namespace {

// User policies that declare one property each, and a plain one that declares none.
struct Plain {};
struct Fp16Autocast {
  static constexpr c10::ScalarType autocast_dtype = c10::ScalarType::Half;
};
struct Bf16Autocast {
  static constexpr c10::ScalarType autocast_dtype = c10::ScalarType::BFloat16;
};
struct Scaling {
  static constexpr bool skips_non_finite_steps = true;
};
struct PrefixPeft {
  static constexpr bool needs_prefix_attention = true;
};
struct QuantizedBase {
  static constexpr bool quantizes_frozen_base = true;
};
struct Recomputing {
  static constexpr bool needs_checkpointable_blocks = true;
};
struct SteppingInBackward {
  static constexpr bool steps_in_backward = true;
};
struct Reducing {
  static constexpr bool reduces_gradients = true;
};
struct FakeQuant {
  static constexpr bool fake_quant_training = true;
};
/// A property declared false is no property.
struct NotReducing {
  static constexpr bool reduces_gradients = false;
};

struct PlainModuleImpl : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& x) { return x; }
};
struct WithPrefixImpl : PlainModuleImpl {
  static constexpr bool has_prefix_attention = true;
};
struct WithBlocksImpl : PlainModuleImpl {
  static constexpr bool has_checkpointable_blocks = true;
};
using PlainModel = std::shared_ptr<PlainModuleImpl>;
using PrefixModel = std::shared_ptr<WithPrefixImpl>;
using BlocksModel = std::shared_ptr<WithBlocksImpl>;

} // namespace

TEST_CASE("The rules read the properties policies and models declare", "[rules]") {
  using namespace rules;
  STATIC_REQUIRE(autocasts_to_fp16<Fp16Autocast>);
  STATIC_REQUIRE_FALSE(autocasts_to_fp16<Bf16Autocast>);
  STATIC_REQUIRE_FALSE(autocasts_to_fp16<Plain>);
  STATIC_REQUIRE(skips_non_finite_steps<Scaling>);
  STATIC_REQUIRE(needs_prefix_attention<PrefixPeft>);
  STATIC_REQUIRE(quantizes_frozen_base<QuantizedBase>);
  STATIC_REQUIRE(needs_checkpointable_blocks<Recomputing>);
  STATIC_REQUIRE(steps_in_backward<SteppingInBackward>);
  STATIC_REQUIRE(reduces_gradients<Reducing>);
  STATIC_REQUIRE_FALSE(reduces_gradients<NotReducing>);
  STATIC_REQUIRE(trains_fake_quantized<FakeQuant>);
  STATIC_REQUIRE_FALSE(trains_fake_quantized<Plain>);
  STATIC_REQUIRE(has_prefix_attention<PrefixModel>);
  STATIC_REQUIRE_FALSE(has_prefix_attention<PlainModel>);
  STATIC_REQUIRE(has_checkpointable_blocks<BlocksModel>);
  STATIC_REQUIRE(has_checkpointable_blocks<torch::nn::Sequential>);
  STATIC_REQUIRE_FALSE(has_checkpointable_blocks<PlainModel>);
  // The shipped policies declare theirs.
  STATIC_REQUIRE(autocasts_to_fp16<precision::Fp16Mixed>);
  STATIC_REQUIRE(skips_non_finite_steps<precision::Fp16Mixed>);
  STATIC_REQUIRE(needs_prefix_attention<peft::Prefix>);
  STATIC_REQUIRE(needs_checkpointable_blocks<memory::Checkpoint>);
  STATIC_REQUIRE(trains_fake_quantized<quant::Qat>);
  STATIC_REQUIRE(has_prefix_attention<models::ViT>);
  STATIC_REQUIRE_FALSE(has_prefix_attention<models::Mlp>);
}

TEST_CASE("broken_rule and broken_model_rule: the first rule broken, by name, or nullptr", "[rules]") {
  using rules::broken_model_rule;
  using rules::broken_rule;
  namespace rule = rules::rule;
  CHECK(broken_rule<Plain, Plain, Plain, Plain, Plain>() == nullptr);
  CHECK(broken_rule<Fp16Autocast, Plain, Plain, Plain, FakeQuant>() == rule::fake_quant_under_fp16);
  CHECK(broken_rule<Bf16Autocast, Plain, Plain, Plain, FakeQuant>() == nullptr);
  CHECK(broken_rule<Scaling, Plain, SteppingInBackward, Plain, Plain>() == rule::step_in_backward_under_loss_scaling);
  CHECK(broken_rule<Plain, Plain, SteppingInBackward, Reducing, Plain>() == rule::step_in_backward_with_reduction);
  CHECK(broken_rule<Plain, Plain, SteppingInBackward, NotReducing, Plain>() == nullptr);
  CHECK(broken_rule<Plain, QuantizedBase, Plain, Plain, FakeQuant>() == rule::fake_quant_over_quantized_base);
  // Two rules broken at once: the first in the header's order is named.
  CHECK(broken_rule<Fp16Autocast, QuantizedBase, Plain, Plain, FakeQuant>() == rule::fake_quant_under_fp16);
  CHECK(broken_rule<Scaling, Plain, SteppingInBackward, Reducing, Plain>() ==
        rule::step_in_backward_under_loss_scaling);
  // Each property alone breaks nothing.
  CHECK(broken_rule<Fp16Autocast, QuantizedBase, Recomputing, Reducing, Plain>() == nullptr);

  CHECK(broken_model_rule<Plain, Plain, PlainModel>() == nullptr);
  CHECK(broken_model_rule<PrefixPeft, Plain, PlainModel>() == rule::prefix_needs_attention);
  CHECK(broken_model_rule<PrefixPeft, Plain, PrefixModel>() == nullptr);
  CHECK(broken_model_rule<Plain, Recomputing, PlainModel>() == rule::checkpoint_needs_blocks);
  CHECK(broken_model_rule<Plain, Recomputing, BlocksModel>() == nullptr);
  CHECK(broken_model_rule<Plain, Recomputing, torch::nn::Sequential>() == nullptr);
  CHECK(broken_model_rule<PrefixPeft, Recomputing, PlainModel>() == rule::prefix_needs_attention);
  // A combination that passes compiles its checks to true.
  STATIC_REQUIRE(rules::check_combination<Plain, Plain, Plain, Plain, Plain>());
  STATIC_REQUIRE(rules::check_model_for<PrefixPeft, Recomputing, models::ViT>());
}
