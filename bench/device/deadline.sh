# bench/device/deadline.sh: sourced by the lease scripts here (from the
# repository root) for their time budget: T0, the start, and left [LESS],
# the seconds before T0 + DEADLINE (565 unless set), less LESS, never under 1
# (a `timeout 0` would mean no limit at all).
# shellcheck shell=sh
T0=$(date +%s)
left() {
    l=$((${DEADLINE:-565} - $(date +%s) + T0 - ${1:-0}))
    [ "$l" -gt 0 ] && echo "$l" || echo 1
}
