"""transformers' ViTForImageClassification against ftopt's models::ViT. A small ViT with random
weights, written by save_pretrained (model.safetensors + config.json), loads into models::ViT
by name (strict: every tensor matches one of ftopt's) and gives the same logits as HF's eager
and SDPA attention; then one training step on the same batch (HF's own cross-entropy loss,
torch.optim.AdamW against torch::optim::AdamW with the same settings) gives the same loss,
gradients, AdamW moments and updated weights.

Tolerances: float32 through the same ATen on both sides, so only the order of floating-point
operations differs (HF's eager attention is matmul + softmax, ftopt's is SDPA): 1e-5 absolute on
values of order 1 (logits), 1e-6 on gradients and on the weights after the step (each moves by
about lr = 1e-2), 1e-7 on AdamW's first moment (0.15 g) and, on the second (0.01 g^2), 1e-8 plus
the gradients' 1e-6 carried through it (0.02 |g|max 1e-6). AdamW's eps is 1e-3 so
that the step depends on the gradient's size, not only on its sign (with eps << |g| the first
step is lr * sign(g), which would hide a wrong gradient)."""
import copy
import json

import torch
import transformers
from safetensors.torch import load_file
from transformers import ViTConfig, ViTForImageClassification

from peer import Peer

LR, BETAS, EPS, WEIGHT_DECAY = 1e-2, (0.85, 0.99), 1e-3, 0.05

peer = Peer("vit")
config = ViTConfig(image_size=28, patch_size=7, num_channels=1, hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=64, num_labels=10, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0, initializer_range=0.2, attn_implementation="sdpa")
model = ViTForImageClassification(config)
with torch.no_grad():  # HF's init leaves biases 0 and LayerNorms 1 / 0: make every tensor matter
    for name, p in model.named_parameters():
        if "layernorm" in name and name.endswith("weight"):
            p.add_(0.1 * torch.randn_like(p))
        elif name.endswith("bias"):
            p.copy_(0.1 * torch.randn_like(p))
model.save_pretrained(peer.path("hf_vit"))
print(f"  config.json: {json.load(open(peer.path('hf_vit/config.json')))['model_type']}, "
      f"transformers {transformers.__version__}, attention {model.config._attn_implementation}")

pixels = torch.randn(6, 1, 28, 28)
labels = torch.randint(0, 10, (6,))
peer.save("input.safetensors", {"pixels": pixels, "labels": labels})

model.eval()
eager = ViTForImageClassification.from_pretrained(peer.path("hf_vit"), attn_implementation="eager").eval()
with torch.no_grad():
    logits_sdpa = model(pixel_values=pixels).logits
    logits_eager = eager(pixel_values=pixels).logits

model.train()  # dropout is 0: the same computation, with training-mode code paths
optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
optimizer.zero_grad()
out = model(pixel_values=pixels, labels=labels)
out.loss.backward()
grads = {name: p.grad.clone() for name, p in model.named_parameters()}
optimizer.step()
state = {name: optimizer.state[p] for name, p in model.named_parameters()}

peer.ftopt("run", "hf_vit", LR, BETAS[0], BETAS[1], EPS, WEIGHT_DECAY)
got = peer.load("vit.ftopt.safetensors")

peer.close("logits vs HF eager attention (eval)", got["logits"], logits_eager, atol=1e-5)
peer.close("logits vs HF SDPA attention (eval)", got["logits"], logits_sdpa, atol=1e-5)
peer.check("logits are not trivial", logits_eager.std().item() > 0.1, f"(std {logits_eager.std().item():.3g})")
peer.close("training logits", got["train_logits"], out.logits, atol=1e-5)
peer.close("cross-entropy loss", got["loss"], out.loss, atol=1e-6)


def by_checkpoint_name(values, folder):
    """{model parameter name: tensor} renamed as save_pretrained names the parameters: transformers
    5 names ViT's modules its own way inside (vit.layers.0.attention.q_proj) and converts to the
    checkpoint names (vit.encoder.layer.0.attention.attention.query) when it saves."""
    holder = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in holder.named_parameters():
            p.copy_(values[name])
    holder.save_pretrained(peer.path(folder))
    return load_file(peer.path(folder + "/model.safetensors"))


grads = by_checkpoint_name(grads, "hf_grads")
exp_avg = by_checkpoint_name({n: s["exp_avg"] for n, s in state.items()}, "hf_exp_avg")
exp_avg_sq = by_checkpoint_name({n: s["exp_avg_sq"] for n, s in state.items()}, "hf_exp_avg_sq")
params = by_checkpoint_name({n: p.detach() for n, p in model.named_parameters()}, "hf_params")
ftopt_names = sorted(k[len("grad."):] for k in got if k.startswith("grad."))
peer.check("ftopt's parameters are the checkpoint's", ftopt_names == sorted(params),
           f"({len(ftopt_names)} vs {len(params)})")


def all_close(kind, expected, atol, rtol=0.0, which="all"):
    """One check over every tensor of a kind (flattened together), naming the worst tensor."""
    excess = {n: ((got[f"{kind}.{n}"].double() - e.double()).abs() / (atol + rtol * e.double().abs())).max().item()
              for n, e in expected.items()}
    name = max(excess, key=excess.get)
    peer.close(f"{kind} of {which} {len(expected)} tensors (worst: {name})",
               torch.cat([got[f"{kind}.{n}"].flatten() for n in expected]),
               torch.cat([e.flatten() for e in expected.values()]), atol=atol, rtol=rtol)


# The key biases' gradient is 0 in exact arithmetic (adding q.b to a whole row of scores leaves
# the softmax unchanged), so what both sides compute there is rounding noise; checked to be
# noise, and their step (about lr * noise / eps) gets a tolerance of its own.
key_bias = [n for n in params if n.endswith("attention.key.bias")]
noise = max(max(grads[n].abs().max().item(), got["grad." + n].abs().max().item()) for n in key_bias)
peer.check(f"the {len(key_bias)} key-bias gradients are rounding noise on both sides", noise < 1e-6,
           f"(largest {noise:.3g}, bound 1e-6)")
rest = [n for n in params if n not in key_bias]
all_close("grad", {n: grads[n] for n in rest}, atol=1e-6)
all_close("exp_avg", {n: exp_avg[n] for n in rest}, atol=1e-7)
# exp_avg_sq = 0.01 g^2 moves by 0.02 |g| dg: the gradients' 1e-6, carried through.
g_max = max(grads[n].abs().max().item() for n in rest)
all_close("exp_avg_sq", {n: exp_avg_sq[n] for n in rest}, atol=1e-8 + 0.02 * g_max * 1e-6)
# AdamW's first step moves each weight by lr g / (|g| + eps), whose slope in g is at most lr / eps:
# the gradients' 1e-6, carried through (observed 1.1e-6 on an AMX machine, under 1e-6 elsewhere).
all_close("param", {n: params[n] for n in rest}, atol=LR * 1e-6 / EPS, which="the other")
all_close("param", {n: params[n] for n in key_bias}, atol=LR * 2e-6 / EPS, which="the key-bias")
peer.check("AdamW step count", all(int(s["step"]) == 1 for s in state.values()) and int(got["step"]) == 1,
           f"(ftopt {int(got['step'])})")
peer.done()
