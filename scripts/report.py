#!/usr/bin/env python3
"""Renders the measured figures of README.md and docs/*.md from the committed result files,
and checks that the documents say what the files say.

Results: benchmarks/results/<machine>/<name>.json, the JSON Google Benchmark writes
(--benchmark_out), or the main job's (`finetune --results FILE`, the same shape), whose context
names the machine (benchmarks/machine.hpp: CPU model, flags, machine type, LibTorch, threads,
date). One folder per machine type; figures from different machines never share a row.

A document asks for a table with a pair of markers, and this script fills in what lies between:

    <!-- report: TABLE MACHINE -->
    ...generated...
    <!-- /report -->

TABLE is one of the renderers below (python_peer.training, python_peer.inference,
python_peer.compile, text_peer.training, text_peer.compile, llm_peer.training, llm_peer.compile,
llm_peer.memory, llm_peer.generate, llm_families.training, llm_families.compile, llm_families.loss,
finetune.text, finetune.llm, readme.measured,
profile.<name>, bench.<name>); MACHINE a folder of benchmarks/results (`readme.measured` takes
`*`: every machine, one row each).

    scripts/report.py                 render every marked table in place
    scripts/report.py --check         exit 1 if a table differs from its files, or if README.md or
                                      any docs/*.md states a figure outside a marked table
    scripts/report.py --store FILE    file a result (its context names the machine) under
                                      benchmarks/results/<machine>/<name>.json, atomically

What --check takes for a figure: a measured time, speed, ratio, memory size or share. A setting,
a count of data or the size of a model is not one ("r 8", "batch 32", "2,225 articles", "within
0.5 points of the baseline").

Written in digits (FIGURE; a number may have thousands separators, "2,893 MiB"):
    a ratio: "2.06x", "2.06×";
    a time: "370 ms", "26 s", "7 min", "2 hours";
    a memory size: "233 MiB", "1.2 GB";
    a rate: "654 tokens/s", "85 GFLOP/s", "654 tokens per second";
    a share: "37%", "41.2%", "20 percent";
    a difference in points: "3.6 points" ("within N points" is a bound, not a figure);
    a perplexity: "the perplexity was 22.59".
Written in words (FIGURE_WORDS, matched ignoring case; NUMBER_WORDS: one to twenty, the tens to
ninety, a hundred, a dozen):
    twice, thrice; halved, halving, "halves the";
    half as a measure: "half the step", "about half", "half as fast", "half of", "a half"
        (not "half-way", "half precision", "the first half");
    a fraction in words: "a quarter", "one third", "two fifths", "three quarters", "an eighth
        of" ("a third", "a fifth", ... only where they are a fraction: followed by of, as, the,
        is, less, more, ... or the end of the clause; "a third sweep" is an ordinal);
    a time in words: "six minutes", "about ten seconds", "a few minutes", "an hour";
    N times faster, slower, as (fast, much, ...), less, more, smaller, larger, fewer, lower,
        higher (N in digits or words), and N-fold;
    a number word and percent: "twenty percent".
Code is quoted text, not a claim: fenced blocks and `inline code` (commands, options, error
messages) are not checked. Numbers around a slash are a split ("an 80/20 split"), not a figure.
Standard library only.
"""
import argparse
import glob
import json
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
DOCUMENTS = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
MARKER = re.compile(r"<!-- report: (\S+) (\S+) -->\n(.*?)<!-- /report -->", re.S)
# What reads as a measured figure written in digits: a ratio, a time, a memory size, a rate, a
# share, a difference in points, a perplexity (the module's docstring says what each looks like).
_NUMBER = r"(?<![\d.,])\b(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
FIGURE = re.compile(
    _NUMBER + r"[x×](?![\w-])"
    r"|" + _NUMBER + r" ?(?:ns|µs|us|ms|s|secs?|seconds?|min|mins|minutes?|hours?|s/epoch|s/step"
    r"|KiB|MiB|GiB|TiB|KB|MB|GB|TB|[A-Za-z]+/s)(?![\w/])"
    r"|" + _NUMBER + r" ?(?:%|percent\b|per cent\b)"
    r"|(?<!within )" + _NUMBER + r" (?:percentage )?points?\b"
    r"|" + _NUMBER + r" [A-Za-z]+ (?:per|a|an) (?:second|minute|hour)\b"
    r"|\bperplexity\b[^.;:]{0,30}?\b\d+\.\d+")
# The numbers written in words that FIGURE_WORDS reads.
NUMBER_WORDS = (r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen"
                r"|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
                r"|a hundred|a dozen)")
_FRACTIONS = r"(?:thirds?|quarters?|fifths?|sixths?|sevenths?|eighths?|ninths?|tenths?)"
_ORDINALS = r"(?:third|fifth|sixth|seventh|eighth|ninth|tenth)"  # "a third" is a fraction or an ordinal
_AS_FRACTION = (r"(?=\s+(?:of|as|the|its|their|is|are|was|were|less|more|smaller|larger|fewer|lower|higher"
                r"|faster|slower)\b|\s*[,.;:)]|\s*$)")
# What reads as a measured figure written in words, matched ignoring case: (what, the regex). The
# module's docstring lists them with examples; tests/report/report_test.py holds both sides.
FIGURE_WORDS = [
    ("twice, thrice", r"\b(?:twice|thrice)\b"),
    ("halved, halves the ...", r"\bhalv(?:ed|ing)\b|\bhalves\s+(?:the|its|their|a|an)\b"),
    ("half as a measure", r"(?<!first )(?<!second )(?<!other )(?<!upper )(?<!lower )(?<!top )(?<!bottom )"
                          r"\bhalf\b(?!-|\s+(?:precision|float)\b)"),
    ("a fraction in words", r"\b" + NUMBER_WORDS + r"[ -]" + _FRACTIONS + r"\b|\ban?[ -]quarter\b"
                            r"|\ban?[ -]" + _ORDINALS + r"\b" + _AS_FRACTION),
    ("a time in words", r"\b(?:" + NUMBER_WORDS + r"|half an?|a few|several)[ -]"
                        r"(?:seconds?|minutes?|hours?|days?)\b|\b(?:a minute|an hour)\b"),
    ("N times faster, slower, as ..., less, more", r"\b(?:\d+(?:\.\d+)?|" + NUMBER_WORDS + r")\s+times\s+(?:faster"
                                                   r"|slower|quicker|as|less|more|smaller|larger|bigger|fewer|lower"
                                                   r"|higher)\b|\b(?:\d+|" + NUMBER_WORDS + r")-fold\b"),
    ("a number word and percent", r"\b" + NUMBER_WORDS + r"\s+(?:percent|per cent)\b"),
]
FIGURE_IN_WORDS = re.compile("|".join(f"(?:{pattern})" for _, pattern in FIGURE_WORDS), re.I)
# Code is quoted text (commands, options, messages), not a claim; numbers around a slash are a split.
CODE_SPAN = re.compile(r"`[^`]*`")
SPLIT = re.compile(r"\b\d+(?:\.\d+)?/\d+(?:\.\d+)?\b")


class ReportError(Exception):
    pass


def load(machine, bench):
    path = os.path.join(RESULTS, machine, bench + ".json")
    if not os.path.exists(path):
        raise ReportError(f"no result file {os.path.relpath(path, ROOT)} (run scripts/bench.sh {bench} on a "
                          f"{machine} machine)")
    with open(path) as f:
        data = json.load(f)
    if data.get("context", {}).get("machine") != machine:
        raise ReportError(f"{os.path.relpath(path, ROOT)} says it ran on a "
                          f"'{data.get('context', {}).get('machine')}' machine, not '{machine}'")
    return data


def machines():
    return sorted(d for d in os.listdir(RESULTS) if os.path.isdir(os.path.join(RESULTS, d))) if os.path.isdir(
        RESULTS) else []


def named_flags(context):
    """The flags that decide which kernels run (AMX, avx512_bf16, VNNI, AVX2), as listed."""
    have = set(context.get("cpu_flags", "").split())
    wanted = ["amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f", "avx2"]
    return [f for f in wanted if f in have]


def machine_line(context):
    """One line naming the machine and the run: CPU model, its kernel-deciding flags, CPUs, LibTorch,
    threads (the result file has the date too)."""
    return (f"{context.get('cpu_model', '?')} ({', '.join(named_flags(context))}), {context.get('num_cpus', '?')} CPUs, "
            f"LibTorch {context.get('libtorch', '?')}, {context.get('threads', '?')} threads")


def by_case(data):
    """Benchmark entries by their name before the first '/'."""
    return {b["name"].split("/")[0]: b for b in data["benchmarks"] if b.get("run_type", "iteration") == "iteration"}


def ms(value):
    return f"{value:.3f} ms" if value < 10 else f"{value:.0f} ms"


def ratio(value):
    return f"{value:.2f}x"


TRAINING_CASES = [
    ("vit_bf16_lora", "ViT, bf16 + LoRA(q, v)"),
    ("vit_bf16_full", "ViT, bf16, full"),
    ("vit_fp32_full", "ViT, fp32, full"),
    ("vit_bf16_dora", "ViT, bf16 + DoRA(q, v)"),
    ("vit_bf16_vera", "ViT, bf16 + VeRA r 256 (q, v)"),
    ("mlp_fp32_full", "MLP 784-64-10, fp32, full"),
    ("bert_bf16_lora", "all-MiniLM-L6-v2, bf16 + LoRA(q, v)"),
    ("bert_fp32_full", "all-MiniLM-L6-v2, fp32, full"),
    ("llama_bf16_lora", "SmolLM2-135M, bf16 + LoRA r 16 (7 projections), 8 x 256 tokens"),
    ("gemma3_bf16_lora", "Gemma 3 270M, bf16 + LoRA r 16 (7 projections), 8 x 256 tokens"),
    ("qwen2_bf16_lora", "Qwen2.5-0.5B, bf16 + LoRA r 16 (7 projections), 8 x 256 tokens"),
]
# The Python ways, as bench_python_peer names their counters (py_<attention>_<optimizer>_<mode>,
# and _chunked where the loss is computed from the hidden states in chunks; a model without
# attention has no attention part), in the table's column order. The chunked ways come after,
# those a file holds (CHUNKED_WAYS: the causal LM's).
PYTHON_WAYS = ["py_sdpa_adamw_eager", "py_eager_adamw_eager", "py_sdpa_fused_eager", "py_eager_fused_eager",
               "py_fastest_fused_default", "py_fastest_fused_max_autotune_no_cudagraphs"]
CHUNKED_WAYS = [w + "_chunked" for w in PYTHON_WAYS]
ATTENTION_TITLES = {"sdpa": "sdpa", "eager": "eager attn.", "fastest": None}  # fastest: named per case
OPTIMIZER_TITLES = {"adamw": "AdamW", "fused": "fused"}
MODE_TITLES = {"eager": "eager", "default": "compile default", "max_autotune_no_cudagraphs": "compile max-autotune"}
LOSS_TITLES = {None: None, "chunked": "chunked loss"}


def way_parts(name):
    """The attention, optimizer, mode and loss of a Python way's counter name (attention None if
    none; loss None for the model's own loss over the logits, "chunked" for the chunked one)."""
    loss = "chunked" if name.endswith("_chunked") else None
    name = name.removesuffix("_chunked")
    words = name.removeprefix("py_").split("_", 1)
    attention = words[0] if words[0] in ATTENTION_TITLES else None
    rest = words[1] if attention else name.removeprefix("py_")
    optimizer, mode = rest.split("_", 1)
    return attention, optimizer, mode, loss


def way_title(name):
    """A Python way's column title: its attention (where chosen per way), optimizer, mode and loss
    (where not the model's own)."""
    attention, optimizer, mode, loss = way_parts(name)
    parts = [ATTENTION_TITLES.get(attention), OPTIMIZER_TITLES[optimizer], MODE_TITLES[mode], LOSS_TITLES[loss]]
    return ", ".join(p for p in parts if p)


def ways_of(entries):
    """The Python ways of a table over these entries: PYTHON_WAYS, then the chunked ways any of them has."""
    return PYTHON_WAYS + [w for w in CHUNKED_WAYS if any(w + "_ms" in e for e in entries)]


def python_way(entry, prefix):
    """The counter of a Python way in this entry. A model without attention (the MLP) has its ways
    without the attention part, shown in the default attention's columns (sdpa, and the compiled
    ones); its eager-attention columns stay empty."""
    if prefix + "_ms" in entry:
        return prefix
    attention, optimizer, mode, loss = way_parts(prefix)
    name = f"py_{optimizer}_{mode}" + ("_chunked" if loss else "")
    return name if attention != "eager" and name + "_ms" in entry else None


def strongest_way(entry):
    """The counter name of Python's strongest way in this entry (its label's strongest=), or None."""
    m = re.search(r"strongest=(\S+)", entry.get("label", ""))
    return m.group(1) if m else None


def strongest_name(entry):
    way = strongest_way(entry)
    return way_title(way) if way else "?"


def render_python_peer_training(machine, bench="python_peer"):
    data = load(machine, bench)
    cases = by_case(data)
    ways = ways_of([cases[c] for c, _ in TRAINING_CASES if c in cases])
    head = ["step", "ftopt, FusedAdamW", "ftopt, AdamW"] + [way_title(w) for w in ways] + [
        "Python's strongest", "strongest / ftopt", "plain AdamW: Python / ftopt", "most users / ftopt"]
    lines = [f"Machine: {machine_line(data['context'])}; Python: {data['context'].get('python', '?')}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case, title in TRAINING_CASES:
        if case not in cases:
            continue
        e = cases[case]
        row = [title, ms(e["ftopt_fused_ms"]), ms(e["ftopt_adamw_ms"])]
        for prefix in ways:
            way = python_way(e, prefix)
            row.append(ms(e[way + "_ms"]) if way else "-")
        row += [f"{strongest_name(e)}", f"**{ratio(e['strongest_x'])}**", ratio(e["adamw_x"]), ratio(e["most_x"])]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def render_python_peer_compile(machine, bench="python_peer"):
    data = load(machine, bench)
    cases = by_case(data)
    ways = ways_of([cases[c] for c, _ in TRAINING_CASES if c in cases])
    lines = [f"Machine: {machine_line(data['context'])}.", "",
             "| step | mode | attention | compile (3 warm-up steps) | graph breaks | graphs |", "|---|---|---|---|---|---|"]
    for case, title in TRAINING_CASES:
        if case not in cases:
            continue
        e = cases[case]
        for prefix in ways:
            way = python_way(e, prefix)
            if not way or way_parts(way)[2] == "eager":
                continue
            m = re.search(r"(?<!\S)" + re.escape(way) + r" attention=(\S+)", e.get("label", ""))
            attention = m.group(1) if m and m.group(1) != "-" else "none"
            _, _, mode, loss = way_parts(way)
            how = ", ".join(t for t in (MODE_TITLES[mode], LOSS_TITLES[loss]) if t)
            lines.append(f"| {title} | {how} | {attention} | {e[way + '_compile_s']:.0f} s | "
                         f"{e[way + '_graph_breaks']:.0f} | {e[way + '_graphs']:.0f} |")
    return "\n".join(lines) + "\n"


def run_of(machine, bench, case):
    """A result file's context and its run of `case`."""
    data = load(machine, bench)
    e = by_case(data).get(case)
    if e is None:
        raise ReportError(f"benchmarks/results/{machine}/{bench}.json has no {case}")
    return data, e


def render_python_peer_inference(machine):
    data, e = run_of(machine, "python_peer", "vit_inference")
    lines = [f"Machine: {machine_line(data['context'])}.", "",
             "| ViT inference, batch 256 | ftopt | Python's fastest | Python / ftopt |", "|---|---|---|---|",
             f"| fp32 | {ms(e['ftopt_fp32_ms'])} | {ms(e['python_fp32_ms'])} | {ratio(e['fp32_x'])} |",
             f"| dynamic int8 (ftopt DynamicInt8, torch.ao quantize_dynamic) | {ms(e['ftopt_int8_ms'])} | "
             f"{ms(e['python_int8_ms'])} | {ratio(e['int8_x'])} |",
             f"| ftopt, bf16 weights | {ms(e['ftopt_bf16_ms'])} | | |"]
    return "\n".join(lines) + "\n"


def render_readme_measured(which):
    """The README's short table: one row per headline step and machine, against Python's strongest."""
    rows = ["| step (2 threads) | machine | ftopt | Python's strongest | ftopt's speed-up | over what most users write |",
            "|---|---|---|---|---|---|"]
    for machine in (machines() if which == "*" else [which]):
        cases, data = {}, None
        for bench in ("llm_peer", "text_peer", "python_peer"):  # the language models' rows first
            try:
                data = load(machine, bench)
            except ReportError:
                continue
            cases.update(by_case(data))
        if data is None:
            continue
        model = re.sub(r"\((R|TM)\)|\b(Processor|CPU)\b|@.*", "", data["context"].get("cpu_model", "?"))
        where = f"{' '.join(model.split())} ({machine})"
        for case, title in sorted(TRAINING_CASES, key=lambda c: not c[0].startswith(("llama", "bert"))):
            if case in ("vit_bf16_dora", "vit_bf16_vera") or case not in cases:
                continue
            e = cases[case]
            ftopt_how, python_how = "", strongest_name(e)
            if case.startswith("llama"):  # each side's loss named: they differ
                ftopt_how, python_how = f" ({FTOPT_LLM_LOSS})", f"{python_how}; {python_llm_loss(e)}"
            rows.append(f"| {title} | {where} | {ms(e['ftopt_fused_ms'])}{ftopt_how} | {ms(e['strongest_ms'])} "
                        f"({python_how}) | {ratio(e['strongest_x'])} | {ratio(e['most_x'])} |")
        if "vit_inference" in cases:
            e = cases["vit_inference"]
            rows.append(f"| ViT inference, fp32 | {where} | {ms(e['ftopt_fp32_ms'])} | "
                        f"{ms(e['python_fp32_ms'])} (fastest of sdpa, eager, compiled) | {ratio(e['fp32_x'])} | |")
            rows.append(f"| ViT inference, dynamic int8 | {where} | {ms(e['ftopt_int8_ms'])} | "
                        f"{ms(e['python_int8_ms'])} (torch.ao) | {ratio(e['int8_x'])} | |")
    return "\n".join(rows) + "\n"


FTOPT_LLM_LOSS = "fused, vocabulary-tiled linear cross-entropy"
PYTHON_CHUNKED_LOSS = "the loss over the hidden states in chunks"


def python_llm_loss(entry):
    """The loss Python's strongest way computed in an LLM entry, and whether a chunked way ran at all."""
    if (strongest_way(entry) or "").endswith("_chunked"):
        return PYTHON_CHUNKED_LOSS
    if any(w + "_ms" in entry for w in CHUNKED_WAYS):
        return "transformers' loss over the whole logits"
    return "transformers' loss over the whole logits; no chunked-loss way in this run"


def render_llm_peer_memory(machine):
    """The LLM step's memory, each side in a fresh process: the peak resident set less the resident
    set after the model is made and before the first step, ftopt's against Python's (with the
    model's own loss, and with the chunked loss where measured); and, in its own column, the tensor
    bytes ftopt's tracking allocator saw live at the step's peak, another quantity. A file from
    before this measurement holds two quantities that are not comparable: they are shown apart,
    with no ratio."""
    data, e = run_of(machine, "llm_peer", "llama_bf16_lora")
    head = f"Machine: {machine_line(data['context'])}."
    if "ftopt_rss_MiB" not in e:
        return "\n".join([
            head + " This file predates the like-for-like measurement (each side's resident set in a fresh "
            "process): its two figures are different quantities, shown apart and not compared.", "",
            "| SmolLM2-135M, bf16 + LoRA, 8 x 256 tokens | tensors live at the step's peak (ftopt's tracking "
            "allocator), MiB | growth of the resident set from before the model, MiB |", "|---|---|---|",
            f"| ftopt, fused loss | {e['ftopt_peak_MiB']:.0f} | |",
            f"| transformers + PEFT, sdpa, fused AdamW, eager, loss over the logits | | "
            f"{e['python_peak_MiB']:.0f} |"]) + "\n"
    lines = [head + " Each side in a fresh process: the peak resident set (VmHWM) less the resident set after "
             "the model is made, before the first step.", "",
             "| SmolLM2-135M, bf16 + LoRA, 8 x 256 tokens | resident set growth, MiB | Python / ftopt | tensors live "
             "at the step's peak (ftopt's tracking allocator), MiB |", "|---|---|---|---|",
             f"| ftopt, FusedAdamW, {FTOPT_LLM_LOSS} | {e['ftopt_rss_MiB']:.0f} | | "
             f"{e['ftopt_tensor_peak_MiB']:.0f} |"]
    for counter, how in (("py_rss_MiB", "transformers' loss over the logits"),
                         ("py_chunked_rss_MiB", PYTHON_CHUNKED_LOSS)):
        if counter in e:
            lines.append(f"| transformers + PEFT, sdpa, fused AdamW, eager, {how} | {e[counter]:.0f} | "
                         f"**{ratio(e[counter] / e['ftopt_rss_MiB'])}** | |")
    return "\n".join(lines) + "\n"


def render_llm_families_loss(machine):
    """The loss and its gradients over Gemma 3's 262,144-token head (bench_llm_families'
    gemma3_fused_loss): the logits made whole against the fused loss, time and the peak above what
    was live."""
    data, e = run_of(machine, "llm_families", "gemma3_fused_loss")
    return "\n".join([
        f"Machine: {machine_line(data['context'])}.", "",
        "| Gemma 3's head (262,144 x 640), 8 x 256 tokens, bf16 autocast, forward + backward | time | peak above "
        "the live tensors, MiB |", "|---|---|---|",
        f"| logits made whole, then loss::causal_lm (transformers' loss) | {ms(e['whole_us'] / 1e3)} | "
        f"{e['whole_peak_MiB']:.0f} |",
        f"| loss::fused_causal_lm | {ms(e['fused_us'] / 1e3)} | {e['fused_peak_MiB']:.0f} "
        f"(**{e['peak_share'] * 100:.1f}%** of the whole logits') |"]) + "\n"


def render_llm_peer_generate(machine):
    """Greedy decoding: ftopt's generate against transformers' generate."""
    data, e = run_of(machine, "llm_peer", "llama_generate")
    tokens = round(e["ftopt_tokens_per_s"] * e["ftopt_ms"] / 1e3)  # the new tokens each side made
    return "\n".join([
        f"Machine: {machine_line(data['context'])}; Python: {data['context'].get('python', '?')}.", "",
        f"| SmolLM2-135M, fp32, greedy, 128-token prompt + {tokens} new tokens | ms | tokens/s |", "|---|---|---|",
        f"| ftopt `models::generate` | {ms(e['ftopt_ms'])} | {e['ftopt_tokens_per_s']:.1f} |",
        f"| transformers `generate`, sdpa | {ms(e['py_sdpa_ms'])} | {tokens / (e['py_sdpa_ms'] / 1e3):.1f} |",
        f"| transformers `generate`, eager attention | {ms(e['py_eager_ms'])} | "
        f"{tokens / (e['py_eager_ms'] / 1e3):.1f} |",
        f"| Python's faster / ftopt | **{ratio(e['generate_x'])}** | |"]) + "\n"


def minutes(seconds):
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def repository_relative(word):
    """An absolute path into a build folder ('build' or 'build-*': '/any/checkout/build/apps/finetune')
    from that folder on ('build/apps/finetune'), so the line reads the same whichever checkout ran
    the benchmark."""
    if not word.startswith(os.sep):
        return word
    parts = word.split(os.sep)
    builds = [i for i, part in enumerate(parts[:-1]) if part == "build" or part.startswith("build-")]
    return os.sep.join(parts[builds[-1]:]) if builds else word


def run_line(context):
    """The machine, the command (paths under the repository shortened, --results left out) and the
    run's wall time, from a result file of the main job (`finetune --results FILE`)."""
    words = [repository_relative(w) for w in context.get("command", "finetune").split()]
    command = " ".join(w for i, w in enumerate(words) if w != "--results" and (i == 0 or words[i - 1] != "--results"))
    return f"Machine: {machine_line(context)}; `{command}`: the whole run took {minutes(context['wall_s'])}."


def pct(value, digits):
    return f"{value:.{digits}f}%"


def quoted(text):
    """A model's answer as a table cell: in code, its pipes escaped and its lines joined."""
    return "`" + " ".join(str(text).replace("`", "'").replace("|", "\\|").split()) + "`"


def render_finetune_text(machine):
    """The main job's closing table (apps/finetune/table.hpp's print_table) from `finetune --results`."""
    data = load(machine, "finetune_text")
    c = data["context"]
    lines = [run_line(c)]
    if "train_articles" in c:
        lines.append(f"all-MiniLM-L6-v2 on BBC News ({c['train_articles']} articles to train, {c['test_articles']} to "
                     f"test, {c['max_length']} tokens, batch {c['batch']}, {c['epochs']} "
                     f"{'epoch' if c['epochs'] == 1 else 'epochs'}).")
    lines = [" ".join(lines), "",
             "| setup | s / epoch | data wait | peak MiB | trainable params | test acc | speed-up | fp32 inference acc "
             "| bf16 weights acc, speed-up | int8 acc, speed-up |", "|" + "---|" * 10]

    def after(e, kind):  # an inference path the row did not run has no speed-up
        return f"{pct(e[kind + '_acc_pct'], 2)}, {ratio(e[kind + '_speedup_x'])}" if e.get(kind + "_speedup_x") else "-"
    for e in data["benchmarks"]:
        if e.get("run_type", "iteration") != "iteration":
            continue
        lines.append(f"| {e['name']} | {e['epoch_s']:.1f} | {pct(e['data_wait_pct'], 1)} | {e['peak_MiB']:.1f} | "
                     f"{e['trainable']} / {e['total_params']} | {pct(e['test_acc_pct'], 2)} | "
                     f"{ratio(e['speedup_x'])} | {pct(e['fp32_acc_pct'], 2)} | {after(e, 'bf16')} | "
                     f"{after(e, 'int8')} |")
    return "\n".join(lines) + "\n"


def render_finetune_llm(machine):
    """The LLM job's closing table (apps/finetune/llm_task.hpp's print_llm_table) from
    `finetune --task llm --results`."""
    data = load(machine, "finetune_llm")
    c = data["context"]
    runs = [e for e in data["benchmarks"] if e.get("run_type", "iteration") == "iteration"]
    before = next((e for e in runs if "step_s" not in e), None)
    line = (f"{run_line(c)} SmolLM2-135M-Instruct (Q4_1 GGUF) answering the BBC section of {c['test_articles']} "
            f"held-out articles ({c['steps']} steps of {c['batch']})")
    if before:
        line += (f"; before fine-tuning: accuracy {pct(before['acc_pct'], 1)}, held-out perplexity "
                 f"{before['ppl']:.2f}, first answer {quoted(before['sample'])}")
    lines = [line + ".", "",
             "| setup | s/step | tokens/s | peak MiB | base / fp32 | accuracy | perplexity | first answer |",
             "|" + "---|" * 8]
    for e in runs:
        if e is before:
            continue
        share = "100%" if e["base_share_pct"] >= 100 else pct(e["base_share_pct"], 1)
        lines.append(f"| {e['name']} | {e['step_s']:.2f} | {e['tokens_per_s']:.0f} | {e['peak_MiB']:.0f} | {share} | "
                     f"{pct(e['acc_pct'], 1)} | {e['ppl']:.2f} | {quoted(e['sample'])} |")
    return "\n".join(lines) + "\n"


def render_bench(bench, machine):
    """Any other benchmark: each run's real time and its counters."""
    data = load(machine, bench)
    lines = [f"Machine: {machine_line(data['context'])}.", "", "| benchmark | one iteration (every contender) | counters |", "|---|---|---|"]
    for e in data["benchmarks"]:
        if e.get("run_type", "iteration") != "iteration":
            continue
        skip = {"name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
                "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit", "label"}
        counters = ", ".join(f"{k} {v:.4g}" for k, v in e.items() if k not in skip and isinstance(v, (int, float)))
        lines.append(f"| {e['name']} | {e['real_time']:.1f} {e['time_unit']} | {counters} |")
    return "\n".join(lines) + "\n"


def render_profile(name, machine, rows=12):
    """bench_profile_step's table: the step's time, then the ops with the largest self time."""
    data = load(machine, name)
    runs = {e["name"]: e for e in data["benchmarks"]}
    lines = [f"Machine: {machine_line(data['context'])}; `{data['context'].get('what', name)}`: "
             f"{ms(runs['step unprofiled']['real_time'])} a step unprofiled, "
             f"{ms(runs['step profiled']['real_time'])} profiled.", "",
             "| op | ms / step | share of op time | calls / step |", "|---|---|---|---|"]
    ops = [e for e in data["benchmarks"] if "share_pct" in e][:rows]
    for e in ops:
        lines.append(f"| `{e['name']}` | {e['real_time']:.1f} | {e['share_pct']:.1f}% | {e['calls']:.0f} |")
    return "\n".join(lines) + "\n"


def render(table, machine):
    """The text of a marked table; ReportError (naming the file or the counter) where it cannot be made."""
    try:
        return render_table(table, machine)
    except KeyError as e:
        raise ReportError(f"a result file behind '{table} {machine}' has no '{e.args[0]}' (written by an older or "
                          f"newer benchmark? run it again)")


def render_table(table, machine):
    if table == "python_peer.training":
        return render_python_peer_training(machine)
    if table == "python_peer.compile":
        return render_python_peer_compile(machine)
    if table == "text_peer.training":
        return render_python_peer_training(machine, "text_peer")
    if table == "text_peer.compile":
        return render_python_peer_compile(machine, "text_peer")
    if table == "llm_peer.training":
        return render_python_peer_training(machine, "llm_peer")
    if table == "llm_peer.compile":
        return render_python_peer_compile(machine, "llm_peer")
    if table == "llm_peer.memory":
        return render_llm_peer_memory(machine)
    if table == "llm_peer.generate":
        return render_llm_peer_generate(machine)
    if table == "llm_families.training":
        return render_python_peer_training(machine, "llm_families")
    if table == "llm_families.compile":
        return render_python_peer_compile(machine, "llm_families")
    if table == "llm_families.loss":
        return render_llm_families_loss(machine)
    if table == "finetune.text":
        return render_finetune_text(machine)
    if table == "finetune.llm":
        return render_finetune_llm(machine)
    if table == "python_peer.inference":
        return render_python_peer_inference(machine)
    if table == "readme.measured":
        return render_readme_measured(machine)
    if table.startswith("profile."):
        return render_profile(table[len("profile."):], machine)
    if table.startswith("bench."):
        return render_bench(table[len("bench."):], machine)
    raise ReportError(f"unknown table '{table}'")


def figure_in(line):
    """The first figure a line of prose states (outside code), in digits or in words, or None."""
    prose = SPLIT.sub(" ", CODE_SPAN.sub(" ", line))
    m = FIGURE.search(prose) or FIGURE_IN_WORDS.search(prose)
    return m.group(0).strip() if m else None


def figures_outside_tables(text):
    """(line number, line, the figure) of each line stating a figure outside the marked tables."""
    outside = MARKER.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found, fenced = [], False
    for number, line in enumerate(outside.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        figure = None if fenced else figure_in(line)
        if figure:
            found.append((number, line.strip(), figure))
    return found


def write_atomically(path, text):
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".report-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def store(path):
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ReportError(f"{path} is not JSON ({e}): a benchmark that stopped half-way?")
    machine = data.get("context", {}).get("machine")
    if not machine:
        raise ReportError(f"{path} has no context.machine: a benchmark built without benchmarks/machine.hpp?")
    bench = os.path.basename(data["context"].get("executable", "")).removeprefix("bench_")
    if not bench or not data.get("benchmarks"):
        raise ReportError(f"{path} names no benchmark executable or has no runs")
    target = os.path.join(RESULTS, machine, bench + ".json")
    write_atomically(target, json.dumps(data, indent=1) + "\n")
    print(f"stored {os.path.relpath(target, ROOT)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="check instead of writing")
    parser.add_argument("--store", metavar="FILE", help="file a benchmark's JSON result under benchmarks/results")
    args = parser.parse_args()
    try:
        if args.store:
            store(args.store)
            return 0
    except ReportError as e:
        print(f"report: {e}", file=sys.stderr)
        return 1
    problems = []
    for doc in DOCUMENTS:
        path = os.path.join(ROOT, doc)
        with open(path) as f:
            text = f.read()
        unrendered = set()

        def fill(m):
            """The table between the markers, from its files; one that cannot be rendered stays as it is."""
            try:
                return f"<!-- report: {m.group(1)} {m.group(2)} -->\n{render(m.group(1), m.group(2))}<!-- /report -->"
            except ReportError as e:
                line = text[:m.start()].count("\n") + 1
                problems.append(f"{doc}:{line}: the table '{m.group(1)} {m.group(2)}': {e}")
                unrendered.add(m.start())
                return m.group(0)
        new = MARKER.sub(fill, text)
        if args.check:
            for m_old, m_new in zip(MARKER.finditer(text), MARKER.finditer(new)):
                if m_old.start() not in unrendered and m_old.group(3) != m_new.group(3):
                    line = text[:m_old.start()].count("\n") + 1
                    problems.append(f"{doc}:{line}: the table '{m_old.group(1)} {m_old.group(2)}' is not what "
                                    f"the result files say (run scripts/report.py)")
            for number, line, figure in figures_outside_tables(text):
                problems.append(f"{doc}:{number}: a figure outside a generated table ('{figure}'): {line[:120]}")
        elif new != text:
            write_atomically(path, new)
            print(f"rendered {doc}")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
