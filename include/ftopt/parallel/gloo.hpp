#pragma once
/// Gloo, parallel::Group's backend for CPU tensors, compiled into a program by including this
/// header in one of its source files (<ftopt.hpp> leaves it out: parallel/support/group.hpp).
/// It includes parallel::Ddp's header, <ftopt/parallel/ddp.hpp>, which <ftopt.hpp> leaves out too.
///
/// Gloo compiles in where LibTorch's include folders have Gloo's headers (Debian's libgloo-dev;
/// FTOPT_WITH_GLOO, set by our CMake). Without them the header registers why there is none,
/// and joining a Gloo group is an ftopt::Error that says so.

#include <cstdlib>
#include <memory>
#include <string>

#include <ftopt/parallel/ddp.hpp>
#include <ftopt/parallel/support/environment.hpp>
#include <ftopt/parallel/support/group.hpp>

#if defined(FTOPT_WITH_GLOO)
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // ProcessGroupGloo.hpp is empty without it; LibTorch's CMake does not set it
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace ftopt::parallel::detail {

#if defined(FTOPT_WITH_GLOO)

/// Gloo's network device: the interface GLOO_SOCKET_IFNAME names (as in PyTorch), the
/// loopback address when MASTER_ADDR is local, else the address this host's name resolves to.
inline std::shared_ptr<::gloo::transport::Device> gloo_device(const Environment& env) {
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface && *interface)
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  const std::string& addr = env.master_addr;
  if (addr == "localhost" || addr.rfind("127.", 0) == 0) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

inline c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                               int world_size, const GroupOptions& options,
                                                               const Environment& env) {
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
  gloo_options->devices.push_back(gloo_device(env));
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, gloo_options);
  return as_process_group(store, rank, world_size, gloo, Backend::Gloo);
}

inline const bool gloo_registered = register_backend(Backend::Gloo, &make_gloo_group, nullptr);

#else

inline const bool gloo_registered =
    register_backend(Backend::Gloo, nullptr,
                     "Gloo's headers were not found in LibTorch's include folders; on Debian install libgloo-dev "
                     "and reconfigure");

#endif

} // namespace ftopt::parallel::detail
