"""torch.utils.checkpoint (use_reentrant=False) against ftopt's activation checkpointing, on the
same weights, inputs and seed:
  - checkpoint(block, h) inside a stem -> block -> head model against nn::checkpoint: the output,
    the gradients of every parameter and of the input, and the next random draw after backward
    (both put the generator back after the recompute);
  - checkpoint_sequential(seq, 3, x) against nn::checkpoint_sequential: gradients of parameters
    and input;
  - three SGD steps of checkpoint_sequential against Trainer<Fp32, Full, memory::Checkpoint>.
The checkpointed segments hold a Dropout (0.25), so the recompute must replay the forward's masks;
the masks are compared first, as plain train-mode forwards from torch.manual_seed(s) and
torch::manual_seed(s) (one CPU generator, seeded alike on both sides). One segment holds a
BatchNorm1d: PyTorch's checkpoint updates its running statistics again in the recompute, ftopt
restores them (nn/checkpoint.hpp), so ftopt's are compared with PyTorch's plain forward.

Tolerances: float32 through the same ATen kernels in the same order on one thread: 1e-6 (values
of order 1); the random draw after backward must be equal."""
import copy

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from peer import Peer

SEED, SEGMENTS, BATCH, STEPS, LR, P = 1234, 3, 16, 3, 0.1, 0.25
TOL = 1e-6


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(8, 16)
        self.block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Dropout(P),
                                         torch.nn.Linear(16, 16))
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x, checkpointed, preserve_rng_state=True):
        h = torch.relu(self.stem(x))
        if checkpointed:
            h = checkpoint(self.block, h, use_reentrant=False, preserve_rng_state=preserve_rng_state)
        else:
            h = self.block(h)
        return self.head(h)


def sequential():
    """Segments of 3 for SEGMENTS = 3: [Linear, BatchNorm, ReLU] and [Linear, Dropout, Tanh]
    checkpointed, [Linear, ReLU, Linear] plain."""
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 16), torch.nn.Dropout(P), torch.nn.Tanh(),
                               torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def grads_of(module, x):
    out = {"x": x.grad.clone()}
    out.update({name: p.grad.clone() for name, p in module.named_parameters()})
    return out


def close_each(peer, what, got, expected, atol=TOL):
    for name, t in expected.items():
        peer.close(f"{what} {name}", got[name], t, atol=atol)


peer = Peer("checkpoint")

# nn::checkpoint on one block.
net = Net().train()
x = torch.randn(BATCH, 8)
probe = torch.randn(BATCH, 4)  # the loss is (out * probe).sum(): d loss / d out = probe
peer.save("net.safetensors", net.state_dict())
peer.save("input.safetensors", {"x": x, "probe": probe})
torch.manual_seed(SEED)
plain = net(x, checkpointed=False).detach()
net.eval()
peer.check("premise: dropout changes the train-mode output", not torch.allclose(plain, net(x, False).detach()))
net.train()
torch.manual_seed(SEED)
xg = x.clone().requires_grad_()
out = net(xg, checkpointed=True)
(out * probe).sum().backward()
expected = grads_of(net, xg)
after = torch.rand(8)
net.zero_grad()
torch.manual_seed(SEED)
xg = x.clone().requires_grad_()
(net(xg, checkpointed=False) * probe).sum().backward()
peer.check("premise: the checkpointed gradients are the plain forward's", all(
    torch.equal(g, expected[name]) for name, g in grads_of(net, xg).items()))
net.zero_grad()
torch.manual_seed(SEED)
xg = x.clone().requires_grad_()
(net(xg, checkpointed=True, preserve_rng_state=False) * probe).sum().backward()
peer.check("premise: without preserve_rng_state the gradients differ",
           not torch.allclose(grads_of(net, xg)["block.0.weight"], expected["block.0.weight"], rtol=0, atol=1e-3))

peer.ftopt("net", SEED)
got = peer.load("net.ftopt.safetensors")
peer.close("dropout masks: plain train-mode output from the same seed", got["plain"], plain, atol=TOL)
peer.close("nn::checkpoint output", got["out"], out.detach(), atol=TOL)
close_each(peer, "nn::checkpoint gradient of", got, expected)
peer.equal("next random draw after backward", got["after"], after)

# nn::checkpoint_sequential, gradients of parameters and input; BatchNorm statistics.
seq = sequential().train()
initial = copy.deepcopy(seq.state_dict())
peer.save("sequential.safetensors", initial)
torch.manual_seed(SEED)
xg = x.clone().requires_grad_()
(checkpoint_sequential(seq, SEGMENTS, xg, use_reentrant=False) * probe).sum().backward()
expected = grads_of(seq, xg)
twice = int(seq[1].num_batches_tracked)
plain_seq = sequential().train()
plain_seq.load_state_dict(initial)
torch.manual_seed(SEED)
xg = x.clone().requires_grad_()
(plain_seq(xg) * probe).sum().backward()
peer.check("premise: the checkpointed gradients are the plain forward's", all(
    torch.equal(g, expected[name]) for name, g in grads_of(plain_seq, xg).items()))
print(f"  BatchNorm1d num_batches_tracked after one step: PyTorch's checkpoint {twice}, plain forward "
      f"{int(plain_seq[1].num_batches_tracked)}")

peer.ftopt("sequential", SEED, SEGMENTS)
got = peer.load("sequential.ftopt.safetensors")
close_each(peer, "nn::checkpoint_sequential gradient of", got, expected)
for name, b in plain_seq.named_buffers():
    peer.close(f"nn::checkpoint_sequential buffer {name} (plain forward's)", got[name], b, atol=TOL)

# memory::Checkpoint in the Trainer: STEPS SGD steps, cross-entropy.
xs = torch.randn(STEPS, BATCH, 8)
ys = torch.randint(0, 4, (STEPS, BATCH))
peer.save("batches.safetensors", {"x": xs, "y": ys})


def sgd_steps(checkpointed):
    model = sequential().train()
    model.load_state_dict(initial)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    torch.manual_seed(SEED)
    for k in range(STEPS):
        out = checkpoint_sequential(model, SEGMENTS, xs[k], use_reentrant=False) if checkpointed else model(xs[k])
        F.cross_entropy(out, ys[k]).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


trained, trained_plain = sgd_steps(True), sgd_steps(False)
peer.ftopt("trainer", SEED, SEGMENTS, LR)
got = peer.load("trainer.ftopt.safetensors")
for name, p in trained.named_parameters():
    peer.close(f"Trainer<memory::Checkpoint> {STEPS} SGD steps: {name}", got[name], p, atol=TOL)
for name, b in trained_plain.named_buffers():
    peer.close(f"Trainer<memory::Checkpoint> buffer {name} (plain forward's)", got[name], b, atol=TOL)
peer.done()
