#!/usr/bin/env python3
"""tests/paths.py: every repository path that a comment or a document names
must exist.

    python3 tests/paths.py [--root DIR]

Reads the tracked files (`git ls-files`; every file under DIR when DIR is
not a git work tree) whose names end in .c .h .cuh .cu .py .sh .md, and the
Makefile, and takes from them the tokens that look like repository paths:

- a path that starts with a top-level folder (src/ rt/ include/ doc/ bench/
  tests/ examples/ python/) must exist under DIR, as a file or a folder;
- a path that starts with ./ or ../ must exist beside the file that names it;
- any other path of two or more parts that ends in a source extension
  (gen/emit_lsa.c, kernels/coco_lsa.cuh, results/README.md) must be the
  tail of a file of the tree, or exist beside the file that names it.

Not paths of the tree, so not checked: globs and templates (`*`, `?`, `{`,
`<`, `$`, `%`: tests/errors/*.coco, $TMP/x.c, tests/unit/%.c), names whose
missing part is a placeholder (in capitals: examples/F.coco, DIR/NAME.cu;
a file name of one letter: src/x.c),
paths under build/ or /tmp, paths inside another path or a URL, a path
named at a commit (3c9b549:bench/results/x.md, as git show takes it), and
the few names of ELSEWHERE below.
Prints FILE:LINE: PATH for each one missing and exits 1; exit 0 when all
exist, 2 on a bad command line.
"""
import os
import re
import subprocess
import sys

TOPS = ("src", "rt", "include", "doc", "bench", "tests", "examples", "python")
SCANNED = (".c", ".h", ".cuh", ".cu", ".py", ".sh", ".md")
SOURCE_EXT = SCANNED + (".coco", ".def", ".awk", ".expect", ".times", ".txt", ".csv", ".svg")
# a token: optional ./ or ../ steps, then two or more parts joined by /;
# never inside a longer path, a word, a URL or a variable's expansion
TOKEN = re.compile(r"(?<![\w/.$@%{}<>:\\-])((?:\.\.?/)*[A-Za-z_][\w.+-]*(?:/[\w.*?{}<>$%+-]+)+/?)")
AT_COMMIT = re.compile(r"[0-9a-f]{7,40}:$")
TEMPLATE_CHARS = set("*?{}<>$%[]\\")
CAPITALS = re.compile(r"^[A-Z][A-Z0-9]*$")
REAL_CAPITALS = {"README", "LICENSE", "DESIGN"}
LINE_SUFFIX = re.compile(r"(?::\d+(?:[-:]\d+)?)+$")
# names of the tree's kind that are not the tree's files: NCCL's header
# (under NCCL_HOME or CUDA_HOME), and the objects the layers test makes in
# $TMP and expects in its messages (tests/groups/80-layers.sh)
ELSEWHERE = {"include/nccl.h", "src/front/ping.c", "src/front/pong.c"}


def tree_files(root):
    """The files to read and to match against: git's tracked files, else a walk."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True)
        if os.path.samefile(root, subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"],
                                                 capture_output=True, text=True, check=True).stdout.strip()):
            return [f for f in out.stdout.splitlines() if os.path.isfile(os.path.join(root, f))]
    except (subprocess.CalledProcessError, FileNotFoundError, OSError):
        pass
    found = []
    for d, subdirs, names in os.walk(root):
        subdirs[:] = [s for s in subdirs if s not in (".git", "build")]
        found += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return found


def scanned(path):
    return path.endswith(SCANNED) or os.path.basename(path) == "Makefile"


def clean(tok):
    """The token without the punctuation of the sentence around it and a :LINE suffix."""
    tok = tok.rstrip(".,;:)'\"`")
    return LINE_SUFFIX.sub("", tok)


def template(tok):
    """A name with a placeholder part: in capitals (examples/F.coco,
    DIR/NAME.cu), or a file name of one letter (src/x.c)."""
    if len(tok.rstrip("/").split("/")[-1].split(".")[0]) == 1:
        return True
    for part in tok.split("/"):
        for piece in re.split(r"[-_.]", part):
            if CAPITALS.match(piece) and piece not in REAL_CAPITALS:
                return True
    return False


class Tree:
    def __init__(self, root, files):
        self.root = root
        self.tails = set()
        for f in files:
            parts = f.split("/")
            for k in range(len(parts)):
                self.tails.add("/".join(parts[k:]))

    def exists(self, rel):
        return os.path.exists(os.path.join(self.root, rel))

    def missing(self, tok, src):
        """True when tok, named in file src, names nothing of the tree."""
        here = os.path.dirname(src)
        parts = tok.split("/")
        first = parts[0]
        if first in (".", "..") and "build" in parts[:-1]:
            return False
        if first in (".", ".."):
            return not self.exists(os.path.normpath(os.path.join(here, tok)))
        if first in TOPS:
            return not self.exists(tok)
        if tok.rstrip("/").endswith(SOURCE_EXT) and first not in ("build", "tmp"):
            return tok not in self.tails and not self.exists(os.path.join(here, tok))
        return False


def check_line(tree, src, n, line):
    """The missing paths of one line, as FILE:LINE: PATH messages."""
    bad = []
    for m in TOKEN.finditer(line):
        tok = clean(m.group(1))
        if "/" not in tok or TEMPLATE_CHARS & set(tok) or tok in ELSEWHERE:
            continue
        if AT_COMMIT.search(line[: m.start()]):
            continue
        if tree.missing(tok, src) and not template(tok):
            bad.append(f"{src}:{n}: {tok} does not exist")
    return bad


def main(argv):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    args = argv[1:]
    if args[:1] == ["--root"] and len(args) == 2:
        root = args[1]
    elif args:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    if not os.path.isdir(root):
        print(f"paths.py: --root {root}: not a folder", file=sys.stderr)
        return 2
    files = tree_files(root)
    tree = Tree(root, files)
    bad, npaths = [], 0
    for src in sorted(f for f in files if scanned(f)):
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                npaths += len(TOKEN.findall(line))
                bad += check_line(tree, src, n, line)
    for b in bad:
        print(b)
    if bad:
        print(f"paths.py: {len(bad)} paths named in comments and docs do not exist")
        return 1
    print(f"paths.py: {npaths} path-like names read, every repository path exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
