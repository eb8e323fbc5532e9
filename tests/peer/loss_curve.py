"""50 training steps of LoRA on a transformers ViT, in PyTorch (PEFT's LoRA, torch.autocast bf16,
torch.optim.AdamW) and in ftopt (Trainer<Bf16Mixed, Lora>, torch::optim::AdamW) from the same
weights, adapters and batches: the two loss curves must agree. ftopt computes the step its own
way (query, key and value as one GEMM, attention written out instead of ATen's flash kernel,
LoRA's scaling on the rank-r product: docs/benchmarks.md), so this is the check that those
choices train the same model.

The ViT: 28x28 images, 4x4 patches (50 tokens, the benchmarks' sequence length, where ftopt
writes attention out), hidden 128, 2 layers, 4 heads, intermediate 256, 10 labels; LoRA r 8,
alpha 16 on query and value, the classifier trained in full (modules_to_save); AdamW lr 5e-3;
four fixed batches of 32 random images with random labels, cycled, so the loss falls as the
model memorizes them.

Tolerances, each the larger of a floor and 3x the spread between Python's own two runs of the
same curve (attn_implementation "sdpa" and "eager": the same model, two kernels, so the size of
the rounding noise on this curve on this machine): fp32, floor 2e-6 (about 8 float32 ulps of a
loss near 2.3; ftopt's curve sits within 5e-7 of PyTorch's, while a wrong term in a gradient
moves it by more than 1e-3 within a few steps); bf16, floor 0.005.
"""
import copy

import torch
import torch.nn.functional as F
from transformers import ViTConfig, ViTForImageClassification

from peer import Peer
from peft import LoraConfig, get_peft_model

STEPS = 50
FP32_FLOOR = 2e-6
BF16_FLOOR = 0.005

peer = Peer("loss_curve")
config = dict(image_size=28, patch_size=4, num_channels=1, hidden_size=128, num_hidden_layers=2,
              num_attention_heads=4, intermediate_size=256, num_labels=10, hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0)
base = ViTForImageClassification(ViTConfig(**config))
base.save_pretrained(peer.path("base"))
batches = [(torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))) for _ in range(4)]
tensors = {}
for i, (x, y) in enumerate(batches):
    tensors[f"x{i}"], tensors[f"y{i}"] = x, y
peer.save("batches.safetensors", tensors)

lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, bias="none",
                  modules_to_save=["classifier"])
start = get_peft_model(copy.deepcopy(base), lora)
start.save_pretrained(peer.path("start"))  # A random, B zero, the classifier's copy: ftopt starts here


def curve(bf16, attn_implementation="sdpa"):
    model = copy.deepcopy(start)
    model.base_model.model.config._attn_implementation = attn_implementation
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-3)
    losses = []
    for step in range(STEPS):
        x, y = batches[step % len(batches)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(pixel_values=x).logits
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return torch.tensor(losses)


fp32, fp32_eager = curve(False, "sdpa"), curve(False, "eager")
bf16_sdpa, bf16_eager = curve(True, "sdpa"), curve(True, "eager")
peer.check("the curve is not flat (the model learns the batches)", fp32[-1] < 0.6 * fp32[0],
           f"(first {fp32[0]:.3f}, last {fp32[-1]:.3f})")

peer.ftopt("train", "fp32", STEPS)
peer.ftopt("train", "bf16", STEPS)
got_fp32 = peer.load("fp32.losses.safetensors")["loss"]
got_bf16 = peer.load("bf16.losses.safetensors")["loss"]
fp32_spread = (fp32.double() - fp32_eager.double()).abs().max().item()
fp32_tolerance = max(FP32_FLOOR, 3 * fp32_spread)
print(f"  python's own fp32 spread (sdpa against eager attention): {fp32_spread:.2e}; tolerance {fp32_tolerance:.2e}")
peer.close(f"fp32: ftopt's {STEPS} losses are PyTorch's", got_fp32.double(), fp32.double(), atol=fp32_tolerance)
spread = (bf16_sdpa - bf16_eager).abs().max().item()
tolerance = max(BF16_FLOOR, 3 * spread)
print(f"  python's own bf16 spread (sdpa against eager attention): {spread:.4f}; tolerance {tolerance:.4f}")
peer.close(f"bf16: ftopt's {STEPS} losses are PyTorch's under autocast", got_bf16.double(), bf16_sdpa.double(),
           atol=tolerance)
peer.done()
