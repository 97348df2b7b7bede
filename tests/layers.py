#!/usr/bin/env python3
"""layers.py: checks that the compiler's files point one way.

The layers, bottom to top (src/coco.h says the same):
    0 core   src/coco.h, src/ops.def, src/core/   (and the public headers, include/)
    1 front  src/front/
    2 sched  src/sched/
    3 cpu    src/cpu/
    4 api    src/api.h, src/api.c, src/api_sched.c, src/api_mem.h, src/api_mem.c
    5 gen    src/gen/           (the CUDA code generator: source out, nothing run)
    6 cuda   src/cuda/          (building and running the generated code)
    7 tune   src/tune/          (the autotuner: above the backend it times)
    8 main   src/main.c
A file may include and call only files of its own layer or of a layer below,
and no two files may depend on each other, even through others (no circles).
Includes are read from the sources; calls from the symbols the objects under
build/ define and use (nm), so run it after `make`. The GPU runtime, rt/,
may include include/ and rt/ alone.

Usage: python3 tests/layers.py [BUILD_DIR] [--root DIR]   (exit 1 and a line per
violation when the layers are broken; one line "layers: N files, M arrows,
ok" otherwise)
"""
import os
import re
import subprocess
import sys

LAYERS = ["core", "front", "sched", "cpu", "api", "gen", "cuda", "tune", "main"]


def layer_of(path):
    """The layer index of a file under src/ or include/, or None."""
    parts = path.split("/")
    if parts[0] == "include" or path in ("src/coco.h", "src/ops.def"):
        return 0
    if parts[0] != "src":
        return None
    if len(parts) == 3 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    if path in ("src/api.h", "src/api.c", "src/api_sched.c", "src/api_mem.h", "src/api_mem.c"):
        return LAYERS.index("api")
    if path == "src/main.c":
        return LAYERS.index("main")
    return None


def sources(root):
    out = []
    for top in ("src", "include", "rt"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".c", ".h", ".cuh")):
                    out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def resolve(root, path, name):
    """The file a quoted include names: beside the includer, then -Isrc, -Iinclude."""
    for base in (os.path.dirname(path), "src", "include"):
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.exists(os.path.join(root, cand)):
            return cand
    return None


def include_errors(root, files):
    errors, arrows = [], []
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            target = resolve(root, path, m.group(1))
            line = text.count("\n", 0, m.start()) + 1
            where = "%s:%d" % (path, line)
            if target is None:
                errors.append("%s: includes \"%s\", which is not found" % (where, m.group(1)))
                continue
            arrows.append((path, target))
            if path.startswith("rt/"):
                if not target.startswith(("rt/", "include/")):
                    errors.append("%s: the runtime includes %s (only rt/ and include/)" % (where, target))
                continue
            a, b = layer_of(path), layer_of(target)
            if a is None or b is None:
                errors.append("%s: %s or %s is in no layer" % (where, path, target))
            elif b > a:
                errors.append("%s: %s (%s) includes %s (%s), a layer above it"
                              % (where, path, LAYERS[a], target, LAYERS[b]))
    return errors, arrows


def objects(build):
    out = []
    for d, subdirs, files in os.walk(build):
        rel = os.path.relpath(d, build)
        if rel.split("/")[0] in ("rt", "asan", "tests", "fake", "fuzz"):
            subdirs[:] = []
            continue
        out += [os.path.join(d, f) for f in files if f.endswith(".o")]
    return sorted(out)


def symbols(obj):
    """(defined, used) external symbols of one object file."""
    text = subprocess.run(["nm", obj], check=True, capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in text.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "TDBRCG":
            defined.add(f[2])
        elif len(f) == 2 and f[0] == "U":
            used.add(f[1])
    return defined, used


def call_graph(build):
    """source file -> set of source files whose functions or data it uses."""
    owner, uses = {}, {}
    for obj in objects(build):
        src = "src/" + os.path.relpath(obj, build)[:-2] + ".c"
        defined, used = symbols(obj)
        for s in defined:
            owner[s] = src
        uses[src] = used
    return {src: {owner[s] for s in used if s in owner and owner[s] != src}
            for src, used in uses.items()}


def call_errors(graph):
    errors = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            la, lb = layer_of(a), layer_of(b)
            if la is None or lb is None:
                errors.append("%s calls %s: a file in no layer" % (a, b))
            elif lb > la:
                errors.append("%s (%s) calls %s (%s), a layer above it"
                              % (a, LAYERS[la], b, LAYERS[lb]))
    return errors


def circles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    args = sys.argv[1:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "--root" in args:  # another tree's sources (the test of this check)
        i = args.index("--root")
        root = args[i + 1]
        del args[i:i + 2]
    build = args[0] if args else os.path.join(root, "build")
    files = sources(root)
    errors, arrows = include_errors(root, files)
    graph = call_graph(build)
    if not graph:
        errors.append("no objects under %s: run make first" % build)
    errors += call_errors(graph)
    for comp in circles(graph):
        errors.append("a circle of calls: " + " -> ".join(comp))
    for e in errors:
        print("layers: " + e)
    if errors:
        return 1
    ncalls = sum(len(v) for v in graph.values())
    print("layers: %d files, %d includes, %d calling arrows, ok" % (len(files), len(arrows), ncalls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
