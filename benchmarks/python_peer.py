"""The Python side of bench_python_peer: the same training step in PyTorch (transformers' ViT,
PEFT's LoRA), eager or under torch.compile, timed here and driven line by line from the C++
benchmark so that both sides alternate on the same machine.

Protocol (stdin -> stdout, one line each):
    setup CASE MODE THREADS   ->  ready SECONDS_TO_SET_UP     (MODE: eager | compile)
    step                      ->  SECONDS (this step's wall time, timed here)
    quit
CASE: vit_fp32_full | vit_bf16_full | vit_bf16_lora | vit_bf16_dora | vit_bf16_vera | mlp_fp32_full (what bench_python_peer.cpp
builds on the C++ side: the d-256 ViT of 6 blocks, MLP 1024, 50 tokens, batch 128, AdamW; the 784-64-10
MLP, batch 32), or the inference cases vit_infer_fp32 | vit_infer_int8 (the same ViT in eval mode
under no_grad, batch 256; int8: torch.ao.quantization.quantize_dynamic on every Linear).
"""
import contextlib
import sys
import time

import torch
import torch.nn.functional as F


def make(case):
    torch.manual_seed(0)
    if case == "mlp_fp32_full":
        model = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        x, y = torch.randn(32, 784), torch.randint(0, 10, (32,))
        return model, (lambda m: m(x)), y, False
    from transformers import ViTConfig, ViTForImageClassification
    config = ViTConfig(image_size=28, patch_size=4, num_channels=1, hidden_size=256, num_hidden_layers=6,
                       num_attention_heads=4, intermediate_size=1024, num_labels=10, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
    model = ViTForImageClassification(config)
    if case in ("vit_bf16_lora", "vit_bf16_dora"):
        from peft import LoraConfig, get_peft_model
        # ftopt's query/value: transformers 5 names them q_proj/v_proj in memory (docs/peft.md).
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                 lora_dropout=0.0, bias="none", use_dora=case == "vit_bf16_dora"))
    if case == "vit_bf16_vera":
        from peft import VeraConfig, get_peft_model
        model = get_peft_model(model, VeraConfig(r=256, target_modules=["q_proj", "v_proj"], vera_dropout=0.0))
    if case.startswith("vit_infer"):  # inference: batch 256, eval mode, no gradients
        model.eval()
        if case == "vit_infer_int8":  # torch.ao's dynamic int8: every Linear, per-tensor weights
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        x = torch.randn(256, 1, 28, 28)
        return model, (lambda m: m(pixel_values=x).logits), None, False
    x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
    return model, (lambda m: m(pixel_values=x).logits), y, case != "vit_fp32_full"


def main():
    step = None
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] == "setup":
            case, mode, threads = words[1], words[2], int(words[3])
            t0 = time.perf_counter()
            torch.set_num_threads(threads)
            model, forward, y, bf16 = make(case)
            if y is None:  # an inference case: eval mode, no optimizer, eager only
                def step():
                    with torch.no_grad():
                        return forward(model)

                for _ in range(3):
                    step()
                print("ready", time.perf_counter() - t0, flush=True)
                continue
            model.train()
            run = torch.compile(model) if mode == "compile" else model
            optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
            scope = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

            def step():
                with scope():
                    out = forward(run)
                loss = F.cross_entropy(out.float(), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                return loss.item()  # a real loop logs the loss (ftopt's Trainer checks it is finite)

            for _ in range(3):  # warm-up; under torch.compile this compiles forward and backward
                step()
            print("ready", time.perf_counter() - t0, flush=True)
        elif words[0] == "step":
            t0 = time.perf_counter()
            step()
            print(time.perf_counter() - t0, flush=True)
        else:
            print("error: unknown command " + words[0], flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
