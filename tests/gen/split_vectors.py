#!/usr/bin/env python3
"""tests/gen/split_vectors.py FILE.ptx...: checks that every kernel of the
PTX of generated code (the generated kernels and the runtime's, from its
headers) loads and stores whole vectors where its code asks for them.

A vector store (or load) the compiler splits into four (16 bytes of FP32, 8
of FP16) shows in PTX as four stores of one element in a row, with no branch
between them, to consecutive elements at one address register R: [R+o],
[R+o+4], [R+o+8], [R+o+12] (the one-element tail paths test a bound before
each). It slows the fused AllReduce (doc/design.md, The CUDA backend),
and the compiler does it for some loop shapes and not others (over
scattered tensors, in one-shot AllReduces, in the push's slot stores)
unless the stores are written out in PTX, as rt/kernels/coco_vec.cuh's
coco_store_bytes does.

Prints one line per split access (file, kernel, line); exit status 1 if any."""
import re
import sys

ENTRY = re.compile(r'^\.(?:visible )?\.entry (\S+?)\(')
ACCESS = re.compile(r'^\s*(st|ld)\.(?:global\.)?(?:nc\.)?[fub](32|16)\s+'
                    r'(?:%\w+,\s*)?\[(%rd\d+)(?:\+(-?\d+))?\]')


def split_accesses(lines):
    """Yields (line number, kernel, "store" or "load") of every run of four
    one-element accesses that make a vector."""
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
        access = ACCESS.match(line)
        if not access:
            run = []
            continue
        kind, size, reg = access.group(1), int(access.group(2)) // 8, access.group(3)
        offset = int(access.group(4) or 0)
        if run and run[-1] != (kind, reg, offset - size, size):
            run = []
        run.append((kind, reg, offset, size))
        if len(run) == 4:
            yield number, kernel, 'store' if kind == 'st' else 'load'
            run = []


def main(paths):
    bad = 0
    for path in paths:
        with open(path, encoding='utf-8') as f:
            for number, kernel, what in split_accesses(f.read().split('\n')):
                print(f'{path}:{number}: {kernel}: a vector {what} split into four')
                bad += 1
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
