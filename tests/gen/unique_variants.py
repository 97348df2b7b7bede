#!/usr/bin/env python3
"""tests/gen/unique_variants.py OUT DIR...: each DIR's generated CUDA (its one
*.cu) without the variants that another variant before it repeats, as
DIR/OUT, for the cuda-gen group's nvcc check.

Many schedules generate the same code: two variants differ then only in
their names, the prefix v<N>_ of their kernels and functions and the
schedule's name in their entry points (coco_run__<name>, ...). Compiling
such a repeat checks nothing more, at a few seconds of nvcc each, so a
variant is left out when the same text (comment lines aside) came before
in its file.
A left-out variant must be one whose only top-level names carry its own
prefix or schedule name, both used by no other variant of its file: then
it could not have clashed with the others either. Otherwise it is kept
(compiled). The prologue and the tables (the part markers of emit_cuda.c:
src/cuda/cuda.h's CUDA_PART_VARIANT and CUDA_PART_TABLES) are kept as they
are. Prints a line per DIR: "DIR: N of M variants compiled"; exit status 1
when a DIR's source is not one emit_cuda wrote (no markers)."""
import glob
import hashlib
import os
import re
import sys

VARIANT = '// @coconet part: a variant\n'
TABLES = '// @coconet part: the tables\n'
PREFIX = re.compile(r'^static int v(\d+)_body\(', re.M)
ENTRY = re.compile(r'^extern "C" int coco_run__([A-Za-z0-9_]+)\(', re.M)
# a line that names nothing at file scope: blank, a comment, a brace, a
# preprocessor line, an indented line or a template head
INNER = re.compile(r'^($|//|[ {}#]|template <)')


def parts(text):
    """(prologue, [variant texts], tables) of an emit_cuda source, or None"""
    head, sep, tables = text.partition(TABLES)
    if not sep:
        return None
    pieces = head.split(VARIANT)
    return pieces[0], pieces[1:], tables


def names(variant):
    """the variant's prefix number and schedule name ('' when not found)"""
    p, e = PREFIX.search(variant), ENTRY.search(variant)
    return (p.group(1) if p else ''), (e.group(1) if e else '')


def normal(variant, prefix, name):
    """the variant with its own names replaced, its comment lines dropped"""
    text = re.sub(r'\bv%s_' % prefix, 'v_', variant) if prefix else variant
    if name:
        text = re.sub(r'__%s\b' % re.escape(name), '__S', text)
    return '\n'.join(l for l in text.split('\n') if not l.startswith('//'))


def droppable(variant, prefix, name, taken):
    """whether every top-level name of the variant is its own"""
    if not prefix or not name or taken.get(('v', prefix), 0) > 1 or taken.get(('s', name), 0) > 1:
        return False
    own = re.compile(r'\bv%s_|__%s\b' % (prefix, re.escape(name)))
    return all(INNER.match(l) or own.search(l) for l in variant.split('\n'))


def main(argv):
    if len(argv) < 3:
        sys.stderr.write('usage: unique_variants.py OUT DIR...\n')
        return 2
    out, status = argv[1], 0
    for d in argv[2:]:
        sources = sorted(s for s in glob.glob(os.path.join(d, '*.cu')) if os.path.basename(s) != out)
        if len(sources) != 1:
            print(f'{d}: {len(sources)} generated .cu files, expected one')
            status = 1
            continue
        with open(sources[0], encoding='utf-8') as f:
            split = parts(f.read())
        if split is None:
            print(f'{sources[0]}: no part markers (not emit_cuda\'s source)')
            status = 1
            continue
        prologue, variants, tables = split
        seen, taken = set(), {}
        for v in variants:
            p, n = names(v)
            taken[('v', p)] = taken.get(('v', p), 0) + 1
            taken[('s', n)] = taken.get(('s', n), 0) + 1
        kept = []
        for v in variants:
            p, n = names(v)
            key = hashlib.sha256(normal(v, p, n).encode()).hexdigest()
            if key in seen and droppable(v, p, n, taken):
                continue
            seen.add(key)
            kept.append(v)
        with open(os.path.join(d, out), 'w', encoding='utf-8') as f:
            f.write(prologue + ''.join(VARIANT + v for v in kept) + TABLES + tables)
        print(f'{d}: {len(kept)} of {len(variants)} variants compiled')
    return status


if __name__ == '__main__':
    sys.exit(main(sys.argv))
