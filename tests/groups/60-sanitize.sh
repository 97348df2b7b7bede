# ---- sanitizers: the examples, their schedules and refusals under ASan/UBSan;
# `gen` of every refused program (tests/errors/*.coco) leaks nothing ----
# (the files run on every core: lanes in tests/run.sh)
# shellcheck shell=sh # sourced by tests/run.sh
group sanitize
sanitize_cases() {
    for f in examples/*.coco tests/errors/sched_*.coco tests/errors/shape_*.coco "$asan_src"/*.coco; do
        mine || continue
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86 UBSAN_OPTIONS=halt_on_error=1:exitcode=86 \
            timeout 120 build/asan/coconet run "$f" --all-schedules >"$TMP/out" 2>"$TMP/err"
        rc=$?
        if [ $rc -eq 86 ] || [ $rc -ge 124 ] || grep -q -e 'runtime error' -e 'Sanitizer' "$TMP/err"; then
            bad "sanitize $f: status $rc: $(grep -m 1 -e 'runtime error' -e 'Sanitizer' -e ERROR "$TMP/err" | cut -c 1-200)"
        else
            ok
        fi
    done
    # every refused program and schedule, given to the CUDA generator: the
    # refusal (of the front end, a schedule or the generator) leaks nothing
    mkdir -p "$TMP/asan-gen"
    for f in tests/errors/*.coco; do
        mine || continue
        args=$(head -n 5 "$f" | sed -n 's|^// args: ||p')
        set -f
        # shellcheck disable=SC2086 # args are words
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86 UBSAN_OPTIONS=halt_on_error=1:exitcode=86 \
            timeout 120 build/asan/coconet gen "$f" -o "$TMP/asan-gen" $args >"$TMP/out" 2>"$TMP/err"
        rc=$?
        set +f
        if [ $rc -eq 86 ] || [ $rc -ge 124 ] || grep -q -e 'runtime error' -e 'Sanitizer' "$TMP/err"; then
            bad "sanitize gen $f: status $rc: $(grep -m 1 -e 'runtime error' -e 'Sanitizer' -e ERROR "$TMP/err" | cut -c 1-200)"
        else
            ok
        fi
    done
}
if [ -x build/asan/coconet ]; then
    asan_src=$TMP/asan
    mkdir -p "$asan_src"
    $PYTHON tests/fuzz/gen.py --dir "$asan_src" 30
    lanes sanitize_cases
    group_end
else
    group_end "skipped: build/asan/coconet was not built"
fi
