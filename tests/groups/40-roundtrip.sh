# ---- printer round trip ----
# What must agree: the run's summary up to its "time" line (the program name
# and one line per output); the time and any schedule comparison after it
# are left out (the printer does not print schedules).
# shellcheck shell=sh disable=SC2154 # sourced by tests/run.sh, whose coco sets rc
summary() { sed -e '/^time /,$d' "$1"; }
group roundtrip
for f in examples/*.coco tests/oracle/programs/*.coco tests/roundtrip/*.coco; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .coco)
    a=$TMP/$name.a.coco
    b=$TMP/$name.b.coco
    coco print "$f"
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "roundtrip $f: print ${why:-exited with status $rc}: $(err1)"; continue; fi
    cp "$TMP/out" "$a"
    coco print "$a"
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "roundtrip $f: the printed program does not print: $(err1)"; continue; fi
    cp "$TMP/out" "$b"
    if ! cmp -s "$a" "$b"; then
        bad "roundtrip $f: printing the printed program changes it:"
        diff "$a" "$b" | head -n 10 | sed 's/^/  /'; continue
    fi
    coco run "$f"
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "roundtrip $f: run ${why:-exited with status $rc}: $(err1)"; continue; fi
    summary "$TMP/out" >"$TMP/run.f"
    coco run "$a"
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "roundtrip $f: run of the printed program ${why:-exited with status $rc}: $(err1)"; continue; fi
    summary "$TMP/out" >"$TMP/run.a"
    if cmp -s "$TMP/run.f" "$TMP/run.a"; then ok; else
        bad "roundtrip $f: the printed program runs differently:"
        diff "$TMP/run.f" "$TMP/run.a" | head -n 10 | sed 's/^/  /'
    fi
done

group_end
