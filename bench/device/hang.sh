#!/bin/sh
# bench/device/hang.sh SECONDS CMD...: runs CMD; if it is still running after
# SECONDS, prints where every coconet process waits (kernel wait channel,
# and each thread's stack from gdb when the machine has it), then kills it.
# For a run that finishes its work but does not exit. PATTERN (default
# "coconet run"): the command lines (pgrep -f) of the processes to look at
# and kill, e.g. "infer_tp.py" for a torchrun's workers.
PATTERN=${PATTERN:-coconet run}
secs=$1
shift
"$@" &
pid=$!
i=0
while [ $i -lt "$secs" ] && kill -0 $pid 2>/dev/null; do sleep 1; i=$((i + 1)); done
if kill -0 $pid 2>/dev/null; then
    echo "== still running after $secs s: where each process waits"
    pids=$(pgrep -f "$PATTERN" | grep -vx "$$") # not this script, whose line may match
    for p in $pids; do
        [ -e "/proc/$p" ] || continue
        echo "-- pid $p ($(tr '\0' ' ' </proc/$p/cmdline | cut -c1-80)): wchan $(cat /proc/$p/wchan 2>/dev/null)"
        if command -v gdb >/dev/null; then
            timeout 60 gdb -p "$p" -batch -ex 'thread apply all bt 12' 2>/dev/null |
                grep -E '^(#|Thread)' | cut -c1-160 | head -60
        fi
    done
    # shellcheck disable=SC2086 # a list of pids
    kill $pids 2>/dev/null
    sleep 2
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null
fi
wait $pid
echo "== status $?"
