"""State dicts that ftopt writes, read by PyTorch's own readers. The Python side makes tensors of
every dtype both writers hold (with NaN, infinities, -0 and subnormals among the floats, the
extremes among the integers), a 0-dim scalar and empty tensors, under dotted model-style names
and in an order that is not sorted; ftopt reads them, adds views that are not contiguous (a
transpose, a strided slice, a slice with a storage offset, an expand) and two entries sharing one
tensor, and writes everything with weights::save_file as torch.save's zip (read back with
torch.load(weights_only=True), also memory-mapped) and as safetensors (safetensors.torch's
load_file). Then models::resnet18 saved by weights::save loads into torchvision's resnet18 with
load_state_dict(strict=True), in either format, and gives ftopt's logits.

Tolerances: none for the files (the bytes must come back: compared bit for bit, so NaN payloads
and -0 count); 1e-5 on the resnet18 logits (float32, same ATen, as tests/peer/resnet.py)."""
import json
import struct

import torch
import torchvision
from safetensors.torch import load_file

from peer import Peer

peer = Peer("state_dicts")


def floats(dtype, n=12):
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0], dtype=dtype)
    tiny = torch.tensor([torch.finfo(dtype).tiny / 4, torch.finfo(dtype).max, torch.finfo(dtype).min], dtype=dtype)
    return torch.cat([specials, tiny, torch.randn(n, dtype=torch.float64).to(dtype)])


def ints(dtype, n=12):
    info = torch.iinfo(dtype)
    ends = torch.tensor([info.min, info.max, 0, -1 if info.min < 0 else 1], dtype=dtype)
    return torch.cat([ends, torch.randint(info.min, info.max, (n,), dtype=dtype)])


# Python makes these; the order is a model's (weight before bias, layer 10 after layer 2), not sorted.
inputs = {
    "encoder.layer.2.attention.query.weight": torch.randn(6, 4),
    "encoder.layer.2.attention.query.bias": floats(torch.float32),
    "encoder.layer.10.norm.weight": floats(torch.float64).reshape(4, 5),
    "encoder.layer.10.norm.bias": floats(torch.bfloat16).reshape(2, 2, 5),
    "embeddings.half": floats(torch.float16),
    "bn.num_batches_tracked": torch.tensor(123456789012, dtype=torch.int64),
    "index.int64": ints(torch.int64),
    "index.int32": ints(torch.int32).reshape(4, 4),
    "codes.int8": ints(torch.int8),
    "codes.uint8": torch.arange(256, dtype=torch.uint8).reshape(16, 16),
    "mask": torch.rand(3, 7) > 0.5,
    "empty.float": torch.empty(0, 3),
    "empty.int64": torch.empty(0, dtype=torch.int64),
    "grid": torch.arange(35, dtype=torch.float32).reshape(5, 7) / 7,
}
peer.save("input.safetensors", inputs)
# What ftopt adds (views of the inputs and a second name for one; see state_dicts.cpp), and the
# order it writes everything in: these after the first five inputs.
grid = inputs["grid"]
made_by_ftopt = {
    "views.transposed": grid.t(),
    "views.strided": grid[:, ::3],
    "views.offset": grid[2:],
    "views.expanded": inputs["encoder.layer.2.attention.query.bias"][:4].expand(3, 4),
    "tied.decoder.weight": inputs["encoder.layer.2.attention.query.weight"],
}
expected = dict(inputs)
expected.update(made_by_ftopt)
order = list(inputs)[:5] + list(made_by_ftopt) + list(inputs)[5:]
expected = {name: expected[name] for name in order}
with open(peer.path("order.txt"), "w") as f:
    f.write("\n".join(order) + "\n")
views = [t for n, t in made_by_ftopt.items() if n.startswith("views.")]
peer.check("the views are not contiguous (or have an offset)",
           all(not t.is_contiguous() or t.storage_offset() > 0 for t in views))

peer.ftopt("write", "order.txt")


def bits(t):
    """The tensor's bytes, for a comparison in which NaN equals itself and -0 differs from 0."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def identical(what, loaded, ordered=True):
    if ordered:
        peer.check(f"{what}: keys, in ftopt's order", list(loaded) == order, f"({len(loaded)} keys)")
    else:
        peer.check(f"{what}: keys", sorted(loaded) == sorted(order), f"({len(loaded)} keys)")
    for name, want in expected.items():
        got = loaded.get(name)
        if got is None:
            peer.check(f"{what}: {name}", False, "(missing)")
            continue
        same = got.dtype == want.dtype and got.shape == want.shape and torch.equal(bits(got), bits(want))
        peer.check(f"{what}: {name}", same, f"({got.dtype} {tuple(got.shape)} vs {want.dtype} {tuple(want.shape)})")


identical("torch.load", torch.load(peer.path("state.ftopt.pt"), weights_only=True))
mapped = torch.load(peer.path("state.ftopt.pt"), weights_only=True, mmap=True)
identical("torch.load(mmap=True)", mapped)
# load_file returns the tensors in the order of their data, but empty tensors share an offset
# with their neighbour and come in any order among them: the order is checked on the file itself
# (writers lay tensors out in their order, and ftopt's reader keeps the file's order).
identical("safetensors load_file", load_file(peer.path("state.ftopt.safetensors")), ordered=False)
with open(peer.path("state.ftopt.safetensors"), "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]), object_pairs_hook=lambda kv: kv)
by_offset = [n for n, v in sorted(((n, dict(v)) for n, v in header if n != "__metadata__"),
                                  key=lambda item: item[1]["data_offsets"][0])]
peer.check("safetensors: tensors laid out in the state dict's order", by_offset == order)

# models::resnet18 -> torchvision's resnet18
x = torch.randn(2, 3, 64, 64)
peer.save("resnet_input.safetensors", {"x": x})
peer.ftopt("resnet18")
ftopt_logits = peer.load("resnet18_logits.ftopt.safetensors")["logits"]
readers = (("resnet18.ftopt.pt", lambda p: torch.load(p, weights_only=True)), ("resnet18.ftopt.safetensors", load_file))
for file, read in readers:
    state = read(peer.path(file))
    model = torchvision.models.resnet18(num_classes=10)
    try:
        model.load_state_dict(state, strict=True)
        problem = ""
    except RuntimeError as e:
        problem = str(e).splitlines()[0]
    peer.check(f"{file}: torchvision resnet18 load_state_dict(strict=True)", not problem, problem)
    if file.endswith(".pt"):
        peer.check(f"{file}: keys in torchvision's order", list(state) == list(model.state_dict()))
    model.eval()
    with torch.no_grad():
        logits = model(x)
    peer.close(f"{file}: torchvision logits (torchvision {torchvision.__version__})", ftopt_logits, logits, atol=1e-5)
    stats = [t for n, t in state.items() if n.endswith("running_var")]
    peer.check(f"{file}: batch-norm statistics are not the defaults",
               all((t - 1).abs().max() > 0.1 for t in stats), f"({len(stats)} running_var)")
peer.done()
