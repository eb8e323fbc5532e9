"""transformers' learning-rate schedules (get_cosine_schedule_with_warmup, its min-lr variant,
get_linear_schedule_with_warmup, get_constant_schedule_with_warmup) and torch's StepLR against
ftopt's schedules as the Trainer applies them: SGD over two parameter groups (lr 0.3 and 0.1),
2 epochs of 7 batches, so the Trainer derives total_steps = 14 from the batches. Per step, each
group's lr; the same double-precision formulas on both sides, so 1e-12 relative."""
import torch

from peer import Peer

import transformers
from transformers import (get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                          get_cosine_with_min_lr_schedule_with_warmup, get_linear_schedule_with_warmup)

STEPS, WARMUP = 14, 3


def lrs_of(make_schedule):
    """Each group's lr at every optimizer step: the lr that step used, before schedule.step()."""
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([{"params": [a], "lr": 0.3}, {"params": [b], "lr": 0.1}])
    schedule = make_schedule(optimizer)
    out = []
    for _ in range(STEPS):
        out.append([group["lr"] for group in optimizer.param_groups])
        optimizer.step()
        schedule.step()
    return torch.tensor(out, dtype=torch.float64)


expected = {
    "cosine": lrs_of(lambda o: get_cosine_schedule_with_warmup(o, WARMUP, STEPS)),
    "cosine_min_lr": lrs_of(lambda o: get_cosine_with_min_lr_schedule_with_warmup(o, WARMUP, STEPS, min_lr_rate=0.1)),
    "linear": lrs_of(lambda o: get_linear_schedule_with_warmup(o, WARMUP, STEPS)),
    "constant": lrs_of(lambda o: get_constant_schedule_with_warmup(o, WARMUP)),
    "step": lrs_of(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.5)),
}
peer = Peer("schedule")
print(f"  transformers {transformers.__version__}")
peer.check("premise: the schedules differ from one another",
           len({tuple(v[:, 0].tolist()) for v in expected.values()}) == len(expected))
peer.ftopt("lrs", WARMUP)
got = peer.load("ftopt.safetensors")
for name, lrs in expected.items():
    peer.close(f"{name}: each group's lr at every step", got[name], lrs, atol=1e-15, rtol=1e-12)
peer.done()
