# ---- sanitizers: the examples, their schedules and refusals under ASan/UBSan ----
group sanitize
if [ -x build/asan/coconet ]; then
    mkdir -p "$TMP/asan"
    for seed in $(seq 1 30); do
        $PYTHON tests/fuzz/gen.py "$seed" >"$TMP/asan/seed$seed.coco"
    done
    for f in examples/*.coco tests/errors/sched_*.coco tests/errors/shape_*.coco "$TMP"/asan/*.coco; do
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86 UBSAN_OPTIONS=halt_on_error=1:exitcode=86 \
            timeout 120 build/asan/coconet run "$f" --all-schedules >"$TMP/out" 2>"$TMP/err"
        rc=$?
        if [ $rc -eq 86 ] || [ $rc -ge 124 ] || grep -q -e 'runtime error' -e 'Sanitizer' "$TMP/err"; then
            bad "sanitize $f: status $rc: $(grep -m 1 -e 'runtime error' -e 'Sanitizer' -e ERROR "$TMP/err" | cut -c 1-200)"
        else
            ok
        fi
    done
    group_end
else
    group_end "skipped: build/asan/coconet was not built"
fi
