# ---- front: the front end's limits, line ends and command-line values ----
# Nesting: parentheses, calls, unary minus and size parentheses may nest
# exactly 200 deep (doc/language.md): 200 levels check, 201 are refused.
# -D: a size or a scalar's value on the command line is read by the file's
# grammar (a size: decimal digits, or 2^k; a scalar: ["-"] NUMBER); quoted
# forms that the error files cannot pass (" 8", "8 ") are refused here, as
# a bad command line (exit status 2), and the numbers the file accepts are
# accepted. Line ends: a lone CR ends a line and CRLF
# is one line end, so that messages give the right line and column.
# --dump DIR: a place that cannot be written is refused before the run.
# print: a sum of 200000 terms is printed (not by recursion) and reads back.
# shellcheck shell=sh disable=SC2154 # sourced by tests/run.sh, whose coco sets rc
group front

# front_refused WHAT EXPECT ARGS...: `coconet ARGS` exits 1 with EXPECT in
# its first line of stderr
front_refused() {
    what=$1; expect=$2; shift 2
    coco "$@"
    if [ -n "$why" ]; then bad "front $what: $why: $(err1)"
    elif [ "$rc" -ne 1 ]; then bad "front $what: exit status $rc, expected 1 ($(err1))"
    elif ! head -n 1 "$TMP/err" | grep -F -q -- "$expect"; then
        bad "front $what: expected '$expect', got: $(err1)"
    else ok; fi
}
# front_usage WHAT EXPECT ARGS...: `coconet ARGS` exits 2 (a bad command
# line) with EXPECT in its first line of stderr
front_usage() {
    what=$1; expect=$2; shift 2
    coco "$@"
    if [ -n "$why" ]; then bad "front $what: $why: $(err1)"
    elif [ "$rc" -ne 2 ]; then bad "front $what: exit status $rc, expected 2 ($(err1))"
    elif ! head -n 1 "$TMP/err" | grep -F -q -- "$expect"; then
        bad "front $what: expected '$expect', got: $(err1)"
    else ok; fi
}
# front_accepted WHAT ARGS...: `coconet ARGS` exits 0
front_accepted() {
    what=$1; shift
    coco "$@"
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "front $what: ${why:-exit status $rc}: $(err1)"
    else ok; fi
}

# nested LEVELS OPEN CLOSE: a program whose expression nests LEVELS deep
nested() {
    awk -v n="$1" -v o="$2" -v c="$3" 'BEGIN {
        print "Tensor x(FP32, [4], Replicated, WORLD);"
        printf "Var y = x * "; for (i = 0; i < n; i++) printf "%s", o
        printf "x"; for (i = 0; i < n; i++) printf "%s", c; print ";"
        print "Execute p({x}, {y});" }'
}
# nested_size LEVELS: a dimension in LEVELS parentheses
nested_size() {
    awk -v n="$1" 'BEGIN {
        printf "Tensor x(FP32, ["; for (i = 0; i < n; i++) printf "("
        printf "4"; for (i = 0; i < n; i++) printf ")"; print "], Replicated, WORLD);"
        print "Execute p({x}, {x});" }'
}
for kind in parentheses minus calls size; do
    for levels in 200 201; do
        f=$TMP/nested_${kind}_$levels.coco
        case $kind in
            parentheses) nested "$levels" '(x + ' ')' ;;
            minus) nested "$levels" '-' '' ;;
            calls) nested "$levels" 'Tanh(' ')' ;;
            size) nested_size "$levels" ;;
        esac >"$f"
        if [ "$levels" -eq 200 ]; then front_accepted "$kind nested 200 deep" check "$f"
        else front_refused "$kind nested 201 deep" \
            "error: expression is nested too deeply (more than 200 levels)" check "$f"; fi
    done
done

# a sum of 200000 terms prints, and its print prints the same
awk 'BEGIN { print "Tensor x(FP32, [4], Replicated, WORLD);"
             printf "Var y = x"; for (i = 1; i < 200000; i++) printf " + x"; print ";"
             print "Execute f({x}, {y});" }' >"$TMP/long_sum.coco"
coco print "$TMP/long_sum.coco"
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "front print of a sum of 200000 terms: ${why:-exit status $rc}: $(err1)"
else
    mv "$TMP/out" "$TMP/long_sum_printed.coco"
    coco print "$TMP/long_sum_printed.coco"
    if [ "$rc" -eq 0 ] && cmp -s "$TMP/out" "$TMP/long_sum_printed.coco"; then ok
    else bad "front print of a sum of 200000 terms does not print to itself: ${why:-$(err1)}"; fi
fi

# -D with spaces, and the numbers the file's grammar accepts
printf 'Size N;\nTensor x(FP32, [N], Replicated, WORLD);\nScalar s(FP32, 1);\nVar y = x * s;\nExecute f({x}, {y});\n' >"$TMP/define.coco"
front_usage "-D N=' 8'" "-D N= 8: a size must be a positive integer" check "$TMP/define.coco" -D "N= 8"
front_usage "-D N='8 '" "-D N=8 : a size must be a positive integer" check "$TMP/define.coco" -D "N=8 "
front_usage "-D s=' 8'" "-D s= 8: the value of a scalar must be a number" check "$TMP/define.coco" -D N=4 -D "s= 8"
front_accepted "-D N=8" check "$TMP/define.coco" -D N=8
for v in 1e3 -1.5e-3 .5 7 0.25E+2; do
    front_accepted "-D s=$v" check "$TMP/define.coco" -D N=4 -D "s=$v"
done

# line ends: CR only, CRLF, and CR, CRLF, LF and CR mixed; the unknown name
# is on the Var line, 13 columns in
printf 'Tensor x(FP32, [4], Replicated, WORLD);\r// a comment\rVar y = x + q;\rExecute f({x}, {y});\r' >"$TMP/cr.coco"
front_refused "CR line ends" "$TMP/cr.coco:3:13: error: unknown name 'q'" check "$TMP/cr.coco"
printf 'Tensor x(FP32, [4], Replicated, WORLD);\r\n// a comment\r\n\r\nVar y = x + q;\r\nExecute f({x}, {y});\r\n' >"$TMP/crlf.coco"
front_refused "CRLF line ends" "$TMP/crlf.coco:4:13: error: unknown name 'q'" check "$TMP/crlf.coco"
printf 'Tensor x(FP32, [4], Replicated, WORLD);\r\r\n\n\rVar y = x + q;\r' >"$TMP/mixed_ends.coco"
front_refused "mixed line ends" "$TMP/mixed_ends.coco:5:13: error: unknown name 'q'" check "$TMP/mixed_ends.coco"
printf 'Tensor x(FP32, [4], Replicated, WORLD);\r// y is x + x\rVar y = x + x;\rExecute f({x}, {y});\r' >"$TMP/cr_ok.coco"
front_accepted "a program with CR line ends" check "$TMP/cr_ok.coco"

# --dump to a place that cannot be written: refused before the run (nothing
# on stdout), under a regular file (which refuses even the superuser)
: >"$TMP/plain_file"
for dir in "$TMP/plain_file" "$TMP/plain_file/sub"; do
    front_refused "--dump $dir" "coconet: --dump $dir: cannot" run examples/adam.coco --dump "$dir"
    if [ -s "$TMP/out" ]; then bad "front --dump $dir: the program ran before the refusal"; else ok; fi
done
group_end
