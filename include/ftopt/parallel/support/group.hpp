#pragma once
/// parallel::Group: a joined c10d process group (Gloo on CPU, NCCL on CUDA builds) and what
/// ftopt needs around it: collectives on tensor lists, a heartbeat per rank in the TCPStore,
/// and errors that say which rank was lost.
///
///   auto group = parallel::Group::join(parallel::Environment::from_env(), {.backend = Backend::Gloo});
///   group->allreduce_sum(tensors);
///
/// Joining: rank 0 hosts a c10d::TCPStore at MASTER_ADDR:MASTER_PORT and waits for WORLD_SIZE
/// processes; the others connect to it. A process alone (WORLD_SIZE 1) uses an in-memory
/// store. Every wait is bounded by `timeout` (PyTorch's default is 30 minutes).
///
/// Backends: a program has the backends whose headers one of its source files includes,
/// <ftopt/parallel/gloo.hpp> and <ftopt/parallel/nccl.hpp>. <ftopt.hpp> leaves them out, as
/// <torch/torch.h> leaves out c10d: ProcessGroupGloo.hpp and ProcessGroupNCCL.hpp (with the CUDA
/// runtime's headers) add to every TU's compile time and memory on top of c10d's ProcessGroup
/// (scripts/tu_cost.sh; docs/build.md).
/// Each registers itself here when the program starts; join() with a backend the program lacks
/// is an ftopt::Error that names the header to include, or says why this build has none.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/types.h>

#include <ftopt/error.hpp>
#include <ftopt/parallel/support/environment.hpp>

namespace ftopt::parallel {

/// The c10d backend. Auto: NCCL for CUDA models, Gloo otherwise.
enum class Backend { Auto, Gloo, Nccl };

inline const char* to_string(Backend b) {
  switch (b) {
    case Backend::Gloo: return "gloo";
    case Backend::Nccl: return "nccl";
    case Backend::Auto: break;
  }
  return "auto";
}

struct GroupOptions {
  Backend backend = Backend::Gloo;  ///< Auto is resolved by the caller (Ddp from the model's device)
  /// Bounds joining (all ranks reaching the store) and every collective.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  /// How often each rank writes its heartbeat into the store (multi-process groups only).
  std::chrono::milliseconds heartbeat = std::chrono::milliseconds(500);
};

namespace detail {

/// A backend's process group over a joined store.
using MakeGroup = c10::intrusive_ptr<c10d::ProcessGroup> (*)(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                             int world_size, const GroupOptions& options,
                                                             const Environment& env);

/// What a backend header registered: `make` where this build has the backend, else `absent`,
/// why not. A backend no header registered has neither.
struct BackendEntry {
  MakeGroup make = nullptr;
  const char* absent = nullptr;
};

inline BackendEntry& backend_entry(Backend b) {
  static BackendEntry entries[3];
  return entries[static_cast<int>(b)];
}

/// Called by the backend headers' registrations, before main.
inline bool register_backend(Backend b, MakeGroup make, const char* absent) {
  backend_entry(b) = {make, absent};
  return true;
}

/// The first line of an exception's message (c10::Error appends a C++ backtrace).
inline std::string first_line(const std::exception& e) {
  std::string text = e.what();
  return text.substr(0, text.find('\n'));
}

/// c10d and Gloo say "Timeout", "timed out" or "Timed out" when a wait ran past its limit.
inline bool timed_out(const std::exception& e) {
  const std::string text = first_line(e);
  return text.find("imeout") != std::string::npos || text.find("imed out") != std::string::npos;
}

/// Python ignores SIGPIPE; a C++ program by default dies of it when a peer's socket closes
/// mid-write, before any error could be reported. Ignore it unless the program set a handler.
inline void ignore_sigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
}

/// A c10d process group from a backend object: on LibTorch 1.x ProcessGroupGloo/NCCL are
/// process groups; on 2.x they are c10d::Backend objects that a ProcessGroup wraps.
template <class PG = c10d::ProcessGroup, class B>
c10::intrusive_ptr<PG> as_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          c10::intrusive_ptr<B> backend, Backend kind) {
  if constexpr (std::is_base_of_v<PG, B>) {
    return backend;
  } else {
    using Type = typename PG::BackendType;
    const Type type = kind == Backend::Nccl ? Type::NCCL : Type::GLOO;
    const c10::DeviceType device = kind == Backend::Nccl ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
    c10::intrusive_ptr<PG> group;
    if constexpr (std::is_constructible_v<PG, c10::intrusive_ptr<c10d::Store>, int, int>)
      group = c10::make_intrusive<PG>(store, rank, size);
    else
      group = c10::make_intrusive<PG>(store, rank, size, c10::make_intrusive<typename PG::Options>(to_string(kind)));
    group->setBackend(device, type, backend);
    group->setDefaultBackend(type);
    return group;
  }
}

} // namespace detail

/// Whether this program can join a group over `b`: its header is included in one of the
/// program's source files and this build of LibTorch has it.
inline bool has_backend(Backend b) { return b != Backend::Auto && detail::backend_entry(b).make != nullptr; }

class Group {
public:
  /// Joins the process group this process's environment describes. Errors name MASTER_ADDR,
  /// MASTER_PORT, RANK and WORLD_SIZE: a store nobody hosts, fewer processes than WORLD_SIZE.
  static std::shared_ptr<Group> join(const Environment& env, const GroupOptions& options) {
    env.validate();
    detail::ignore_sigpipe();
    ftopt::detail::check(options.backend != Backend::Auto,
                         "parallel::Group::join: resolve Backend::Auto to gloo or nccl first");
    const detail::BackendEntry& backend = detail::backend_entry(options.backend);
    const char* name = to_string(options.backend);
    ftopt::detail::check(backend.make || backend.absent, "parallel::Group::join: the ", name,
                         " backend is not in this program: include <ftopt/parallel/", name,
                         ".hpp> in one of its source files (<ftopt.hpp> leaves c10d's backends out, as "
                         "<torch/torch.h> does)");
    ftopt::detail::check(backend.make != nullptr, "parallel::Group::join: this build has no ", name, " backend (",
                         backend.absent, ")");
    ftopt::detail::check(options.timeout.count() > 0, "parallel::Group::join: timeout must be positive, got ",
                         options.timeout.count(), " ms");
    // One group per process and environment, kept until the process exits, as torch.distributed's
    // default group: a later Ddp in the same process shares it. (Leaving and re-joining would
    // race: rank 0 must close its store and host a new one on the same port while the other
    // ranks may already be knocking on the old one.)
    static std::mutex mutex;
    static std::map<std::string, std::shared_ptr<Group>> joined;
    const std::string key = env.master() + "/" + std::to_string(env.rank) + "/" + std::to_string(env.world_size) +
                            "/" + to_string(options.backend);
    std::lock_guard lock(mutex);
    if (auto existing = joined[key]) return existing;
    auto group = std::shared_ptr<Group>(new Group(env, options));
    group->connect();
    joined[key] = group;
    return group;
  }

  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() { stop_heartbeat(); }

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const Environment& environment() const { return env_; }
  Backend backend() const { return options_.backend; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  const c10::intrusive_ptr<c10d::ProcessGroup>& get() const { return group_; }

  /// Sums each tensor over the ranks, in place.
  void allreduce_sum(std::vector<torch::Tensor>& tensors) {
    if (world_size() == 1) return;
    guard("all-reduce", [&] { group_->allreduce(tensors)->wait(); });
  }

  /// Copies root's tensors into every rank's, in place. Tensors of one dtype and device go
  /// in one flat message.
  void broadcast(std::vector<torch::Tensor> tensors, int root = 0) {
    if (world_size() == 1 || tensors.empty()) return;
    torch::NoGradGuard no_grad;
    guard("broadcast", [&] {
      for (auto& same : by_dtype_and_device(tensors)) {
        std::vector<torch::Tensor> flat{at::flatten_dense_tensors(same)};
        c10d::BroadcastOptions options;
        options.rootRank = root;
        group_->broadcast(flat, options)->wait();
        if (rank() == root) continue;
        auto parts = at::unflatten_dense_tensors(flat.front(), same);
        for (std::size_t i = 0; i < same.size(); ++i) same[i].copy_(parts[i]);
      }
    });
  }

  void barrier() {
    if (world_size() == 1) return;
    guard("barrier", [&] { group_->barrier()->wait(); });
  }

  /// Runs f; if it throws, says which rank was lost. A rank whose heartbeat stopped is named;
  /// a timeout with every rank alive is called a hang. Anything else is rethrown unchanged.
  template <class F>
  void guard(const char* what, F&& f) {
    try {
      f();
    } catch (const ftopt::Error&) {
      throw;
    } catch (const std::exception& e) {
      std::string diagnosis = diagnose();
      const std::string message = detail::first_line(e);
      if (diagnosis.empty() && !detail::timed_out(e)) throw;
      if (diagnosis.empty())
        diagnosis = "every rank is still alive, so one is hung or took a different path (waited " +
                    std::to_string(options_.timeout.count()) + " ms, the timeout)";
      ftopt::detail::fail("parallel (rank ", rank(), " of ", world_size(), ", ", to_string(backend()),
                          "): ", what, " failed: ", diagnosis, ". ", to_string(backend()), " said: ", message);
    }
  }

  /// The ranks whose heartbeat did not advance over three heartbeat periods, as a sentence;
  /// empty when all beat. Blocks for those periods; used on the error path only.
  std::string diagnose() {
    if (world_size() == 1 || !store_) return "";
    try {
      const auto before = beats();
      std::this_thread::sleep_for(3 * options_.heartbeat);
      const auto after = beats();
      std::string lost;
      for (int r = 0; r < world_size(); ++r)
        if (r != rank() && before[r] == after[r]) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
      if (lost.empty()) return "";
      return "lost rank " + lost + " (its heartbeat in the store stopped)";
    } catch (const std::exception&) {
      return rank() == 0 ? "the store is unreachable"
                         : "lost rank 0 (the store it hosts at " + env_.master() + " is unreachable)";
    }
  }

private:
  Group(const Environment& env, const GroupOptions& options) : env_(env), options_(options) {}

  static std::string beat_key(int rank) { return "ftopt/heartbeat/" + std::to_string(rank); }

  void connect() {
    if (world_size() == 1) {
      store_ = c10::make_intrusive<c10d::HashStore>();
    } else {
      c10d::TCPStoreOptions store_options;
      store_options.port = env_.master_port;
      store_options.isServer = rank() == 0;
      store_options.numWorkers = static_cast<std::size_t>(world_size());
      store_options.waitWorkers = true;
      store_options.timeout = options_.timeout;
      try {
        store_ = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, store_options);
      } catch (const std::exception& e) {
        if (rank() == 0 && !detail::timed_out(e))
          ftopt::detail::fail("parallel: rank 0 cannot host the store at MASTER_ADDR:MASTER_PORT=", env_.master(), ": ",
                              detail::first_line(e));
        if (rank() == 0) not_all_joined(e);
        ftopt::detail::fail("parallel: rank ", rank(), " could not reach the store at MASTER_ADDR:MASTER_PORT=",
                            env_.master(), " within ", options_.timeout.count(),
                            " ms (is rank 0 running, and are the address and port right?): ", detail::first_line(e));
      }
    }
    try {
      group_ = make_group();
    } catch (const std::exception& e) {
      if (detail::timed_out(e)) not_all_joined(e);
      ftopt::detail::fail("parallel: rank ", rank(), " of WORLD_SIZE=", world_size(), " could not form the ",
                          to_string(backend()), " group through ", env_.master(), ": ", detail::first_line(e));
    }
    if (world_size() > 1) start_heartbeat();
  }

  [[noreturn]] void not_all_joined(const std::exception& e) const {
    ftopt::detail::fail("parallel: rank ", rank(), " formed no ", to_string(backend()), " group through ",
                        "MASTER_ADDR:MASTER_PORT=", env_.master(), ": not all WORLD_SIZE=", world_size(),
                        " processes joined within ", options_.timeout.count(),
                        " ms (is WORLD_SIZE right, and did every rank start?): ", detail::first_line(e));
  }

  c10::intrusive_ptr<c10d::ProcessGroup> make_group() {
    return detail::backend_entry(options_.backend).make(store_, rank(), world_size(), options_, env_);
  }

  static std::vector<std::vector<torch::Tensor>> by_dtype_and_device(const std::vector<torch::Tensor>& tensors) {
    std::vector<std::vector<torch::Tensor>> groups;
    for (const auto& t : tensors) {
      auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
        return g.front().scalar_type() == t.scalar_type() && g.front().device() == t.device();
      });
      if (same == groups.end()) groups.push_back({t});
      else same->push_back(t);
    }
    return groups;
  }

  std::vector<std::string> beats() {
    std::vector<std::string> values(static_cast<std::size_t>(world_size()));
    for (int r = 0; r < world_size(); ++r) {
      if (r == rank() || !store_->check({beat_key(r)})) continue;
      auto bytes = store_->get(beat_key(r));
      values[static_cast<std::size_t>(r)].assign(bytes.begin(), bytes.end());
    }
    return values;
  }

  void start_heartbeat() {
    heartbeat_ = std::thread([this] {
      std::unique_lock lock(beat_mutex_);
      for (std::uint64_t n = 0; !stopping_; ++n) {
        try {
          const std::string value = std::to_string(n);
          store_->set(beat_key(rank()), std::vector<std::uint8_t>(value.begin(), value.end()));
        } catch (const std::exception&) {
          return;  // the store is gone; diagnose() reports it
        }
        beat_cv_.wait_for(lock, options_.heartbeat, [this] { return stopping_; });
      }
    });
  }

  void stop_heartbeat() {
    if (!heartbeat_.joinable()) return;
    {
      std::lock_guard lock(beat_mutex_);
      stopping_ = true;
    }
    beat_cv_.notify_all();
    heartbeat_.join();
  }

  Environment env_;
  GroupOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::thread heartbeat_;
  std::mutex beat_mutex_;
  std::condition_variable beat_cv_;
  bool stopping_ = false;
};

} // namespace ftopt::parallel
