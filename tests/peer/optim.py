"""torch.optim.AdamW + transformers' get_cosine_schedule_with_warmup + torch.nn.utils.
clip_grad_norm_ against ftopt's Trainer (TrainerOptions clip_grad_norm, schedule::WarmupCosine
with total_steps derived from the batches): 20 steps of a small classifier on fixed weights and
batches. Per step: the learning rate the optimizer stepped with, the total gradient norm before
clipping, the clipped gradients and the weights; and the final weights. max_norm is the median
norm of an unclipped trial run, so some steps clip and some do not (checked).

Tolerances: learning rates are the same double-precision formula: 1e-12 relative. Everything
else is float32 through the same ATen, but torch.optim.AdamW's exp_avg.lerp_ and LibTorch's
mul_ + add_ round differently, and AdamW divides by sqrt(exp_avg_sq), so last-bit differences
grow a little over 20 steps: 1e-5 on norms, gradients and weights (values of order 0.1 to 1)."""
import statistics

import torch
import torch.nn.functional as F

from peer import Mlp, Peer

import transformers
from transformers import get_cosine_schedule_with_warmup

STEPS, WARMUP, BATCH, IN, HIDDEN, OUT = 20, 5, 16, 8, 32, 4
LR, BETAS, EPS, WEIGHT_DECAY = 3e-2, (0.9, 0.999), 1e-8, 0.01


def train(initial, x, y, max_norm):
    """The Trainer's order per step: forward, loss, backward, clip, lr from the schedule, step."""
    model = Mlp(IN, [HIDDEN], OUT)
    model.load_state_dict(initial)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    schedule = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=WARMUP, num_training_steps=STEPS)
    record = {"lr": [], "norm": [], "grads": [], "weights": []}
    for k in range(STEPS):
        F.cross_entropy(model(x[k]), y[k]).backward()
        record["norm"].append(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item())
        record["grads"].append({n: p.grad.clone() for n, p in model.named_parameters()})
        record["lr"].append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        record["weights"].append({n: p.detach().clone() for n, p in model.named_parameters()})
    return record


def close_per_step(peer, what, got, expected, atol):
    """One check over every step and tensor: got[f"step{k}.{what}.{name}"] against expected[k][name]."""
    pairs = [(got[f"step{k}.{what}.{name}"], t) for k in range(STEPS) for name, t in expected[k].items()]
    worst = max((g - e).abs().max().item() for g, e in pairs)
    peer.check(f"{what} after every step", all(torch.allclose(g, e, rtol=0, atol=atol) for g, e in pairs),
               f"(max |diff| {worst:.3g}, atol {atol:g})")


peer = Peer("optim")
initial = Mlp(IN, [HIDDEN], OUT).state_dict()
x = torch.randn(STEPS, BATCH, IN) * 2
y = torch.randint(0, OUT, (STEPS, BATCH))
max_norm = round(statistics.median(train(initial, x, y, float("inf"))["norm"]), 3)
expected = train(initial, x, y, max_norm)
norms = torch.tensor(expected["norm"], dtype=torch.float64)
clipped = int((norms > max_norm).sum())
print(f"  transformers {transformers.__version__}; max_norm {max_norm}; {clipped} of {STEPS} steps clipped")
peer.check("premise: some steps clip and some do not", 0 < clipped < STEPS, f"({clipped} of {STEPS})")
peer.check("premise: warmup starts at lr 0 and the cosine ends near 0",
           expected["lr"][0] == 0.0 and 0 < expected["lr"][-1] < 0.05 * LR, f"(last lr {expected['lr'][-1]:.3g})")

peer.save("weights.safetensors", initial)
peer.save("batches.safetensors", {"x": x, "y": y})
peer.ftopt("train", LR, BETAS[0], BETAS[1], EPS, WEIGHT_DECAY, WARMUP, max_norm)
got = peer.load("ftopt.safetensors")
lrs = torch.tensor(expected["lr"], dtype=torch.float64)
peer.close("lr the optimizer stepped with", got["optimizer_lr"], lrs, atol=1e-15, rtol=1e-12)
peer.close("FitState::lr after every step", got["fit_state_lr"], lrs, atol=1e-15, rtol=1e-12)
peer.close("total grad norm before clipping", got["norm"].double(), norms, atol=1e-5)
close_per_step(peer, "grads", got, expected["grads"], atol=1e-5)
close_per_step(peer, "weights", got, expected["weights"], atol=1e-5)
for name, p in expected["weights"][-1].items():
    peer.close(f"final {name}", got[f"final.{name}"], p, atol=1e-5)
peer.done()
