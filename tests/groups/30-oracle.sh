# ---- oracle: examples (and extra programs) against numpy ----
# (the cases, program x P, run on every core: lanes in tests/run.sh)
group oracle
if ! $PYTHON -c "import numpy" 2>/dev/null; then
    # (a Debian python refuses pip installs unless told to: PEP 668)
    $PYTHON -m pip install --quiet -r tests/requirements.txt >"$TMP/pip.out" 2>&1 ||
        PIP_BREAK_SYSTEM_PACKAGES=1 $PYTHON -m pip install --quiet -r tests/requirements.txt \
            >"$TMP/pip.out" 2>&1 ||
        { echo "pip install numpy failed:"; tail -n 5 "$TMP/pip.out"; }
fi
# one case a program x P (its two seeds), on every core (lanes)
oracle_cases() {
    mkdir -p "$TMP/oracle"
    for f in examples/*.coco tests/oracle/programs/*.coco; do
        [ -f "$f" ] || continue
        name=$(basename "$f" .coco)
        for P in 1 2 3 4 8; do
            mine || continue
            coco check "$f" --ranks "$P"
            if [ $rc -eq 1 ] && grep -q -e 'divisible' -e 'does not divide' -e 'is not a rank of' "$TMP/err"; then
                skip=$((skip + 1)); continue
            fi
            if [ -n "$why" ] || [ $rc -ne 0 ]; then
                bad "$f --ranks $P: check failed ${why:-with status $rc}: $(err1)"; continue
            fi
            for seed in 1 20240611; do
                dir=$TMP/oracle/$name.p$P.s$seed
                repro="./coconet run $f --ranks $P --seed $seed --dump /tmp/dump && $PYTHON tests/oracle/check.py $f /tmp/dump --seed $seed"
                coco run "$f" --ranks "$P" --seed "$seed" --dump "$dir"
                if [ -n "$why" ] || [ $rc -ne 0 ]; then
                    bad "$f --ranks $P --seed $seed: run ${why:-exited with status $rc}: $(err1)"
                    echo "  reproduce: $repro"; continue
                fi
                if $PYTHON tests/oracle/check.py "$f" "$dir" --seed "$seed" >"$TMP/oracle.out" 2>&1; then
                    ok
                else
                    bad "$f --ranks $P --seed $seed: the oracle disagrees:"
                    head -n 8 "$TMP/oracle.out" | sed 's/^/  /'
                    echo "  reproduce: $repro"
                fi
            done
        done
    done
}
if $PYTHON -c 'import numpy' 2>/dev/null; then
    lanes oracle_cases skip
else
    bad "oracle: python3 with numpy is not available (pip install -r tests/requirements.txt)"
fi
group_end "$skip program x P combinations skipped (P not allowed by the program's sizes, groups or roots)"
