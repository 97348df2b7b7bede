# ---- CUDA code generation: every example x all schedules compiles ----
# Only where nvcc is installed; object code only (no GPU is needed).
# shellcheck shell=sh disable=SC2154 # sourced by tests/run.sh, whose coco sets rc
group cuda-gen
mkdir -p "$TMP/gen"
for f in examples/*.coco tests/gpu/norms.coco tests/gpu/send.coco tests/gpu/lamb_scattered.coco \
         tests/gpu/arith.coco tests/gpu/transformer_ops.coco tests/oracle/programs/ragged.coco \
         tests/gpu/rows_ln.coco tests/gpu/rows_rms.coco tests/gpu/rows_softmax.coco \
         tests/gpu/rows_bwd.coco tests/gpu/rows_bwd16.coco \
         tests/gpu/overlap_blocks.coco tests/gpu/overlap_blocks_t.coco tests/gpu/rows_overlap.coco \
         tests/gpu/optim_adamw_step.coco tests/gpu/optim_adam_all.coco tests/gpu/optim_lamb_step.coco \
         tests/gpu/optim_lamb_tensor.coco tests/oracle/programs/members.coco; do
    name=$(basename "$f" .coco)
    dir=$TMP/gen/$name
    coco gen "$f" -o "$dir" --all-schedules
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen $f: ${why:-exit status $rc}: $(err1)"; continue; fi
    # one workspace layout on every rank (offsets in the symmetric window)
    if ! command -v "$PYTHON" >/dev/null 2>&1; then :
    elif "$PYTHON" tests/gen/workspace.py "$dir"/*.cu >"$TMP/ws.out" 2>&1; then ok
    else bad "workspace of $f depends on the rank:"; head -n 5 "$TMP/ws.out" | sed 's/^/  /'; fi
    echo "$f" >"$dir/source"
done
# The overlaps by a collective's blocks (src/gen/emit_overlap_blocks.c)
# choose their chunks at run time, from P among others: their programs'
# code is the same for every P (here 2 and 8 against 4's, which nvcc
# compiles below with the kernel instances of every P)
for f in tests/gpu/overlap_blocks.coco tests/gpu/overlap_blocks_t.coco; do
    name=$(basename "$f" .coco)
    for p in 2 8; do
        rm -rf "$TMP/gen-p$p"
        coco gen "$f" -o "$TMP/gen-p$p" --all-schedules --ranks "$p"
        if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen $f at P = $p: ${why:-exit status $rc}: $(err1)"
        elif cmp -s "$TMP/gen-p$p/$name.cu" "$TMP/gen/$name/$name.cu"; then ok
        else bad "gen $f: the code at P = $p differs from P = 4's"; fi
        rm -rf "$TMP/gen-p$p"
    done
done
# the nvcc checks, on every core at once (the largest sources first), then
# judged in order. Each source is compiled without its variants that repeat
# another of its variants but for their names (tests/gen/unique_variants.py:
# the same code, already checked).
#  obj: the C++ and CUDA front end and NVVM, warnings as errors, for the GPUs
#    the runtime builds for (compute_90), as PTX (which nvcc's ptxas reads
#    again): SASS, which takes most of the build's time, is checked for four
#    programs (ptx), whose inline PTX (coco_vec.cuh's stores) every program
#    shares;
#  ptx: every vector access stays one in the PTX (tests/gen/split_vectors.py),
#    built as the runtime builds it (-O3) for an H100/H200 (sm_90) and 4
#    ranks: a one-shot AllReduce, scattered tensors (FP16 and FP32), LAMB;
#    and ptxas takes that PTX
if command -v nvcc >/dev/null 2>&1; then
    coco gen bench/allreduce_fused.coco -o "$TMP/gen/allreduce_fused" --all-schedules
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen bench/allreduce_fused.coco: ${why:-exit status $rc}: $(err1)"; fi
    ptx_names="allreduce_fused adam_scattered lamb_scattered lamb"
    command -v "$PYTHON" >/dev/null 2>&1 || ptx_names=
    for dir in "$TMP"/gen/*/; do
        dir=${dir%/}
        if [ -f "$dir/source" ] || case " $ptx_names " in *" ${dir##*/} "*) true ;; *) false ;; esac; then
            echo "$dir"
        fi
    done >"$TMP/gen.dirs"
    # shellcheck disable=SC2013,SC2046 # a list of directories, one a word
    if [ -z "$ptx_names" ]; then # no $PYTHON: every variant
        for dir in $(cat "$TMP/gen.dirs"); do cp "$dir"/*.cu "$TMP/unique.cu" && mv "$TMP/unique.cu" "$dir/"; done
    elif ! "$PYTHON" tests/gen/unique_variants.py unique.cu $(cat "$TMP/gen.dirs") >"$TMP/unique.out" 2>&1; then
        bad "tests/gen/unique_variants.py:"; head -n 5 "$TMP/unique.out" | sed 's/^/  /'
    fi
    # shellcheck disable=SC2013,SC2016 # directories, one a word; sh -c's $0 and $1
    for dir in $(cat "$TMP/gen.dirs"); do
        [ -f "$dir/unique.cu" ] || continue
        [ -f "$dir/source" ] && echo "$(wc -c <"$dir/unique.cu") obj $dir"
        case " $ptx_names " in *" ${dir##*/} "*) echo "$(wc -c <"$dir/unique.cu") ptx $dir" ;; esac
    done | sort -rn | cut -d ' ' -f 2- |
        ptxas=$(dirname "$(command -v nvcc)")/ptxas xargs -L 1 -P "$TEST_JOBS" sh -c 'cd "$1" && case $0 in
            obj) timeout 300 nvcc -O0 -Xcicc -O0 -arch=compute_90 -code=compute_90 -std=c++17 \
                     -Werror all-warnings -c unique.cu -o generated.o >nvcc.out 2>&1
                 echo $? >nvcc.rc ;;
            ptx) { timeout 300 nvcc -O3 -arch=sm_90 -std=c++17 -DCOCO_ONLY_P=4 -ptx unique.cu \
                       -o generated.ptx && timeout 300 "$ptxas" -arch=sm_90 -O0 generated.ptx -o /dev/null; } \
                     >ptx.out 2>&1
                 echo $? >ptx.rc ;;
            esac'
    for dir in "$TMP"/gen/*/; do
        [ -f "$dir/source" ] || continue
        if [ "$(cat "$dir/nvcc.rc" 2>/dev/null)" = 0 ]; then ok
        else bad "nvcc $(cat "$dir/source") (all schedules):"; { head -n 10 "$dir/nvcc.out" 2>/dev/null || head -n 5 "$TMP/unique.out"; } | sed 's/^/  /'; fi
    done
    for name in $ptx_names; do
        dir=$TMP/gen/$name
        if [ ! -d "$dir" ]; then bad "vector accesses of $name: not generated"; continue; fi
        if [ "$(cat "$dir/ptx.rc" 2>/dev/null)" = 0 ] &&
            "$PYTHON" tests/gen/split_vectors.py "$dir/generated.ptx" >"$TMP/split.out" 2>&1; then ok
        else bad "vector accesses of $name (PTX, sm_90):"; head -n 5 "$dir/ptx.out" "$TMP/split.out" 2>/dev/null | sed 's/^/  /'; fi
    done
    # the overlapped MatMul's chunk count (rt/kernels/coco_overlap.cuh), run
    # on the host against a generated folder's headers (tests/gen/overlap_chunks.cu)
    # shellcheck disable=SC1091,SC2086 # written by make; NCCL_LINK's words
    if ( . build/cuda.conf && "$NVCC" -std=c++17 -I"$TMP/gen/mlp" -I"$NCCL_INCLUDE" -L"$NCCL_LIB" \
        tests/gen/overlap_chunks.cu -o "$TMP/overlap_chunks" -Xlinker -rpath="$NCCL_LIB" \
        -lcublasLt $NCCL_LINK && "$TMP/overlap_chunks" ) >"$TMP/chunks.out" 2>&1; then ok
    else bad "the overlapped MatMul's chunk count:"; head -n 10 "$TMP/chunks.out" | sed 's/^/  /'; fi
    # a source's variants compiled apart, at once, and linked into one object
    # (src/cuda/build_parts.c): tests/gpu/host.coco's two variants as two
    # parts (PTX for compute_90: no ptxas), every symbol once, no part left
    # behind; then a part that does not compile, named with its log
    cache=$TMP/parts-cache
    # shellcheck disable=SC2010,SC2012 # ls of the build cache, plainly named
    if COCONET_CACHE=$cache COCONET_CUDA_ARCH=compute_90 COCONET_BUILD_JOBS=2 timeout 300 \
        "$COCONET" run tests/gpu/host.coco --backend cuda --ranks 1 --build-only >"$TMP/parts.out" 2>&1; then
        so=$(ls "$cache"/*.so | head -n 1)
        syms=$(nm -D --defined-only "$so" | awk '$3 ~ /^coco_/ { print $3 }' | sort | paste -sd' ' -)
        want="coco_l2_clear coco_lsa_close coco_lsa_open coco_nccl_version coco_output_alias"
        want="$want coco_run__fused coco_run__program coco_schedule_names coco_window_inputs__fused"
        want="$want coco_window_inputs__program coco_window_outputs__fused coco_window_outputs__program"
        want="$want coco_workspace__fused coco_workspace__program"
        left=$(ls "$cache" | grep -c '\.part[0-9]*\.')
        if [ "$syms" = "$want" ] && [ "$left" -eq 0 ]; then ok
        else bad "build in parts of tests/gpu/host.coco: symbols '$syms' (expected '$want'), $left part files left"; fi
    else bad "build in parts of tests/gpu/host.coco:"; tail -n 5 "$TMP/parts.out" | sed 's/^/  /'; fi
    coco gen tests/gpu/host.coco -o "$TMP/parts-src"
    awk '{ print } $0 == "// @coconet part: a variant" && ++n == 2 { print "#error a part that does not compile" }' \
        "$TMP/parts-src/host.cu" >"$TMP/parts-bad.cu"
    if COCONET_CACHE=$cache COCONET_CUDA_ARCH=compute_90 COCONET_BUILD_JOBS=2 timeout 300 \
        "$COCONET" run tests/gpu/host.coco --backend cuda --ranks 1 --build-only \
        --cuda-source "$TMP/parts-bad.cu" >"$TMP/parts.out" 2>&1; then
        bad "a part with an #error built"
    elif grep -q 'nvcc failed building part [01] of 2' "$TMP/parts.out" &&
        grep -q 'a part that does not compile' "$TMP/parts.out"; then ok
    else bad "a part that does not compile:"; tail -n 5 "$TMP/parts.out" | sed 's/^/  /'; fi
    group_end
else
    group_end "nvcc skipped: not installed"
fi
