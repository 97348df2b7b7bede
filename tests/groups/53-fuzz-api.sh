# ---- fuzz-api: libFuzzer over the public API (tests/fuzz/fuzz_api.c) ----
# Built by `make test` when clang has libFuzzer (tests/fuzz/has_libfuzzer.sh);
# skipped with a note otherwise. First every kept crasher of
# tests/fuzz/crashers/ is replayed (each must now pass), then the harness
# fuzzes for FUZZ_SECONDS (default 30) from a corpus made here of every .coco
# file of examples/, bench/ and tests/ (a settings byte for 4 ranks, then the
# text). A finding fails the group; its input is kept in build/fuzz/findings/
# (minimise it with -minimize_crash=1 and commit it to tests/fuzz/crashers/).
# shellcheck shell=sh # sourced by tests/run.sh
group fuzz-api
fuzzer=build/fuzz/fuzz_api
if [ ! -x "$fuzzer" ]; then
    if sh tests/fuzz/has_libfuzzer.sh "${CLANG:-clang}"; then
        bad "fuzz-api: clang has libFuzzer but $fuzzer is not built (make fuzz-api)"
    else
        echo "note: fuzz-api skipped: no clang with libFuzzer here"
    fi
else
    for f in tests/fuzz/crashers/*; do
        [ -f "$f" ] || continue
        if timeout 60 "$fuzzer" "$f" >"$TMP/fuzz.log" 2>&1; then ok; else
            bad "fuzz-api: the kept crasher $f fails again: $(grep -m 1 -E 'ERROR|fuzz_api:|SUMMARY' "$TMP/fuzz.log")"
        fi
    done
    mkdir -p "$TMP/corpus" build/fuzz/findings
    for f in examples/*.coco bench/*.coco tests/*/*.coco tests/*/*/*.coco; do
        [ -f "$f" ] || continue
        { printf '\003'; cat "$f"; } >"$TMP/corpus/$(echo "$f" | tr / _)"
    done
    timeout $((${FUZZ_SECONDS:-30} + 300)) "$fuzzer" -max_total_time="${FUZZ_SECONDS:-30}" \
        -timeout=120 -rss_limit_mb=3072 -max_len=8192 -print_final_stats=1 \
        -dict=tests/fuzz/coco.dict -artifact_prefix=build/fuzz/findings/ \
        "$TMP/corpus" >"$TMP/fuzz.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$TMP/fuzz.log")
    if [ $rc -eq 0 ]; then ok; else
        bad "fuzz-api: status $rc after ${runs:-?} inputs: $(grep -m 1 -E '==ERROR|fuzz_api:|SUMMARY|timeout|deadly' "$TMP/fuzz.log")"
        grep -m 3 'Test unit written to' "$TMP/fuzz.log"
    fi
fi
group_end "${runs:-0} inputs fuzzed"
