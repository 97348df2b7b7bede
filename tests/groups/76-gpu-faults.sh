# ---- the GPU fault tests' script (tests/gpu/faults.sh), without a GPU ----
# Its dying-rank cases on the stand-in runtime (build/fake/libfake_rt.so,
# which honours COCONET_TEST_DIE) over tests/gpu/host.coco at P = 1 and 3:
# every row must pass (status 1, the rank named first, nothing left), and
# so must the normal run after them. Needs nvcc for host.cu, as the
# launcher's unit test does.
# shellcheck shell=sh # sourced by tests/run.sh
group gpu-faults
if [ ! -f build/fake/libfake_rt.so ] || [ ! -f build/cuda.conf ]; then
    group_end "skipped: no build/fake/libfake_rt.so or no nvcc"
else
    COCONET_CUDA_RUNTIME=$PWD/build/fake/libfake_rt.so COCONET_TEST_GPUS=8 COCONET_CUDA_ARCH=sm_80 COCONET_HOME=$PWD \
        COCONET_CACHE=$TMP/faults-cache FAULT_FILE=tests/gpu/host.coco \
        FAULT_ARGS="--cuda-source tests/gpu/host.cu --schedule fused" FAULT_FUSED=fused FAULT_SEND='' \
        FAULT_CASES=die RANKS="1 3" PARTS=faults timeout 600 sh tests/gpu/run.sh "$TMP/faults.md" \
        >"$TMP/faults.out" 2>&1
    rc=$?
    rows=$(grep -c '^| P=.* | PASS |$' "$TMP/faults.md")
    # P = 1: rank 0 at 6 points; P = 3: ranks 2 and 0 at 6 points; a normal run after each P
    if [ $rc -eq 0 ] && [ "$rows" -eq 20 ]; then ok; else
        bad "tests/gpu/faults.sh on the stand-in runtime: status $rc, $rows of 20 rows passed:"
        grep -e '^FAIL' -e 'error' "$TMP/faults.out" | head -n 10 | sed 's/^/  /'
    fi
    group_end
fi
