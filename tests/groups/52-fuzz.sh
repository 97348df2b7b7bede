# ---- fuzz: random well-formed programs x all their schedules ----
# tests/fuzz/gen.py SEED writes a program whose first line gives its ranks and
# data seed; failures found once are kept in tests/fuzz/regressions/. Then
# FUZZ_UNEVEN (100) programs of gen.py --uneven: sizes no rank count need
# divide. The programs are written by one gen.py process each, then run on
# every core (lanes in tests/run.sh).
# shellcheck shell=sh disable=SC2154 # sourced by tests/run.sh, whose coco sets rc
group fuzz
# fuzz_one DIR SEED GEN_OPTION: one generated program with all its schedules
fuzz_one() {
    f=$1/seed$2.coco
    [ -s "$f" ] || { bad "fuzz: gen.py $3 wrote no program for seed $2"; return; }
    args=$(sed -n 's|^// args: ||p' "$f")
    set -f
    # shellcheck disable=SC2086 # args are words
    coco run "$f" --all-schedules $args
    set +f
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then
        bad "fuzz seed $2${3:+ ($3)}: ${why:-exit status $rc}: $(grep -m 1 -e WRONG -e error "$TMP/out" "$TMP/err" | cut -c 1-200)"
        echo "  reproduce: $PYTHON tests/fuzz/gen.py ${3:+$3 }$2 > /tmp/fuzz.coco && ./coconet run /tmp/fuzz.coco --all-schedules $args"
        return
    fi
    nsched=$((nsched + $(grep -c -E '^[A-Za-z0-9_]+ +(bitwise|rounding) ' "$TMP/out")))
    ok
}
fuzz_cases() {
    for seed in $(seq 1 "${FUZZ_PROGRAMS:-200}"); do
        mine || continue
        fuzz_one "$fuzz_src" "$seed" ""
    done
    for seed in $(seq 1 "${FUZZ_UNEVEN:-100}"); do
        mine || continue
        fuzz_one "$fuzz_src/uneven" "$seed" --uneven
    done
    for f in tests/fuzz/regressions/*.coco; do
        [ -f "$f" ] || continue
        mine || continue
        args=$(sed -n 's|^// args: ||p' "$f")
        set -f
        # shellcheck disable=SC2086 # args are words
        run_schedules "$f" $args
        set +f
    done
}
nsched=0
fuzz_src=$TMP/fuzz
mkdir -p "$fuzz_src"
mkdir -p "$fuzz_src/uneven"
$PYTHON tests/fuzz/gen.py --dir "$fuzz_src" "${FUZZ_PROGRAMS:-200}" >"$TMP/gen.out" 2>&1 ||
    { bad "fuzz: gen.py --dir failed:"; head -n 5 "$TMP/gen.out" | sed 's/^/  /'; }
$PYTHON tests/fuzz/gen.py --uneven --dir "$fuzz_src/uneven" "${FUZZ_UNEVEN:-100}" >"$TMP/gen.out" 2>&1 ||
    { bad "fuzz: gen.py --uneven --dir failed:"; head -n 5 "$TMP/gen.out" | sed 's/^/  /'; }
lanes fuzz_cases nsched
group_end "$nsched schedule runs checked"
