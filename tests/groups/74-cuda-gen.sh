# ---- CUDA code generation: every example x all schedules compiles ----
# Only where nvcc is installed; object code only (no GPU is needed).
group cuda-gen
mkdir -p "$TMP/gen"
for f in examples/*.coco tests/gpu/norms.coco tests/gpu/send.coco tests/gpu/lamb_scattered.coco \
         tests/gpu/arith.coco tests/oracle/programs/ragged.coco; do
    name=$(basename "$f" .coco)
    dir=$TMP/gen/$name
    coco gen "$f" -o "$dir" --all-schedules
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen $f: ${why:-exit status $rc}: $(err1)"; continue; fi
    # one workspace layout on every rank (offsets in the symmetric window)
    if ! command -v "$PYTHON" >/dev/null 2>&1; then :
    elif "$PYTHON" tests/gen/workspace.py "$dir"/*.cu >"$TMP/ws.out" 2>&1; then ok
    else bad "workspace of $f depends on the rank:"; head -n 5 "$TMP/ws.out" | sed 's/^/  /'; fi
    echo "$f" >"$dir/source"
done
# compiled on every core at once (one nvcc per program), then judged in order:
# the C++ and CUDA front end and NVVM, warnings as errors, for the GPUs the
# runtime builds for (compute_90), as PTX: ptxas, which took three quarters
# of the time (mlp: 187 s against 43 s), checks the PTX of four programs
# below, whose inline PTX (coco_vec.cuh's stores) every program shares
if command -v nvcc >/dev/null 2>&1; then
    ptxas=$(dirname "$(command -v nvcc)")/ptxas # nvcc's own
    for dir in "$TMP"/gen/*/; do [ -f "$dir/source" ] && echo "$dir"; done |
        xargs -P "$(nproc 2>/dev/null || echo 2)" -I DIR sh -c \
            'cd DIR && timeout 300 nvcc -O0 -Xcicc -O0 -arch=compute_90 -code=compute_90 \
                 -std=c++17 -Werror all-warnings -c ./*.cu -o generated.o >nvcc.out 2>&1
             echo $? >nvcc.rc'
    for dir in "$TMP"/gen/*/; do
        [ -f "$dir/source" ] || continue
        if [ "$(cat "$dir/nvcc.rc" 2>/dev/null)" = 0 ]; then ok
        else bad "nvcc $(cat "$dir/source") (all schedules):"; head -n 10 "$dir/nvcc.out" | sed 's/^/  /'; fi
    done
    # every vector access stays one in the PTX (tests/gen/split_vectors.py),
    # built as the runtime builds it (-O3) for an H100/H200 (sm_90) and 4
    # ranks: a one-shot AllReduce, scattered tensors (FP16 and FP32), LAMB;
    # and ptxas takes that PTX
    coco gen bench/allreduce_fused.coco -o "$TMP/gen/allreduce_fused" --all-schedules
    if [ -n "$why" ] || [ $rc -ne 0 ]; then bad "gen bench/allreduce_fused.coco: ${why:-exit status $rc}: $(err1)"; fi
    for name in allreduce_fused adam_scattered lamb_scattered lamb; do
        dir=$TMP/gen/$name
        command -v "$PYTHON" >/dev/null 2>&1 || break
        if [ ! -d "$dir" ]; then bad "vector accesses of $name: not generated"; continue; fi
        if (cd "$dir" && timeout 300 nvcc -O3 -arch=sm_90 -std=c++17 -DCOCO_ONLY_P=4 -ptx ./*.cu \
                -o generated.ptx && timeout 300 "$ptxas" -arch=sm_90 -O0 generated.ptx -o /dev/null) \
                >"$TMP/ptx.out" 2>&1 &&
            "$PYTHON" tests/gen/split_vectors.py "$dir/generated.ptx" >"$TMP/split.out" 2>&1; then ok
        else bad "vector accesses of $name (PTX, sm_90):"; head -n 5 "$TMP/ptx.out" "$TMP/split.out" | sed 's/^/  /'; fi
    done
    group_end
else
    group_end "nvcc skipped: not installed"
fi
