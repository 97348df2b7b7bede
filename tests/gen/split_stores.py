#!/usr/bin/env python3
"""tests/gen/split_stores.py FILE.ptx...: checks that every kernel of the
PTX of generated code (the generated kernels and the runtime's, from its
headers) stores whole vectors where its code asks for them.

A vector store the compiler splits into four (16 bytes of FP32, 8 of FP16)
shows in PTX as four stores of one element in a row, with no branch between
them, to consecutive elements at one address register R: [R+o], [R+o+4],
[R+o+8], [R+o+12] (the one-element tail paths test a bound before each
store). It cost the fused AllReduce 10 % at 2^28 on 2 GPUs
(bench/results/2026-11-23-h200x2-b.md), and the compiler did it for some
loop shapes and not others (over scattered tensors, in one-shot
AllReduces, in the push's slot stores), until rt/kernels/coco_vec.cuh wrote
its vector stores out in PTX (coco_store_bytes).

Prints one line per split store (file, kernel, line); exit status 1 if any."""
import re
import sys

ENTRY = re.compile(r'^\.(?:visible )?\.entry (\S+?)\(')
STORE = re.compile(r'^\s*st\.(?:global\.)?[fub](32|16)\s+\[(%rd\d+)(?:\+(-?\d+))?\]')


def split_stores(lines):
    """Yields (line number, kernel) of every run of four split stores."""
    kernel, run = None, []
    for number, line in enumerate(lines, 1):
        entry = ENTRY.match(line)
        if entry:
            kernel, run = entry.group(1), []
            continue
        if kernel is None:
            continue
        text = line.strip()
        if not text or text.startswith('//'):
            continue
        store = STORE.match(line)
        if not store:
            run = []
            continue
        size, reg = int(store.group(1)) // 8, store.group(2)
        offset = int(store.group(3) or 0)
        if run and run[-1] != (reg, offset - size, size):
            run = []
        run.append((reg, offset, size))
        if len(run) == 4:
            yield number, kernel
            run = []


def main(paths):
    bad = 0
    for path in paths:
        with open(path, encoding='utf-8') as f:
            for number, kernel in split_stores(f.read().split('\n')):
                print(f'{path}:{number}: {kernel}: a vector store split into four')
                bad += 1
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
