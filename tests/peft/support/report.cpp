// Tests for include/ftopt/peft/support/report.hpp: PEFT's print_trainable_parameters line,
// "trainable params: T || all params: A || trainable%: 100 * T / A" with thousands separated by
// commas and four decimals (peft/peft_model.py: f"... {trainable_params:,d} ... {100 * t / a:.4f}").
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/peft/support/report.hpp>

TEST_CASE("trainable_report: PEFT's line, counts grouped by thousands, the share to four decimals", "[peft]") {
  // 1000 x 1000 weight and 1000 bias: 1,001,000 parameters.
  torch::nn::Linear wide(1000, 1000);
  CHECK(ftopt::peft::trainable_report(*wide) ==
        "trainable params: 1,001,000 || all params: 1,001,000 || trainable%: 100.0000");
  // The bias alone trains: 100 * 1000 / 1001000 = 0.0999000999...
  wide->weight.requires_grad_(false);
  CHECK(ftopt::peft::trainable_report(*wide) ==
        "trainable params: 1,000 || all params: 1,001,000 || trainable%: 0.0999");
  // 3 x 4 + 4 = 16 parameters, 4 training: 25%; fewer than four digits need no comma.
  torch::nn::Linear small(3, 4);
  small->weight.requires_grad_(false);
  CHECK(ftopt::peft::trainable_report(*small) == "trainable params: 4 || all params: 16 || trainable%: 25.0000");
  // A module without parameters: 0 of 0, not a division by zero.
  torch::nn::ReLU relu;
  CHECK(ftopt::peft::trainable_report(*relu) == "trainable params: 0 || all params: 0 || trainable%: 0.0000");
}
