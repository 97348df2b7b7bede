#!/bin/sh
# tests/gpu/torch_pip.sh OUT: coconet.torch as a new user gets it, on a
# machine with GPUs, nvcc and torch, offline: `pip install
# --no-build-isolation ./python` from a copy of the checkout without its build
# outputs, into a fresh venv that sees this Python's packages (torch, its NCCL
# wheel, pip and setuptools: a .pth file, no network), timed; then the time
# of a first call (a RowParallelLinear's forward: its program built by nvcc
# into an empty cache) and the median of the next five; then, from outside
# the checkout and with no COCONET_HOME, COCONET_LIB, COCONET_CUDA_RUNTIME,
# PYTHONPATH or LD_PRELOAD: `python -m coconet.check`, then tests/gpu/torch_check.py on the installed
# package (COCONET_CHECK_INSTALLED=1): its builds (--build-only, timed),
# then every check (or ONLY's) under torchrun for each P in RANKS (1).
# The table goes to OUT (markdown), with the install's and the builds'
# seconds; every step's output to OUT.log. Exit status non-zero on a FAIL.
# Variables: PYTHON (python3, with torch), RANKS, ONLY, TIMEOUT (900), JOBS (8),
# AHEAD (1; 0 skips the builds ahead: each check then builds what it calls).
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
OUT=${1:-build/torch-pip-results.md}
case $OUT in /*) ;; *) OUT=$ROOT/$OUT ;; esac
LOG=$OUT.log
PYTHON=${PYTHON:-python3}
RANKS=${RANKS:-1}
TIMEOUT=${TIMEOUT:-900}
JOBS=${JOBS:-8}
AHEAD=${AHEAD:-1}
mkdir -p "$(dirname "$OUT")"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/coconet-pip.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT
unset COCONET_HOME COCONET_LIB COCONET_CUDA_RUNTIME PYTHONPATH LD_PRELOAD
V=$TMP/venv
: >"$LOG"
fail=0
row() { echo "| $1 | $2 | $3 | $4 |" >>"$OUT"; if [ "$3" = FAIL ]; then fail=1; fi; }
{
    echo "# coconet.torch installed with pip"
    echo
    echo "Made by tests/gpu/torch_pip.sh on $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname):"
    echo "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd ';' -);"
    echo "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}."
    echo
    echo "| P | check | result | detail |"
    echo "|---|---|---|---|"
} >"$OUT"

site=$($PYTHON -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') ||
    { row - install FAIL "$PYTHON has no torch"; cat "$OUT"; exit 1; }
$PYTHON -m venv --without-pip "$V" >>"$LOG" 2>&1
echo "$site" >"$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch_env.pth"
mkdir "$TMP/src"
tar -cf - --exclude=build --exclude=.git . | tar -xf - -C "$TMP/src"
start=$(date +%s)
if (cd "$TMP/src" && "$V/bin/python" -m pip install -v --no-build-isolation --no-index ./python) \
    >>"$LOG" 2>&1; then
    row - install PASS "pip install --no-build-isolation ./python: $(($(date +%s) - start)) s; $(grep -m 1 -o 'coconet: the GPU runtime against.*' "$LOG")"
else
    row - install FAIL "pip install failed after $(($(date +%s) - start)) s; see $LOG"
fi
cd "$TMP" || exit 2
if "$V/bin/python" -m coconet.check >"$TMP/check" 2>&1; then
    row - coconet.check PASS "$(grep -E '^(GPU|NCCL|symmetric|device API|result)' "$TMP/check" | tr -s ' ' | paste -sd ';' -)"
else
    row - coconet.check FAIL "$(grep -A 1 MISSING "$TMP/check" | tr -s ' ' | paste -sd ';' -)"
fi
cat "$TMP/check" >>"$LOG"
if COCONET_CACHE=$TMP/first-cache "$V/bin/python" -c '
import time, torch
from coconet.torch.nn import RowParallelLinear
layer = RowParallelLinear(1024, 1024, p_drop=0.0, residual=False, dtype=torch.float16)
x = torch.randn(2, 32, 1024, device="cuda", dtype=torch.float16)
ms = []
for _ in range(6):
    t0 = time.perf_counter(); layer(x); torch.cuda.synchronize()
    ms.append((time.perf_counter() - t0) * 1e3)
print("first call %.0f ms (its program built), the next five %.2f ms (median)"
      % (ms[0], sorted(ms[1:])[2]))
' >"$TMP/first" 2>&1; then
    row 1 "first call" PASS "$(tail -n 1 "$TMP/first")"
else
    row 1 "first call" FAIL "$(tail -n 1 "$TMP/first")"
fi
cat "$TMP/first" >>"$LOG"
export COCONET_CHECK_INSTALLED=1
for P in $RANKS; do
    start=$(date +%s)
    if [ "$AHEAD" = 1 ]; then
        "$V/bin/python" "$ROOT/tests/gpu/torch_check.py" --build-only --ranks "$P" \
            --jobs "$JOBS" >"$TMP/build" 2>&1
        cat "$TMP/build" >>"$LOG"
        row "$P" builds "$(grep -q FAILED "$TMP/build" && echo FAIL || echo PASS)" \
            "$(grep -c '^build ' "$TMP/build") objects built or found in $(($(date +%s) - start)) s"
    fi
    # shellcheck disable=SC2086 # ONLY: a list of expressions
    timeout -k 30 "$TIMEOUT" "$V/bin/python" -m torch.distributed.run --standalone \
        --nproc_per_node="$P" "$ROOT/tests/gpu/torch_check.py" ${ONLY:+--only $ONLY} \
        >"$TMP/out" 2>&1
    rc=$?
    cat "$TMP/out" >>"$LOG"
    grep '^RESULT|' "$TMP/out" | while IFS='|' read -r _ name status detail; do
        echo "| $P | $name | $status | $detail |"
    done >>"$OUT"
    if [ "$rc" -ne 0 ] || grep -q '^RESULT|[^|]*|FAIL|' "$TMP/out"; then
        fail=1
        [ "$rc" -ne 0 ] && row "$P" "(torchrun)" FAIL "exit status $rc; see $LOG"
    fi
done
cat "$OUT"
exit $fail
