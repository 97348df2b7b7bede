# ---- the arithmetic of generated kernels (src/gen/emit_value.c) ----
# FP32 instructions where they round as the CPU's double does, double
# arithmetic elsewhere (the statements expected: tests/gen/arith.expect);
# tests/gpu/arith.coco runs each line on GPUs.
# shellcheck shell=sh disable=SC2154 # sourced by tests/run.sh, whose coco sets rc
group arith-gen
rm -rf "$TMP/arith"
coco gen tests/gpu/arith.coco -o "$TMP/arith"
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen tests/gpu/arith.coco: ${why:-exit status $rc}: $(err1)"; else
    while IFS='|' read -r what want; do
        case $what in '#'*|'') continue ;; esac
        if grep -q -E "$want" "$TMP/arith/arith.cu"; then ok
        else bad "tests/gpu/arith.coco: no statement for $what ($want)"; fi
    done <tests/gen/arith.expect
fi
# all-FP32 LAMB's fused kernels: FP32 arithmetic, but Pow (and the reductions)
rm -rf "$TMP/arith"
coco gen bench/lamb_fp32.coco -o "$TMP/arith" --all-schedules --schedule fuse_RS_Opt_AG_4
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen bench/lamb_fp32.coco: ${why:-exit status $rc}: $(err1)"
elif grep -n -E '(double|float) r[0-9]+ = .*__d(add|sub|mul|div|sqrt)_rn' "$TMP/arith/lamb.cu" >"$TMP/dbl"; then
    bad "bench/lamb_fp32.coco: double arithmetic in an all-FP32 step:"; head -n 3 "$TMP/dbl"
else ok; fi
group_end
