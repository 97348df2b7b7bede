# ---- paths: every repository path a comment or a document names exists ----
# tests/paths.py reads the tracked .c .h .cuh .cu .py .sh .md files and the
# Makefile and checks each path-like name in them (src/..., doc/...,
# ../bench/..., gen/emit_lsa.c). The check is also shown to fail: on a copy
# of the tree whose README names a file that does not exist, and on a small
# tree whose one document names a stale path and a stale link beside names
# that are not paths (a glob, a variable's expansion, a placeholder, a path
# at a commit), which must pass.
# shellcheck shell=sh # sourced by tests/run.sh
group paths
if command -v "$PYTHON" >/dev/null 2>&1; then
    if "$PYTHON" tests/paths.py >"$TMP/paths.out" 2>&1; then ok
    else bad "tests/paths.py:"; head -n 20 "$TMP/paths.out" | sed 's/^/  /'; fi
    # a copy of the tree with a README that names a missing file
    rm -rf "$TMP/tree" && mkdir -p "$TMP/tree"
    if git ls-files >"$TMP/files" 2>/dev/null && [ -s "$TMP/files" ]; then
        tar -cf - -T "$TMP/files" | tar -xf - -C "$TMP/tree"
    else
        cp -r Makefile README.md src include rt doc bench tests examples python "$TMP/tree/"
    fi
    # (the names below are built from variables, so that this file names no
    # missing path itself)
    psrc=src pup=.. && pgone=$psrc/cuda/emit_lsa.c
    echo "The generator once lived in $pgone." >>"$TMP/tree/README.md"
    n=$(wc -l <"$TMP/tree/README.md")
    if "$PYTHON" tests/paths.py --root "$TMP/tree" >"$TMP/paths.out" 2>&1; then
        bad "tests/paths.py passes a README naming $pgone"
    elif grep -q "^README.md:$n: $pgone does not exist$" "$TMP/paths.out"; then ok
    else bad "tests/paths.py on a missing path: $(grep -m 1 README.md "$TMP/paths.out")"; fi
    # what is a path and what is not
    rm -rf "$TMP/small" && mkdir -p "$TMP/small/doc" "$TMP/small/src/gen"
    : >"$TMP/small/src/gen/emit_lsa.c"
    # shellcheck disable=SC2016 # a literal $TMP, part of the document
    printf '%s\n' "The generator: \`$psrc/gen/emit_lsa.c\`, gen/emit_lsa.c, [it]($pup/$psrc/gen/)." \
        "Stale: $psrc/emit_lsa.c:46 and [a result]($pup/bench/results/old.md)." \
        'Not paths: tests/errors/*.coco, $TMP/x.c, DIR/NAME.cu, 3c9b549:bench/results/old.md, build/x/y.c.' \
        >"$TMP/small/doc/a.md"
    "$PYTHON" tests/paths.py --root "$TMP/small" >"$TMP/paths.out" 2>&1
    rc=$?
    got=$(grep 'does not exist$' "$TMP/paths.out" | paste -sd '|' -)
    want="doc/a.md:2: $psrc/emit_lsa.c does not exist|doc/a.md:2: $pup/bench/results/old.md does not exist"
    if [ $rc -eq 1 ] && [ "$got" = "$want" ]; then ok
    else bad "tests/paths.py on doc/a.md: exit $rc, got '$got', expected '$want'"; fi
    group_end
else
    group_end "skipped: no $PYTHON"
fi
