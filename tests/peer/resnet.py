"""torchvision's resnet18 and resnet50: `torch.save(model.state_dict())` files, loaded by
ftopt's models::resnet18/50, give torchvision's logits to 1e-5 (eval mode, batch-norm running
statistics made non-trivial so they matter).

LoRA on the convolutions, both ways, against PEFT's lora.Conv2d on resnet18 (every conv1 and conv2,
the 7x7 stride-2 stem among them; fc kept): PEFT trains one AdamW step (in eval mode, so the
batch-norm statistics the adapter file does not hold stay the base's) and saves; ftopt loads it
and gives PeftModel's logits. ftopt writes an adapter with non-zero tensors; PeftModel loads it
and gives ftopt's logits, before and after merge_and_unload. Tolerance 1e-5, as for the bare
model: both sides add s B(A(x)) to the convolution's output in the same float32 operations
(observed 0); the merged weights are W + s (B A) formed the same way.
"""
import copy

import torch
import torch.nn.functional as F
import torchvision
from peft import LoraConfig, PeftModel, get_peft_model

from peer import Peer

peer = Peer("resnet")
x = torch.randn(2, 3, 64, 64)
peer.save("input.safetensors", {"x": x})
for arch in ("resnet18", "resnet50"):
    model = getattr(torchvision.models, arch)(num_classes=10)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.copy_(torch.randn_like(buffer) * 0.1)
            elif name.endswith("running_var"):
                buffer.copy_(torch.rand_like(buffer) + 0.5)
    model.eval()
    torch.save(model.state_dict(), peer.path(arch + ".pt"))
    with torch.no_grad():
        expected = model(x)
    peer.ftopt("logits", arch)
    got = peer.load(arch + ".ftopt.safetensors")["logits"]
    peer.close(f"{arch} logits (torchvision {torchvision.__version__})", got, expected, atol=1e-5)
    if arch == "resnet18":
        resnet18 = model

LORA_ATOL = 1e-5
with torch.no_grad():
    base_logits = resnet18(x)
# PEFT -> ftopt
tuned = get_peft_model(copy.deepcopy(resnet18), LoraConfig(r=4, lora_alpha=8, target_modules=["conv1", "conv2"],
                                                            modules_to_save=["fc"]))
tuned.eval()
optimizer = torch.optim.AdamW([p for p in tuned.parameters() if p.requires_grad], lr=1e-2)
F.cross_entropy(tuned(x), torch.randint(0, 10, (2,))).backward()
optimizer.step()
tuned.save_pretrained(peer.path("peft_conv"))
with torch.no_grad():
    expected = tuned(x)
peer.check("peft_conv: the adapter changes the logits", (expected - base_logits).abs().max() > 100 * LORA_ATOL,
           f"(max |diff| {(expected - base_logits).abs().max():.3g})")
peer.ftopt("lora_load", "peft_conv")
got = peer.load("peft_conv.ftopt.safetensors")
peer.check("peft_conv: ftopt adapts the 17 convolutions PEFT does", int(got["conv_layers"]) == 17,
           f"({int(got['conv_layers'])})")
peer.close("peft_conv: PeftModel's logits", got["logits"], expected, atol=LORA_ATOL)
# ftopt -> PEFT
peer.ftopt("lora_save", "ftopt_conv")
got = peer.load("ftopt_conv.ftopt.safetensors")
peer.check("ftopt_conv: the adapter changes the logits", (got["logits"] - base_logits).abs().max() > 100 * LORA_ATOL,
           f"(max |diff| {(got['logits'] - base_logits).abs().max():.3g})")
loaded = PeftModel.from_pretrained(copy.deepcopy(resnet18), peer.path("ftopt_conv")).eval()
with torch.no_grad():
    peer.close("ftopt_conv: PeftModel.from_pretrained gives ftopt's logits", loaded(x), got["logits"], atol=LORA_ATOL)
    peer.close("ftopt_conv: merge_and_unload gives ftopt's merged logits", loaded.merge_and_unload()(x),
               got["merged_logits"], atol=LORA_ATOL)
peer.done()
