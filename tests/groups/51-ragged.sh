# ---- uneven slices: sizes that do not divide among the ranks ----
# Every schedule of the optimizers at sizes from 1 (fewer elements than
# ranks: empty slices) to 1000003, none divisible by every P: each must run
# and match the program, and as many schedules must apply as at N = 1008
# (divisible by 2, 3, 4 and 8): none may be refused for the size.
group ragged
nsched=0
for f in examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco; do
    for P in 2 3 4 8; do
        coco schedules "$f" -D N=1008 --ranks "$P"
        want=$(grep -c '^Schedule ' "$TMP/out")
        for N in 1 2 3 5 1001 1000003; do
            coco schedules "$f" -D "N=$N" --ranks "$P"
            got=$(grep -c '^Schedule ' "$TMP/out")
            if [ "$got" -eq "$want" ] && [ "$want" -gt 1 ]; then ok; else
                bad "schedules $f -D N=$N --ranks $P: $got schedules, $want at N=1008"
            fi
            run_schedules "$f" -D "N=$N" --ranks "$P"
        done
    done
done
group_end "$nsched schedule runs checked"
