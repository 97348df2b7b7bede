# ---- the benchmark's programs and plots ----
# bench/*.coco run with all their schedules on the CPU backend (P = 4) and
# match their programs; bench/plot_fig6.py draws the expected SVG from a
# synthetic CSV (tests/bench/check_plot.py, where python3 is installed) and
# takes unchecked rows (--reference none) as timings; bench/mp.sh's steps
# after the GPUs (bench/mp_rows.awk, mp_merge.py, plot_fig10.py where
# matplotlib is installed) give the expected rows, ratios, summary and SVG
# (tests/bench/check_mp.py).
# shellcheck shell=sh disable=SC2154 # sourced by tests/run.sh, whose coco sets rc
group bench
for f in bench/*.coco; do
    case $f in bench/bert_*) continue ;; esac # BERT-large's size: in group scattered, smaller
    coco run "$f" --ranks 4 --all-schedules
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "run $f --all-schedules: ${why:-exit status $rc}: $(err1)"
    else ok; fi
done
for sh in bench/fused.sh bench/scattered.sh bench/mp.sh bench/rows.sh; do
    if sh -n "$sh" 2>"$TMP/err"; then ok; else bad "$sh: $(err1)"; fi
done
# bench/rows.sh: the programs it writes run on the CPU backend, the fused
# schedule matching the program; its table from reports and PyTorch's
# times (tests/bench/rows: fixtures in coconet's and torch_rows.py's
# formats): the rows, GB/s as a share of the copy, ln_bwd = ln_dx + ln_dgdb
rm -rf "$TMP/rows" && mkdir -p "$TMP/rows"
PROGRAMS_ONLY=1 SIZES=16x64 TYPES="FP16 BF16" sh bench/rows.sh "$TMP/rows" >"$TMP/rows.out" 2>&1
n=0
for f in "$TMP"/rows/*.coco; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    coco run "$f" --ranks 1 --schedule fused
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "bench/rows.sh's $(basename "$f"): ${why:-exit status $rc}: $(err1)"
    elif ! grep -q '^fused  *bitwise ' "$TMP/out"; then bad "bench/rows.sh's $(basename "$f"): fused not bitwise"
    else ok; fi
done
if [ "$n" -eq 10 ]; then ok; else bad "bench/rows.sh PROGRAMS_ONLY=1 wrote $n programs, not 10"; fi
rm -rf "$TMP/rows" && cp -r tests/bench/rows "$TMP/rows"
SUMMARY_ONLY=1 sh bench/rows.sh "$TMP/rows" >"$TMP/rows.out" 2>&1
fwd=$(grep '^| ln_fwd |' "$TMP/rows/summary.md")
bwd=$(grep '^| ln_bwd |' "$TMP/rows/summary.md")
if [ "$fwd" = "| ln_fwd | FP16 | 8192x3072 | 0.0600 | 2517 | 84.4 % | 84.3 % | 0.4000 | 0.1800 | 3.00 |" ] &&
    [ "$bwd" = "| ln_bwd | FP16 | 8192x3072 | 0.2700 | 559 | 18.7 % | - | 0.3000 | 0.2500 | 0.93 |" ]; then ok
else bad "bench/rows.sh's table: got '$fwd' and '$bwd'"; fi
if command -v "$PYTHON" >/dev/null 2>&1; then
    if timeout 60 "$PYTHON" tests/bench/check_plot.py >"$TMP/plot.out" 2>&1; then ok; else
        bad "tests/bench/check_plot.py:"; head -n 20 "$TMP/plot.out" | sed 's/^/  /'
    fi
    # bench/mp.sh's rows, CSV, summary and Figure 10 on fixtures; its
    # PyTorch side compiles (torch itself is on the GPU machine only)
    if timeout 120 "$PYTHON" tests/bench/check_mp.py >"$TMP/mp.out" 2>&1; then ok; else
        bad "tests/bench/check_mp.py:"; head -n 20 "$TMP/mp.out" | sed 's/^/  /'
    fi
    # bench/plot_roofline.py: the program's and the best variant's share of
    # the bound per WHAT of one_gpu.sh's log (a later run replaces an
    # earlier one), and an SVG that parses
    timeout 60 "$PYTHON" bench/plot_roofline.py tests/bench/roofline.log -o "$TMP/roofline.svg" \
        >"$TMP/roofline.csv" 2>&1
    got=$(sed 1d "$TMP/roofline.csv" | paste -sd ' ' -)
    want="adam N=2^28,program,memory,15.0 adam N=2^28,paper,memory,96.0 self_attention B=8,program,gemm,24.4 self_attention B=8,MM_AR_C,gemm,56.8"
    if [ "$got" = "$want" ] &&
        "$PYTHON" -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$TMP/roofline.svg"; then ok
    else bad "bench/plot_roofline.py: got '$got', expected '$want'"; fi
    note=
    grep -q 'plot_fig10.py not checked' "$TMP/mp.out" && note="plot_fig10.py skipped: no matplotlib"
    for py in bench/torch_mp.py bench/torch_rows.py bench/torch_sp_boundary.py \
        bench/torch_tp_layers.py; do
        if "$PYTHON" -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' \
            "$py" 2>"$TMP/err"; then ok; else bad "$py: $(tail -n 1 "$TMP/err")"; fi
    done
    # rows timed with --reference none (result unchecked) are timings; a
    # failed check (REPLICAS) is not
    printf '%s\n' "tool,program,optimizer,precision,N,variant,schedule,result,ms" \
        "coconet,adam_fp32,adam,fp32,1073741824,AR_Opt,AR-Opt,unchecked,40.0" \
        "coconet,adam_fp32,adam,fp32,1073741824,fuse_RS_Opt_AG,fuse(RS-Opt-AG),REPLICAS,1.0" \
        "torch,torch_adam,adam,fp32,1073741824,allreduce+fused_adam,baseline,measured,80.0" \
        >"$TMP/unchecked.csv"
    timeout 60 "$PYTHON" bench/plot_fig6.py "$TMP/unchecked.csv" -o "$TMP/unchecked.svg" \
        >"$TMP/plot.out" 2>&1
    got=$(grep '^adam-fp32,' "$TMP/plot.out" | paste -sd ' ' -)
    if [ "$got" = "adam-fp32,2^30,AR-Opt,2.000" ]; then ok; else
        bad "plot_fig6.py with unchecked rows: got '$got', expected 'adam-fp32,2^30,AR-Opt,2.000'"
    fi
    group_end ${note:+"$note"}
else
    group_end "plot skipped: no $PYTHON"
fi
