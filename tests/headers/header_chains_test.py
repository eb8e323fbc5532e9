"""Tests for cmake/header_chains.py, which groups the headers of the self-containment check: each
chain ordered so that a header includes every one before it, as few chains as the include order
allows, includes inside #if left out of that order, and `verify` refusing chains that no longer
hold. Each case writes a small include tree of its own."""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "cmake" / "header_chains.py"


class Tree:
    def __init__(self, headers):
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="ftopt-chains-"))
        self.include, self.out = self.root / "include", self.root / "chains"
        self.write(headers)

    def write(self, headers):
        for name, text in headers.items():
            path = self.include / "ftopt" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("#pragma once\n" + text)

    def run(self, mode):
        return subprocess.run([sys.executable, str(SCRIPT), mode, str(self.include), str(self.out)],
                              capture_output=True, text=True)

    def chains(self):
        return sorted([re.findall(r"#include <ftopt/(.*)>", p.read_text()) for p in self.out.glob("chain_*.cpp")])


def include(*names):
    return "".join(f"#include <ftopt/{n}>\n" for n in names)


class HeaderChains(unittest.TestCase):
    def test_each_header_once_each_after_what_it_includes(self):
        # a <- b <- c (c includes b includes a), and d, e each including only a: two of b/d/e
        # cannot share a chain, so three chains: [a, b, c], [d], [e] in some assignment.
        tree = Tree({"a.hpp": "", "b.hpp": include("a.hpp"), "c.hpp": include("b.hpp"),
                     "d.hpp": include("a.hpp"), "e.hpp": include("a.hpp", "std.hpp")})
        self.assertEqual(tree.run("write").returncode, 0)
        chains = tree.chains()
        self.assertEqual(sorted(h for c in chains for h in c), ["a.hpp", "b.hpp", "c.hpp", "d.hpp", "e.hpp"])
        self.assertEqual(len(chains), 3)
        self.assertIn(["a.hpp", "b.hpp", "c.hpp"], chains)
        self.assertEqual(tree.run("verify").returncode, 0)

    def test_an_include_inside_if_does_not_order(self):
        tree = Tree({"a.hpp": "", "b.hpp": "#if FTOPT_SOMETHING\n" + include("a.hpp") + "#endif\n"})
        tree.run("write")
        self.assertEqual(tree.chains(), [["a.hpp"], ["b.hpp"]])

    def test_verify_refuses_chains_that_no_longer_hold(self):
        tree = Tree({"a.hpp": "", "b.hpp": include("a.hpp")})
        tree.run("write")
        self.assertEqual(tree.chains(), [["a.hpp", "b.hpp"]])
        tree.write({"b.hpp": ""})  # b stops including a: a before b would hide a missing include
        result = tree.run("verify")
        self.assertEqual(result.returncode, 1)
        self.assertIn("b.hpp does not include all of ['ftopt/a.hpp']", result.stderr)
        self.assertIn("re-run cmake", result.stderr)

    def test_verify_refuses_a_detail_header_including_one_above_it(self):
        tree = Tree({"error.hpp": "", "nn/a.hpp": "", "detail/b.hpp": include("error.hpp", "detail/c.hpp"),
                     "detail/c.hpp": ""})
        tree.run("write")
        self.assertEqual(tree.run("verify").returncode, 0)
        tree.write({"detail/c.hpp": include("nn/a.hpp")})
        tree.run("write")
        result = tree.run("verify")
        self.assertEqual(result.returncode, 1)
        self.assertIn("ftopt/detail/c.hpp includes ftopt/nn/a.hpp; ftopt/detail/ includes only", result.stderr)

    def test_verify_refuses_a_header_added_since(self):
        tree = Tree({"a.hpp": ""})
        tree.run("write")
        tree.write({"new.hpp": ""})
        result = tree.run("verify")
        self.assertEqual(result.returncode, 1)
        self.assertIn("ftopt/new.hpp", result.stderr)

    def test_a_chain_starts_from_the_largest_precompiled_header_its_first_header_includes(self):
        # a includes <ATen/ATen.h> (b through a; c directly <torch/nn/module.h> too); d nothing.
        tree = Tree({"a.hpp": "#include <ATen/ATen.h>\n", "b.hpp": include("a.hpp"),
                     "c.hpp": "#include <torch/nn/module.h>\n" + include("a.hpp"), "d.hpp": "#include <vector>\n"})
        self.assertEqual(tree.run("write").returncode, 0)
        tiers = sorted((p.name.split("_")[1], re.findall(r"#include <ftopt/(.*)>", p.read_text())[0])
                       for p in tree.out.glob("chain_*.cpp"))
        self.assertIn(("aten", "a.hpp"), tiers)
        self.assertIn(("plain", "d.hpp"), tiers)
        self.assertEqual(tree.run("verify").returncode, 0)
        # a no longer includes ATen: its chain may not start from ATen's precompiled header.
        tree.write({"a.hpp": "#if FTOPT_X\n#include <ATen/ATen.h>\n#endif\n"})
        result = tree.run("verify")
        self.assertEqual(result.returncode, 1)
        self.assertIn("no longer starts from that precompiled header", result.stderr)

    def test_a_chain_is_cut_where_its_headers_start_from_another_precompiled_header(self):
        # a includes no LibTorch header; b includes a and <torch/nn/module.h>; c includes b. One
        # chain [a, b, c] by the include order, checked as [a] alone and [b, c] from module.h.
        tree = Tree({"a.hpp": "#include <vector>\n", "b.hpp": include("a.hpp") + "#include <torch/nn/module.h>\n",
                     "c.hpp": include("b.hpp")})
        self.assertEqual(tree.run("write").returncode, 0)
        tiers = sorted((p.name.split("_")[1], re.findall(r"#include <ftopt/(.*)>", p.read_text()))
                       for p in tree.out.glob("chain_*.cpp"))
        self.assertEqual(tiers, [("module", ["b.hpp", "c.hpp"]), ("plain", ["a.hpp"])])
        self.assertEqual(tree.run("verify").returncode, 0)

    def test_a_bad_command_prints_the_usage(self):
        result = subprocess.run([sys.executable, str(SCRIPT), "check"], capture_output=True, text=True)
        self.assertEqual(result.returncode, 2)
        self.assertIn("header_chains.py write INCLUDE_DIR OUT_DIR", result.stderr)


if __name__ == "__main__":
    unittest.main()
