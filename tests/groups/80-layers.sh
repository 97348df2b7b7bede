# ---- layers: the compiler's files include and call one way ----
# tests/layers.py reads the includes of src/, include/ and rt/ and the calls
# between build/'s objects (nm): a file may use only its own layer and those
# below (core, front, sched, cpu, api, gen, cuda, tune, main), and no two files may use
# each other. The check is also shown to fail: on a copy of the sources where
# the front end includes the CUDA header, and on objects that call each other.
# shellcheck shell=sh # sourced by tests/run.sh
group layers
if command -v "$PYTHON" >/dev/null 2>&1 && command -v nm >/dev/null 2>&1; then
    if "$PYTHON" tests/layers.py build >"$TMP/layers.out" 2>&1; then ok
    else bad "tests/layers.py:"; head -n 20 "$TMP/layers.out" | sed 's/^/  /'; fi
    # an include that points up
    rm -rf "$TMP/tree" && mkdir -p "$TMP/tree" && cp -r src include rt "$TMP/tree/"
    printf '#include "cuda/cuda.h"\n' >>"$TMP/tree/src/front/lex.c"
    if "$PYTHON" tests/layers.py build --root "$TMP/tree" >"$TMP/layers.out" 2>&1; then
        bad "tests/layers.py passes src/front/lex.c including cuda/cuda.h"
    elif grep -q 'src/front/lex.c:[0-9]*: src/front/lex.c (front) includes src/cuda/cuda.h (cuda), a layer above it' "$TMP/layers.out"; then ok
    else bad "tests/layers.py on an upward include: $(head -n 1 "$TMP/layers.out")"; fi
    # the code generator reaching up into the backend that builds and runs
    rm -rf "$TMP/tree" && mkdir -p "$TMP/tree" && cp -r src include rt "$TMP/tree/"
    printf '#include "cuda/cuda.h"\n' >>"$TMP/tree/src/gen/compile.c"
    if "$PYTHON" tests/layers.py build --root "$TMP/tree" >"$TMP/layers.out" 2>&1; then
        bad "tests/layers.py passes src/gen/compile.c including cuda/cuda.h"
    elif grep -q 'src/gen/compile.c (gen) includes src/cuda/cuda.h (cuda), a layer above it' "$TMP/layers.out"; then ok
    else bad "tests/layers.py on gen including cuda: $(head -n 1 "$TMP/layers.out")"; fi
    # two files of one layer that call each other
    rm -rf "$TMP/objs" && mkdir -p "$TMP/objs/front"
    printf 'int pong(int);\nint ping(int n) { return n ? pong(n - 1) : 0; }\n' >"$TMP/objs/ping.c"
    printf 'int ping(int);\nint pong(int n) { return n ? ping(n - 1) : 1; }\n' >"$TMP/objs/pong.c"
    if cc -c -o "$TMP/objs/front/ping.o" "$TMP/objs/ping.c" && cc -c -o "$TMP/objs/front/pong.o" "$TMP/objs/pong.c"; then
        if "$PYTHON" tests/layers.py "$TMP/objs" >"$TMP/layers.out" 2>&1; then
            bad "tests/layers.py passes two files calling each other"
        elif grep -q 'a circle of calls: src/front/ping.c -> src/front/pong.c' "$TMP/layers.out"; then ok
        else bad "tests/layers.py on a circle: $(head -n 1 "$TMP/layers.out")"; fi
    else bad "layers: cc could not build the circle's objects"; fi
    group_end
else
    group_end "skipped: no $PYTHON or nm"
fi
