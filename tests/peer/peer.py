"""Shared by the peer tests: each tests/peer/<topic>.py makes inputs and expected values with the
real Python library, runs ftopt's side (the C++ program peer_<topic>, built from <topic>.cpp) on
them through files in a work folder, and compares. Expected values are whatever the library
produces on this run; nothing is checked in.

    peer = Peer("resnet")           # parses --ftopt PROGRAM --work DIR
    peer.ftopt("logits", "resnet18")   # runs PROGRAM logits resnet18 DIR, fails the test on a non-zero exit
    peer.close("resnet18 logits", got, expected, atol=1e-5)
    peer.done()                     # prints "peer resnet: N checks passed" (exit 0), or exits 1

A check that fails prints its name and the largest difference and the test exits 1 at done()
(every check runs, so one run shows every mismatch).
"""
import argparse
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")        # nothing here may reach a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class Mlp(torch.nn.Module):
    """ftopt's models::Mlp in PyTorch, names and all: flatten, then (Linear, ReLU) per hidden
    width and a last Linear, as `layers.0`, `layers.1`, ... so state dicts move between them."""

    def __init__(self, inputs, hidden, outputs):
        super().__init__()
        widths, stages = [inputs, *hidden], []
        for a, b in zip(widths, widths[1:]):
            stages += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        self.layers = torch.nn.Sequential(*stages, torch.nn.Linear(widths[-1], outputs))

    def forward(self, x):
        return self.layers(x.flatten(1))


def small_vit(peer):
    """The small random transformers ViTForImageClassification the ViT peer tests share (lora.py,
    ia3.py; tests/peer/vit_peer.hpp is ftopt's side): 28x28, one channel, patch 7, hidden 32, 2
    layers, 4 heads, MLP 64, 10 labels, its LayerNorms moved away from 1 and 0 so their tensors
    matter. Saved with save_pretrained as base/, with 4 inputs and labels as input.safetensors and
    labels.safetensors. Returns (model in eval mode, x, labels, its logits on x)."""
    from transformers import ViTConfig, ViTForImageClassification
    config = ViTConfig(image_size=28, patch_size=7, num_channels=1, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64, num_labels=10)
    base = ViTForImageClassification(config)
    with torch.no_grad():
        for name, p in base.named_parameters():
            if "layernorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    base.eval()
    base.save_pretrained(peer.path("base"))
    x = torch.randn(4, 1, 28, 28)
    labels = torch.randint(0, 10, (4,))
    peer.save("input.safetensors", {"x": x})
    peer.save("labels.safetensors", {"labels": labels})
    with torch.no_grad():
        return base, x, labels, base(pixel_values=x).logits


# Strings that tokenizers get wrong: whitespace runs, contractions, digits, scripts without
# spaces, emoji sequences, control and zero-width characters, ChatML's markers, long repeats, code.
HARD_STRINGS = [
    "", " ", "   ", "\n\n\n", "\t \t", "a  b   c    d", "  leading", "trailing  ", "line\nbreak\r\nand\rreturns",
    "I'm you're we've they'll he'd she's it's don't", "'S 'T 'RE 'VE 'M 'LL 'D", "O'Neil's rock'n'roll",
    "0 1 12 123 1234 12345 3.14159 1,000,000 $100.50 20% 2nd 3rd 10th", "١٢٣ ٤٥ ½ ² ③ Ⅻ",
    "日本語のテキストと中文字符, 한국어 텍스트", "I ❤️ 🤗 NLP 😀!! 👩‍👩‍👧 🏳️‍🌈", "emoji🥰inside", "Crème brûlée à la MODE",
    "Ελληνικά ΚΕΦΑΛΑΙΑ σς", "Кириллица ЁЖИК", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีครับ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝",
    "hello\u00a0world\u3000wide\u2003em", "zero\u200dwidth\u200cjoiner\ufeffbom", "a\x00b\x01c\x7fd\x85e",
    "<|im_start|>user\nWhich section?<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|><|endoftext|>x",
    "<|im_start|<|im_end|>>", "<repo_name>ftopt<file_sep>a.cpp", "x" * 300, "ab" * 200, "!!!???...;;;",
    "e-mail: someone@example.com, url: https://example.com/a?b=c#d", "def f(x):\n    return x ** 2  # square\n",
    "(parenthesised) [bracket]\tword «quote»", "x \r\n\r\n y\n\n  z", "'ſx Don'T 'Sx x'sy", "1234567 ١٢٣٤",
    "cafe\u0301 \u212b \u1100\u1161 composed", "a.\n\nb", "don't\tWON'T\nI'LL",
]


def bbc_texts(peer, bbc):
    """The 2,225 BBC articles of the folder `bbc` (checked to be all there), then HARD_STRINGS,
    also written one JSON string a line to the work folder's texts.jsonl for ftopt's side.
    Returns (texts, the number of articles)."""
    import glob
    import json
    files = sorted(glob.glob(os.path.join(bbc, "*", "*.txt")))
    peer.check("the BBC corpus has 2,225 articles", len(files) == 2225, f"({len(files)})")
    articles = [open(f, "rb").read().decode("utf-8", errors="replace") for f in files]
    texts = articles + HARD_STRINGS
    with open(peer.path("texts.jsonl"), "w", encoding="utf-8") as out:
        for t in texts:
            out.write(json.dumps(t) + "\n")
    return texts, len(articles)


def check_token_ids(peer, what, reference, ids, lengths, expected, texts, articles):
    """ftopt's ids of `texts` (flat `ids`, each text's length in `lengths`) equal to `expected`
    (the reference library's, named `reference`): one check over the first `articles` texts, one
    over the hard strings after them, the first few that differ printed."""
    offsets = [0] + torch.cumsum(lengths, 0).tolist()
    ids = ids.tolist()
    wrong = [i for i, want in enumerate(expected) if ids[offsets[i]:offsets[i + 1]] != want]
    peer.check(f"{what}: ids equal to {reference} on {articles} BBC articles",
               not [i for i in wrong if i < articles], f"({sum(i < articles for i in wrong)} differ)")
    peer.check(f"{what}: ids equal on {len(texts) - articles} hard strings", not [i for i in wrong if i >= articles],
               "".join(f"\n       {texts[i][:40]!r}: ftopt {ids[offsets[i]:offsets[i + 1]][:12]} "
                       f"{reference} {expected[i][:12]}" for i in wrong[:5]))


def vit_logits(model, x):
    """A transformers ViT's (or PeftModel's) logits on x, without gradients."""
    with torch.no_grad():
        return model(pixel_values=x).logits


def vector_file_key(name):
    """A PEFT parameter name as adapter files (and ftopt's PEFT keys) spell it, for methods whose
    tensors sit in a ParameterDict per adapter (IA3's ia3_l, VeRA's vera_lambda_*): without the
    "base_model.model." prefix, the adapter name, or modules_to_save's wrapper."""
    name = name.removeprefix("base_model.model.").replace(".modules_to_save.default.", ".")
    return name.removesuffix(".default")


def peft_trained_one_step(peer, case, model, x, labels, base_logits, logits_atol):
    """A PeftModel after one AdamW step (lr 5e-2) on a cross-entropy loss, in eval mode, saved as
    `case`/ with save_pretrained; checks that the adapter now changes the logits. Returns its
    logits on x."""
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-2)
    torch.nn.functional.cross_entropy(model(pixel_values=x).logits, labels).backward()
    optimizer.step()
    model.eval()
    model.save_pretrained(peer.path(case))
    expected = vit_logits(model, x)
    worst = (expected - base_logits).abs().max().item()
    peer.check(f"{case}: the adapter changes the logits", worst > 100 * logits_atol, f"(max |diff| {worst:.3g})")
    return expected


def check_loaded_adapter(peer, case, loaded, got, x, labels, file_key, logits_atol, grad_atol, weights_atol):
    """ftopt's adapter as PEFT loaded it (`loaded`: PeftModel.from_pretrained(..., is_trainable=True)
    in eval mode) against what ftopt wrote in `got`: the logits ("logits"), the gradients of a
    cross-entropy loss ("grad.<PEFT key>"; `file_key` turns PEFT's parameter names into those
    keys), and merge_and_unload's logits ("merged_logits") and saved weights ("merged.<name>")."""
    def logits(model):
        return vit_logits(model, x)

    peer.close(f"{case}: PeftModel.from_pretrained gives ftopt's logits", logits(loaded), got["logits"],
               atol=logits_atol)
    torch.nn.functional.cross_entropy(loaded(pixel_values=x).logits, labels).backward()
    grads = {"grad." + file_key(n): p.grad for n, p in loaded.named_parameters() if p.requires_grad}
    ftopt_grads = {k: v for k, v in got.items() if k.startswith("grad.")}
    peer.check(f"{case}: the same trainable tensors", sorted(grads) == sorted(ftopt_grads),
               f"(only ftopt: {sorted(set(ftopt_grads) - set(grads))[:3]}, "
               f"only PEFT: {sorted(set(grads) - set(ftopt_grads))[:3]})")
    if sorted(grads) == sorted(ftopt_grads):
        peer.close(f"{case}: the gradients", torch.cat([ftopt_grads[k].flatten() for k in sorted(grads)]),
                   torch.cat([grads[k].flatten() for k in sorted(grads)]), atol=grad_atol)
    merged = loaded.merge_and_unload()
    peer.close(f"{case}: merge_and_unload gives ftopt's merged logits", logits(merged), got["merged_logits"],
               atol=logits_atol)
    merged.save_pretrained(peer.path(case + "_merged"))
    merged_weights = load_file(peer.path(case + "_merged/model.safetensors"))
    ftopt_weights = {k.removeprefix("merged."): v for k, v in got.items() if k.startswith("merged.")}
    peer.check(f"{case}: merged checkpoints have the same names", sorted(merged_weights) == sorted(ftopt_weights),
               f"(only ftopt: {sorted(set(ftopt_weights) - set(merged_weights))[:3]}, "
               f"only PEFT: {sorted(set(merged_weights) - set(ftopt_weights))[:3]})")
    if sorted(merged_weights) == sorted(ftopt_weights):
        peer.close(f"{case}: merge_and_unload's weights are ftopt's merged weights",
                   torch.cat([ftopt_weights[k].flatten() for k in sorted(ftopt_weights)]),
                   torch.cat([merged_weights[k].flatten() for k in sorted(ftopt_weights)]), atol=weights_atol)


class Peer:
    def __init__(self, topic):
        parser = argparse.ArgumentParser(description=f"peer test: {topic}")
        parser.add_argument("--ftopt", required=True, help="the C++ side, peer_" + topic)
        parser.add_argument("--work", required=True, help="a scratch folder (emptied first)")
        args = parser.parse_args()
        self.topic, self.program, self.work = topic, args.ftopt, args.work
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.passed, self.failed = 0, []
        torch.manual_seed(0)
        print(f"peer {topic}: torch {torch.__version__}, work folder {self.work}", flush=True)

    def path(self, name):
        return os.path.join(self.work, name)

    def save(self, name, tensors):
        """Writes {name: tensor} as a safetensors file in the work folder (contiguous copies)."""
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, self.path(name))

    def load(self, name):
        return load_file(self.path(name))

    def ftopt(self, *args):
        """Runs the C++ side: PROGRAM ARGS... WORK; its output is shown; a failure ends the test."""
        command = [self.program, *map(str, args), self.work]
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(result.stdout)
        if result.returncode != 0:
            print(f"peer {self.topic}: FAILED: {' '.join(command)} exited with {result.returncode}")
            sys.exit(1)
        return result.stdout

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"  ok   {name} {detail}")
        else:
            self.failed.append(name)
            print(f"  FAIL {name} {detail}")

    def close(self, name, got, expected, atol, rtol=0.0):
        """|got - expected| <= atol + rtol |expected| everywhere, same shape."""
        got, expected = got.detach().double(), expected.detach().double()
        if got.shape != expected.shape:
            return self.check(name, False, f"shape {tuple(got.shape)} != {tuple(expected.shape)}")
        diff = (got - expected).abs()
        bound = atol + rtol * expected.abs()
        worst = diff.max().item() if diff.numel() else 0.0
        self.check(name, bool((diff <= bound).all()), f"(max |diff| {worst:.3g}, atol {atol:g}, rtol {rtol:g})")

    def equal(self, name, got, expected):
        same = got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected)
        self.check(name, same, f"({got.dtype} {tuple(got.shape)} vs {expected.dtype} {tuple(expected.shape)})")

    def done(self):
        if self.failed:
            print(f"peer {self.topic}: {len(self.failed)} of {self.passed + len(self.failed)} checks FAILED: "
                  + ", ".join(self.failed))
            sys.exit(1)
        if self.passed == 0:
            print(f"peer {self.topic}: no check ran")
            sys.exit(1)
        print(f"peer {self.topic}: {self.passed} checks passed")
