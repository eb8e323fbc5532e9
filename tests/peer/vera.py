"""Hugging Face PEFT's VeRA adapters and ftopt's, both ways, on the small random transformers
ViTForImageClassification of lora.py, with targets of two shapes (queries and values 32x32, the
MLP's fc1 32->64 and fc2 64->32), so the shared A [r, 64] and B [64, r] are sliced per layer.

(a) PEFT -> ftopt: get_peft_model(VeraConfig(...)) trains one AdamW step and saves; ftopt draws
    the projections from the same projection_prng_key (they must equal PEFT's, bit for bit),
    reads adapter_config.json and the tensors, and gives PeftModel's logits.
(b) ftopt -> PEFT: ftopt attaches the same VeRA, moves every trainable tensor off its start and
    saves with the projections; PeftModel.from_pretrained gives ftopt's logits and the gradients of
    a cross-entropy loss, and merge_and_unload gives ftopt's merged logits and weights.
(c) ftopt -> PEFT without the projections (save_projection false): PEFT draws them again from
    the key, and gives ftopt's logits.

Tolerances: logits 1e-5 and gradients 1e-5 (float32, the same products in the same order; the
low-rank GEMM ftopt may use instead of the branch rounds differently), merged weights 1e-6.
"""
import copy
import json

import transformers
from safetensors.torch import load_file

from peer import Peer, check_loaded_adapter, peft_trained_one_step, small_vit, vector_file_key, vit_logits

import peft
from peft import PeftModel, VeraConfig, get_peft_model

LOGITS_ATOL = 1e-5
WEIGHTS_ATOL = 1e-6
GRAD_ATOL = 1e-5
TARGETS = ["q_proj", "v_proj", "fc1", "fc2"]

peer = Peer("vera")
print(f"peer vera: peft {peft.__version__}, transformers {transformers.__version__}")
base, x, labels, base_logits = small_vit(peer)


def logits(model):
    return vit_logits(model, x)


# (a) PEFT -> ftopt
config = VeraConfig(r=16, target_modules=TARGETS, projection_prng_key=7, modules_to_save=["classifier"])
model = get_peft_model(copy.deepcopy(base), config)
expected = peft_trained_one_step(peer, "peft_vera", model, x, labels, base_logits, LOGITS_ATOL)
adapter = load_file(peer.path("peft_vera/adapter_model.safetensors"))
peer.check("peft_vera: PEFT's file holds the shared projections as base_model.vera_A and vera_B",
           adapter.get("base_model.vera_A") is not None and tuple(adapter["base_model.vera_A"].shape) == (16, 64)
           and tuple(adapter["base_model.vera_B"].shape) == (64, 16),
           f"({sorted(k for k in adapter if 'lambda' not in k)[:4]})")
peer.ftopt("load", "peft_vera")
got = peer.load("peft_vera.ftopt.safetensors")
with open(peer.path("peft_vera.ftopt.json")) as f:
    read = json.load(f)
peer.equal("peft_vera: ftopt draws PEFT's vera_A from projection_prng_key 7", got["drawn_A"], adapter["base_model.vera_A"])
peer.equal("peft_vera: ftopt draws PEFT's vera_B from projection_prng_key 7", got["drawn_B"], adapter["base_model.vera_B"])
peer.check("peft_vera: ftopt adapts the 8 layers PEFT does, with r 16 and key 7",
           read["adapted_layers"] == 8 and read["r"] == 16 and read["projection_prng_key"] == 7, f"({read})")
peer.check("peft_vera: ftopt loads every tensor of PEFT's file", read["loaded"] == len(adapter),
           f"({read['loaded']} of {len(adapter)})")
peer.close("peft_vera: PeftModel's logits", got["logits"], expected, atol=LOGITS_ATOL)

# (b) ftopt -> PEFT, with the projections
peer.ftopt("save", "ftopt_vera", "projection")
got = peer.load("ftopt_vera.ftopt.safetensors")
worst = (got["logits"] - base_logits).abs().max().item()
peer.check("ftopt_vera: the adapter changes the logits", worst > 100 * LOGITS_ATOL, f"(max |diff| {worst:.3g})")
loaded = PeftModel.from_pretrained(copy.deepcopy(base), peer.path("ftopt_vera"), is_trainable=True).eval()
read = loaded.peft_config["default"]
adapted = sorted(n.removesuffix(".vera_lambda_d.default") for n, _ in loaded.named_parameters() if "vera_lambda_d" in n)
peer.check("ftopt_vera: PEFT reads ftopt's config and adapts the same 8 layers",
           len(adapted) == 8 and all(n.split(".")[-1] in TARGETS for n in adapted) and read.r == 16
           and read.projection_prng_key == 11 and read.save_projection,
           f"(targets {sorted(read.target_modules)}, adapted {len(adapted)}, r {read.r}, key {read.projection_prng_key})")
check_loaded_adapter(peer, "ftopt_vera", loaded, got, x, labels, vector_file_key, logits_atol=LOGITS_ATOL,
                     grad_atol=GRAD_ATOL, weights_atol=WEIGHTS_ATOL)

# (c) ftopt -> PEFT, the projections drawn again from the key
peer.ftopt("save", "ftopt_vera_key", "key")
got = peer.load("ftopt_vera_key.ftopt.safetensors")
adapter = load_file(peer.path("ftopt_vera_key/adapter_model.safetensors"))
peer.check("ftopt_vera_key: no projections in the file", not any("vera_A" in k or "vera_B" in k for k in adapter),
           f"({len(adapter)} tensors)")
loaded = PeftModel.from_pretrained(copy.deepcopy(base), peer.path("ftopt_vera_key")).eval()
peer.close("ftopt_vera_key: PEFT draws the projections from the key and gives ftopt's logits", logits(loaded),
           got["logits"], atol=LOGITS_ATOL)
peer.done()
