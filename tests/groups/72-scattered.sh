# ---- scattered tensors: the same results as one contiguous tensor ----
# Each program with Scattered[...] tensors runs, with all its schedules, bit
# for bit like its twin in which every scattered tensor is one tensor of the
# members' total size (Scattered[a, b, c] -> [a+b+c]).
group scattered
mkdir -p "$TMP/gen"
for spec in "examples/adam_scattered.coco" "examples/adam_scattered.coco -D W=41" \
            "tests/gpu/lamb_scattered.coco -D W=41" "bench/bert_adam_scattered.coco -D H=16 -D V=66 -D S=8" \
            "tests/gpu/scattered_inline.coco -D W=41"; do
    set -f
    # shellcheck disable=SC2086 # spec is words
    set -- $spec
    set +f
    f=$1; shift
    sed -E ':a; s/Scattered\[([^],]*),/Scattered[\1+/; ta; s/Scattered\[/[/g' "$f" >"$TMP/twin.coco"
    for P in 2 4; do
        coco run "$f" --ranks "$P" --all-schedules "$@"
        if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "scattered $f --ranks $P: ${why:-exit status $rc}: $(err1)"; continue; fi
        sed -n '1,/^time /p' "$TMP/out" | grep -v '^time ' >"$TMP/scat.sum"
        coco run "$TMP/twin.coco" --ranks "$P" --all-schedules "$@"
        if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "scattered twin of $f --ranks $P: ${why:-exit status $rc}: $(err1)"; continue; fi
        sed -n '1,/^time /p' "$TMP/out" | grep -v '^time ' >"$TMP/twin.sum"
        if cmp -s "$TMP/scat.sum" "$TMP/twin.sum"; then ok; else
            bad "scattered $f --ranks $P: differs from its contiguous twin:"; diff "$TMP/scat.sum" "$TMP/twin.sum" | head -n 6
        fi
    done
done
# the CUDA of a scattered program compiles (the cuda-gen group has the
# example), as the runtime builds it for a run on 4 ranks (COCO_ONLY_P,
# src/cuda_build.c): the fused kernels' and the scattered collectives'
# instances for 4 ranks, none for 1, 2 or 8; and LAMB's for one rank (its
# fused kernels, one and two of them, and collectives over members, over
# local memory), none for 2, 4 or 8
if command -v nvcc >/dev/null 2>&1; then
    coco gen bench/bert_adam_scattered.coco -o "$TMP/gen/bert" --all-schedules
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen bench/bert_adam_scattered.coco: ${why:-exit status $rc}: $(err1)"
    elif (cd "$TMP/gen/bert" && timeout 300 nvcc -O1 -std=c++17 -Werror all-warnings \
            -DCOCO_ONLY_P=4 -c ./*.cu -o generated.o) >"$TMP/nvcc.out" 2>&1; then
        nm -C "$TMP/gen/bert/generated.o" >"$TMP/nm.out" 2>&1
        fused='_f[0-9]+(_b)?<[0-9]+, ' scat='coco_lsa_scat_collective<[0-9]+, [0-9]+, [0-9]+, '
        if grep -q -E "$fused"'4,' "$TMP/nm.out" && grep -q -E "$scat"'4,' "$TMP/nm.out" &&
            ! grep -q -E "($fused|$scat)[128]," "$TMP/nm.out"; then ok
        else bad "bench/bert_adam_scattered.coco with COCO_ONLY_P=4: other instances than for 4 ranks"; fi
    else bad "nvcc bench/bert_adam_scattered.coco:"; head -n 10 "$TMP/nvcc.out" | sed 's/^/  /'; fi
    coco gen tests/gpu/lamb_scattered.coco -o "$TMP/gen/lamb1" --all-schedules
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen tests/gpu/lamb_scattered.coco: ${why:-exit status $rc}: $(err1)"
    elif (cd "$TMP/gen/lamb1" && timeout 300 nvcc -O1 -std=c++17 -Werror all-warnings \
            -DCOCO_ONLY_P=1 -c ./*.cu -o generated.o) >"$TMP/nvcc.out" 2>&1; then
        nm -C "$TMP/gen/lamb1/generated.o" >"$TMP/nm.out" 2>&1
        fused='_f[0-9]+(_b)?<[0-9]+, ' scat='coco_lsa_scat_collective<[0-9]+, [0-9]+, [0-9]+, '
        if grep -q -E "_f[0-9]+<[0-9]+, 1," "$TMP/nm.out" && grep -q -E "_f[0-9]+_b<[0-9]+, 1," "$TMP/nm.out" &&
            grep -q -E "$scat"'1,' "$TMP/nm.out" && ! grep -q -E "($fused|$scat)[248]," "$TMP/nm.out"; then ok
        else bad "tests/gpu/lamb_scattered.coco with COCO_ONLY_P=1: not the instances for one rank alone"; fi
    else bad "nvcc tests/gpu/lamb_scattered.coco (COCO_ONLY_P=1):"; head -n 10 "$TMP/nvcc.out" | sed 's/^/  /'; fi
fi
group_end
