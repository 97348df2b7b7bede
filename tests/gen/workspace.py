#!/usr/bin/env python3
"""tests/gen/workspace.py FILE.cu...: checks that the workspace of generated
CUDA code has one layout on every rank.

The runtime places the workspace in a symmetric NCCL window, where NCCL's
kernels and the peer-memory kernels address a buffer by its offset, which
must then be the same on every rank. An offset is the sum of the sizes
reserved before it, so no size given to coco_ws may depend on the rank. In
the generated code a shape h<id> is rank-dependent when its local extent
comes from coco_part_len (a sliced value); coco_count of such a shape is the
rank's own element count. A coco_ws size that uses one is an error (a sliced
value's room is its chunk: coco_padded_count / G).

Prints one line per offence with its file and line; exit status 1 if any."""
import re
import sys

FUNCTION = re.compile(r'^(static int v\d+_body|extern "C")')
SLICED_SHAPE = re.compile(r'\bh(\d+)\.dim\[\d+\] = coco_part_len\(')
WS_CALL = re.compile(r'coco_ws\(&ws, ctx, (.*)\);')
COUNT_OF = re.compile(r'\bcoco_count\(h(\d+)\)')


def offences(path):
    sliced = set()
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            if FUNCTION.match(line):
                sliced = set()
            m = SLICED_SHAPE.search(line)
            if m:
                sliced.add(m.group(1))
            m = WS_CALL.search(line)
            if not m:
                continue
            for shape in COUNT_OF.findall(m.group(1)):
                if shape in sliced:
                    yield (f'{path}:{number}: workspace size depends on the rank '
                           f'(coco_count of sliced shape h{shape}): {line.strip()}')


def main(paths):
    if not paths:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    bad = [o for p in paths for o in offences(p)]
    for o in bad:
        print(o)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
