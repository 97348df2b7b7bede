# ---- scaling: checking and generating take time linear in the program ----
# Shapes, each generated at n and 4n names or terms: one long expression
# (Var y = x + x + ...), many chained Vars (Var v_i = v_(i-1) + x), chained
# Vars with a schedule applied (fuse, split: the graph is re-sorted after
# each statement), many Tensors and Vars all listed in Execute (duplicates
# and unlisted inputs are looked for), one long expression fused and
# overlapped by a schedule (the parts of its statement are found), and many
# AllReduces each split by its own statement (a schedule of n statements:
# the graph is not re-sorted after each). `coconet check` of the 4n program
# must take less than 8 times the CPU time of the n program, plus a floor of
# 0.1 s for noise (a quadratic step takes 16 times as long). `coconet gen`
# is timed alike on chained Vars and chained Ites (a kernel each: a
# kernel's code must take time in its own nodes), and `coconet run` of
# examples/adam.coco at P and 4P ranks (its memory pre-check takes time
# linear in the ranks), and `coconet schedules` of chained layers (the
# enumeration). The 4n programs are about 1 MB; the whole group takes a few
# seconds.
# shellcheck shell=sh # sourced by tests/run.sh
group scaling

# scaling_expr N: one expression of N terms
scaling_expr() {
    awk -v n="$1" 'BEGIN {
        print "Tensor x(FP32, [4], Replicated, WORLD);"
        printf "Var y = x"; for (i = 1; i < n; i++) printf " + x"; print ";"
        print "Execute f({x}, {y});" }'
}
# scaling_chain N [SCHEDULE]: N chained Vars of an AllReduce's result
scaling_chain() {
    awk -v n="$1" -v sched="${2:-}" 'BEGIN {
        print "Tensor g(FP32, [4], Local, WORLD, RANK);"
        print "Var x = AllReduce(\"+\", g);"
        print "Var v0 = x + x;"
        for (i = 1; i < n; i++) printf "Var v%d = v%d + x;\n", i, i - 1
        printf "Execute f({g}, {v%d});\n", n - 1
        if (sched) print "Schedule s {\n  c = fuse(v1, v2, v3, ComputationFuse);\n  (rs, ag) = split(x, ARSplitRSAG);\n}" }'
}
# scaling_ites N: N chained Ites of an AllReduce's result
scaling_ites() {
    awk -v n="$1" 'BEGIN {
        print "Tensor g(FP32, [4], Local, WORLD, RANK);"
        print "Var x = AllReduce(\"+\", g);"
        print "Var v0 = x + x;"
        for (i = 1; i < n; i++) printf "Var v%d = Ite(v%d > x, v%d, x);\n", i, i - 1, i - 1
        printf "Execute f({g}, {v%d});\n", n - 1 }'
}
# scaling_many N: N tensors and N Vars, Execute listing them all
scaling_many() {
    awk -v n="$1" 'BEGIN {
        for (i = 0; i < n; i++) printf "Tensor g%d(FP32, [4], Replicated, WORLD);\n", i
        for (i = 0; i < n; i++) printf "Var b%d = g%d * 2;\n", i, i
        printf "Execute f({g0"; for (i = 1; i < n; i++) printf ",g%d", i
        printf "}, {b0"; for (i = 1; i < n; i++) printf ",b%d", i; print "});" }'
}
# scaling_splits N: N AllReduces, each split by a statement of the schedule
scaling_splits() {
    awk -v n="$1" 'BEGIN {
        print "Tensor g(FP32, [4], Local, WORLD, RANK);"
        for (i = 0; i < n; i++) printf "Var a%d = AllReduce(\"+\", g);\n", i
        printf "Var s = a0"; for (i = 1; i < n; i++) printf " + a%d", i; print ";"
        print "Execute f({g}, {s});"
        print "Schedule s {"
        for (i = 0; i < n; i++) printf "  (rs%d, ag%d) = split(a%d, ARSplitRSAG);\n", i, i, i
        print "}" }'
}
# cpu_ms FILE: the CPU time (user + system) of the shell's finished children
# that `times` wrote to FILE, in ms (CPU time, not wall time, so that other
# work on a busy machine does not count)
cpu_ms() {
    awk 'NR == 2 { split($1, u, "m"); split($2, s, "m")
                   printf "%d\n", ((u[1] + s[1]) * 60 + u[2] + s[2]) * 1000 }' "$1"
}
# scaling_fused N: an expression of N terms, fused with its reader and
# overlapped with the AllReduce it reads
scaling_fused() {
    awk -v n="$1" 'BEGIN {
        print "Tensor g(FP32, [4], Local, WORLD, RANK);"
        print "Tensor x(FP32, [4], Replicated, WORLD);"
        print "Var a = AllReduce(\"+\", g);"
        printf "Var y = a"; for (i = 0; i < n; i++) printf " + x"; print ";"
        print "Var z = y * 2;"
        print "Execute f({g,x}, {z});"
        print "Schedule s {\n  c = fuse(y, z, ComputationFuse);\n  o = overlap(a, c);\n}" }'
}
# elapsed_ms ARGS...: the CPU milliseconds `coconet ARGS...` takes; fails
# (and prints nothing) when it does not succeed within 20 s. `times` runs
# in this shell, not in a subshell, which has no children.
elapsed_ms() {
    times >"$TMP/times0"
    timeout 20 "$COCONET" "$@" >/dev/null 2>"$TMP/err" || return 1
    times >"$TMP/times1"
    echo $(($(cpu_ms "$TMP/times1") - $(cpu_ms "$TMP/times0")))
}
# scaling_verdict WHAT T1 T4: ok when T4 ms (at 4n) is less than 8 times T1
# ms (at n) + 100 ms
scaling_verdict() {
    if [ "$3" -lt $(($2 * 8 + 100)) ]; then ok
    else bad "scaling $1 took $2 ms, at 4 times the size $3 ms (more than 8 times + 100 ms: not linear)"; fi
}
# scaling_time VERB K: elapsed_ms of `coconet VERB` of $TMP/scaleK.coco
# (check, schedules; gen into a new directory)
scaling_time() {
    rm -rf "$TMP/gen$2"
    if [ "$1" = gen ]; then elapsed_ms gen "$TMP/scale$2.coco" -o "$TMP/gen$2"
    else elapsed_ms "$1" "$TMP/scale$2.coco"; fi
}
# scaling_check NAME N GENERATOR [VERB]: times `coconet VERB` (check by
# default) of the program at N and 4N
scaling_check() {
    name=$1; n=$2; n4=$((4 * n)); verb=${4:-check}
    "$3" "$n" >"$TMP/scale1.coco"
    "$3" "$n4" >"$TMP/scale4.coco"
    if ! scaling_time "$verb" 1 >"$TMP/t1" || ! scaling_time "$verb" 4 >"$TMP/t4"; then
        bad "scaling $name (n=$n): coconet $verb failed or took more than 20 s: $(err1)"; return
    fi
    scaling_verdict "$name: $verb at n=$n" "$(cat "$TMP/t1")" "$(cat "$TMP/t4")"
}
# scaling_ranks NAME P FILE ARGS...: times `coconet run FILE --ranks P ARGS`
# and the same at 4P
scaling_ranks() {
    name=$1; p=$2; file=$3; shift 3
    if ! elapsed_ms run "$file" --ranks "$p" "$@" >"$TMP/t1" ||
       ! elapsed_ms run "$file" --ranks $((4 * p)) "$@" >"$TMP/t4"; then
        bad "scaling $name (P=$p): coconet run failed or took more than 20 s: $(err1)"; return
    fi
    scaling_verdict "$name: run at P=$p" "$(cat "$TMP/t1")" "$(cat "$TMP/t4")"
}
scaling_sched() { scaling_chain "$1" schedule; }
scaling_check "one expression" 50000 scaling_expr
scaling_check "chained Vars" 12500 scaling_chain
scaling_check "chained Vars with a schedule" 20000 scaling_sched
scaling_check "many names listed in Execute" 20000 scaling_many
scaling_check "a long expression fused" 20000 scaling_fused
scaling_check "a schedule of many splits" 2000 scaling_splits
scaling_check "chained Vars" 5000 scaling_chain gen
scaling_check "chained Ites" 5000 scaling_ites gen
scaling_ranks "adam's ranks" 256 examples/adam.coco -D N=64 --backend cpu
scaling_check "enumerating the schedules of chained layers" 20 chained_layers schedules
group_end
