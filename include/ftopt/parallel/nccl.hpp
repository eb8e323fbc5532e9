#pragma once
/// NCCL, parallel::Group's backend for CUDA tensors, compiled into a program by including this
/// header in one of its source files (<ftopt.hpp> leaves it out: parallel/support/group.hpp).
/// It includes parallel::Ddp's header, <ftopt/parallel/ddp.hpp>, which <ftopt.hpp> leaves out too.
///
/// NCCL compiles in where LibTorch was built with it (USE_C10D_NCCL, set by the torch_cuda
/// target) and <nccl.h> is found. Without them the header registers why there is none, and
/// joining an NCCL group is an ftopt::Error that says so.

#include <ftopt/parallel/ddp.hpp>
#include <ftopt/parallel/support/environment.hpp>
#include <ftopt/parallel/support/group.hpp>

#if defined(USE_C10D_NCCL) && __has_include(<nccl.h>)
#define FTOPT_WITH_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ftopt::parallel::detail {

#if defined(FTOPT_WITH_NCCL)

inline c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                               int world_size, const GroupOptions& options,
                                                               const Environment&) {
  auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
  nccl_options->timeout = options.timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, nccl_options);
  return as_process_group(store, rank, world_size, nccl, Backend::Nccl);
}

inline const bool nccl_registered = register_backend(Backend::Nccl, &make_nccl_group, nullptr);

#else

inline const bool nccl_registered =
    register_backend(Backend::Nccl, nullptr, "NCCL needs a CUDA LibTorch built with it and <nccl.h>");

#endif

} // namespace ftopt::parallel::detail
