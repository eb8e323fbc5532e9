"""fp16 mixed precision on the CPU: torch.autocast("cpu", float16) with torch.amp.GradScaler("cpu")
against ftopt's Trainer<precision::Fp16Mixed>, on the same weights and batches. A Linear-ReLU-
Linear classifier is trained 16 steps with SGD (momentum) under a scripted run: the initial scale
is high enough that fp16 backward overflows on its own, growth_interval is 3 so the scale grows
back into overflow, and two batches carry an injected inf and NaN. After every step: the scale,
whether the step was skipped, the loss and every weight; and the final weights.

Tolerances: both sides run the same ATen kernels (fp16 forward and backward, fp32 master weights)
on one thread, so results agree to float32 rounding: 1e-6 on losses and weights. The scale is a
power of two and the skip pattern a yes/no: compared exactly."""
import torch
import torch.nn.functional as F

from peer import Mlp, Peer

STEPS, BATCH, IN, HIDDEN, OUT = 16, 16, 8, 16, 4
INIT_SCALE, GROWTH_FACTOR, BACKOFF_FACTOR, GROWTH_INTERVAL = 2.0**19, 2.0, 0.5, 3
LR, MOMENTUM = 0.1, 0.9
INF_STEP, NAN_STEP = 7, 10


peer = Peer("fp16_scaler")
model = Mlp(IN, [HIDDEN], OUT)
peer.save("weights.safetensors", model.state_dict())
x = torch.randn(STEPS, BATCH, IN)
y = torch.randint(0, OUT, (STEPS, BATCH))
x[INF_STEP, 3, 2] = float("inf")
x[NAN_STEP, 0, 0] = float("nan")
peer.save("batches.safetensors", {"x": x, "y": y})

optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, growth_factor=GROWTH_FACTOR,
                              backoff_factor=BACKOFF_FACTOR, growth_interval=GROWTH_INTERVAL)
scales, skipped, losses, after = [], [], [], []
for k in range(STEPS):  # the Trainer's order: forward under autocast, fp32 loss, scaled backward,
    with torch.autocast("cpu", dtype=torch.float16):  # unscale, step, update, gradients to None
        out = model(x[k])
    loss = F.cross_entropy(out.float(), y[k])
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    before = [p.detach().clone() for p in model.parameters()]
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    skipped.append(all(torch.equal(b, p) for b, p in zip(before, model.parameters())))
    scales.append(scaler.get_scale())
    losses.append(loss.detach())
    after.append({name: p.detach().clone() for name, p in model.named_parameters()})
    if k == 0:
        fp16_forward = out.dtype == torch.float16
scales = torch.tensor(scales, dtype=torch.float64)
skipped = torch.tensor(skipped)
losses = torch.stack(losses)

# The scenario must exercise what it is meant to, or the comparison proves little.
grew = bool((scales[1:] > scales[:-1]).any())
natural = [k for k in range(STEPS) if skipped[k] and k not in (INF_STEP, NAN_STEP)]
peer.check("premise: the forward ran in float16", fp16_forward)
peer.check("premise: the injected inf and NaN steps were skipped", bool(skipped[INF_STEP] and skipped[NAN_STEP]))
peer.check("premise: fp16 overflow skipped a step by itself", len(natural) > 0, f"(steps {natural})")
peer.check("premise: the scale grew after growth_interval clean steps", grew)
fp32_model = Mlp(IN, [HIDDEN], OUT)
fp32_model.load_state_dict(peer.load("weights.safetensors"))
with torch.no_grad():
    fp32_gap = (F.cross_entropy(fp32_model(x[0]), y[0]) - losses[0]).abs().item()
peer.check("premise: an fp32 forward's loss is further than the tolerance from fp16's", fp32_gap > 1e-5,
           f"(|diff| {fp32_gap:.3g} at step 0)")
peer.check("premise: most steps were taken", int((~skipped).sum()) >= STEPS // 2, f"({int((~skipped).sum())} of {STEPS})")

peer.ftopt("train", INIT_SCALE, GROWTH_FACTOR, BACKOFF_FACTOR, GROWTH_INTERVAL, LR, MOMENTUM)
got = peer.load("ftopt.safetensors")
print(f"  scales (torch): {[int(s) for s in scales.tolist()]}")
print(f"  skipped (torch): {[k for k in range(STEPS) if skipped[k]]}")
peer.equal("scale after every update", got["scale"], scales)
peer.equal("skipped steps", got["skipped"], skipped)
peer.equal("EpochStats::skipped_steps", got["epoch_skipped_steps"], skipped.sum())
finite = torch.isfinite(losses)
peer.equal("steps with a non-finite loss", torch.isfinite(got["loss"]), finite)
peer.close("finite losses", got["loss"][finite], losses[finite], atol=1e-6)
worst = max((got[f"step{k}.{name}"] - p).abs().max().item() for k in range(STEPS) for name, p in after[k].items())
peer.check("weights after every step", all(
    torch.allclose(got[f"step{k}.{name}"], p, rtol=0, atol=1e-6) for k in range(STEPS) for name, p in after[k].items()),
    f"(max |diff| {worst:.3g}, atol 1e-06)")
for name, p in model.named_parameters():
    peer.close(f"final {name}", got[f"final.{name}"], p, atol=1e-6)
peer.done()
