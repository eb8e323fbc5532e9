"""Hugging Face PEFT's LoRA adapters and ftopt's, both ways, on a small random transformers
ViTForImageClassification (ftopt's models::ViT loads the base from its save_pretrained file).

(a) PEFT -> ftopt: get_peft_model(LoraConfig(...)) trains one AdamW step (so lora_B, the biases
    asked for and the classifier are non-zero / changed) and save_pretrained writes the adapter;
    ftopt reads adapter_config.json and adapter_model.safetensors and gives PeftModel's logits.
(b) ftopt -> PEFT: ftopt attaches the same Lora, sets every trainable tensor to non-zero values
    and writes the adapter; PeftModel.from_pretrained gives ftopt's logits, and so does
    merge_and_unload(), whose weights are ftopt's merged weights; the gradients of a loss at that
    adapter match PEFT's, and so does one SGD step from ftopt's LoRA+ parameter_groups against
    PEFT's create_loraplus_optimizer (SGD with weight decay: each tensor moves by its group's lr
    times (gradient + decay x value), so a wrong group shows; Adam's first step, about lr x the
    gradient's sign, would turn gradient rounding near zero into lr-sized differences).
(c) ftopt's QLora (int8 and NF4 frozen base): PEFT loads its adapter onto the base with ftopt's
    dequantized weights in the adapted layers and gives ftopt's logits and gradients, and
    merge_and_unload gives ftopt's merged logits (ftopt computes one GEMM over deq(W) + s B A,
    PEFT W x + s B(A x): the same tolerances hold).
Both ways cover plain LoRA, rsLoRA, DoRA (use_dora), and the PiSSA and OLoRA initialisations: an
ftopt PiSSA adapter loaded by PEFT onto the original base gives ftopt's logits only if both sides
factored W into the same s B0 A0 (PEFT refactors the base when it loads the adapter).

transformers 5 names ViT's modules vit.layers.N.attention.q_proj in memory (the checkpoint keeps
vit.encoder.layer.N.attention.attention.query), and PEFT 0.21 writes and matches adapters with the
in-memory names, so PEFT's side targets q_proj/v_proj and ftopt's query/value, through
peft::AdapterNames; the "names" check ties ftopt's renaming to this transformers.

Tolerances: logits 1e-5 (float32 on the same ATen, the same operations in the same order; observed
0); merged logits 1e-5 too (each side folds s B A into W in float32, and a fold in another order
would round W and the sums differently; observed 0); merged weights 1e-6 (both compute
W + (B @ A) * s in float32; observed 0). DoRA computes its output in another order than PEFT
(m / n (W x + s B A x) + b against PEFT's base + (m / n - 1) W x + (m / n) s B A x), which rounds
differently: same tolerances. Gradients 1e-5, the LoRA+ step 1e-6 (lr x 16 = 0.16 times gradients
that agree to about 1e-7).
"""
import copy
import json

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file

from peer import Peer, small_vit

import peft
from peft import LoraConfig, PeftModel, get_peft_model
from peft.optimizers import create_loraplus_optimizer

LOGITS_ATOL = 1e-5
MERGED_ATOL = 1e-5
WEIGHTS_ATOL = 1e-6
GRAD_ATOL = 1e-5
STEP_ATOL = 1e-6
LORAPLUS_LR, LORAPLUS_RATIO, LORAPLUS_DECAY = 1e-2, 16.0, 0.1  # SGD, as tests/peer/lora.cpp

peer = Peer("lora")
print(f"peer peft: peft {peft.__version__}, transformers {transformers.__version__}")
base, x, labels, base_logits = small_vit(peer)

peer.ftopt("names")
with open(peer.path("names.json")) as f:
    names = json.load(f)
expected_names = list(base.state_dict().keys())
peer.check("ftopt's PEFT names of the ViT's tensors are this transformers' module names",
           sorted(names) == sorted(expected_names),
           f"({len(names)} names; only ftopt: {sorted(set(names) - set(expected_names))[:3]}, "
           f"only transformers: {sorted(set(expected_names) - set(names))[:3]})")


def logits(model):
    with torch.no_grad():
        return model(pixel_values=x).logits


def changed(name, got, reference):
    """The adapter must move the logits, or a logits match would not show it was loaded."""
    worst = (got - reference).abs().max().item()
    peer.check(f"{name}: the adapter changes the logits", worst > 100 * LOGITS_ATOL, f"(max |diff| {worst:.3g})")


# (a) PEFT -> ftopt
peft_cases = {
    "peft_plain": dict(r=4, lora_alpha=8, bias="none", use_rslora=False, modules_to_save=["classifier"]),
    "peft_lora_only_rslora": dict(r=8, lora_alpha=16, bias="lora_only", use_rslora=True, modules_to_save=None),
    "peft_all_rslora": dict(r=4, lora_alpha=12, bias="all", use_rslora=True, modules_to_save=["classifier"]),
    "peft_dora": dict(r=4, lora_alpha=8, bias="none", use_rslora=False, modules_to_save=["classifier"], use_dora=True),
    "peft_pissa": dict(r=4, lora_alpha=8, bias="none", use_rslora=False, modules_to_save=None,
                       init_lora_weights="pissa"),
    "peft_olora_dora": dict(r=2, lora_alpha=4, bias="lora_only", use_rslora=True, modules_to_save=["classifier"],
                            init_lora_weights="olora", use_dora=True),
}
for case, settings in peft_cases.items():
    model = get_peft_model(copy.deepcopy(base), LoraConfig(target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                                                           **settings))
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    F.cross_entropy(model(pixel_values=x).logits, labels).backward()
    optimizer.step()
    model.eval()
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    peer.check(f"{case}: PEFT's step made every lora_B non-zero",
               len(lora_b) == 4 and all(b.abs().max() > 0 for b in lora_b))
    if "use_dora" in settings:
        magnitudes = [p for n, p in model.named_parameters() if "lora_magnitude_vector" in n]
        peer.check(f"{case}: PEFT trains a DoRA magnitude per adapted layer", len(magnitudes) == 4)
    model.save_pretrained(peer.path(case))
    expected = logits(model)
    changed(case, expected, base_logits)

    peer.ftopt("load", case)
    got = peer.load(case + ".ftopt.safetensors")
    with open(peer.path(case + ".ftopt.json")) as f:
        read = json.load(f)
    if case == "peft_plain":
        peer.close("base ViT logits (ftopt on transformers' save_pretrained file)", got["base"], base_logits,
                   atol=LOGITS_ATOL)
    wanted = dict(r=settings["r"], lora_alpha=settings["lora_alpha"], bias=settings["bias"],
                  use_rslora=settings["use_rslora"], lora_dropout=0.0, target_modules=["query", "value"],
                  modules_to_save=settings["modules_to_save"] or [], lora_layers=4,
                  use_dora=settings.get("use_dora", False), init_lora_weights=settings.get("init_lora_weights", True))
    read_back = {k: (sorted(v) if isinstance(v, list) else v) for k, v in read.items() if k in wanted}
    peer.check(f"{case}: ftopt reads PEFT's adapter_config.json", read_back == wanted, f"({read_back})")
    adapter = load_file(peer.path(case + "/adapter_model.safetensors"))
    copies = [k for k in adapter if ".original_module." in k or ".modules_to_save." in k]
    peer.check(f"{case}: ftopt loads every tensor of PEFT's file but the wrapper's copies",
               read["loaded"] == len(adapter) - len(copies),
               f"({read['loaded']} of {len(adapter)}, {len(copies)} copies)")
    peer.close(f"{case}: PeftModel's logits", got["logits"], expected, atol=LOGITS_ATOL)

# (b) ftopt -> PEFT
ftopt_cases = {
    "ftopt_plain": dict(r=4, lora_alpha=8, bias="none", use_rslora=False, modules_to_save="classifier"),
    "ftopt_lora_only_rslora": dict(r=8, lora_alpha=16, bias="lora_only", use_rslora=True, modules_to_save="classifier"),
    "ftopt_all": dict(r=4, lora_alpha=12, bias="all", use_rslora=False, modules_to_save="-"),
    "ftopt_dora": dict(r=4, lora_alpha=8, bias="none", use_rslora=False, modules_to_save="classifier", use_dora=True),
    "ftopt_pissa": dict(r=4, lora_alpha=8, bias="lora_only", use_rslora=False, modules_to_save="classifier",
                        init_lora_weights="pissa"),
    "ftopt_olora_dora": dict(r=2, lora_alpha=4, bias="all", use_rslora=True, modules_to_save="-",
                             init_lora_weights="olora", use_dora=True),
}


def file_key(name):
    """PEFT's in-memory parameter name as its adapter file (and ftopt's PEFT keys) spell it."""
    name = name.removeprefix("base_model.model.").replace(".modules_to_save.default.", ".").replace(".default.", ".")
    return name.removesuffix(".weight") if name.endswith("lora_magnitude_vector.weight") else name


def trainable(model):
    return {file_key(n): p for n, p in model.named_parameters() if p.requires_grad}


def same_tensors(name, got, expected, atol):
    """got and expected, {key: tensor}, hold the same keys and values."""
    peer.check(f"{name}: the same tensors", sorted(got) == sorted(expected),
               f"(only ftopt: {sorted(set(got) - set(expected))[:3]}, only PEFT: {sorted(set(expected) - set(got))[:3]})")
    if sorted(got) == sorted(expected):
        worst = max(sorted(got), key=lambda k: (got[k] - expected[k]).abs().max().item())
        peer.close(f"{name} (worst: {worst})", torch.cat([got[k].flatten() for k in sorted(got)]),
                   torch.cat([expected[k].flatten() for k in sorted(got)]), atol=atol)


for case, settings in ftopt_cases.items():
    use_dora, init = settings.get("use_dora", False), settings.get("init_lora_weights", True)
    peer.ftopt("save", case, settings["r"], settings["lora_alpha"], settings["bias"], int(settings["use_rslora"]),
               settings["modules_to_save"], int(use_dora), "true" if init is True else init)
    got = peer.load(case + ".ftopt.safetensors")
    changed(case, got["logits"], base_logits)
    model = PeftModel.from_pretrained(copy.deepcopy(base), peer.path(case)).eval()
    read = model.peft_config["default"]
    read_back = dict(r=read.r, lora_alpha=read.lora_alpha, bias=read.bias, use_rslora=read.use_rslora,
                     target_modules=sorted(read.target_modules), modules_to_save=read.modules_to_save,
                     use_dora=read.use_dora, init_lora_weights=read.init_lora_weights)
    wanted = dict(r=settings["r"], lora_alpha=settings["lora_alpha"], bias=settings["bias"],
                  use_rslora=settings["use_rslora"], target_modules=["q_proj", "v_proj"],
                  use_dora=use_dora, init_lora_weights=init,
                  modules_to_save=None if settings["modules_to_save"] == "-" else [settings["modules_to_save"]])
    peer.check(f"{case}: PEFT reads ftopt's adapter_config.json", read_back == wanted, f"({read_back})")
    peer.close(f"{case}: PeftModel.from_pretrained gives ftopt's logits", logits(model), got["logits"],
               atol=LOGITS_ATOL)
    # The backward: the gradients of the loss at ftopt's saved adapter (DoRA's row norm detached
    # on both sides), and one SGD step with PEFT's LoRA+ groups against ftopt's parameter_groups.
    tuned = PeftModel.from_pretrained(copy.deepcopy(base), peer.path(case), is_trainable=True).eval()
    F.cross_entropy(tuned(pixel_values=x).logits, labels).backward()
    params = trainable(tuned)
    same_tensors(f"{case}: the gradients", {k: v for k, v in got.items() if k.startswith("grad.")},
                 {"grad." + k: p.grad for k, p in params.items()}, atol=GRAD_ATOL)
    optimizer = create_loraplus_optimizer(tuned, torch.optim.SGD, lr=LORAPLUS_LR, loraplus_lr_ratio=LORAPLUS_RATIO,
                                          loraplus_weight_decay=LORAPLUS_DECAY)
    optimizer.step()
    same_tensors(f"{case}: the adapter after one LoRA+ SGD step",
                 {k: v for k, v in got.items() if k.startswith("stepped.")},
                 {"stepped." + k: p.detach() for k, p in params.items()}, atol=STEP_ATOL)
    merged = model.merge_and_unload()
    peer.close(f"{case}: merge_and_unload gives ftopt's merged logits", logits(merged), got["merged_logits"],
               atol=MERGED_ATOL)
    merged.save_pretrained(peer.path(case + "_merged"))  # the checkpoint's names, as ftopt's
    merged_weights = load_file(peer.path(case + "_merged/model.safetensors"))
    ftopt_weights = {k.removeprefix("merged."): v for k, v in got.items() if k.startswith("merged.")}
    peer.check(f"{case}: merged checkpoints have the same names", sorted(merged_weights) == sorted(ftopt_weights),
               f"({len(merged_weights)} vs {len(ftopt_weights)})")
    if sorted(merged_weights) == sorted(ftopt_weights):
        peer.close(f"{case}: merge_and_unload's weights are ftopt's merged weights",
                   torch.cat([ftopt_weights[k].flatten() for k in sorted(ftopt_weights)]),
                   torch.cat([merged_weights[k].flatten() for k in sorted(ftopt_weights)]), atol=WEIGHTS_ATOL)

for case, fmt in (("qlora_int8", "int8"), ("qlora_nf4", "nf4")):
    peer.ftopt("qlora", case, fmt)
    got = peer.load(case + ".ftopt.safetensors")
    dequantized = copy.deepcopy(base)
    bases = {k.removeprefix("base."): v for k, v in got.items() if k.startswith("base.")}
    missing, unexpected = dequantized.load_state_dict(bases, strict=False)
    peer.check(f"{case}: ftopt's dequantized bases are the queries and values of the base",
               len(bases) == 4 and not unexpected, f"({sorted(bases)}, unexpected {unexpected})")
    model = PeftModel.from_pretrained(copy.deepcopy(dequantized), peer.path(case)).eval()
    peer.close(f"{case}: PeftModel over the dequantized base gives ftopt's logits", logits(model), got["logits"],
               atol=LOGITS_ATOL)
    tuned = PeftModel.from_pretrained(copy.deepcopy(dequantized), peer.path(case), is_trainable=True).eval()
    F.cross_entropy(tuned(pixel_values=x).logits, labels).backward()
    same_tensors(f"{case}: the gradients", {k: v for k, v in got.items() if k.startswith("grad.")},
                 {"grad." + k: p.grad for k, p in trainable(tuned).items()}, atol=GRAD_ATOL)
    peer.close(f"{case}: merge_and_unload gives ftopt's merged logits", logits(model.merge_and_unload()),
               got["merged_logits"], atol=MERGED_ATOL)
peer.done()
