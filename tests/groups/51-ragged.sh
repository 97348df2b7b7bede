# ---- uneven slices: sizes that do not divide among the ranks ----
# Every schedule of the optimizers at sizes from 1 (fewer elements than
# ranks: empty slices) to 524309, none divisible by every P: each must run
# and match the program, and as many schedules must apply as at N = 1008
# (divisible by 2, 3, 4 and 8): none may be refused for the size. 524309 is
# odd and leaves every rank, at P = 8 too, a slice of at least the 65536
# elements from which the CPU executor computes on threads (exec_threads,
# src/cpu/exec_fast.c; eval_on_ranks_parallel, src/cpu/exec.c), the last
# rank's shorter than the others'. The cases (program x P x N) run on every
# core (lanes in tests/run.sh), the largest N first.
# shellcheck shell=sh # sourced by tests/run.sh
group ragged
ragged_cases() {
    for N in 524309 1001 1 2 3 5; do
        for f in examples/adam.coco examples/lamb.coco examples/sgd_momentum.coco; do
            for P in 2 3 4 8; do
                mine || continue
                coco schedules "$f" -D N=1008 --ranks "$P"
                want=$(grep -c '^Schedule ' "$TMP/out")
                coco schedules "$f" -D "N=$N" --ranks "$P"
                got=$(grep -c '^Schedule ' "$TMP/out")
                if [ "$got" -eq "$want" ] && [ "$want" -gt 1 ]; then ok; else
                    bad "schedules $f -D N=$N --ranks $P: $got schedules, $want at N=1008"
                fi
                run_schedules "$f" -D "N=$N" --ranks "$P"
            done
        done
    done
}
# The transformer examples at token counts that no P divides, from 1 (fewer
# tokens than ranks: empty slices) to 13 (S of the layers, whose
# ReduceScatter and AllGather cut the tokens; T of the softmax): each
# schedule must run and match the program, and as many must apply as at the
# file's sizes. The layer and its backward also at S = 10925 (odd, no
# multiple of 3), whose slices hold more than the 65536 elements from which
# the CPU executor computes on threads.
ragged_big_layer_cases() {
    for c in "examples/transformer_sp.coco 8" "examples/transformer_sp_backward.coco 3"; do
        mine || continue
        run_schedules "${c% *}" -D S=10925 --ranks "${c#* }"
    done
}
ragged_layer_cases() {
    for n in 13 5 1; do
        for f in examples/transformer_sp.coco examples/transformer_sp_backward.coco \
                 examples/rmsnorm_sp.coco examples/softmax.coco; do
            size=S
            [ "$f" = examples/softmax.coco ] && size=T
            for P in 2 3 4 8; do
                mine || continue
                coco schedules "$f" --ranks "$P"
                want=$(grep -c '^Schedule ' "$TMP/out")
                coco schedules "$f" -D "$size=$n" --ranks "$P"
                got=$(grep -c '^Schedule ' "$TMP/out")
                if [ "$got" -eq "$want" ] && [ "$want" -gt 1 ]; then ok; else
                    bad "schedules $f -D $size=$n --ranks $P: $got schedules, $want at the file's sizes"
                fi
                run_schedules "$f" -D "$size=$n" --ranks "$P"
            done
        done
    done
}
nsched=0
lanes ragged_cases nsched
lanes ragged_big_layer_cases nsched
lanes ragged_layer_cases nsched
group_end "$nsched schedule runs checked"
