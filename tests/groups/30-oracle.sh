# ---- oracle: examples (and extra programs) against numpy ----
# (the cases, program x P, run on every core: lanes in tests/run.sh)
# shellcheck shell=sh disable=SC2154 # sourced by tests/run.sh, whose coco sets rc
group oracle
if ! $PYTHON -c "import numpy" 2>/dev/null; then
    # (a Debian python refuses pip installs unless told to: PEP 668)
    $PYTHON -m pip install --quiet -r tests/requirements.txt >"$TMP/pip.out" 2>&1 ||
        PIP_BREAK_SYSTEM_PACKAGES=1 $PYTHON -m pip install --quiet -r tests/requirements.txt \
            >"$TMP/pip.out" 2>&1 ||
        { echo "pip install numpy failed:"; tail -n 5 "$TMP/pip.out"; }
fi
# one case a program x P (its two seeds), on every core (lanes); a lane's
# dumps are checked at its end by one check.py process (--batch: numpy
# imported once), then judged in order
oracle_cases() {
    mkdir -p "$TMP/oracle"
    : >"$TMP/oracle.list"
    for f in examples/*.coco tests/oracle/programs/*.coco; do
        [ -f "$f" ] || continue
        name=$(basename "$f" .coco)
        for P in 1 2 3 4 8; do
            mine || continue
            coco check "$f" --ranks "$P"
            if [ "$rc" -eq 1 ] && grep -q -e 'divisible' -e 'does not divide' -e 'is not a rank of' "$TMP/err"; then
                skip=$((skip + 1)); continue
            fi
            if [ -n "$why" ] || [ "$rc" -ne 0 ]; then
                bad "$f --ranks $P: check failed ${why:-with status $rc}: $(err1)"; continue
            fi
            for seed in 1 20240611; do
                dir=$TMP/oracle/$name.p$P.s$seed
                coco run "$f" --ranks "$P" --seed "$seed" --dump "$dir"
                if [ -n "$why" ] || [ "$rc" -ne 0 ]; then
                    bad "$f --ranks $P --seed $seed: run ${why:-exited with status $rc}: $(err1)"
                    echo "  reproduce: ./coconet run $f --ranks $P --seed $seed"; continue
                fi
                echo "$f $dir $seed $dir.oracle $P" >>"$TMP/oracle.list"
            done
        done
    done
    cut -d ' ' -f 1-4 "$TMP/oracle.list" >"$TMP/oracle.batch"
    $PYTHON tests/oracle/check.py --batch "$TMP/oracle.batch" >"$TMP/oracle.out" 2>&1
    while read -r f dir seed out P; do
        repro="./coconet run $f --ranks $P --seed $seed --dump /tmp/dump && $PYTHON tests/oracle/check.py $f /tmp/dump --seed $seed"
        if [ "$(tail -n 1 "$out" 2>/dev/null)" = "exit 0" ]; then
            ok
        else
            bad "$f --ranks $P --seed $seed: the oracle disagrees:"
            { sed '$d' "$out" 2>/dev/null || cat "$TMP/oracle.out"; } | head -n 8 | sed 's/^/  /'
            echo "  reproduce: $repro"
        fi
    done <"$TMP/oracle.list"
}
if $PYTHON -c 'import numpy' 2>/dev/null; then
    lanes oracle_cases skip
else
    bad "oracle: python3 with numpy is not available (pip install -r tests/requirements.txt)"
fi
group_end "$skip program x P combinations skipped (P not allowed by the program's sizes, groups or roots)"
