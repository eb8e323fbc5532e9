#!/usr/bin/env python3
"""Groups ftopt's public headers for the self-containment check (ftoptHeaderCheck.cmake).

A header H is self-contained when a source file holding only `#include <H>` compiles. A source
file that includes A and then H checks H just as strictly when H includes A itself (directly
or through other headers, unconditionally): A brings nothing H would not bring. So the headers
are split into chains, each ordered so that every header includes all the ones before it, and
one source file per chain checks them all: the fewest chains (Dilworth's theorem, from a
maximum matching) for the fewest parses of LibTorch's headers.

Most of a chain's time is LibTorch's headers. A chain may start from a precompiled LibTorch header
P and check its headers as strictly, when P is one its first header includes (through ftopt's
headers, unconditionally): then every header of the chain includes P when compiled alone, and
P coming first hides nothing from the check, since a header that uses P's declarations without
including P is a header whose closure lacks P, which no chain of P holds, so it is checked
without P. Each chain takes the first of PRECOMPILED that its first header includes, or none,
and is cut where a later header would take another (split_by_tier).

  header_chains.py write INCLUDE_DIR OUT_DIR    one chain_<tier>_NNN.cpp per chain in OUT_DIR
                                                (tier: a key of PRECOMPILED, or plain)
  header_chains.py verify INCLUDE_DIR OUT_DIR   exit 1 when the chains no longer hold (a
                                                header added, removed or including otherwise),
                                                or when a header of ftopt/detail/ includes one
                                                above it (LOWEST_LAYER)
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*<(ftopt[^>]*)>')
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s*<([^>]*)>')
# The precompiled LibTorch headers a chain may start from, the largest first (cmake's tiers).
PRECOMPILED = {'module': 'torch/nn/module.h', 'aten': 'ATen/ATen.h', 'tensor': 'ATen/core/Tensor.h'}
# ftopt/detail/ is the lowest layer: its headers include only each other and these leaves.
LOWEST_LAYER = ('ftopt/detail/', 'ftopt/error.hpp', 'ftopt/kernel_options.hpp', 'ftopt/json.hpp')
CONDITION_OPEN = re.compile(r'^\s*#\s*if')
CONDITION_CLOSE = re.compile(r'^\s*#\s*endif')


def unconditional_includes(path, pattern=INCLUDE):
    """The ftopt headers (or, with ANY_INCLUDE, every header) `path` includes outside any #if
    block (include guards are #pragma once)."""
    depth, out = 0, []
    for line in path.read_text().splitlines():
        if CONDITION_OPEN.match(line):
            depth += 1
        elif CONDITION_CLOSE.match(line):
            depth -= 1
        elif depth == 0 and (m := pattern.match(line)):
            out.append(m.group(1))
    return out


def tier(root, closure, first):
    """The key of the first PRECOMPILED header that `first` includes through ftopt's headers, or
    'plain'."""
    included = set()
    for h in {first} | closure[first]:
        included |= set(unconditional_includes(root / h, ANY_INCLUDE))
    return next((key for key, header in PRECOMPILED.items() if header in included), 'plain')


def closures(root):
    headers = sorted(str(p.relative_to(root)) for p in root.rglob('*.hpp'))
    direct = {h: [d for d in unconditional_includes(root / h) if d in headers] for h in headers}
    done = {}

    def closure(h):
        if h not in done:
            done[h] = set()
            for d in direct[h]:
                done[h] |= {d} | closure(d)
        return done[h]

    return {h: closure(h) for h in headers}


def chains(closure):
    """A minimum chain cover: each chain ordered from the header included by all the others."""
    below = {}  # header -> the header that follows it in its chain (which includes it)

    def augment(upper, seen):
        for lower in sorted(closure[upper]):
            if lower in seen:
                continue
            seen.add(lower)
            if lower not in below or augment(below[lower], seen):
                below[lower] = upper
                return True
        return False

    for upper in sorted(closure):
        augment(upper, set())
    follows = set(below.values())  # headers that come after another in their chain
    out = []
    for start in sorted(h for h in closure if h not in follows):
        chain = [start]
        while chain[-1] in below:
            chain.append(below[chain[-1]])
        out.append(chain)
    return out


def split_by_tier(root, closure, chains):
    """(tier, chain) pairs: each chain cut where its tier changes. A header includes all the
    ones before it, so the tiers along a chain only move up PRECOMPILED's order, and each piece is
    a chain that starts from the precompiled header its own first header includes: a chain from
    a header that includes no LibTorch header (kernel_options.hpp) to one that includes
    torch/nn/module.h parses LibTorch's headers from the start when whole, and checks its
    LibTorch-free headers in a moment and the others from the precompiled header when cut."""
    out = []
    for chain in chains:
        pieces = []
        for header in chain:
            key = tier(root, closure, header)
            if pieces and pieces[-1][0] == key:
                pieces[-1][1].append(header)
            else:
                pieces.append((key, [header]))
        out += pieces
    return out


def read_chain(path):
    return [m.group(1) for line in path.read_text().splitlines() if (m := INCLUDE.match(line))]


def main(mode, include_dir, out_dir):
    root, out = pathlib.Path(include_dir), pathlib.Path(out_dir)
    closure = closures(root)
    if mode == 'write':
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob('chain_*.cpp'):
            old.unlink()
        for i, (key, chain) in enumerate(split_by_tier(root, closure, chains(closure))):
            text = '// Each header includes every one above it (cmake/header_chains.py).\n'
            text += ''.join(f'#include <{h}>\n' for h in chain)
            (out / f'chain_{key}_{i:03d}.cpp').write_text(text)
        return 0
    for h in sorted(closure):
        upward = [d for d in unconditional_includes(root / h) if h.startswith(LOWEST_LAYER[0])
                  and not d.startswith(LOWEST_LAYER)]
        if upward:
            print(f'header check: {h} includes {", ".join(upward)}; ftopt/detail/ includes only '
                  f'{", ".join(LOWEST_LAYER)} (move the header up, or the code it needs down)', file=sys.stderr)
            return 1
    seen = []
    for path in sorted(out.glob('chain_*.cpp')):
        chain = read_chain(path)
        seen += chain
        if chain and chain[0] in closure and path.name.split('_')[1] != tier(root, closure, chain[0]):
            print(f'header check: {path.name} no longer starts from that precompiled header ({chain[0]} '
                  f'includes otherwise): re-run cmake', file=sys.stderr)
            return 1
        for i, h in enumerate(chain):
            earlier = set(chain[:i])
            if h not in closure or not earlier <= closure[h]:
                print(f'header check: {path.name} no longer holds ({h} does not include all of '
                      f'{sorted(earlier)}): re-run cmake', file=sys.stderr)
                return 1
    if sorted(seen) != sorted(closure):
        missing = sorted(set(closure) - set(seen)) or sorted(set(seen) - set(closure))
        print(f'header check: the headers changed since cmake ran ({", ".join(missing[:5])}): re-run cmake',
              file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    if len(sys.argv) != 4 or sys.argv[1] not in ('write', 'verify'):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
