#!/bin/sh
# bench/rows.sh OUT: row kernels (src/gen/emit_rows.c) on one GPU beside
# PyTorch in the same run (after `make`, on a machine with a GPU and torch):
#
#   ln_fwd    bias + Dropout + residual + LayerNorm (gamma, beta) over [T, H]:
#             the one-rank form of the sequence-parallel layer boundary's
#             FusedAllReduce (schedule `fused`: one row kernel)
#   ln_dx     LayerNorm's input gradient from the saved normalized input and
#             reciprocal, the one-rank form of its fused RS -> rows -> AG
#   ln_dgdb   the gradients of gamma and beta: sums over the T rows (the
#             reduction kernels); ln_bwd = ln_dx + ln_dgdb
#   gelu_fwd  GELU (exact: Erf) of y + bias over [T, 4H], one fused kernel
#   gelu_bwd  GELU's derivative times the gradient over [T, 4H], one kernel
#
# at each [T, H] of SIZES and each type of TYPES. coconet's side is
# `coconet run --backend cuda --ranks 1 --reference none --iters ITERS
# --schedule fused` (the gpu-time of the variant `fused`: its one kernel,
# or ln_dgdb's two reductions); correctness is checked elsewhere
# (make test-gpu: tests/gpu/rows_*.coco). PyTorch's side is
# bench/torch_rows.py: each computation eager and through torch.compile,
# and the device copy p.copy_(g). The table gives, per row, coconet's
# time, its GB/s on the bytes the computation must move (each input read
# once, each output written once: the roofline's memory column), that as
# a share of PyTorch's copy in the same run, the roofline's own share
# (of-bound: the runtime's measured copy), PyTorch's times and coconet's
# speed-up over the compiled one.
#
#   sh bench/rows.sh OUT
#   SIZES="8192x3072" TYPES=FP16 ITERS=50 sh bench/rows.sh OUT
#
# Variables: SIZES (TxH, "8192x3072 16384x4096"), TYPES ("FP16 BF16"),
# KINDS ("ln_fwd ln_dx ln_dgdb gelu_fwd gelu_bwd"), ITERS (20), ARGS (more
# `coconet run` options, e.g. --breakdown), TORCH (1; 0: coconet alone),
# BUILD_ONLY (1: build every run's code into the cache, time nothing),
# PROGRAMS_ONLY (1: write the programs, run nothing), SUMMARY_ONLY (1: the
# table from the reports and torch.csv already in OUT, run nothing).
# Writes OUT/*.coco (the programs), OUT/run-KIND_TYPE_TxH.txt (each
# report), OUT/coconet.log (every report whole), OUT/torch.csv and
# OUT/summary.md (the table; printed).
cd "$(dirname "$0")/.." || exit 2
OUT=${1:-build/rows}
SIZES=${SIZES:-8192x3072 16384x4096}
TYPES=${TYPES:-FP16 BF16}
KINDS=${KINDS:-ln_fwd ln_dx ln_dgdb gelu_fwd gelu_bwd}
ITERS=${ITERS:-20}
TORCH=${TORCH:-1}
mkdir -p "$OUT"
LOG=$OUT/coconet.log

# program KIND TYPE H: the program (H, a literal of the means, in the text)
program() {
    case $1 in
    ln_fwd) cat <<EOF
// bench/rows.sh: bias, Dropout, residual and LayerNorm over rows of H
Size T = 8192, H = $3;
Tensor y($2, [T,H], Local, WORLD, RANK);
Tensor b($2, [H], Replicated, WORLD);
Tensor r($2, [T,H], Replicated, WORLD);
Tensor gam($2, [H], Replicated, WORLD);
Tensor bet($2, [H], Replicated, WORLD);
Var sum = AllReduce("+", y);
Var z = Dropout(sum + b, 0.1) + r;
Var zc = z - ReduceTensor("+", z, -1, Keep) / $3;
Var rstd = 1 / Sqrt(ReduceTensor("+", zc * zc, -1, Keep) / $3 + 0.00001);
Var out = zc * rstd * gam + bet;
Execute ln_fwd({y, b, r, gam, bet}, {out});
Schedule fused {
  (rs, ag) = split(sum, ARSplitRSAG);
  reorder(ag, z, zc, rstd, out);
  fuse(rs, sc_z, sc_zc, sc_rstd, sc_out, ag_out, AllReduceFuse);
}
EOF
    ;;
    ln_dx) cat <<EOF
// bench/rows.sh: LayerNorm's input gradient from the saved xh and rstd
Size T = 8192, H = $3;
Tensor dyp($2, [T,H], Local, WORLD, RANK);
Tensor xh($2, [T,H], Replicated, WORLD);
Tensor rstd($2, [T,1], Replicated, WORLD);
Tensor g($2, [H], Replicated, WORLD);
Var dy = AllReduce("+", dyp);
Var dxh = dy * g;
Var dx = (dxh - ReduceTensor("+", dxh, -1, Keep) / $3 - xh * (ReduceTensor("+", dxh * xh, -1, Keep) / $3)) * rstd;
Execute ln_dx({dyp, xh, rstd, g}, {dx});
Schedule fused {
  (rs, ag) = split(dy, ARSplitRSAG);
  reorder(ag, dxh, dx);
  fuse(rs, sc_dxh, sc_dx, ag_dx, AllReduceFuse);
}
EOF
    ;;
    ln_dgdb) cat <<EOF
// bench/rows.sh: the gradients of LayerNorm's gamma and beta (sums over rows)
Size T = 8192, H = $3;
Tensor dy($2, [T,H], Replicated, WORLD);
Tensor xh($2, [T,H], Replicated, WORLD);
Var dg = ReduceTensor("+", dy * xh, 0);
Var db = ReduceTensor("+", dy, 0);
Execute ln_dgdb({dy, xh}, {dg, db});
Schedule fused { // the reductions as they are (a fused computation is one loop over elements)
}
EOF
    ;;
    gelu_fwd) cat <<EOF
// bench/rows.sh: GELU of y + bias (the column-parallel MatMul's epilogue)
Size T = 8192, F = $((4 * $3));
Tensor y($2, [T,F], Replicated, WORLD);
Tensor b($2, [F], Replicated, WORLD);
Var z = y + b;
Var out = 0.5 * z * (1 + Erf(z * 0.7071067811865476));
Execute gelu_fwd({y, b}, {out});
Schedule fused {
  fuse(z, out, ComputationFuse);
}
EOF
    ;;
    gelu_bwd) cat <<EOF
// bench/rows.sh: GELU's derivative times the gradient
Size T = 8192, F = $((4 * $3));
Tensor dz($2, [T,F], Replicated, WORLD);
Tensor z($2, [T,F], Replicated, WORLD);
Var cdf = 0.5 * (1 + Erf(z * 0.7071067811865476));
Var dx = dz * (cdf + z * Exp(z * z * -0.5) * 0.3989422804014327);
Execute gelu_bwd({dz, z}, {dx});
Schedule fused {
  fuse(cdf, dx, ComputationFuse);
}
EOF
    ;;
    esac
}

# run KIND TYPE T H: the program, then coconet's run of it, its report in
# OUT/run-KIND_TYPE_TxH.txt
run() {
    f=$OUT/$1_$2_$4.coco
    program "$1" "$2" "$4" >"$f"
    [ "${PROGRAMS_ONLY:-0}" = 1 ] && return
    size="-D T=$3"
    if [ "${BUILD_ONLY:-0}" = 1 ]; then
        # shellcheck disable=SC2086 # the size's words
        ./coconet run "$f" $size --schedule fused --backend cuda --ranks 1 --build-only >>"$LOG" 2>&1 &
        return
    fi
    cmd="./coconet run $f $size --schedule fused --backend cuda --ranks 1 --reference none --iters $ITERS $ARGS"
    report=$OUT/run-$1_$2_$3x$4.txt
    echo "== $cmd" >"$report"
    # shellcheck disable=SC2086 # the command's words
    $cmd >>"$report" 2>&1
    echo "exit status $?" >>"$report"
    cat "$report" >>"$LOG"
}

# rows: each report's `fused` row, as "KIND|TYPE|TxH|ms|GB/s|of-bound" (the
# roofline's GB/s: its memory, the bytes that must move, over the time; ms
# from those bytes, known here, and that rate: 4 digits, where the row
# gives 3 decimals)
rows() {
    for report in "$OUT"/run-*.txt; do
        [ -f "$report" ] || continue
        name=$(basename "$report" .txt)
        name=${name#run-}
        awk -v name="$name" '
            BEGIN {
                n = split(name, a, "_")
                k = a[1] "_" a[2]; t = a[3]; s = a[4]; split(s, d, "x")
                es = t == "FP32" ? 4 : 2; T = d[1]; H = d[2]; F = 4 * H
                if (k == "ln_fwd") bytes = 3 * T * H + 3 * H
                else if (k == "ln_dx") bytes = 3 * T * H + T + H
                else if (k == "ln_dgdb") bytes = 2 * T * H + 2 * H
                else if (k == "gelu_fwd") bytes = 2 * T * F + F
                else bytes = 3 * T * F
                bytes *= es
            }
            /^schedule +outputs/ { rows = 1; next }
            /^roofline +memory/ { roof = 1; next }
            rows && $1 == "fused" { for (i = 3; i <= NF; i++) if ($i == "ms") ms = $(i - 1) }
            roof && $1 == "fused" { gbs = $8; ofb = $NF == "%" ? $(NF - 1) : "" }
            END {
                if (ms == "") exit
                if (gbs + 0 > 0) ms = sprintf("%.5f", bytes / gbs / 1e6)
                print k "|" t "|" s "|" ms "|" gbs "|" ofb
            }' "$report"
    done
}

if [ "${SUMMARY_ONLY:-0}" != 1 ]; then
    : >"$LOG"
    rm -f "$OUT"/run-*.txt
    if [ "$TORCH" = 1 ] && [ "${BUILD_ONLY:-0}" != 1 ] && [ "${PROGRAMS_ONLY:-0}" != 1 ]; then
        # shellcheck disable=SC2086 # lists
        python3 bench/torch_rows.py --sizes $SIZES --types $TYPES --iters "$ITERS" >"$OUT/torch.csv" 2>&1
    fi
    for size in $SIZES; do
        t=${size%x*}
        h=${size#*x}
        for type in $TYPES; do
            for kind in $KINDS; do
                run "$kind" "$type" "$t" "$h"
            done
        done
    done
fi
if [ "${BUILD_ONLY:-0}" = 1 ]; then
    wait
    echo "built (BUILD_ONLY=1): $LOG"
    exit 0
fi
[ "${PROGRAMS_ONLY:-0}" = 1 ] && exit 0
rows >"$OUT/rows.txt"

# the table: coconet's rows beside PyTorch's (ln_bwd: ln_dx + ln_dgdb
# against PyTorch's whole backward)
{
    echo "# Row kernels on one GPU beside PyTorch"
    echo
    echo "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1);" \
         "commit $(git rev-parse --short HEAD 2>/dev/null);" \
         "command: SIZES=\"$SIZES\" TYPES=\"$TYPES\" ITERS=$ITERS ARGS=\"$ARGS\" sh bench/rows.sh"
    echo
    awk -F, '$2 == "copy" { printf "PyTorch copy (p.copy_(g), FP32 2^28): %.4f ms, %.0f GB/s\n\n", $6, 8 * $3 / $6 / 1e6 }' \
        "$OUT/torch.csv" 2>/dev/null
    echo "| what | type | T x H | coconet ms | GB/s | of copy | of-bound | torch eager ms | torch compiled ms | x compiled |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    awk -F'|' -v torch="$OUT/torch.csv" '
        BEGIN {
            while ((getline line < torch) > 0) {
                n = split(line, c, ",")
                if (c[2] == "copy") copy = 8 * c[3] / c[6] / 1e6
                else if (n >= 6) tms[c[2] "|" c[4] "|" c[3] "|" c[5]] = c[6]
            }
        }
        function out(what, t, s, ms, gbs, ofb, tw) {
            e = tms[tw "|" t "|" s "|eager"]; cm = tms[tw "|" t "|" s "|compiled"]
            printf "| %s | %s | %s | %.4f | %.0f | %s | %s | %s | %s | %s |\n", what, t, s, ms, gbs,
                   copy ? sprintf("%.1f %%", 100 * gbs / copy) : "-", ofb != "" ? ofb " %" : "-",
                   e != "" ? e : "-", cm != "" ? cm : "-", cm != "" ? sprintf("%.2f", cm / ms) : "-"
        }
        {
            out($1, $2, $3, $4, $5, $6, $1)
            n++; kind[n] = $1; type[n] = $2; size[n] = $3; ms[n] = $4
            if ($1 == "ln_dx") { dx[$2 "|" $3] = $4; dxb[$2 "|" $3] = $4 * $5 }
        }
        END {
            for (i = 1; i <= n; i++) {
                k = type[i] "|" size[i]
                if (kind[i] == "ln_dgdb" && k in dx)
                    out("ln_bwd", type[i], size[i], dx[k] + ms[i], dxb[k] / (dx[k] + ms[i]), "", "ln_bwd")
            }
        }' "$OUT/rows.txt"
    echo
    echo "GB/s: the bytes each computation must move (the roofline's memory column: inputs"
    echo "read once, outputs written once; ln_bwd: ln_dx's) over coconet's time; of copy: that"
    echo "over PyTorch's copy in this run; of-bound: the roofline's share of the runtime's copy"
    echo "limit; x compiled: torch.compile's time over coconet's. Every report: $LOG."
} >"$OUT/summary.md"
cat "$OUT/summary.md"
