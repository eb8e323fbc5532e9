#pragma once
/// peft::kernel::adapter_linears: frozen linear layers that share one input, each with at most one
/// trainable update of its weight, computed as one GEMM over the updated weights W' for the
/// forward and again for the input's gradient. The one autograd kernel under every adapter that
/// changes a weight: LoRA and rsLoRA (W + s B A), DoRA (the rows of W + s B A rescaled), VeRA (a
/// low-rank term of scaled frozen matrices), IA3's feedforward scaling (W diag(l)), over a frozen
/// weight in any float dtype or packed in a storage format (QLoRA's int8 and NF4).
///
/// A low-rank term's gradients come from the rank-r product saved in the forward:
///
///     forward    u = x A^T             y  = x W'^T + b
///     backward   dx = dy W'            dB = s dy^T u         dA = s (dy B)^T x
///
/// Layer by layer the same LoRA forward is x W^T, A x, B(s A x) and their sum, and its backward
/// two more skinny GEMMs (through B, then through A back to x) and the sum's gradient: per layer
/// this saves two rank-r GEMMs over the token dimension and two full-width elementwise passes.
///
/// A DoRA term (a magnitude m per output row; PEFT's use_dora without dropout) rescales W''s rows
/// by c = m / n, n = ||W'||_row taken as a constant (PEFT detaches it), so y = x (c W')^T + b is
/// still one GEMM. Its gradients come from G = dy^T x, the gradient W' would have:
///
///     backward   dx = dy (c W')        dm = rowsum(G * W') / n
///                dB = s (c G) A^T      dA = s B^T (c G)
///
/// one GEMM as wide as the layer instead of PEFT's three products and five full-width
/// elementwise passes (base, scaled, sum, and their gradients), in the forward and the backward.
/// A plain term whose rank is wide for its layer (in out < 2 r (in + out) multiply-adds per token,
/// e.g. VeRA's r 256 on 128-wide layers) takes its gradients from G too (c = 1), and u is not kept.
///
/// A column scaling l (IA3 on a feedforward layer, y = W (x * l) + b) runs alone:
///
///     forward    y = x (W diag(l))^T + b
///     backward   h = dy W          dx = h * l          dl = sum over tokens of h * x
///
/// where PEFT's form multiplies x by l first (a float32 product as large as the input and its
/// cast back, and the gradients of both). dx and dl are PEFT's to the bit (h * l taken in float32
/// and rounded once to the input's dtype; dl's products of bf16 values exact in float32).
///
/// W' is formed in the dtype the update is added in (a float weight's own, float32 for a packed
/// one) and cast once to the compute dtype (the input's: bf16 under autocast), as autocast casts W
/// alone. Over float weights the kernel keeps W' for the backward; over packed ones it keeps only
/// the packed weights and forms W' again there (torchtune's linear_nf4 does the same), so no float
/// copy of a quantized base outlives its GEMM. Measured: bench_peft, bench_step_parts
/// (docs/benchmarks.md).
///
///   std::vector<peft::kernel::Layer> layers = {{.base = kernel::FrozenBase::dense(q->weight), .term = lora_term},
///                                              {.base = kernel::FrozenBase::dense(k->weight)}};
///   at::Tensor qk = peft::kernel::adapter_linears(layers, bias, nn::autocast_input(x));  // [*, out_q + out_k]

#include <cstdint>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>

#include <ftopt/detail/autograd.hpp>
#include <ftopt/error.hpp>
#include <ftopt/storage/packed.hpp>

namespace ftopt::peft::kernel {

/// A layer's frozen weight as the kernel reads it: the float tensor itself (any dtype), or a
/// weight packed in a storage format and dequantized where it is needed.
class FrozenBase {
public:
  using Dequantize = at::Tensor (*)(const storage::PackedWeight&, at::ScalarType);

  static FrozenBase dense(const at::Tensor& weight) {
    FrozenBase base;
    base.dense_ = weight;
    return base;
  }
  template <storage::Format F>
  static FrozenBase packed(const storage::PackedWeight& packed) {
    FrozenBase base;
    base.packed_ = packed;
    base.dequantize_ = &F::dequantize;
    return base;
  }

  bool is_packed() const { return dequantize_ != nullptr; }
  std::int64_t rows() const { return is_packed() ? packed_.shape[0] : dense_.size(0); }
  /// The weight in `dtype`.
  at::Tensor in(at::ScalarType dtype) const { return is_packed() ? dequantize_(packed_, dtype) : dense_.to(dtype); }
  /// The weight in the dtype an update is added in: a float weight's own, float32 for a packed one.
  at::Tensor for_update() const { return is_packed() ? dequantize_(packed_, at::kFloat) : dense_; }

private:
  at::Tensor dense_;
  storage::PackedWeight packed_;
  Dequantize dequantize_ = nullptr;
};

/// A trainable low-rank update s B A of a weight ([r, in] and [out, r]); with a magnitude m [out]
/// (DoRA) the rows of W + s B A rescaled by m over their norms.
struct LowRank {
  at::Tensor a, b;
  double scaling = 1;
  at::Tensor magnitude;  ///< DoRA's m; undefined for a plain term
};

/// A trainable scaling of the weight's columns, W diag(l) (IA3's feedforward vector, [in] in any
/// shape with that many entries).
struct Columns {
  at::Tensor scale;
};

using Term = std::variant<std::monostate, LowRank, Columns>;

/// One layer of a group: its frozen base and its update, or none (a folded branch, or a layer
/// with nothing attached).
struct Layer {
  FrozenBase base;
  Term term;
};

namespace detail {

/// The group without its tensors that train, for the backward: each layer's base and width, and
/// where its term's tensors are in the kernel's inputs.
struct Plan : torch::CustomClassHolder {
  enum class Kind : std::uint8_t { none, low_rank, dora, columns };
  struct Entry {
    FrozenBase base;
    Kind kind = Kind::none;
    double scaling = 1;
    std::size_t term = 0;       ///< the index of its A and B (in layer order), or of its column scale
    std::size_t magnitude = 0;  ///< DoRA's index into the magnitudes
    at::ScalarType param_dtype = at::kFloat;  ///< its trained tensors' dtype
  };
  std::vector<Entry> layers;
  bool keeps_weight = true;  ///< every base a float one: W' is kept for the backward
};

/// The tensors that train, as the kernel's inputs (each list one input per tensor).
struct Trained {
  std::vector<at::Tensor> as, bs, magnitudes, columns;
};

/// W'_i in `dtype` (the norm a DoRA term takes pushed onto `norms`).
inline at::Tensor updated_weight(const Plan::Entry& layer, const Trained& t, at::ScalarType dtype,
                                 std::vector<at::Tensor>* norms = nullptr) {
  using Kind = Plan::Kind;
  if (layer.kind == Kind::none) return layer.base.in(dtype);
  at::Tensor w = layer.base.for_update();
  const auto own = w.scalar_type();
  if (layer.kind == Kind::columns) return (w * t.columns[layer.term].reshape({1, -1})).to(dtype);
  w = at::addmm(w, t.bs[layer.term].to(own), t.as[layer.term].to(own), /*beta=*/1, /*alpha=*/layer.scaling);
  if (layer.kind == Kind::dora) {
    const at::Tensor n = at::linalg_vector_norm(w, 2, {1});
    w = w * (t.magnitudes[layer.magnitude] / n).unsqueeze(1);
    if (norms) norms->push_back(n);
  }
  return w.to(dtype);
}

/// Every layer's W' stacked, in `dtype`.
inline at::Tensor updated_weights(const Plan& plan, const Trained& t, at::ScalarType dtype,
                                  std::vector<at::Tensor>* norms = nullptr) {
  std::vector<at::Tensor> stacked;
  for (const auto& layer : plan.layers) stacked.push_back(updated_weight(layer, t, dtype, norms));
  return stacked.size() == 1 ? stacked[0] : at::cat(stacked);
}

/// Whether a plain term of rank r on an [out, in] layer takes its gradients from the layer-wide
/// product G = g^T x (in out multiply-adds per token) rather than from u = x A^T (2 r (in + out):
/// u, then dB = s g^T u, then dA = s (g B)^T x): for ranks wide for their layer, as VeRA's are.
inline bool grads_from_full_product(std::int64_t r, std::int64_t in, std::int64_t out) {
  return in * out < 2 * r * (in + out);
}

/// dA = s (g B)^T x and dB = s g^T u, in `param_dtype`, from the layer's output gradient g
/// [tokens, out], the input x [tokens, in], u = x A^T [tokens, r] and B [out, r] in the compute dtype.
inline std::pair<at::Tensor, at::Tensor> low_rank_grads(const at::Tensor& g, const at::Tensor& x, const at::Tensor& u,
                                                        const at::Tensor& b, double s, at::ScalarType param_dtype) {
  return {at::mm(at::mm(g, b).t(), x).to(param_dtype).mul_(s), at::mm(g.t(), u).to(param_dtype).mul_(s)};
}

/// dA = s B^T G and dB = s G A^T, from the gradient G of a merged weight W + s B A.
inline std::pair<at::Tensor, at::Tensor> grads_through(const at::Tensor& grad_w, const at::Tensor& a,
                                                       const at::Tensor& b, double s) {
  return {at::mm(b.t(), grad_w).mul_(s), at::mm(grad_w, a.t()).mul_(s)};
}

/// A DoRA term's dA, dB and dm from its layer's output gradient g and the input x in the compute
/// dtype, and its own tensors in theirs: with W' = W + s B A, c = m / n and G = g^T x,
/// dA = s B^T (c G), dB = s (c G) A^T, dm = rowsum(G W') / n.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> dora_grads(const at::Tensor& g, const at::Tensor& x,
                                                                 const at::Tensor& w, const at::Tensor& a,
                                                                 const at::Tensor& b, double s, const at::Tensor& m,
                                                                 const at::Tensor& n) {
  const at::Tensor grad_w = at::mm(g.t(), x).to(a.scalar_type());
  const at::Tensor dm = (grad_w * at::addmm(w.to(a.scalar_type()), b, a, /*beta=*/1, /*alpha=*/s)).sum(1).div_(n);
  const auto [da, db] = grads_through(grad_w.mul_((m / n).unsqueeze(1)), a, b, s);
  return {da, db, dm};
}

class AdapterLinearsFunction : public torch::autograd::Function<AdapterLinearsFunction> {
public:
  using Context = torch::autograd::AutogradContext;
  using Kind = Plan::Kind;

  /// input [*, in] in the compute dtype; bias the layers' biases stacked, or nothing; the terms'
  /// tensors where `plan` says. Returns the layers' outputs side by side, [*, sum out_i].
  static torch::autograd::variable_list forward(Context* ctx, const at::Tensor& input, at::TensorList bias,
                                                at::TensorList as, at::TensorList bs, at::TensorList magnitudes,
                                                at::TensorList columns, c10::intrusive_ptr<Plan> plan) {
    auto guard = ftopt::detail::no_autocast();
    const auto dtype = input.scalar_type();
    const Trained t{as.vec(), bs.vec(), magnitudes.vec(), columns.vec()};
    std::vector<at::Tensor> norms;
    const at::Tensor w = updated_weights(*plan, t, dtype, &norms);
    const at::Tensor y = at::linear(input, w, bias.empty() ? at::Tensor() : bias[0].to(dtype));
    // A narrow plain term's backward needs u = x A^T and B in the compute dtype; a wide one's
    // A and B as given; a DoRA term's A and B as given, m and n.
    std::vector<at::Tensor> narrow_as, saved_bs, extra;
    for (const auto& layer : plan->layers) {
      if (layer.kind == Kind::columns) {
        extra.push_back(columns[layer.term]);
        continue;
      }
      if (layer.kind == Kind::none) continue;
      const at::Tensor &a = as[layer.term], &b = bs[layer.term];
      if (layer.kind == Kind::dora) {
        saved_bs.push_back(b);
        extra.insert(extra.end(), {a, magnitudes[layer.magnitude], norms[layer.magnitude]});
      } else if (grads_from_full_product(a.size(0), input.size(-1), layer.base.rows())) {
        saved_bs.push_back(b);
        extra.push_back(a);
      } else {
        narrow_as.push_back(a);
        saved_bs.push_back(b.to(dtype));
      }
    }
    const at::Tensor u = narrow_as.empty() ? at::Tensor()
                                           : at::mm(input.reshape({-1, input.size(-1)}),
                                                    at::cat(narrow_as).to(dtype).t());  // [tokens, sum r_j]
    torch::autograd::variable_list saved{input, u, plan->keeps_weight ? w : at::Tensor()};
    saved.insert(saved.end(), saved_bs.begin(), saved_bs.end());
    saved.insert(saved.end(), extra.begin(), extra.end());
    if (!plan->keeps_weight) {  // to form W' again: every A, B and m as given
      saved.insert(saved.end(), as.begin(), as.end());
      saved.insert(saved.end(), bs.begin(), bs.end());
      saved.insert(saved.end(), magnitudes.begin(), magnitudes.end());
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["plan"] = c10::IValue::make_capsule(plan);
    ctx->saved_data["bias_dtype"] = bias.empty() ? dtype : bias[0].scalar_type();
    ctx->saved_data["counts"] = std::vector<std::int64_t>{static_cast<std::int64_t>(bias.size()),
                                                          static_cast<std::int64_t>(as.size()),
                                                          static_cast<std::int64_t>(magnitudes.size()),
                                                          static_cast<std::int64_t>(columns.size())};
    return {y};
  }

  static torch::autograd::variable_list backward(Context* ctx, torch::autograd::variable_list grad_outputs) {
    auto guard = ftopt::detail::no_autocast();
    const auto plan = c10::static_intrusive_pointer_cast<Plan>(ctx->saved_data["plan"].toCapsule());
    const auto counts = ctx->saved_data["counts"].toIntVector();
    const auto biases = static_cast<std::size_t>(counts[0]), terms = static_cast<std::size_t>(counts[1]),
               magnitudes = static_cast<std::size_t>(counts[2]), columns = static_cast<std::size_t>(counts[3]);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& u = saved[1];
    const auto dtype = input.scalar_type();
    std::int64_t width = 0;
    for (const auto& layer : plan->layers) width += layer.base.rows();
    const at::Tensor g = grad_outputs[0].to(dtype).reshape({-1, width});
    const at::Tensor x = input.reshape({-1, input.size(-1)});
    // One gradient per input of forward: input, the bias (if any), as..., bs..., magnitudes...,
    // columns..., the plan.
    torch::autograd::variable_list grads(1 + biases + 2 * terms + magnitudes + columns + 1);
    const std::size_t first_a = 1 + biases, first_b = first_a + terms, first_m = first_b + terms,
                      first_c = first_m + magnitudes;
    if (biases == 1 && ctx->needs_input_grad(1)) grads[1] = g.sum(0).to(ctx->saved_data["bias_dtype"].toScalarType());
    // The tensors saved after input, u and W': a B per low-rank term, then each term's own.
    std::size_t next_b = 3, next_extra = 3 + terms;
    if (plan->layers.size() == 1 && plan->layers[0].kind == Kind::columns) {
      const at::Tensor& scale = saved[next_extra];
      const at::Tensor h = at::mm(g, plan->layers[0].base.in(dtype));  // the gradient of x * l
      // dl first: its float32 temporaries are gone before dx is allocated.
      if (ctx->needs_input_grad(first_c))
        grads[first_c] = (h.to(scale.scalar_type()) * x).sum(0).view(scale.sizes());
      if (ctx->needs_input_grad(0)) {
        at::Tensor dx = at::empty_like(h);
        at::mul_out(dx, h, scale.reshape({1, -1}));  // in float32, rounded once into the input's dtype
        grads[0] = dx.view(input.sizes());
      }
      return grads;
    }
    std::int64_t row = 0, rank_begin = 0;
    for (const auto& layer : plan->layers) {
      const std::int64_t out = layer.base.rows();
      const at::Tensor g_i = g.narrow(1, row, out);
      row += out;
      if (layer.kind == Kind::none || layer.kind == Kind::columns) continue;
      const std::size_t j = layer.term;
      const at::Tensor& b = saved[next_b++];  // in the compute dtype; a DoRA or wide term's as given
      if (layer.kind == Kind::dora) {
        const auto* own = &saved[next_extra];  // A, m, n
        next_extra += 3;
        std::tie(grads[first_a + j], grads[first_b + j], grads[first_m + layer.magnitude]) =
            dora_grads(g_i, x, layer.base.for_update(), own[0], b, layer.scaling, own[1], own[2]);
      } else if (grads_from_full_product(b.size(1), x.size(1), out)) {
        const at::Tensor& a = saved[next_extra++];
        std::tie(grads[first_a + j], grads[first_b + j]) =
            grads_through(at::mm(g_i.t(), x).to(a.scalar_type()), a, b, layer.scaling);
      } else {
        const std::int64_t r = b.size(1);
        std::tie(grads[first_a + j], grads[first_b + j]) =
            low_rank_grads(g_i, x, u.narrow(1, rank_begin, r), b, layer.scaling, layer.param_dtype);
        rank_begin += r;
      }
    }
    if (ctx->needs_input_grad(0)) {
      at::Tensor w;
      if (plan->keeps_weight) {
        w = saved[2];
      } else {  // formed again from the packed bases and every A, B and m as given (the end of saved)
        const auto as_given = saved.end() - static_cast<std::ptrdiff_t>(2 * terms + magnitudes);
        const auto bs_given = as_given + static_cast<std::ptrdiff_t>(terms);
        const auto ms_given = bs_given + static_cast<std::ptrdiff_t>(terms);
        w = updated_weights(*plan, Trained{{as_given, bs_given}, {bs_given, ms_given}, {ms_given, saved.end()}, {}},
                            dtype);
      }
      grads[0] = at::mm(g, w).view(input.sizes());
    }
    return grads;
  }
};

} // namespace detail

/// The layers' outputs side by side ([*, sum out_i]) for an input in the compute dtype
/// (nn::autocast_input under autocast); `bias` the layers' biases stacked, or undefined. A column
/// scaling runs only in a group of one.
inline at::Tensor adapter_linears(std::span<const Layer> layers, const at::Tensor& bias, const at::Tensor& input) {
  using Plan = detail::Plan;
  auto plan = c10::make_intrusive<Plan>();
  detail::Trained t;
  for (const auto& layer : layers) {
    Plan::Entry entry{.base = layer.base};
    plan->keeps_weight = plan->keeps_weight && !layer.base.is_packed();
    if (const auto* low_rank = std::get_if<LowRank>(&layer.term)) {
      entry.kind = low_rank->magnitude.defined() ? Plan::Kind::dora : Plan::Kind::low_rank;
      entry.scaling = low_rank->scaling;
      entry.term = t.as.size();
      entry.param_dtype = low_rank->a.scalar_type();
      t.as.push_back(low_rank->a);
      t.bs.push_back(low_rank->b);
      if (low_rank->magnitude.defined()) {
        entry.magnitude = t.magnitudes.size();
        t.magnitudes.push_back(low_rank->magnitude);
      }
    } else if (const auto* columns = std::get_if<Columns>(&layer.term)) {
      ftopt::detail::check(layers.size() == 1, "peft::kernel::adapter_linears: a column scaling runs in a group of one");
      entry.kind = Plan::Kind::columns;
      plan->keeps_weight = false;  // its backward needs the base, not W'
      entry.term = t.columns.size();
      t.columns.push_back(columns->scale);
    }
    plan->layers.push_back(std::move(entry));
  }
  if (!at::GradMode::is_enabled()) {  // inference: the GEMM alone, nothing to keep
    auto guard = ftopt::detail::no_autocast();
    const auto dtype = input.scalar_type();
    return at::linear(input, detail::updated_weights(*plan, t, dtype), bias.defined() ? bias.to(dtype) : bias);
  }
  // As TensorLists, so that autograd counts each tensor as an input of its own.
  return detail::AdapterLinearsFunction::apply(input, ftopt::detail::present(bias), at::TensorList(t.as),
                                               at::TensorList(t.bs), at::TensorList(t.magnitudes),
                                               at::TensorList(t.columns), std::move(plan))[0];
}

} // namespace ftopt::peft::kernel
