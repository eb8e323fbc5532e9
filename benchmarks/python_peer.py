"""The Python side of bench_python_peer: the same training step in PyTorch (transformers' ViT,
PEFT's LoRA), each way a Python user would run it, timed here and driven line by line from the
C++ benchmark so that every contender alternates on the same machine.

Protocol (stdin -> stdout, one line each):
    setup CASE ATTENTION OPTIMIZER MODE THREADS [LOSS]
        -> ready SETUP_SECONDS ATTENTION GRAPH_BREAKS GRAPHS
    steps N -> SECONDS (the median wall time of N steps run back to back, timed here)
    memory -> MIB (the peak resident set, VmHWM, minus the resident set after setup made the model
        and its optimizer and before the first step; the peak is reset there, so what setup made
        and freed before does not count: ftopt's side measures the same in its own fresh process)
    quit
CASE: vit_fp32_full | vit_bf16_full | vit_bf16_lora | vit_bf16_dora | vit_bf16_vera | mlp_fp32_full
    (the d-256 ViT of 6 blocks, MLP 1024, 50 tokens, batch 128; the 784-64-10 MLP, batch 32),
    bert_bf16_lora | bert_fp32_full (all-MiniLM-L6-v2's BERT, batch 32 x 128 tokens),
    llama_bf16_lora (SmolLM2-135M's architecture as LlamaForCausalLM, batch 8 x 256 tokens, PEFT's
    LoRA r 16 on all seven projections, transformers' causal-LM loss over its logits),
    gemma3_bf16_lora | qwen2_bf16_lora (the same step on Gemma 3 270M's architecture as
    Gemma3ForCausalLM, and on Qwen2.5-0.5B's as Qwen2ForCausalLM: their config.json fields, random
    weights),
    llama_generate (the same model's greedy generate, a prompt of 128 tokens and 64 new ones), or
    the inference cases vit_infer_fp32 | vit_infer_int8 (the same ViT in eval mode under no_grad,
    batch 256; int8: torch.ao.quantization.quantize_dynamic on every Linear).
ATTENTION: sdpa (transformers' default: torch's scaled_dot_product_attention) | eager (attention
    written out) | fastest (both timed here for a few steps; the faster is kept and named in the
    answer) | - (a model without attention).
OPTIMIZER: adamw (torch.optim.AdamW's default, foreach) | fused (AdamW(fused=True)) | - (inference).
LOSS (the *_bf16_lora decoders only): logits (the default: transformers' loss over the materialized
    [8, 256, vocab] logits) | chunked (the hidden states times the head in 8 chunks along the
    sequence, each chunk's logits cast to float32 for its cross-entropy, summed and divided by the
    tokens: torchtune's CEWithChunkedOutputLoss, written in PyTorch; compiled with the model).
MODE: eager | default | max-autotune-no-cudagraphs (torch.compile's modes). SETUP_SECONDS holds
    the compilation (three warm-up steps), so it is reported apart from the step; GRAPH_BREAKS and
    GRAPHS are dynamo's counts for the compiled model (0 0 in eager mode).
"""
import contextlib
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F


def make(case, attention, loss="logits"):
    """The model, its forward over the fixed input, the targets (None for inference), bf16 or not."""
    torch.manual_seed(0)
    if case == "mlp_fp32_full":
        model = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        x, y = torch.randn(32, 784), torch.randint(0, 10, (32,))
        return model, (lambda m: m(x)), y, False
    if case.startswith("bert"):
        return make_bert(case, attention)
    if case == "llama_generate":
        return make_llama_generate(attention)
    if case.startswith(("llama", "gemma3", "qwen2")):
        return make_llama(case, attention, loss)
    from transformers import ViTConfig, ViTForImageClassification
    config = ViTConfig(image_size=28, patch_size=4, num_channels=1, hidden_size=256, num_hidden_layers=6,
                       num_attention_heads=4, intermediate_size=1024, num_labels=10, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, attn_implementation=attention)
    model = ViTForImageClassification(config)
    if case in ("vit_bf16_lora", "vit_bf16_dora"):
        from peft import LoraConfig, get_peft_model
        # ftopt's query/value: transformers 5 names them q_proj/v_proj in memory (docs/peft.md).
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                 lora_dropout=0.0, bias="none", use_dora=case == "vit_bf16_dora"))
    if case == "vit_bf16_vera":
        from peft import VeraConfig, get_peft_model
        model = get_peft_model(model, VeraConfig(r=256, target_modules=["q_proj", "v_proj"], vera_dropout=0.0))
    if case.startswith("vit_infer"):
        model.eval()
        if case == "vit_infer_int8":  # torch.ao's dynamic int8: every Linear, per-tensor weights
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        x = torch.randn(256, 1, 28, 28)
        return model, (lambda m: m(pixel_values=x).logits), None, False
    x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
    return model, (lambda m: m(pixel_values=x).logits), y, case != "vit_fp32_full"


def make_bert(case, attention):
    """all-MiniLM-L6-v2's architecture as BertForSequenceClassification (5 labels, dropout 0.1 as
    its config), batch 32 x 128 tokens without padding; bert_bf16_lora: PEFT's recipe (r 8,
    alpha 16, query and value, dropout 0.1) with the new head trained in full."""
    from transformers import BertConfig, BertForSequenceClassification
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, num_labels=5, attn_implementation=attention)
    model = BertForSequenceClassification(config)
    if case == "bert_bf16_lora":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"],
                                                 lora_dropout=0.1, bias="none", modules_to_save=["classifier"]))
    ids = torch.randint(1000, 30000, (32, 128))
    ids[:, 0], ids[:, -1] = 101, 102
    mask = torch.ones_like(ids)
    y = torch.randint(0, 5, (32,))
    return model, (lambda m: m(input_ids=ids, attention_mask=mask).logits), y, case != "bert_fp32_full"


LOSS = object()  # the forward returns the loss itself (a causal LM given its labels)


def make_llama(case, attention, loss):
    """SmolLM2-135M's architecture (LlamaConfig as its config.json: 30 layers, hidden 576, 9 heads
    over 3 key/value heads, MLP 1536, vocab 49,152, tied embeddings, rope_theta 1e5), or Gemma 3
    270M's or Qwen2.5-0.5B's (decoder_config), with PEFT's LoRA (r 16, alpha 32, dropout 0.05,
    q/k/v/o/gate/up/down), batch 8 x 256 random tokens, the labels the ids:
    model(input_ids, labels=ids).loss, transformers' ForCausalLMLoss over the logits; or, loss
    chunked, ChunkedCausalLm's loss over the hidden states."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    model = get_peft_model(AutoModelForCausalLM.from_config(decoder_config(case, attention)), LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.05, bias="none",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    ids = torch.randint(100, 49000, (8, 256))
    if loss == "chunked":
        return ChunkedCausalLm(model), (lambda m: m(ids)), LOSS, True
    return model, (lambda m: m(input_ids=ids, labels=ids).loss), LOSS, True


class ChunkedCausalLm(torch.nn.Module):
    """A PEFT-wrapped LlamaForCausalLM whose loss never forms the whole logits in float32: the
    decoder's hidden states, the labels shifted left (-100 after the last token, as transformers'
    loss shifts them), both split into `chunks` along the sequence; each chunk's logits (the tied
    head, in autocast's bf16) cast to float32 for a summed cross-entropy; the sum over the tokens
    that have a label. torchtune's CEWithChunkedOutputLoss (8 chunks) with the head applied per
    chunk, as its models' chunked output does."""

    def __init__(self, peft_model, chunks=8):
        super().__init__()
        self.peft_model = peft_model
        self.chunks = chunks

    def forward(self, ids):
        causal_lm = self.peft_model.base_model.model
        hidden = causal_lm.model(input_ids=ids).last_hidden_state
        labels = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], dim=1)
        head = causal_lm.lm_head.weight
        total = hidden.new_zeros((), dtype=torch.float32)
        for h, y in zip(hidden.chunk(self.chunks, dim=1), labels.chunk(self.chunks, dim=1)):
            logits = F.linear(h, head).float()
            total = total + F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=-100,
                                            reduction="sum")
        return total / (labels != -100).sum()


def decoder_config(case, attention):
    """The config of the case's architecture: SmolLM2-135M's, Gemma 3 270M's (its config.json as
    Gemma3TextConfig: 18 layers, hidden 640, 4 heads of 256 over 1 key/value head, MLP 2048, vocab
    262,144, five sliding layers of 512 tokens to one global) or Qwen2.5-0.5B's (Qwen2Config: 24
    layers, hidden 896, 14 heads over 2, MLP 4864, vocab 151,936, q/k/v biases, tied)."""
    if case.startswith("gemma3"):
        from transformers import Gemma3TextConfig
        return Gemma3TextConfig(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                                num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                                query_pre_attn_scalar=256, sliding_window=512, max_position_embeddings=32768,
                                rms_norm_eps=1e-6, rope_parameters={
                                    "full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
                                tie_word_embeddings=True, attn_implementation=attention)
    if case.startswith("qwen2"):
        from transformers import Qwen2Config
        return Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                           num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                           rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True,
                           attn_implementation=attention)
    return smollm2_config(attention)


def smollm2_config(attention):
    """SmolLM2-135M's config.json as LlamaConfig."""
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                       num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                       rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
                       attn_implementation=attention)


def make_llama_generate(attention):
    """Greedy decoding with SmolLM2-135M's architecture (float32, random weights), batch 1: a
    prompt of 128 tokens, then exactly 64 new ones, by generate(do_sample=False) with its default
    (dynamic) cache."""
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM(smollm2_config(attention)).eval()
    ids = torch.randint(100, 49000, (1, 128))
    mask = torch.ones_like(ids)

    def forward(m):
        out = m.generate(ids, attention_mask=mask, max_new_tokens=64, min_new_tokens=64, do_sample=False,
                         pad_token_id=0, eos_token_id=None)
        assert out.shape[1] == 128 + 64
        return out
    return model, forward, None, False


def make_step(case, attention, optimizer_name, mode, loss="logits"):
    """A function running one step of the case as set up."""
    model, forward, y, bf16 = make(case, attention, loss)
    run = model if mode == "eager" else torch.compile(model, mode=mode)
    if y is None:
        def infer():
            with torch.no_grad():
                return forward(run)
        return infer
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=optimizer_name == "fused")
    scope = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def train():
        with scope():
            out = forward(run)
        loss = out if y is LOSS else F.cross_entropy(out.float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()  # a real loop logs the loss (ftopt's Trainer checks it is finite)
    return train


def resident_mib():
    """The process's resident memory now (MiB)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_resident_mib():
    """The highest resident memory the process has had since reset_peak_resident (VmHWM, MiB)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_resident():
    """Starts VmHWM again from the resident set now (Linux: 5 into /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def seconds(step):
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def fastest_attention(case, optimizer_name, loss):
    """'sdpa' or 'eager', whichever runs the case's eager step faster here (the best of four steps
    each, after two warm-up steps each)."""
    steps = {a: make_step(case, a, optimizer_name, "eager", loss) for a in ("sdpa", "eager")}
    for step in steps.values():
        step(), step()
    best = {a: min(seconds(s) for _ in range(4)) for a, s in steps.items()}
    return min(best, key=best.get)


def main():
    step = None
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] == "setup":
            case, attention, optimizer_name, mode, threads = words[1], words[2], words[3], words[4], int(words[5])
            loss = words[6] if len(words) > 6 else "logits"
            t0 = time.perf_counter()
            torch.set_num_threads(threads)
            if attention == "fastest":
                attention = fastest_attention(case, optimizer_name, loss)
            from torch._dynamo.utils import counters
            counters.clear()
            step = make_step(case, attention, optimizer_name, mode, loss)
            resident_before = resident_mib()  # the model and optimizer made, no step run yet
            reset_peak_resident()
            for _ in range(3):  # warm-up; under torch.compile this compiles forward and backward
                step()
            breaks = sum(counters["graph_break"].values())
            graphs = counters["stats"]["unique_graphs"]
            print("ready", time.perf_counter() - t0, attention, breaks, graphs, flush=True)
        elif words[0] == "steps":
            times = sorted(seconds(step) for _ in range(int(words[1])))
            print(times[len(times) // 2], flush=True)
        elif words[0] == "memory":
            print(peak_resident_mib() - resident_before, flush=True)
        elif words[0] == "versions":
            import peft
            import transformers
            print(f"torch {torch.__version__} transformers {transformers.__version__} peft {peft.__version__}",
                  flush=True)
        else:
            print("error: unknown command " + words[0], flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
