#pragma once
/// Helpers for ftopt's custom autograd functions.

#include <ATen/core/Tensor.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/ArrayRef.h>

namespace ftopt::detail {

/// Autocast kept out of a kernel that is given every tensor in the dtype it computes in (and would
/// otherwise have autocast form a weight update in bf16).
inline c10::impl::ExcludeDispatchKeyGuard no_autocast() {
  return c10::impl::ExcludeDispatchKeyGuard(
      c10::DispatchKeySet({c10::DispatchKey::AutocastCPU, c10::DispatchKey::AutocastCUDA}));
}

/// The tensor as a list: itself, or nothing when undefined (layers without bias). Autograd takes
/// no undefined tensor as a custom function's input; one in a list is none.
inline at::TensorList present(const at::Tensor& t) {
  return t.defined() ? at::TensorList(t) : at::TensorList();
}

} // namespace ftopt::detail
