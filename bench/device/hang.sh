#!/bin/sh
# bench/device/hang.sh SECONDS CMD...: runs CMD; if it is still running after
# SECONDS, prints where every coconet process waits (kernel wait channel,
# and each thread's stack from gdb when the machine has it), then kills it.
# For a run that finishes its work but does not exit.
secs=$1
shift
"$@" &
pid=$!
i=0
while [ $i -lt "$secs" ] && kill -0 $pid 2>/dev/null; do sleep 1; i=$((i + 1)); done
if kill -0 $pid 2>/dev/null; then
    echo "== still running after $secs s: where each process waits"
    for p in $(pgrep -f 'coconet run'); do
        echo "-- pid $p ($(tr '\0' ' ' </proc/$p/cmdline | cut -c1-80)): wchan $(cat /proc/$p/wchan 2>/dev/null)"
        if command -v gdb >/dev/null; then
            timeout 60 gdb -p "$p" -batch -ex 'thread apply all bt 12' 2>/dev/null |
                grep -E '^(#|Thread)' | cut -c1-160 | head -60
        fi
    done
    pkill -f 'coconet run'
    sleep 2
    pkill -9 -f 'coconet run'
fi
wait $pid
echo "== status $?"
