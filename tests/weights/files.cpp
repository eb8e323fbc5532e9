// Tests for include/ftopt/weights/files.hpp: saved files load back, in both formats.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <ftopt/weights/files.hpp>

#include "../support.hpp"

using namespace ftopt;
using ftopt::test::fixture;

TEST_CASE("Saved files load back, in both formats", "[weights]") {
  const test::ScratchDir scratch("weights-files");
  const auto& dir = scratch.path;
  auto sd = weights::load_torch_file(fixture("state_dict_ordereddict.pt"));
  for (auto name : {"again.pt", "again.safetensors"}) {
    INFO(name);
    weights::save_file(dir / name, sd, weights::format_for(name));
    auto back = weights::load_file(dir / name);
    REQUIRE(back.keys() == sd.keys());
    for (const auto& item : sd) {
      CHECK(back[item.key()].scalar_type() == item.value().scalar_type());
      CHECK(torch::equal(back[item.key()], item.value()));
    }
  }
}
