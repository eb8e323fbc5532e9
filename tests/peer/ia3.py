"""Hugging Face PEFT's (IA)^3 adapters and ftopt's, both ways, on the small random transformers
ViTForImageClassification of lora.py (keys, values and the MLP's second Linear, which is the
feedforward module: its input, the MLP's intermediate activations, is scaled; the head kept).

(a) PEFT -> ftopt: get_peft_model(IA3Config(...)) trains one AdamW step and saves; ftopt reads
    adapter_config.json (which layers, which of them feedforward) and the vectors, and gives
    PeftModel's logits.
(b) ftopt -> PEFT: ftopt attaches the same IA3, moves every trainable tensor off its start and
    saves; PeftModel.from_pretrained gives ftopt's logits and the gradients of a cross-entropy loss,
    and merge_and_unload gives ftopt's merged logits and weights.

Tolerances: logits and merged logits 1e-5, merged weights 1e-6, gradients 1e-5 (float32, the same
operations; the scaling vector multiplies the same tensors on both sides).
"""
import copy
import json

import transformers
from safetensors.torch import load_file

from peer import Peer, check_loaded_adapter, peft_trained_one_step, small_vit, vector_file_key, vit_logits

import peft
from peft import IA3Config, PeftModel, get_peft_model

LOGITS_ATOL = 1e-5
WEIGHTS_ATOL = 1e-6
GRAD_ATOL = 1e-5

peer = Peer("ia3")
print(f"peer ia3: peft {peft.__version__}, transformers {transformers.__version__}")
base, x, labels, base_logits = small_vit(peer)


def logits(model):
    return vit_logits(model, x)


# (a) PEFT -> ftopt
model = get_peft_model(copy.deepcopy(base), IA3Config(target_modules=["k_proj", "v_proj", "fc2"],
                                                      feedforward_modules=["fc2"], modules_to_save=["classifier"]))
expected = peft_trained_one_step(peer, "peft_ia3", model, x, labels, base_logits, LOGITS_ATOL)
peer.ftopt("load", "peft_ia3")
got = peer.load("peft_ia3.ftopt.safetensors")
with open(peer.path("peft_ia3.ftopt.json")) as f:
    read = json.load(f)
adapter = load_file(peer.path("peft_ia3/adapter_model.safetensors"))
peer.check("peft_ia3: ftopt scales the 6 layers PEFT does, 2 of them feedforward",
           read["scaled_layers"] == 6 and read["feedforward_layers"] == 2, f"({read})")
peer.check("peft_ia3: ftopt loads every tensor of PEFT's file", read["loaded"] == len(adapter),
           f"({read['loaded']} of {len(adapter)})")
peer.close("peft_ia3: PeftModel's logits", got["logits"], expected, atol=LOGITS_ATOL)

# (b) ftopt -> PEFT
peer.ftopt("save", "ftopt_ia3")
got = peer.load("ftopt_ia3.ftopt.safetensors")
worst = (got["logits"] - base_logits).abs().max().item()
peer.check("ftopt_ia3: the adapter changes the logits", worst > 100 * LOGITS_ATOL, f"(max |diff| {worst:.3g})")
loaded = PeftModel.from_pretrained(copy.deepcopy(base), peer.path("ftopt_ia3"), is_trainable=True).eval()
read = loaded.peft_config["default"]
peer.check("ftopt_ia3: PEFT reads ftopt's feedforward modules as a part of the targets",
           set(read.feedforward_modules) <= set(read.target_modules) and sorted(read.feedforward_modules) == ["fc2"],
           f"(targets {sorted(read.target_modules)}, feedforward {sorted(read.feedforward_modules)})")
check_loaded_adapter(peer, "ftopt_ia3", loaded, got, x, labels, vector_file_key, logits_atol=LOGITS_ATOL,
                     grad_atol=GRAD_ATOL, weights_atol=WEIGHTS_ATOL)
peer.done()
