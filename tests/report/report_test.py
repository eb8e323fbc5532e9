"""Tests for scripts/report.py: tables rendered from result files, the check that documents say
what the files say and state no figure outside a table (in digits or in words), and filing a
result (bad input refused, nothing half-written). Each case runs the script in a scratch copy of
the layout it reads (README.md, docs/, benchmarks/results/), in a temporary folder: the sample
result files below are never filed in the repository."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "report.py")
_spec = importlib.util.spec_from_file_location("report", SCRIPT)
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

CONTEXT = {"date": "2026-01-02T03:04:05+00:00", "num_cpus": 2, "cpu_model": "Test CPU", "cpu_flags": "avx2 fma",
           "machine": "intel-avx2", "libtorch": "2.11.0", "threads": "2", "executable": "build/benchmarks/bench_layers"}
RUN = {"name": "linear/iterations:5/real_time", "run_name": "linear", "run_type": "iteration", "iterations": 5,
       "real_time": 1.5, "cpu_time": 1.4, "time_unit": "ms", "plain_us": 120.0, "ours_ratio": 1.003}


class Scratch:
    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="ftopt-report-")
        os.makedirs(os.path.join(self.root, "scripts"))
        os.makedirs(os.path.join(self.root, "docs"))
        shutil.copy(SCRIPT, os.path.join(self.root, "scripts", "report.py"))
        self.write("README.md", "# t\n\n<!-- report: bench.layers intel-avx2 -->\n<!-- /report -->\n")
        self.write("docs/benchmarks.md", "# b\n\nNo figures here.\n")

    def write(self, path, text):
        with open(os.path.join(self.root, path), "w") as f:
            f.write(text)

    def read(self, path):
        with open(os.path.join(self.root, path)) as f:
            return f.read()

    def run(self, *args):
        return subprocess.run([sys.executable, os.path.join(self.root, "scripts", "report.py"), *args],
                              capture_output=True, text=True)

    def result(self, data, name="result.json"):
        path = os.path.join(self.root, name)
        with open(path, "w") as f:
            f.write(data if isinstance(data, str) else json.dumps(data))
        return path


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.s = Scratch()
        self.addCleanup(shutil.rmtree, self.s.root)
        filed = self.s.run("--store", self.s.result({"context": CONTEXT, "benchmarks": [RUN]}))
        self.assertEqual(filed.returncode, 0, filed.stderr)

    def test_renders_the_files_figures_and_the_check_passes(self):
        self.assertEqual(self.s.run().returncode, 0)
        readme = self.s.read("README.md")
        self.assertIn("Test CPU (avx2), 2 CPUs, LibTorch 2.11.0, 2 threads", readme)
        self.assertIn("| linear/iterations:5/real_time | 1.5 ms | plain_us 120, ours_ratio 1.003 |", readme)
        check = self.s.run("--check")
        self.assertEqual(check.returncode, 0, check.stderr)

    def test_a_figure_that_is_not_the_files_fails_the_check(self):
        self.s.run()
        self.s.write("README.md", self.s.read("README.md").replace("ours_ratio 1.003", "ours_ratio 1.5"))
        check = self.s.run("--check")
        self.assertEqual(check.returncode, 1)
        self.assertIn("README.md:3: the table 'bench.layers intel-avx2' is not what the result files say", check.stderr)

    def test_a_figure_outside_a_table_fails_the_check(self):
        self.s.run()
        self.s.write("docs/benchmarks.md", "# b\n\nftopt is 1.50x faster.\n")
        check = self.s.run("--check")
        self.assertEqual(check.returncode, 1)
        self.assertIn("docs/benchmarks.md:3: a figure outside a generated table ('1.50x'): ftopt is 1.50x faster.",
                      check.stderr)

    def test_every_document_is_checked_for_figures_in_words_too(self):
        self.s.run()
        self.s.write("docs/llm.md", "# l\n\nThe fused loss takes about half the memory.\n\n```\n2.06x\n```\n")
        check = self.s.run("--check")
        self.assertEqual(check.returncode, 1)
        self.assertIn("docs/llm.md:3: a figure outside a generated table ('half')", check.stderr)
        self.assertNotIn("docs/llm.md:6", check.stderr)  # a fenced block is quoted, not a claim

    def test_a_missing_result_file_is_named(self):
        self.s.write("README.md", "<!-- report: bench.peft intel-avx2 -->\n<!-- /report -->\n")
        check = self.s.run("--check")
        self.assertEqual(check.returncode, 1)
        self.assertIn("no result file benchmarks/results/intel-avx2/peft.json", check.stderr)

    def test_a_result_filed_under_another_machine_is_refused(self):
        folder = os.path.join(self.s.root, "benchmarks", "results", "amd-avx512bf16")
        os.makedirs(folder)
        shutil.copy(os.path.join(self.s.root, "benchmarks", "results", "intel-avx2", "layers.json"), folder)
        self.s.write("README.md", "<!-- report: bench.layers amd-avx512bf16 -->\n<!-- /report -->\n")
        check = self.s.run("--check")
        self.assertEqual(check.returncode, 1)
        self.assertIn("says it ran on a 'intel-avx2' machine, not 'amd-avx512bf16'", check.stderr)

    def test_storing_bad_input_is_refused_and_files_nothing(self):
        results = os.path.join(self.s.root, "benchmarks", "results")
        before = sorted(os.walk(results))
        cut = self.s.run("--store", self.s.result(json.dumps({"context": CONTEXT, "benchmarks": [RUN]})[:80]))
        self.assertEqual(cut.returncode, 1)
        self.assertIn("is not JSON", cut.stderr)
        anonymous = self.s.run("--store", self.s.result({"context": {"date": "x"}, "benchmarks": [RUN]}))
        self.assertEqual(anonymous.returncode, 1)
        self.assertIn("has no context.machine", anonymous.stderr)
        empty = self.s.run("--store", self.s.result({"context": CONTEXT, "benchmarks": []}))
        self.assertEqual(empty.returncode, 1)
        self.assertIn("has no runs", empty.stderr)
        self.assertEqual(sorted(os.walk(results)), before)



class FiguresInProse(unittest.TestCase):
    """What the check takes for a measured figure (a time, speed, ratio, memory size or share), and
    what it leaves alone (a setting, a count of data, the size of a model, code)."""

    CAUGHT = [
        "ftopt is twice as fast", "it halved the peak", "half the step", "the step takes about half.",
        "half as many parses", "at two fifths of Python's memory", "a third is GEMMs", "a third.",
        "a quarter of the time", "two thirds of the step", "three quarters of it", "an eighth of its bytes",
        "one third", "in about six minutes", "about 6 minutes", "within an hour", "a few seconds",
        "3 times faster", "three times slower", "ten times as fast", "twenty percent", "a 5-fold gain",
        "37% less memory", "it reached 41.2%", "took 8 min 1 s", "compiled in 26 s", "654 tokens/s",
        "2.8 GB", "233 MiB", "370 ms", "2.06x", "2.06×", "3.6 points under the baseline",
        "the held-out perplexity was 22.59",
    ]
    NOT_CAUGHT = [
        "an 80/20 split", "within 0.5 points of the baseline", "LoRA r 8", "batch 32", "2,225 articles",
        "8 x 256 tokens", "4x4 patches", "a third sweep computes", "a second run repairs", "a benchmark that "
        "stopped half-way", "half precision", "the first half of the heads", "each head's rotary halves for llama",
        "the adapters ten times that", "`timeout = 30 min`", "`rust_x 24.96`", "GPT-2's and Llama 3's",
        "1,024 held-out tokens", "tolerance 1e-5", "dropout 0.1", "the 784-64-10 MLP", "Unicode 8.0",
        "a learning rate of 2e-3", "SmolLM2-135M", "float32 and bf16",
    ]

    def test_figures_in_digits_and_in_words_are_caught(self):
        for line in self.CAUGHT:
            with self.subTest(line=line):
                self.assertIsNotNone(report.figure_in(line))

    def test_settings_counts_and_code_are_not_figures(self):
        for line in self.NOT_CAUGHT:
            with self.subTest(line=line):
                self.assertIsNone(report.figure_in(line))

    def test_the_word_list_is_the_module_docstrings(self):
        for word in ("twice", "half", "two fifths", "six minutes", "times faster", "percent"):
            self.assertIn(word, report.__doc__)
        self.assertTrue(all(what and pattern for what, pattern in report.FIGURE_WORDS))


MACHINE = {**CONTEXT, "machine": "amd-avx512bf16", "cpu_model": "AMD EPYC", "cpu_flags": "avx2 avx512f avx512_bf16"}
TEXT_ROW = {"run_type": "iteration", "epoch_s": 120.0, "data_wait_pct": 0.4, "peak_MiB": 812.5, "trainable": 22713605,
            "total_params": 22713605, "test_acc_pct": 97.3, "speedup_x": 1.0, "fp32_acc_pct": 97.3, "bf16_acc_pct": 97.08,
            "bf16_speedup_x": 2.51, "int8_acc_pct": 96.85, "int8_speedup_x": 1.62}
FINETUNE_TEXT = {
    "context": {**MACHINE, "executable": "finetune_text", "wall_s": 366.0, "train_articles": 1780,
                "test_articles": 445, "max_length": 128, "batch": 32, "epochs": 1,
                "command": "/elsewhere/checkout/build/apps/finetune --results /tmp/t.json --rows LoRA"},
    "benchmarks": [{**TEXT_ROW, "name": "baseline: fp32, full fine-tuning, torch AdamW"},
                   {**TEXT_ROW, "name": "Bf16Mixed + peft::Lora", "epoch_s": 40.0, "speedup_x": 3.0, "trainable": 75653,
                    "int8_acc_pct": 0.0, "int8_speedup_x": 0.0}]}
LLM_ROW = {"run_type": "iteration", "step_s": 1.72, "tokens_per_s": 715.0, "peak_MiB": 1732.0, "base_share_pct": 100.0,
           "acc_pct": 100.0, "ppl": 20.13, "sample": "sport"}
FINETUNE_LLM = {
    "context": {**MACHINE, "executable": "finetune_llm", "wall_s": 481.0, "test_articles": 40, "steps": 40, "batch": 8,
                "command": "build/apps/finetune --task llm"},
    "benchmarks": [{"name": "before fine-tuning", "acc_pct": 0.0, "ppl": 22.59, "sample": "The section | of the"},
                   {**LLM_ROW, "name": "Bf16Mixed + peft::Lora (r 16, 7 projections), fused loss"},
                   {**LLM_ROW, "name": "Bf16Mixed + peft::QLora<storage::Q4_1>, fused loss", "base_share_pct": 15.625}]}
STEP = {"ftopt_fused_ms": 2320.0, "ftopt_adamw_ms": 2431.0, "py_sdpa_adamw_eager_ms": 4897.0, "py_eager_adamw_eager_ms": 4964.0,
        "py_sdpa_fused_eager_ms": 4962.0, "py_eager_fused_eager_ms": 4904.0, "py_fastest_fused_default_ms": 4782.0,
        "py_fastest_fused_default_compile_s": 108.0, "py_fastest_fused_default_graph_breaks": 0,
        "py_fastest_fused_default_graphs": 1, "py_fastest_fused_max_autotune_no_cudagraphs_ms": 5019.0,
        "py_fastest_fused_max_autotune_no_cudagraphs_compile_s": 110.0,
        "py_fastest_fused_max_autotune_no_cudagraphs_graph_breaks": 0, "py_fastest_fused_max_autotune_no_cudagraphs_graphs": 1,
        "adamw_x": 2.01, "most_x": 2.11}
OLD_LLM = {**STEP, "name": "llama_bf16_lora/iterations:1/real_time", "run_type": "iteration", "strongest_ms": 4782.0,
           "strongest_x": 2.06, "ftopt_peak_MiB": 2893.4, "python_peak_MiB": 7029.3, "peak_share": 0.41,
           "label": "strongest=py_fastest_fused_default py_fastest_fused_default attention=sdpa "
                    "py_fastest_fused_max_autotune_no_cudagraphs attention=sdpa "}
NEW_LLM = {**STEP, "name": "llama_bf16_lora/iterations:1/real_time", "run_type": "iteration",
           "py_sdpa_fused_eager_chunked_ms": 3100.0, "py_eager_fused_eager_chunked_ms": 3200.0,
           "py_fastest_fused_default_chunked_ms": 3000.0, "py_fastest_fused_default_chunked_compile_s": 120.0,
           "py_fastest_fused_default_chunked_graph_breaks": 0, "py_fastest_fused_default_chunked_graphs": 1,
           "strongest_ms": 3000.0, "strongest_x": 1.29, "ftopt_rss_MiB": 1000.0, "py_rss_MiB": 4000.0,
           "py_chunked_rss_MiB": 2500.0, "ftopt_tensor_peak_MiB": 2893.4,
           "label": "strongest=py_fastest_fused_default_chunked py_fastest_fused_default attention=sdpa "
                    "py_fastest_fused_max_autotune_no_cudagraphs attention=sdpa "
                    "py_fastest_fused_default_chunked attention=eager "}


class Renderers(unittest.TestCase):
    """The main job's tables and the LLM's against Python, from sample files filed in a scratch layout."""

    def setUp(self):
        self.s = Scratch()
        self.addCleanup(shutil.rmtree, self.s.root)

    def file(self, data):
        filed = self.s.run("--store", self.s.result(data))
        self.assertEqual(filed.returncode, 0, filed.stderr)

    def render(self, table, machine):
        self.s.write("README.md", f"<!-- report: {table} {machine} -->\n<!-- /report -->\n")
        rendered = self.s.run()
        self.assertEqual(rendered.returncode, 0, rendered.stderr)
        check = self.s.run("--check")
        self.assertEqual(check.returncode, 0, check.stderr)
        return self.s.read("README.md")

    def test_the_main_jobs_table_and_its_wall_time(self):
        self.file(FINETUNE_TEXT)
        text = self.render("finetune.text", "amd-avx512bf16")
        self.assertIn("AMD EPYC (avx512_bf16, avx512f, avx2), 2 CPUs", text)
        self.assertIn("`build/apps/finetune --rows LoRA`: the whole run took 6.1 min.", text)
        self.assertIn("(1780 articles to train, 445 to test, 128 tokens, batch 32, 1 epoch)", text)
        self.assertIn("| baseline: fp32, full fine-tuning, torch AdamW | 120.0 | 0.4% | 812.5 | 22713605 / 22713605 | "
                      "97.30% | 1.00x | 97.30% | 97.08%, 2.51x | 96.85%, 1.62x |", text)
        self.assertIn("| Bf16Mixed + peft::Lora | 40.0 | 0.4% | 812.5 | 75653 / 22713605 | 97.30% | 3.00x | 97.30% | "
                      "97.08%, 2.51x | - |", text)

    def test_the_llm_jobs_table(self):
        self.file(FINETUNE_LLM)
        text = self.render("finetune.llm", "amd-avx512bf16")
        self.assertIn("the whole run took 8.0 min. SmolLM2-135M-Instruct (Q4_1 GGUF) answering the BBC section of 40 "
                      "held-out articles (40 steps of 8); before fine-tuning: accuracy 0.0%, held-out perplexity 22.59, "
                      "first answer `The section \\| of the`.", text)
        self.assertIn("| Bf16Mixed + peft::Lora (r 16, 7 projections), fused loss | 1.72 | 715 | 1732 | 100% | 100.0% | "
                      "20.13 | `sport` |", text)
        self.assertIn("| Bf16Mixed + peft::QLora<storage::Q4_1>, fused loss | 1.72 | 715 | 1732 | 15.6% |", text)

    def test_every_missing_file_and_counter_is_named_and_the_other_tables_still_render(self):
        self.llm_file({k: v for k, v in NEW_LLM.items() if k != "py_rss_MiB" and k != "ftopt_tensor_peak_MiB"})
        self.s.write("README.md", "".join(f"<!-- report: {t} amd-avx512bf16 -->\n<!-- /report -->\n" for t in (
            "finetune.text", "finetune.llm", "llm_peer.memory", "llm_peer.training")))
        rendered = self.s.run()
        self.assertEqual(rendered.returncode, 1)
        for problem in ("README.md:1: the table 'finetune.text amd-avx512bf16': no result file "
                        "benchmarks/results/amd-avx512bf16/finetune_text.json (run scripts/bench.sh finetune_text",
                        "README.md:3: the table 'finetune.llm amd-avx512bf16': no result file",
                        "README.md:5: the table 'llm_peer.memory amd-avx512bf16': a result file behind "
                        "'llm_peer.memory amd-avx512bf16' has no 'ftopt_tensor_peak_MiB'"):
            self.assertIn(problem, rendered.stderr)
        self.assertIn("| fused, compile default, chunked loss | **1.29x** |", self.s.read("README.md"))

    def llm_file(self, entry):
        self.file({"context": {**MACHINE, "executable": "build/benchmarks/bench_llm_peer", "python": "torch 2.11.0"},
                   "benchmarks": [entry]})

    def test_chunked_loss_ways_render_and_the_strongest_is_named_with_each_sides_loss(self):
        self.llm_file(NEW_LLM)
        training = self.render("llm_peer.training", "amd-avx512bf16")
        self.assertIn("| sdpa, fused, eager, chunked loss | eager attn., fused, eager, chunked loss | "
                      "fused, compile default, chunked loss | Python's strongest |", training)
        self.assertIn("| 3100 ms | 3200 ms | 3000 ms | fused, compile default, chunked loss | **1.29x** |", training)
        compiled = self.render("llm_peer.compile", "amd-avx512bf16")
        self.assertIn("| compile default, chunked loss | eager | 120 s | 0 | 1 |", compiled)
        self.assertIn("| compile default | sdpa | 108 s | 0 | 1 |", compiled)
        readme = self.render("readme.measured", "*")
        self.assertIn("| 2320 ms (fused, vocabulary-tiled linear cross-entropy) | 3000 ms (fused, compile default, "
                      "chunked loss; the loss over the hidden states in chunks) | 1.29x | 2.11x |", readme)

    def test_the_llm_memory_is_resident_set_against_resident_set_and_the_allocators_figure_apart(self):
        self.llm_file(NEW_LLM)
        memory = self.render("llm_peer.memory", "amd-avx512bf16")
        self.assertIn("| resident set growth, MiB | Python / ftopt | tensors live at the step's peak (ftopt's tracking "
                      "allocator), MiB |", memory)
        self.assertIn("| ftopt, FusedAdamW, fused, vocabulary-tiled linear cross-entropy | 1000 | | 2893 |", memory)
        self.assertIn("| transformers + PEFT, sdpa, fused AdamW, eager, transformers' loss over the logits | 4000 | "
                      "**4.00x** | |", memory)
        self.assertIn("| transformers + PEFT, sdpa, fused AdamW, eager, the loss over the hidden states in chunks | "
                      "2500 | **2.50x** | |", memory)

    def test_a_file_from_before_the_chunked_loss_and_the_like_for_like_memory_says_so(self):
        self.llm_file(OLD_LLM)
        memory = self.render("llm_peer.memory", "amd-avx512bf16")
        self.assertIn("This file predates the like-for-like measurement", memory)
        self.assertNotIn("Python / ftopt", memory)
        readme = self.render("readme.measured", "*")
        self.assertIn("4782 ms (fused, compile default; transformers' loss over the whole logits; no chunked-loss way "
                      "in this run)", readme)
        training = self.render("llm_peer.training", "amd-avx512bf16")
        self.assertNotIn("chunked", training)


if __name__ == "__main__":
    unittest.main()
