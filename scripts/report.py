#!/usr/bin/env python3
"""Renders the measured figures of README.md and docs/*.md from the committed benchmark results,
and checks that the documents say what the files say.

Results: benchmarks/results/<machine>/<benchmark>.json, the JSON Google Benchmark writes
(--benchmark_out), whose context names the machine (benchmarks/machine.hpp: CPU model, flags,
machine type, LibTorch, threads, date). One folder per machine type; figures from different
machines never share a row.

A document asks for a table with a pair of markers, and this script fills in what lies between:

    <!-- report: TABLE MACHINE -->
    ...generated...
    <!-- /report -->

TABLE is one of the renderers below (python_peer.training, python_peer.inference,
python_peer.compile, text_peer.training, text_peer.compile, llm_peer.training, llm_peer.compile,
llm_peer.memory, llm_peer.generate, readme.measured, profile.<name>, bench.<name>); MACHINE a folder of benchmarks/results
(`readme.measured` takes `*`: every machine, one row each).

    scripts/report.py                 render every marked table in place
    scripts/report.py --check         exit 1 if a table differs from its files, or if README.md or
                                      docs/benchmarks.md states a figure outside a marked table
    scripts/report.py --store FILE    file a result (its context names the machine) under
                                      benchmarks/results/<machine>/<benchmark>.json, atomically
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
# Documents whose every figure must come from a marked table.
FIGURES_FROM_FILES_ONLY = ["README.md", "docs/benchmarks.md"]
MARKER = re.compile(r"<!-- report: (\S+) (\S+) -->\n(.*?)<!-- /report -->", re.S)
# What reads as a measured figure: a ratio, a time, a memory size, a rate, a share.
FIGURE = re.compile(r"\b\d+(\.\d+)?x\b|\b\d+(\.\d+)? ?(ms|µs|us|s/epoch|MiB|GiB|GFLOP/s|samples/s)\b|\b\d+\.\d+ ?%")


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
]
# The Python ways, as bench_python_peer names their counters (py_<attention>_<optimizer>_<mode>;
# a model without attention has no attention part), in the table's column order.
PYTHON_WAYS = ["py_sdpa_adamw_eager", "py_eager_adamw_eager", "py_sdpa_fused_eager", "py_eager_fused_eager",
               "py_fastest_fused_default", "py_fastest_fused_max_autotune_no_cudagraphs"]
ATTENTION_TITLES = {"sdpa": "sdpa", "eager": "eager attn.", "fastest": None}  # fastest: named per case
OPTIMIZER_TITLES = {"adamw": "AdamW", "fused": "fused"}
MODE_TITLES = {"eager": "eager", "default": "compile default", "max_autotune_no_cudagraphs": "compile max-autotune"}


def way_parts(name):
    """The attention, optimizer and mode of a Python way's counter name (attention None if none)."""
    words = name.removeprefix("py_").split("_", 1)
    attention = words[0] if words[0] in ATTENTION_TITLES else None
    rest = words[1] if attention else name.removeprefix("py_")
    optimizer, mode = rest.split("_", 1)
    return attention, optimizer, mode


def way_title(name):
    """A Python way's column title: its attention (where chosen per way), optimizer and mode."""
    attention, optimizer, mode = way_parts(name)
    parts = [ATTENTION_TITLES.get(attention), OPTIMIZER_TITLES[optimizer], MODE_TITLES[mode]]
    return ", ".join(p for p in parts if p)


def python_way(entry, prefix):
    """The counter of a Python way in this entry. A model without attention (the MLP) has its ways
    without the attention part, shown in the default attention's columns (sdpa, and the compiled
    ones); its eager-attention columns stay empty."""
    if prefix + "_ms" in entry:
        return prefix
    attention, optimizer, mode = way_parts(prefix)
    name = f"py_{optimizer}_{mode}"
    return name if attention != "eager" and name + "_ms" in entry else None


def strongest_name(entry):
    m = re.search(r"strongest=(\S+)", entry.get("label", ""))
    return way_title(m.group(1)) if m else "?"


def render_python_peer_training(machine, bench="python_peer"):
    data = load(machine, bench)
    cases = by_case(data)
    head = ["step", "ftopt, FusedAdamW", "ftopt, AdamW"] + [way_title(w) for w in PYTHON_WAYS] + [
        "Python's strongest", "strongest / ftopt", "plain AdamW: Python / ftopt", "most users / ftopt"]
    lines = [f"Machine: {machine_line(data['context'])}; Python: {data['context'].get('python', '?')}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case, title in TRAINING_CASES:
        if case not in cases:
            continue
        e = cases[case]
        row = [title, ms(e["ftopt_fused_ms"]), ms(e["ftopt_adamw_ms"])]
        for prefix in PYTHON_WAYS:
            way = python_way(e, prefix)
            row.append(ms(e[way + "_ms"]) if way else "-")
        row += [f"{strongest_name(e)}", f"**{ratio(e['strongest_x'])}**", ratio(e["adamw_x"]), ratio(e["most_x"])]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def render_python_peer_compile(machine, bench="python_peer"):
    data = load(machine, bench)
    cases = by_case(data)
    lines = [f"Machine: {machine_line(data['context'])}.", "",
             "| step | mode | attention | compile (3 warm-up steps) | graph breaks | graphs |", "|---|---|---|---|---|---|"]
    for case, title in TRAINING_CASES:
        if case not in cases:
            continue
        e = cases[case]
        for prefix in PYTHON_WAYS[4:]:
            way = python_way(e, prefix)
            if not way:
                continue
            m = re.search(re.escape(way) + r" attention=(\S+)", e.get("label", ""))
            attention = m.group(1) if m and m.group(1) != "-" else "none"
            lines.append(f"| {title} | {MODE_TITLES[way_parts(way)[2]]} | {attention} | {e[way + '_compile_s']:.0f} s | "
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
            rows.append(f"| {title} | {where} | {ms(e['ftopt_fused_ms'])} | {ms(e['strongest_ms'])} "
                        f"({strongest_name(e)}) | {ratio(e['strongest_x'])} | {ratio(e['most_x'])} |")
        if "vit_inference" in cases:
            e = cases["vit_inference"]
            rows.append(f"| ViT inference, dynamic int8 | {where} | {ms(e['ftopt_int8_ms'])} | "
                        f"{ms(e['python_int8_ms'])} (torch.ao) | {ratio(e['int8_x'])} | |")
    return "\n".join(rows) + "\n"


def render_llm_peer_memory(machine):
    """The LLM step's memory: ftopt's tracked tensors against the growth of Python's resident set."""
    data, e = run_of(machine, "llm_peer", "llama_bf16_lora")
    return "\n".join([
        f"Machine: {machine_line(data['context'])}.", "",
        "| SmolLM2-135M, bf16 + LoRA, 8 x 256 tokens | peak MiB | share of Python's |", "|---|---|---|",
        f"| ftopt, fused loss (tensors live at the step's peak: weights, AdamW state, activations) | "
        f"{e['ftopt_peak_MiB']:.0f} | **{100 * e['peak_share']:.1f}%** |",
        f"| transformers + PEFT, sdpa, fused AdamW (growth of the resident set from before the model) | "
        f"{e['python_peak_MiB']:.0f} | |"]) + "\n"


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
    if table == "python_peer.inference":
        return render_python_peer_inference(machine)
    if table == "readme.measured":
        return render_readme_measured(machine)
    if table.startswith("profile."):
        return render_profile(table[len("profile."):], machine)
    if table.startswith("bench."):
        return render_bench(table[len("bench."):], machine)
    raise ReportError(f"unknown table '{table}'")


def figures_outside_tables(text):
    """(line number, line) of each line stating a figure outside the marked tables."""
    outside = MARKER.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found, fenced = [], False
    for number, line in enumerate(outside.split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and FIGURE.search(line):
            found.append((number, line.strip()))
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
        problems = []
        for doc in DOCUMENTS:
            path = os.path.join(ROOT, doc)
            with open(path) as f:
                text = f.read()

            def fill(m):
                return f"<!-- report: {m.group(1)} {m.group(2)} -->\n{render(m.group(1), m.group(2))}<!-- /report -->"
            new = MARKER.sub(fill, text)
            if args.check:
                for m_old, m_new in zip(MARKER.finditer(text), MARKER.finditer(new)):
                    if m_old.group(3) != m_new.group(3):
                        line = text[:m_old.start()].count("\n") + 1
                        problems.append(f"{doc}:{line}: the table '{m_old.group(1)} {m_old.group(2)}' is not what "
                                        f"the result files say (run scripts/report.py)")
                if doc in FIGURES_FROM_FILES_ONLY:
                    for number, line in figures_outside_tables(text):
                        problems.append(f"{doc}:{number}: a figure outside a generated table: {line[:120]}")
            elif new != text:
                write_atomically(path, new)
                print(f"rendered {doc}")
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    except ReportError as e:
        print(f"report: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
