"""Tests for scripts/report.py: tables rendered from result files, the check that documents say
what the files say, and filing a result (bad input refused, nothing half-written). Each case runs
the script in a scratch copy of the layout it reads (README.md, docs/, benchmarks/results/)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "report.py")

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
        self.assertIn("docs/benchmarks.md:3: a figure outside a generated table: ftopt is 1.50x faster.", check.stderr)

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


if __name__ == "__main__":
    unittest.main()
