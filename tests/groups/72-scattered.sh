# ---- scattered tensors: the same results as one contiguous tensor ----
# Each program with Scattered[...] tensors runs, with all its schedules, bit
# for bit like its twin in which every scattered tensor is one tensor of the
# members' total size (Scattered[a, b, c] -> [a+b+c]).
# And the CUDA of a scattered program compiles (the cuda-gen group has the
# example), as the runtime builds it for a run on 4 ranks (COCO_ONLY_P,
# src/cuda/cuda_build.c): the fused kernels' and the scattered collectives'
# instances for 4 ranks, none for 1, 2 or 8; and LAMB's for one rank (its
# fused kernels, one and two of them, and collectives over members, over
# local memory), none for 2, 4 or 8. Each source is compiled without the
# variants that repeat another but for their names, as in cuda-gen
# (tests/gen/unique_variants.py). The cases (the two nvcc builds first, then
# each program x P) run on every core: lanes in tests/run.sh.
# shellcheck shell=sh disable=SC2154 # sourced by tests/run.sh, whose coco sets rc
group scattered
# scattered_nvcc FILE P DIR: `coconet gen` of FILE into DIR, then DIR's
# variants compiled for P ranks alone (COCO_ONLY_P) into DIR/generated.o;
# status 0 when that object was made (else a FAIL line is printed)
scattered_nvcc() {
    coco gen "$1" -o "$3" --all-schedules
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen $1: ${why:-exit status $rc}: $(err1)"; return 1; fi
    if command -v "$PYTHON" >/dev/null 2>&1; then
        "$PYTHON" tests/gen/unique_variants.py unique.cu "$3" >"$TMP/nvcc.out" 2>&1
    else cp "$3"/*.cu "$TMP/unique.cu" && mv "$TMP/unique.cu" "$3/"; fi &&
        (cd "$3" && timeout 300 nvcc -O1 -std=c++17 -Werror all-warnings \
            -DCOCO_ONLY_P="$2" -c unique.cu -o generated.o) >>"$TMP/nvcc.out" 2>&1 && return 0
    bad "nvcc $1 (COCO_ONLY_P=$2):"; head -n 10 "$TMP/nvcc.out" | sed 's/^/  /'
    return 1
}
scattered_cases() {
    fused='_f[0-9]+(_b)?<[0-9]+, ' scat='coco_lsa_scat_collective<[0-9]+, [0-9]+, [0-9]+, '
    if command -v nvcc >/dev/null 2>&1 && mine && scattered_nvcc bench/bert_adam_scattered.coco 4 "$TMP/gen/bert"; then
        nm -C "$TMP/gen/bert/generated.o" >"$TMP/nm.out" 2>&1
        if grep -q -E "$fused"'4,' "$TMP/nm.out" && grep -q -E "$scat"'4,' "$TMP/nm.out" &&
            ! grep -q -E "($fused|$scat)[128]," "$TMP/nm.out"; then ok
        else bad "bench/bert_adam_scattered.coco with COCO_ONLY_P=4: other instances than for 4 ranks"; fi
    fi
    if command -v nvcc >/dev/null 2>&1 && mine && scattered_nvcc tests/gpu/lamb_scattered.coco 1 "$TMP/gen/lamb1"; then
        nm -C "$TMP/gen/lamb1/generated.o" >"$TMP/nm.out" 2>&1
        if grep -q -E "_f[0-9]+<[0-9]+, 1," "$TMP/nm.out" && grep -q -E "_f[0-9]+_b<[0-9]+, 1," "$TMP/nm.out" &&
            grep -q -E "$scat"'1,' "$TMP/nm.out" && ! grep -q -E "($fused|$scat)[248]," "$TMP/nm.out"; then ok
        else bad "tests/gpu/lamb_scattered.coco with COCO_ONLY_P=1: not the instances for one rank alone"; fi
    fi
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
            mine || continue
            coco run "$f" --ranks "$P" --all-schedules "$@"
            if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "scattered $f --ranks $P: ${why:-exit status $rc}: $(err1)"; continue; fi
            sed -n '1,/^time /p' "$TMP/out" | grep -v '^time ' >"$TMP/scat.sum"
            coco run "$TMP/twin.coco" --ranks "$P" --all-schedules "$@"
            if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "scattered twin of $f --ranks $P: ${why:-exit status $rc}: $(err1)"; continue; fi
            sed -n '1,/^time /p' "$TMP/out" | grep -v '^time ' >"$TMP/twin.sum"
            if cmp -s "$TMP/scat.sum" "$TMP/twin.sum"; then ok; else
                bad "scattered $f --ranks $P: differs from its contiguous twin:"; diff "$TMP/scat.sum" "$TMP/twin.sum" | head -n 6
            fi
        done
    done
}
lanes scattered_cases
group_end
