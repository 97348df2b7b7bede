# ---- scaling: checking takes time linear in the size of the program ----
# Three shapes, each generated at n and 4n names or terms: one long
# expression (Var y = x + x + ...), many chained Vars (Var v_i = v_(i-1) + x),
# and chained Vars with a schedule applied (fuse, split: the graph is re-sorted
# after each statement). `coconet check` of the 4n program must take less than
# 8 times as long as of the n program, plus a floor of 0.5 s for noise on a
# busy machine (a quadratic step takes 16 times as long). The 4n programs are
# about 1 MB; the whole group takes a few seconds.
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
# elapsed_ms FILE: the milliseconds `coconet check FILE` takes; fails (and
# prints nothing) when it does not succeed within 20 s
elapsed_ms() {
    t0=$(date +%s%N)
    timeout 20 $COCONET check "$1" >/dev/null 2>"$TMP/err" || return 1
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000000))
}
# scaling_check NAME N GENERATOR: times the program at N and 4N
scaling_check() {
    name=$1; n=$2; n4=$((4 * n))
    "$3" "$n" >"$TMP/scale1.coco"
    "$3" "$n4" >"$TMP/scale4.coco"
    if ! t1=$(elapsed_ms "$TMP/scale1.coco") || ! t4=$(elapsed_ms "$TMP/scale4.coco"); then
        bad "scaling $name (n=$n): coconet check failed or took more than 20 s: $(err1)"; return
    fi
    if [ "$t4" -lt $((8 * t1 + 500)) ]; then ok
    else bad "scaling $name: n=$n took $t1 ms, 4n=$n4 took $t4 ms (more than 8 times + 500 ms: not linear)"; fi
}
scaling_sched() { scaling_chain "$1" schedule; }
scaling_check "one expression" 50000 scaling_expr
scaling_check "chained Vars" 12500 scaling_chain
scaling_check "chained Vars with a schedule" 20000 scaling_sched
group_end
