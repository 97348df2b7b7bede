# ---- error tests ----
# Error test headers (first lines of the file):
#   // expect: SUBSTRING    required: stderr must contain it
#   // args: ARGS           optional: extra coconet arguments (-D N=0 --ranks 3)
#   // line: N              optional: stderr must contain "FILE:N:"
#   // noline               the message has no position (command-line errors)
#   // command: run         optional: run `coconet run` instead of `coconet check`
#                           (gen: `coconet gen` into a scratch directory)
#   // ulimit: KIB          optional: run under `ulimit -v KIB` (address space),
#                           so that a memory refusal is the same on any machine
#   // status: N            optional: the exit status (default 1; 2: a bad
#                           command line, such as a bad -D)
# Without "line" or "noline", stderr must start with "FILE:LINE:COL: error: ".
# shellcheck shell=sh # sourced by tests/run.sh
check_error() {
    f=$1
    head -n 6 "$f" >"$TMP/head"
    expect=$(sed -n '1s|^// expect: ||p' "$TMP/head")
    args=$(sed -n 's|^// args: ||p' "$TMP/head")
    line=$(sed -n 's|^// line: ||p' "$TMP/head")
    noline=$(grep -c '^// noline' "$TMP/head")
    cmd=$(sed -n 's|^// command: ||p' "$TMP/head")
    ulimit_v=$(sed -n 's|^// ulimit: ||p' "$TMP/head")
    status=$(sed -n 's|^// status: ||p' "$TMP/head")
    if [ -z "$expect" ]; then bad "$f: the first line is not '// expect: MESSAGE'"; return; fi
    if [ "$cmd" = gen ]; then
        rm -rf "$TMP/gen-out" && mkdir -p "$TMP/gen-out"
        args="$args -o $TMP/gen-out"
    fi
    set -f
    # shellcheck disable=SC2086 # args are words
    coco "${cmd:-check}" "$f" $args
    set +f
    # shellcheck disable=SC2034 # read by coco (tests/run.sh)
    ulimit_v=
    if [ -n "$why" ]; then bad "$f: coconet ${cmd:-check} $why: $(err1)"; return; fi
    if [ "$rc" -ne "${status:-1}" ]; then bad "$f: exit status $rc, expected ${status:-1} ($(err1))"; return; fi
    if ! grep -F -q -- "$expect" "$TMP/err"; then
        bad "$f: expected '$expect', got: $(err1)"; return
    fi
    if [ -n "$line" ]; then
        if ! head -n 1 "$TMP/err" | grep -F -q -- "$f:$line:"; then
            bad "$f: expected the error at line $line, got: $(err1)"; return
        fi
    elif [ "$noline" -eq 0 ]; then
        if ! head -n 1 "$TMP/err" | grep -q "^$f:[0-9][0-9]*:[0-9][0-9]*: error: "; then
            bad "$f: the message has no FILE:LINE:COL: position: $(err1)"; return
        fi
    fi
    ok
}

# repeat STRING COUNT: STRING written COUNT times
repeat() { awk -v s="$1" -v n="$2" 'BEGIN { for (i = 0; i < n; i++) printf "%s", s }'; }

gen=$TMP/errors
mkdir -p "$gen"
# binary garbage: bytes that are not text, after a valid first statement
printf '// expect: unexpected byte 0xff (is this a text file?)\n// line: 4\nSize N = 4;\n\377\376\001\200\233garbage\n' >"$gen/binary_garbage.coco"
printf '// expect: unexpected byte 0x01\n// line: 3\n\001\002\003\004\005\006\007\010\016\017\020\021\022\023\024\025\026\027\030\031\032\033\034\035\036\037\177\n' >"$gen/binary_control.coco"
printf '// expect: unexpected byte 0xc3\n// line: 3\nTensor caf\303\251(FP32, [4], Replicated, WORLD);\n' >"$gen/binary_utf8_name.coco"
# a NUL byte: the whole file is refused, with no position
printf '// expect: the file contains a NUL byte\n// noline\nSize N\000 = 4;\nTensor x(FP32, [N], Replicated, WORLD);\nExecute p({x}, {x});\n' >"$gen/binary_nul.coco"
# nesting 10000 deep: a clean error, not a stack overflow
deep() { # name prefix open close
    { printf '// expect: nested too deeply\n// line: 4\nTensor x(FP32, [4], Replicated, WORLD);\n'
      printf 'Var y = %s' "$2"; repeat "$3" 10000; printf 'x'; repeat "$4" 10000
      printf ';\nExecute p({x}, {y});\n'; } >"$gen/$1.coco"
}
deep deep_parentheses '' '(' ')'
deep deep_unary_minus '' '-' ''
deep deep_calls '' 'Tanh(' ')'
deep deep_mixed '1 + ' '(x * -' ')'
{ printf '// expect: nested too deeply\n// line: 3\nTensor x(FP32, ['; repeat '(' 10000; printf '4'; repeat ')' 10000
  printf '], Replicated, WORLD);\nExecute p({x}, {x});\n'; } >"$gen/deep_size.coco"
# a name of 100000 characters
{ printf '// expect: name is too long (100000 characters, at most 63)\n// line: 4\nTensor x(FP32, [4], Replicated, WORLD);\nVar '
  repeat 'abcdefghij' 10000; printf ' = x + 1;\nExecute p({x}, {x});\n'; } >"$gen/name_huge.coco"

group errors
for f in tests/errors/*.coco "$gen"/*.coco; do
    check_error "$f"
done
# a --dump that cannot be written whole (files over `ulimit -f`) fails with
# status 1 and leaves no manifest (an earlier one is removed), no .tmp file
# and no partial .f64 file
mkdir -p "$TMP/dump" && echo stale >"$TMP/dump/manifest.txt"
(trap '' XFSZ; ulimit -f 2 && exec timeout 60 "$COCONET" run examples/adam.coco --dump "$TMP/dump") \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
partial=$(find "$TMP/dump" -name '*.tmp' -o -name '*.f64' -size +2k | head -n 1)
if [ $rc -ne 1 ] || ! grep -q 'cannot write .*: File too large' "$TMP/err"; then
    bad "dump past ulimit -f: status $rc, expected 1 with a message: $(err1)"
elif [ -e "$TMP/dump/manifest.txt" ] || [ -n "$partial" ]; then
    bad "dump past ulimit -f left a manifest or a partial file ($partial)"
else ok; fi
group_end
