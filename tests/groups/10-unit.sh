# ---- unit tests ----
# (the binaries run on every core at once: lanes in tests/run.sh)
# shellcheck shell=sh # sourced by tests/run.sh
group unit
unit_cases() {
    for t in build/tests/*; do
        if [ ! -f "$t" ] || [ ! -x "$t" ]; then continue; fi
        mine || continue
        timeout 60 "$t" >"$TMP/unit.out" 2>&1
        rc=$?
        if [ $rc -eq 0 ]; then ok; else
            bad "unit $t exited with status $rc:"
            grep -i 'fail' "$TMP/unit.out" | head -n 20
        fi
    done
}
lanes unit_cases
group_end
