# bench/run_log.sh: sourced (from the repository root) by the scripts that
# run a series of GPU jobs in one command on a machine lent for a short
# time (bench/training.sh, tests/gpu/torch_p1.sh): whatever the machine's
# limits on what comes back, the folder OUT gets two files, summary.md (a
# line per job from say) and logs.tar.gz (every log the jobs leave in
# $LOGS), the archive written however the script ends.
#
# run_log_start OUT NAME TITLE: OUT made and absolute, LOGS a fresh folder
# (coconet-NAME.*), summary.md begun with TITLE, the GPUs, torch and the
# commit (COMMIT, else git's); then `make` (on failure said, and exit 1),
# COCONET_CACHE (default build/cache) and NCCL (default the NCCL_LIB the
# runtime was built with, its libnccl.so.2) set.
# shellcheck shell=sh

say() { echo "- [$(($(date +%s) - T0)) s] $*" | tee -a "$SUM"; }

run_log_start() {
    OUT=$1
    mkdir -p "$OUT" || exit 2
    case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac
    LOGS=$(mktemp -d "${TMPDIR:-/tmp}/coconet-$2.XXXXXX") || exit 2
    SUM=$OUT/summary.md
    T0=$(date +%s)
    trap 'tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null; rm -rf "$LOGS"' EXIT
    {
        echo "# $3"
        echo
        echo "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
            sort | uniq -c | sed 's/^ *//' | paste -sd ';' -);"
        echo "torch $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -n 1);"
        echo "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}."
        echo
    } >"$SUM"
    make -j"$(nproc)" >"$LOGS/make.log" 2>&1 || { say "make FAILED (logs.tar.gz: make.log)"; exit 1; }
    say "make"
    export COCONET_CACHE="${COCONET_CACHE:-$PWD/build/cache}"
    NCCL=${NCCL-$(sed -n 's/^NCCL_LIB=//p' build/cuda.conf 2>/dev/null)/libnccl.so.2}
}
