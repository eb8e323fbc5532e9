// The compile-time cost of a grid, the way Boost.Hana measures its own: this file instantiates
// the first FTOPT_GRID_N valid combinations of the main job's grid (each Trainer's prepare,
// fit, evaluate and finalize on the ViT, as a grid run does), and
// benchmarks/grid_compile_time.sh times its compilation for several N. N = 0 is the fixed cost
// of the headers.
#include <utility>
#include <vector>

#include <boost/hana/take_front.hpp>
#include <torch/torch.h>

#include <ftopt.hpp>

#ifndef FTOPT_GRID_N
#define FTOPT_GRID_N 1
#endif

namespace grid = ftopt::grid;
namespace hana = boost::hana;

using Grid = grid::Grid<grid::Axis<ftopt::precision::Fp32, ftopt::precision::Bf16Mixed>,
                        grid::Axis<ftopt::peft::Full, ftopt::peft::Lora, ftopt::peft::Adapter>,
                        grid::Axis<ftopt::memory::None, ftopt::memory::Checkpoint>, grid::Axis<ftopt::parallel::Single>,
                        grid::Axis<ftopt::quant::None, ftopt::quant::DynamicInt8>>;

template <class T>
void use() {
  ftopt::models::ViT model({.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 64, .layers = 4, .heads = 4,
                            .intermediate = 128, .num_labels = 5});
  T trainer;
  torch::optim::AdamW optimizer(trainer.prepare(model), torch::optim::AdamWOptions(1e-3));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  trainer.fit(model, optimizer, batches);
  trainer.evaluate(model, batches);
  trainer.finalize(model);
}

int main() {
  static_assert(FTOPT_GRID_N <= Grid::valid_size<ftopt::models::ViT>());
  hana::for_each(hana::take_front(Grid::valid<ftopt::models::ViT>(), hana::size_c<FTOPT_GRID_N>), [](auto c) {
    hana::unpack(c, [](auto... t) { use<ftopt::Trainer<typename decltype(t)::type...>>(); });
  });
}
