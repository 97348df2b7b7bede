# ---- schedules: every program x every enumerated schedule x P ----
# `coconet run --all-schedules` runs the program and each schedule and exits 1
# when a schedule's outputs or Updated state differ from the program's beyond
# rounding (judged against an FP64 evaluation: see coco_run_compare).
# Then generated programs at the enumeration's limits (below).
# shellcheck shell=sh disable=SC2154 # sourced by tests/run.sh, whose coco sets rc
group schedules
nsched=0
sskip=0
for f in examples/*.coco tests/oracle/programs/*.coco; do
    [ -f "$f" ] || continue
    for P in 1 2 3 4 8; do
        coco check "$f" --ranks "$P"
        if [ "$rc" -eq 1 ] && grep -q -e 'divisible' -e 'does not divide' -e 'is not a rank of' "$TMP/err"; then
            sskip=$((sskip + 1)); continue
        fi
        run_schedules "$f" --ranks "$P"
    done
done

# Enumeration at its limits. A schedule's name has no length limit: 75
# chained convolutions are named Conv-C 75 times (more than 512 bytes),
# listed and run. An AllGather read by 100 computations: a reorder moves
# all 100 before it. 80 chained layers have more schedules than the
# enumeration's cap: they are listed quickly, and `schedules`, `run
# --all-schedules` and `tune --plan` (of 20 layers) say that the list stops
# at the cap. A Cast written inside an AllReduce gives the schedules (fused
# ones too) that the Cast in a Var of its own gives, and a hand-written
# fuse of that AllReduce applies.
# conv_chain N: N chained Tanh(Conv2D(...)) statements
conv_chain() {
    awk -v n="$1" 'BEGIN {
        print "Tensor x(FP32, [2,4,6,6], Replicated, WORLD);"
        print "Tensor w(FP32, [4,4,3,3], Replicated, WORLD);"
        print "Var v0 = Tanh(Conv2D(x, w, 1, 1));"
        for (i = 1; i < n; i++) printf "Var v%d = Tanh(Conv2D(v%d, w, 1, 1));\n", i, i - 1
        printf "Execute f({x,w}, {v%d});\n", n - 1 }'
}
conv_chain 75 >"$TMP/conv75.coco"
coco schedules "$TMP/conv75.coco"
long=$(awk 'BEGIN { for (i = 0; i < 75; i++) printf "%sConv-C", i ? "-" : ""; print "" }')
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "schedules of 75 convolutions: ${why:-exit status $rc}: $(err1)"
elif ! grep -q -F -x -- "Schedule $(echo "$long" | tr - _) {  // $long" "$TMP/out"; then
    bad "schedules of 75 convolutions: no schedule named $long: $(sed -n 2p "$TMP/out" | cut -c 1-200)"
else ok; fi
run_schedules "$TMP/conv75.coco" --ranks 2
# fanout N: an AllReduce read by N computations, each an output
fanout() {
    awk -v n="$1" 'BEGIN {
        print "Tensor g(FP32, [16], Local, WORLD, RANK);"
        print "Var s = AllReduce(\"+\", g);"
        for (i = 0; i < n; i++) printf "Var u%d = Tanh(s) * %d;\n", i, i + 1
        printf "Execute f({g}, {u0"; for (i = 1; i < n; i++) printf ",u%d", i; print "});" }'
}
fanout 100 >"$TMP/fanout100.coco"
coco schedules "$TMP/fanout100.coco"
all=$(awk 'BEGIN { for (i = 0; i < 100; i++) printf ", u%d", i }')
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "schedules of 100 readers: ${why:-exit status $rc}: $(err1)"
elif ! grep -q -F -x -- "  reorder(ag_s$all, AGReorder);" "$TMP/out"; then
    bad "schedules of 100 readers: no reorder of all 100: $(grep -m 1 reorder "$TMP/out" | cut -c 1-200)"
else ok; fi
run_schedules "$TMP/fanout100.coco" --ranks 4
chained_layers 80 >"$TMP/layers80.coco"
chained_layers 20 >"$TMP/layers20.coco"
cap_note="note: the enumeration stopped at its cap of 4000 schedules"
coco schedules "$TMP/layers80.coco"
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "schedules of 80 layers: ${why:-exit status $rc}: $(err1)"
elif [ "$(grep -c '^Schedule ' "$TMP/out")" -ne 4000 ]; then
    bad "schedules of 80 layers: $(grep -c '^Schedule ' "$TMP/out") schedules, expected the cap, 4000"
elif ! grep -q -F -- "$cap_note" "$TMP/err"; then bad "schedules of 80 layers: no note of the cap: $(err1)"
else ok; fi
run_schedules "$TMP/layers80.coco" --ranks 2
if ! grep -q -F -- "$cap_note" "$TMP/err"; then bad "run --all-schedules of 80 layers: no note of the cap: $(err1)"
else ok; fi
coco tune "$TMP/layers20.coco" --plan
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "tune --plan of 20 layers: ${why:-exit status $rc}: $(err1)"
elif ! grep -q -F -- "$cap_note" "$TMP/err"; then bad "tune --plan of 20 layers: no note of the cap: $(err1)"
else ok; fi
# five AllReduces, each split and fused or not: schedules of up to 15
# statements, fewer than the cap: the depth (10) cuts the list, and a note says so
awk 'BEGIN { for (i = 1; i <= 5; i++) {
        printf "Tensor x%d(FP32, [8], Local, WORLD, RANK);\n", i
        printf "Var y%d = AllReduce(\"+\", x%d);\n", i, i }
    print "Execute f({x1,x2,x3,x4,x5}, {y1,y2,y3,y4,y5});" }' >"$TMP/deep.coco"
coco schedules "$TMP/deep.coco"
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "schedules of 5 AllReduces: ${why:-exit status $rc}: $(err1)"
elif ! grep -q -F "note: the enumeration tried schedules of at most 10 statements" "$TMP/err"; then
    bad "schedules of 5 AllReduces: no note of the depth: $(err1)"
else ok; fi
# sgd_cast INLINE|VAR: an optimizer step whose AllReduce reads a Cast
sgd_cast() {
    echo "Size N = 1024;"
    echo "Tensor g(FP16, [N], Local, WORLD, RANK);"
    echo "Tensor p(FP32, [N], Replicated, WORLD);"
    echo "Scalar lr(FP32, 0.1);"
    if [ "$1" = INLINE ]; then echo 'Var avg = AllReduce("+", Cast(g, FP32));'
    else echo "Var g32 = Cast(g, FP32);"; echo 'Var avg = AllReduce("+", g32);'; fi
    echo "Var p1 = Update(p, p - lr * avg);"
    echo "Execute sgd({g, p, lr}, {p1});"
    echo "Schedule by_hand {"
    echo "  f = fuse(avg, p1, AllReduceFuse);"
    echo "}"
}
sgd_cast INLINE >"$TMP/cast_inline.coco"
sgd_cast VAR >"$TMP/cast_var.coco"
coco schedules "$TMP/cast_var.coco"
sed 1d "$TMP/out" >"$TMP/cast_var.list"
coco schedules "$TMP/cast_inline.coco"
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "schedules of a Cast in an AllReduce: ${why:-exit status $rc}: $(err1)"
elif ! sed 1d "$TMP/out" | cmp -s - "$TMP/cast_var.list"; then
    bad "schedules of a Cast in an AllReduce differ from those of the Cast in a Var: $(sed 1d "$TMP/out" | diff - "$TMP/cast_var.list" | sed -n 2p)"
elif ! grep -q -F -x "  fuse(rs_avg, ag_p1, AllReduceFuse);" "$TMP/out"; then
    bad "schedules of a Cast in an AllReduce: no fuse(rs_avg, ag_p1, AllReduceFuse)"
else ok; fi
run_schedules "$TMP/cast_inline.coco" --ranks 4
run_schedules "$TMP/cast_inline.coco" --ranks 3
# A layer boundary (row-parallel MatMul, AllReduce, a row norm, a
# column-parallel MatMul written inline with its bias; 7 tokens, uneven
# slices at 4 ranks): the enumeration overlaps the AllGather with the
# MatMul that reads it (named by its statement), and both MatMuls at once,
# named in the paper's notation; every schedule matches the program.
boundary() {
    echo "Size T = 7, H = 8;"
    echo "Tensor x(FP32, [T,H], Sliced(1), WORLD, RANK);"
    echo "Tensor w(FP32, [H,H], Sliced(0), WORLD, RANK);"
    echo "Tensor w1(FP32, [H,2*H], Sliced(1), WORLD, RANK);"
    echo "Tensor b1(FP32, [2*H], Sliced(0), WORLD, RANK);"
    echo "Var proj = MatMul(x, w);"
    echo 'Var s = AllReduce("+", proj);'
    echo 'Var n = s / Sqrt(ReduceTensor("+", s * s, -1, Keep) + 1);'
    echo "Var h = MatMul(n, w1) + b1;"
    echo "Execute boundary({x, w, w1, b1}, {h});"
}
boundary >"$TMP/boundary.coco"
coco schedules "$TMP/boundary.coco"
for name in 'MM-RS-C-ol(AG,MM)-C' 'ol(MM,RS)-C-ol(AG,MM)-C' 'ol(MM,fuse(RS-C-AG))-MM-C'; do
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "schedules of a layer boundary: ${why:-exit status $rc}: $(err1)"
    elif ! grep -q -F -- "// $name" "$TMP/out"; then
        bad "schedules of a layer boundary: no $name: $(grep -c '^Schedule ' "$TMP/out") schedules"
    else ok; fi
done
run_schedules "$TMP/boundary.coco" --ranks 4
# every item of an enumerated overlap has a token in the name: no candidate
# is a part of a computation (a reduction's sum across ranks, as the bias
# gradients of examples/transformer_sp_backward.coco have)
for f in examples/*.coco; do
    coco schedules "$f"
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "schedules $f: ${why:-exit status $rc}: $(err1)"
    elif grep -E '// .*(\(,|,\)|,,|\(\))' "$TMP/out" >"$TMP/nameless"; then
        bad "schedules $f: an item without a name: $(head -n 1 "$TMP/nameless")"
    else ok; fi
done
group_end "$nsched schedule runs checked, $sskip program x P combinations skipped"
