"""torch.ao.quantization.quantize_dynamic against ftopt's quant::DynamicInt8, on the same float
weights: an MLP 784-256-128-10 (as nn.Sequential, so its state dict is models::Mlp's) converted
with torch.ao's default dynamic qconfig (per-tensor qint8 weights) and its per-channel one, both
on the quantized engine Python uses (ftopt is told the same one).

Compared: the float outputs (1e-5, float32 on the same ATen); the int8 weights (bit for bit: both
apply the same min/max observer formula) and their scales (bit for bit as float32, see below);
and the relative output error of each against the float model, where ftopt's may be at most
1.05x torch.ao's + 1e-6 (slack for a rounding that falls the other way through different code;
here both run quantized::linear_dynamic on the same engine, so their outputs are also compared
directly, to 1e-5). torch.ao.quantization's deprecation warning (it points to torchao) is
silenced: the eager API still works in this torch."""
import copy
import warnings

import torch
import torch.nn as nn

warnings.filterwarnings("ignore", message="torch.ao.quantization is deprecated")
from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic  # noqa: E402

from peer import Mlp, Peer  # noqa: E402

peer = Peer("quant")


model = Mlp(784, [256, 128], 10).eval()
peer.save("mlp.safetensors", model.state_dict())
x = torch.rand(64, 1, 28, 28)  # pixel-like: non-negative, as after ToTensor
peer.save("input.safetensors", {"x": x})
with torch.no_grad():
    y = model(x)
engine = torch.backends.quantized.engine
print(f"  quantized engine {engine} (supported: {', '.join(torch.backends.quantized.supported_engines)})")


def relative_error(got, want):
    return ((got - want).norm() / want.norm()).item()


for granularity, qconfig in (("per_tensor", default_dynamic_qconfig), ("per_channel", per_channel_dynamic_qconfig)):
    quantized = quantize_dynamic(copy.deepcopy(model), {nn.Linear: qconfig}, dtype=torch.qint8)
    with torch.no_grad():
        y_ao = quantized(x)
    peer.ftopt("quantize", granularity, engine)
    got = peer.load(f"{granularity}.ftopt.safetensors")
    peer.close(f"{granularity}: ftopt's float output", got["float"], y, atol=1e-5)

    for i in (0, 2, 4):
        w = quantized.layers[i].weight()
        peer.equal(f"{granularity}: layers.{i} int8 weight", got[f"layers.{i}.int_repr"], w.int_repr())
        scales = w.q_scale() if granularity == "per_tensor" else w.q_per_channel_scales()
        # torch.ao's observer divides in float32, ftopt in float64: the same scale once rounded to
        # the float32 the kernels use (ftopt's float64 scale is within 1 ulp of float32 of it).
        peer.equal(f"{granularity}: layers.{i} weight scales, as float32", got[f"layers.{i}.scales"].float(),
                   torch.as_tensor(scales, dtype=torch.float64).reshape(-1).float())

    error_ao, error_ftopt = relative_error(y_ao, y), relative_error(got["int8"], y)
    bound = 1.05 * error_ao + 1e-6
    peer.check(f"{granularity}: ftopt's relative error <= 1.05x torch.ao's + 1e-6", error_ftopt <= bound,
               f"(ftopt {error_ftopt:.4g}, torch.ao {error_ao:.4g}, bound {bound:.4g})")
    peer.check(f"{granularity}: ftopt's output is quantized (its error is over a tenth of torch.ao's)",
               error_ftopt > 0.1 * error_ao, f"(ftopt {error_ftopt:.4g})")
    peer.close(f"{granularity}: ftopt's int8 output vs torch.ao's", got["int8"], y_ao, atol=1e-5)
peer.done()
