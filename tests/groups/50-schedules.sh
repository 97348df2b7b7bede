# ---- schedules: every program x every enumerated schedule x P ----
# `coconet run --all-schedules` runs the program and each schedule and exits 1
# when a schedule's outputs or Updated state differ from the program's beyond
# rounding (judged against an FP64 evaluation: see coco_run_compare).
group schedules
nsched=0
sskip=0
for f in examples/*.coco tests/oracle/programs/*.coco; do
    [ -f "$f" ] || continue
    for P in 1 2 3 4 8; do
        coco check "$f" --ranks "$P"
        if [ $rc -eq 1 ] && grep -q -e 'divisible' -e 'does not divide' -e 'is not a rank of' "$TMP/err"; then
            sskip=$((sskip + 1)); continue
        fi
        run_schedules "$f" --ranks "$P"
    done
done
group_end "$nsched schedule runs checked, $sskip program x P combinations skipped"
