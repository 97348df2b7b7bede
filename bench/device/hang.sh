#!/bin/sh
# bench/device/hang.sh SECONDS CMD...: runs CMD; if it is still running after
# SECONDS, prints where each of its processes (CMD and every process under
# it: a coconet run's ranks, a torchrun's workers) waits (kernel wait
# channel, and each thread's stack from gdb when the machine has it), then
# kills them. For a run that finishes its work but does not exit.
secs=$1
shift
"$@" &
pid=$!
# pid and every process under it, parents first
tree() {
    echo "$1"
    for c in $(pgrep -P "$1"); do tree "$c"; done
}
i=0
while [ $i -lt "$secs" ] && kill -0 $pid 2>/dev/null; do sleep 1; i=$((i + 1)); done
if kill -0 $pid 2>/dev/null; then
    echo "== still running after $secs s: where each process waits"
    pids=$(tree $pid)
    for p in $pids; do
        [ -e "/proc/$p" ] || continue
        echo "-- pid $p ($(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-80)): wchan $(cat "/proc/$p/wchan" 2>/dev/null)"
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
