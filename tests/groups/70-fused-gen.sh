# ---- which fused collectives become kernels over the peers' memory ----
# (src/gen/emit_lsa.c, src/gen/emit_send.c; generation only, no nvcc): "VARIANT
# one|two|rows" per FusedAllReduce and "VARIANT send" per fused Send generated so,
# and "VARIANT rowseg" per fused computation generated as one row kernel,
# compared with the expected list in tests/gen/fused/NAME.expect (its header:
# the program, the arguments of `coconet gen`, and whether the rules below,
# which every generated fused kernel keeps, are checked too). Over scattered tensors, and
# over FP16 and BF16 values, nearly every variant has one: an AllReduce no
# schedule fused, or a ReduceScatter whose only reader is an AllGather, is
# generated as a FusedAllReduce with no computation
# (src/gen/lower_collectives.c).
# shellcheck shell=sh disable=SC2154 # sourced by tests/run.sh, whose coco sets rc
# shellcheck disable=SC2012 # ls of the files coconet gen wrote, plainly named
group fused-gen
fused_kinds() {
    awk '/^\/\/ =+ .*: .* =+$/ { v = $4 }
         /^\/\/ FusedAllReduce .* as two kernels/ { print v, "two" }
         /^\/\/ FusedAllReduce .* as one kernel/ { print v, "one" }
         /^\/\/ fused Send .* as one kernel/ { print v, "send" }
         /^\/\/ FusedAllReduce .* as a row kernel/ { print v, "rows" }
         /^\/\/ a row kernel:/ { print v, "rowseg" }' "$1"
}
# The NCCL path's own buffers come from the workspace's end (coco_ws_tail)
# and the kernels' path never names one; the dry run asks for them only
# where that path can run (coco_ws_need), and each NCCL path checks they fit
# first (coco_ws_fits). ws_rules CU NAME
ws_rules() {
    leaks=$(awk '/^static int v[0-9]+_body\(/ { split("", tail); fast = 0 }
                 /void \*[a-z0-9]+ = coco_ws_tail\(/ { match($0, /void \*[a-z0-9]+/); tail[substr($0, RSTART + 6, RLENGTH - 6)] = 1 }
                 /^        if \(coco_lsa_usable\(/ { fast = 1 }
                 fast && /^        } else [{]$/ { fast = 0 }
                 fast { k = split($0, tok, /[^A-Za-z0-9_]+/); for (i = 1; i <= k; i++) n += (tok[i] in tail) }
                 END { print n + 0 }' "$1")
    tails=$(grep -c 'void \*[a-z0-9]* = coco_ws_tail(' "$1")
    needs=$(grep -c '^        \*need = coco_ws_need(ctx, G_WORLD, ws, wst);$' "$1")
    bodies=$(grep -c '^static int v[0-9]*_body(' "$1")
    fits=$(grep -c '^        if (!coco_ws_fits(ctx, ws, wst))$' "$1")
    launches=$(grep -c '^    { /\* line [0-9]*: FusedAllReduce ' "$1")
    if [ "$leaks" -eq 0 ] && [ "$needs" -eq "$bodies" ] && [ "$fits" -eq "$launches" ] &&
        { [ "$launches" -eq 0 ] || [ "$tails" -gt 0 ]; }; then ok
    else bad "$2: $leaks names of the NCCL path's buffers on the kernels' path, $tails such buffers, $needs of $bodies dry runs by coco_ws_need, $fits of $launches NCCL paths checking their room"; fi
}
# the arguments each variant's peer-memory kernels reach in the other ranks'
# windows (coco_window_inputs__S / coco_window_outputs__S: a session's caller
# refuses such a tensor outside its arena)
window_args() { # FILE RANKS VARIANT: "inputs | outputs" of VARIANT (each FILE generated once)
    win=$TMP/win-$(basename "$1" .coco)-$2
    [ -d "$win" ] || coco gen "$1" -o "$win" --all-schedules --ranks "$2"
    cu=$(ls "$win"/*.cu 2>/dev/null | head -n 1)
    [ -n "$cu" ] || return
    i=$(sed -n "s/^extern \"C\" const int coco_window_inputs__$3\[\] = {\(.*\)};$/\1/p" "$cu")
    o=$(sed -n "s/^extern \"C\" const int coco_window_outputs__$3\[\] = {\(.*\)};$/\1/p" "$cu")
    echo "$i | $o"
}
for c in "examples/adam.coco 4 paper|0, 1, -1 | 0, -1" "examples/adam.coco 4 program|0, -1 | -1" \
    "examples/adam_scattered.coco 4 paper|0, 1, -1 | -1" \
    "examples/self_attention.coco 4 paper|-1 | 0, -1" "examples/self_attention.coco 4 MM_AR_C|-1 | -1" \
    "examples/pipeline.coco 4 AR_fuse_C_P2P|-1 | 0, -1" "examples/pipeline.coco 4 paper|-1 | -1" \
    "tests/gpu/scattered_inline.coco 4 program|0, 1, -1 | -1"; do
    # shellcheck disable=SC2086 # FILE RANKS VARIANT
    set -- ${c%%|*}
    want=${c#*|}
    got=$(window_args "$1" "$2" "$3")
    if [ "$got" = "$want" ]; then ok; else bad "window arguments of $1 $3 at P = $2: got '$got', expected '$want'"; fi
done
# every variant of every program exports both lists
rm -rf "$TMP/win"
coco gen examples/mlp.coco -o "$TMP/win" --all-schedules --ranks 4
cu=$(ls "$TMP"/win/*.cu | head -n 1)
runs=$(grep -c '^extern "C" int coco_run__' "$cu")
wi=$(grep -c '^extern "C" const int coco_window_inputs__' "$cu")
wo=$(grep -c '^extern "C" const int coco_window_outputs__' "$cu")
if [ "$runs" -gt 0 ] && [ "$wi" -eq "$runs" ] && [ "$wo" -eq "$runs" ]; then ok
else bad "mlp: $runs entry points, $wi and $wo window lists"; fi
# the model-parallel layers: their FusedAllReduces read the MatMul's output,
# a workspace value, on the kernels' path
for f in examples/self_attention.coco examples/mlp.coco; do
    rm -rf "$TMP/fused"
    coco gen "$f" -o "$TMP/fused" --all-schedules --ranks 4
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen $f: ${why:-exit status $rc}: $(err1)"; continue; fi
    ws_rules "$(ls "$TMP"/fused/*.cu | head -n 1)" "$f"
done
for x in tests/gen/fused/*.expect; do
    f=$(sed -n 's|^# program: ||p' "$x")
    args=$(sed -n 's|^# args: *||p' "$x")
    want=$(grep -v '^#' "$x" | paste -sd, -)
    rm -rf "$TMP/fused"
    set -f
    # shellcheck disable=SC2086 # args are words
    coco gen "$f" -o "$TMP/fused" $args
    set +f
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen $f ($x): ${why:-exit status $rc}: $(err1)"; continue; fi
    cu=$(ls "$TMP"/fused/*.cu | head -n 1)
    got=$(fused_kinds "$cu" | paste -sd, -)
    if [ "$got" = "$want" ]; then ok; else bad "fused kernels of $f ($x): got '$got', expected '$want'"; fi
    if grep -q '^# rules: rows$' "$x"; then
        # row kernels (src/gen/emit_rows.c): each FusedAllReduce's has its
        # grid from its part's rows (coco_rows_lsa_grid), no push, and an
        # instance of each shape of COCO_ROWS_SHAPES at each P with vectors
        # (its one-rank form at P = 1) and the streaming one with V = 1;
        # each fused computation's is launched with the same shapes
        rows=$(grep -c '^// FusedAllReduce .* as a row kernel' "$cu")
        segs=$(grep -c '^// a row kernel:' "$cu")
        grids=$(grep -c '^        coco_rows_lsa_grid(ctx, cs, H, [0-9]*, &grid, &block);$' "$cu")
        seg_grids=$(grep -c '^        const dim3 grid = coco_rows_grid(nrows, H, V, 65535), block = coco_rows_block(H, V);$' "$cu")
        no_push=$(grep -c '^ *if (go(st, 0, grid, coco_chunks_all(cs)))$' "$cu")
        shapes=$(grep -c '^        else if (shape.r == 6 && shape.w == 2)$' "$cu")
        streams=$(grep -c '^        v[0-9]*_f[0-9]*<1, [1248], 0, 0><<<grid, block, 0, st>>>(' "$cu")
        seg_streams=$(grep -c '^        v[0-9]*_k[0-9]*<1, 0, 0><<<grid, block, 0, st>>>(' "$cu")
        if [ "$rows" -gt 0 ] && [ "$grids" -eq "$rows" ] && [ "$no_push" -ge "$rows" ] &&
            [ "$seg_grids" -eq "$segs" ] && [ "$shapes" -eq $((4 * rows + segs)) ] &&
            [ "$streams" -eq $((4 * rows)) ] && [ "$seg_streams" -eq "$segs" ]; then ok
        else bad "$f: $rows row FusedAllReduces ($grids grids by rows, $no_push launches without push, $streams streaming instances), $segs row computations ($seg_grids grids, $seg_streams streaming instances), $shapes dispatches of a shape"; fi
    fi
    if ! grep -q '^# rules: yes$' "$x"; then continue; fi
    # every two-kernel fusion exchanges its ranks' folds and ends on a barrier
    two=$(grep -c 'as two kernels' "$cu")
    ex=$(grep -c 'coco_lsa_peer_fold<P>' "$cu")
    if [ "$two" -eq 0 ] || [ "$ex" -ge "$two" ]; then ok; else bad "$f: $two two-kernel fusions, $ex exchanges"; fi
    # one rank: every fused launch can take its kernels (no window, no
    # device communicator: coco_lsa_devcomm gives zeros), whose _go has an
    # instance for P = 1 at each V, and every kernel's barrier is
    # CocoLsaBarrier<P> (none at P = 1) and every peer address coco_lsa_ptr<P>
    fused_launches=$(grep -c '^    { /\* line [0-9]*: FusedAllReduce ' "$cu")
    one_rank=$(grep -c ' && (G_WORLD == 1 || G_WORLD == 2 || G_WORLD == 4 || G_WORLD == 8)) {$' "$cu")
    devcomms=$(grep -c '^        ncclDevComm dc = coco_lsa_devcomm(ctx);$' "$cu")
    gos=$(grep -c '^static int v[0-9]*_f[0-9]*_go(' "$cu")
    p1=$(awk '/^static int v[0-9]+_f[0-9]+_go\(/ { on = 1; n = 0 } on && /^    if \(V == [0-9]+ && P == 1\) \{$/ { n++ }
              on && /^}/ { on = 0; if (n >= 1) k++ } END { print k + 0 }' "$cu")
    fkernels=$(awk '/^__global__ void .*_f[0-9]+(_b)?\(/ { n++ } END { print n + 0 }' "$cu")
    bars=$(grep -c '^    CocoLsaBarrier<P> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};$' "$cu")
    direct=$(grep -c 'ncclGetLsaPointer\|ncclLsaBarrierSession' "$cu")
    if [ "$one_rank" -eq "$fused_launches" ] && [ "$devcomms" -eq "$fused_launches" ] &&
        [ "$p1" -eq "$gos" ] && [ "$bars" -eq "$fkernels" ] && [ "$direct" -eq 0 ]; then ok
    else bad "$f: $fused_launches fused launches, $one_rank for one rank, $devcomms with coco_lsa_devcomm; $gos dispatchers, $p1 with P = 1 instances; $fkernels kernels, $bars CocoLsaBarrier<P>; $direct direct NCCL peer addresses or barriers"; fi
    # the autotuner's knobs reach every fused launch: vector width and the
    # peers' loads in flight (ctx->fused_vec, ctx->fused_peers), each value
    # with a kernel instance
    launches=$(grep -c '^    { /\* line [0-9]*: FusedAllReduce ' "$cu")
    peers=$(grep -c '_go(V, (int)G_WORLD, one, push ? 0 : ctx->fused_peers, push, !ctx->one_rank_fused \&\& ctx->fused_algo == COCO_FUSED_AUTO, g, block, s, ' "$cu")
    vecs=$(grep -c 'int V = .*ctx->fused_vec' "$cu")
    sends=$(grep -c '^// fused Send .* as one kernel' "$cu")
    u1=$(grep -c '&& U == 1 && PUSH == 0) {$' "$cu")
    if [ "$peers" -eq "$launches" ] && [ "$vecs" -eq $((launches + sends)) ] &&
        { [ "$launches" -eq 0 ] || [ "$u1" -gt 0 ]; }; then ok
    else bad "$f: $launches fused launches, $peers with fused_peers, $vecs V choices with fused_vec ($sends Sends), $u1 U=1 instances"; fi
    # the push algorithm: every launch over contiguous operands can take it
    # (its choice passed, an instance generated), one-kernel fusions by
    # size, two-kernel ones (cross-rank reductions) when asked
    # (COCONET_FUSED=push) and then in rounds (their steps passed:
    # coco_lsa_push_round; the next round's stores before a round's
    # elements, the barrier after); over scattered operands by size, and
    # not with cross-rank reductions
    pushes=$(grep -c 'if (go(st, fpush[0-9]*, grid, coco_chunks_all(cs)))$' "$cu")
    instances=$(grep -c '&& PUSH == 1) {$' "$cu")
    by_size=$(grep -c 'coco_lsa_pushes(ctx, 1, ' "$cu")
    asked=$(grep -c 'coco_lsa_pushes(ctx, ctx->fused_algo == COCO_FUSED_PUSH, ' "$cu")
    rounds=$(grep -c '^    coco_lsa_rounds<V>(cs, rsteps, steps, rounds);$' "$cu")
    knobs=$(grep -c ', coco_lsa_push_round(ctx)[,)]' "$cu")
    ahead=$(awk '/^    if \(r \+ 1 < rounds\) \/\* round r \+ 1.s stores, while round r computes \*\/$/ { s = NR }
                 /^        coco_lsa_push_parts<V, [A-Z0-9_]+, P>\(win, o[0-9]+, ost, rank, cs, nall, r \+ 1, steps\);$/ && s == NR - 1 { p++ }
                 /^    if \(r \+ 1 < rounds\) \/\* round r \+ 1.s stores seen by the peers \*\/$/ { b = NR }
                 /^        bar.sync\(ncclCoopCta\(\), cuda::memory_order_acq_rel\);$/ && b == NR - 1 { q++ }
                 END { print (p < q ? p : q) + 0 }' "$cu")
    case $f in
    *scattered*) want=$((launches - two)) want_asked=0 want_rounds=0 ;;
    *) want=$launches want_asked=$two want_rounds=$two ;;
    esac
    if [ "$pushes" -eq "$want" ] && { [ "$want" -eq 0 ] || [ "$instances" -gt 0 ]; } &&
        [ "$asked" -eq "$want_asked" ] && [ "$by_size" -eq $((want - want_asked)) ] &&
        [ "$rounds" -eq "$want_rounds" ] && [ "$knobs" -eq "$want_rounds" ] && [ "$ahead" -eq "$want_rounds" ]; then ok
    else bad "$f: $launches fused launches, $pushes able to push (expected $want), $instances push instances, $by_size by size, $asked when asked (expected $want_asked), $rounds in rounds, $knobs given the round, $ahead pipelined (expected $want_rounds)"; fi
    ws_rules "$cu" "$f"
    # every one-kernel Send syncs before and after its stores, and keeps its
    # NCCL lowering (the run-time fallback) in the same entry point
    sends=$(grep -c '^// fused Send .* as one kernel' "$cu")
    bars=$(grep -c 'CocoSendSync<PEER> xfer(dc);' "$cu")
    ends=$(grep -c 'xfer.finish();' "$cu")
    falls=$(awk '/^    [{] [/][*] line [0-9]+: fused Send / { inb = 1; nccl = 0 }
                 inb && /ncclSend\(/ { nccl = 1 }
                 inb && /^    } [/][*] fused Send / { n += nccl; inb = 0 }
                 END { print n + 0 }' "$cu")
    if [ "$sends" -eq "$bars" ] && [ "$sends" -eq "$ends" ] && [ "$falls" -eq "$sends" ]; then ok
    else bad "$f: $sends one-kernel Sends, $bars start barriers, $ends end barriers, $falls fallbacks"; fi
    # over scattered tensors every kernel takes buckets through the one walk
    # (coco_lsa_scat_walk; each part's first bucket found on the host), and
    # the kernels' path copies nothing between members and one buffer (an
    # output that is an updated tensor's new value included: it is computed
    # into the members, and a caller's buffer is filled at the end)
    case $f in *scattered*)
        kernels=$(awk '/^__global__ void .*_f[0-9]+(_b)?\(/ { n++ } END { print n + 0 }' "$cu")
        buckets=$(grep -c 'coco_lsa_scat_walk<V>(sc, pb.first\[part\], base, n,$' "$cu")
        parts=$(grep -c 'CocoLsaParts pb = coco_lsa_parts(' "$cu")
        fcopies=$(awk '/FusedAllReduce .* \*\/$/ { on = 1 } on && /} else {$/ { on = 0 }
                       on && /coco_scat_copy\(/ { n++ } END { print n + 0 }' "$cu")
        if [ "$kernels" -gt 0 ] && [ "$buckets" -eq "$kernels" ] && [ "$parts" -ge 1 ] && [ "$fcopies" -eq 0 ]; then ok
        else bad "$f: $kernels fused kernels, $buckets over buckets, $parts part tables, $fcopies copies on the kernels' path"; fi
        # a ReduceScatter of a scattered tensor, or an AllGather into one,
        # outside fusions: one kernel over the members beside its NCCL path
        # (coco_lsa_scat_launch), whose path copies nothing
        blocks=$(grep -c '^    { /\* line [0-9]*: [A-Za-z0-9_]* = \(ReduceScatter\|AllGather\) \*/$' "$cu")
        launches=$(grep -c 'if (coco_lsa_scat_launch<' "$cu")
        copies=$(awk '/if [(]coco_lsa_scat_usable[(]/ { on = 1 } on && /} else [{]/ { on = 0 }
                      on && /coco_scat_copy[(]/ { n++ } END { print n + 0 }' "$cu")
        # nor does any entry point gather a member list at its start (an
        # FP32 gradient, lamb_scattered's, is gathered in the NCCL paths)
        starts=$(awk '/COCO_FAIL[(]ctx, "workspace"/ { on = 1; next } on && /^    ([{] )?[/][*] line/ { on = 0 }
                      on && /coco_scat_copy[(].*, 0[)][)]$/ { n++ } END { print n + 0 }' "$cu")
        if [ "$launches" -gt 0 ] && [ "$launches" -le "$blocks" ] && [ "$copies" -eq 0 ] && [ "$starts" -eq 0 ]; then ok
        else bad "$f: $blocks ReduceScatter/AllGather blocks, $launches over the members, $copies copies on their path, $starts gathers at the start"; fi ;;
    *)  if ! grep -q 'coco_lsa_scat_launch<' "$cu"; then ok
        else bad "$f: a ReduceScatter or AllGather over members in a program without scattered tensors"; fi
        # every element loop of a contiguous fused kernel starts at the
        # shift that aligns the peers' vectors (coco_lsa_first at the
        # chunk's first element, emit_overlap.c; or the
        # round's span from it: coco_lsa_round_span), and its part-local
        # arrays are read and written at any alignment
        loops=$(awk '/^__global__ void .*_f[0-9]+(_b)?\(/ { on = 1 } on && /^}/ { on = 0 }
                     on && /for \(long [ij]0 = / { n++ } END { print n + 0 }' "$cu")
        shifted=$(awk '/for \(long j0 = chunk_lo \+ coco_lsa_first<V>\(base \+ chunk_lo\); j0 < hi; j0 \+= coco_lsa_stride<V>\(\)\) \{$/ { n++ }
                       /^        coco_lsa_round_span<V>\(base, n, r, steps, jb, je\);$/ { span = NR }
                       /^        for \(long j0 = jb; j0 < je; j0 \+= coco_lsa_stride<V>\(\)\) \{$/ && span == NR - 1 { n++ }
                       END { print n + 0 }' "$cu")
        locals=$(grep -c 'coco_[ls]tv<V, [A-Z0-9_]*>([xyc][0-9]*, i0, lim, ' "$cu")
        if { [ "$launches" -eq 0 ] || [ "$loops" -gt 0 ]; } && [ "$shifted" -eq "$loops" ] &&
            [ "$locals" -eq 0 ]; then ok
        else bad "$f: $loops element loops in fused kernels, $shifted from the shift, $locals part-local accesses needing alignment"; fi ;;
    esac
    rm -rf "$TMP/fused"
done
rm -rf "$TMP/fused"
# A Linear Send (examples/pipeline_linear.coco): every fused Send kernel's
# receiver is the next group only where there is one (to = -1 on the last
# group: no store), the first group stores its own value (keep), and the
# same rank-independent `peer` decides the barriers; the NCCL lowering sends
# from all but the last group, receives into all but the first (which copies
# its input), and nothing wraps around.
coco gen examples/pipeline_linear.coco -o "$TMP/linear" --all-schedules
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen examples/pipeline_linear.coco: ${why:-exit status $rc}: $(err1)"
else
    cu=$(ls "$TMP"/linear/*.cu | head -n 1)
    sends=$(grep -c '^    { /\* line [0-9]*: fused Send ' "$cu")
    to=$(grep -c '^        const int to = tgr >= 0 && tgr < ngr ? (int)(tgr \* G_GROUP + rank % G_GROUP) : -1;$' "$cu")
    keep=$(grep -c '^        const int keep = !(fgr >= 0 && fgr < ngr);$' "$cu")
    peer=$(grep -c '^        const int peer = 1 != 0 && 1 < ngr && -1 < ngr;$' "$cu")
    nccl_src=$(grep -c '^        int src = fg >= 0 && fg < ng ? (int)(fg \* G_GROUP + idx) : -1;$' "$cu")
    nccl_send=$(grep -c '^            if (dst >= 0)$' "$cu")
    wraps=$(grep -c '% ngr + ngr) % ngr\|% ng + ng) % ng' "$cu")
    if [ "$sends" -gt 0 ] && [ "$to" -eq "$sends" ] && [ "$keep" -eq "$sends" ] && [ "$peer" -eq "$sends" ] &&
        [ "$nccl_src" -gt 0 ] && [ "$nccl_send" -eq "$nccl_src" ] && [ "$wraps" -eq 0 ]; then ok
    else bad "examples/pipeline_linear.coco: $sends fused Sends, $to linear receivers, $keep keep, $peer peer; $nccl_src NCCL linear sources, $nccl_send guarded sends; $wraps wrapping around"; fi
fi
rm -rf "$TMP/linear"
# overlap(MatMul, FusedAllReduce): the variants whose MatMul runs in chunks
# (tests/gen/overlap.expect); the fused kernel launched once on the side
# stream with its chunks (each block waiting for each chunk's flag, then,
# where the instance pushes, storing the chunk's parts into the peers'
# staging slots, then its barrier; the push of every part at once only
# without chunks), by push only when asked (COCONET_FUSED=push); each chunk
# a strided batched MatMul of every part's rows then its flag's signal (the
# flags cleared on the stream first, so that a CUDA graph's replay waits); the
# main stream waits for the side stream at the end, then, with
# COCONET_OVERLAP_TAIL, launches the last chunk on the whole grid; and the
# one-stream path (chunks = 1) beside it
got=""
for f in examples/self_attention.coco examples/mlp.coco; do
    name=$(basename "$f" .coco)
    coco gen "$f" -o "$TMP/ovl" --all-schedules
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen $f: ${why:-exit status $rc}: $(err1)"; continue; fi
    cu=$(ls "$TMP"/ovl/*.cu | head -n 1)
    got="$got$(awk -v n="$name" '/^\/\/ =+ .*: .* =+$/ { v = $4 } /chunk by chunk, overlapped/ { print n, v }' "$cu")
"
    blocks=$(grep -c 'chunk by chunk, overlapped \*/$' "$cu")
    batched=$(grep -c 'coco_matmul_on(ctx, [0-9]*, COCO_[A-Z0-9]*, (const char \*)b[0-9]* + row0 \* mK \* [0-9]*, b[0-9]*, (char \*)b[0-9]* + row0 \* mN \* [0-9]*, row1 - row0, mN, mK, G_WORLD, mP \* mK, 0, mP \* mN, sms, st))$' "$cu")
    sides=$(grep -c '^            if (go(side, by_push, coco_overlap_grid(ctx, grid), ck))$' "$cu")
    by_push=$(grep -c '^            const int by_push = fpush[0-9]* && ctx->fused_algo == COCO_FUSED_PUSH;$' "$cu")
    side_chunks=$(grep -c '^            CocoChunks ck = {chunks, mP, mN, flag, 0, chunks - tail};$' "$cu")
    clears=$(grep -c '^            COCO_CUDA_QUIET(ctx, "MatMul", [0-9]*, cudaMemsetAsync(flag, 0, chunks \* sizeof(unsigned), st));$' "$cu")
    tails=$(awk '/^            if \(tail\) \{ \/\* the last chunk on the whole grid, after the MatMul \*\/$/ { t = NR }
                 t && NR == t + 1 && /^                const CocoChunks last = \{chunks, mP, mN, NULL, chunks - 1, chunks\};$/ { l = NR }
                 l && NR == l + 1 && /^                if \(go\(st, by_push, grid, last\)\)$/ { n++; t = 0; l = 0 }
                 END { print n + 0 }' "$cu")
    loops=$(grep -c '^    for (int c = ck.from; c < ck.to; c++) {$' "$cu")
    signals=$(grep -c '^                coco_chunk_signal<<<1, 1, 0, st>>>(flag, c);$' "$cu")
    waits=$(awk '/^__global__ void .*_f[0-9]+\(/ { on = 1 } on && /^}/ { on = 0 }
                 on && /^    if \(ck.count > 1\) \{ \/\* chunk c written here/ { g = NR }
                 on && g && NR == g + 1 && /^        if \(ck.flag\)$/ { f = NR; g = 0 }
                 on && f && NR == f + 1 && /^            coco_chunk_wait\(ck, c\);$/ { w = NR; f = 0 }
                 on && w && NR == w + 1 && /^        if constexpr \(PUSH\)$/ { p = NR }
                 on && p && NR == p + 1 && /^            coco_lsa_push_chunk<V, COCO_[A-Z0-9]+, P>\(win, o[0-9]+, ost, rank, cs, nall, chunk_lo, chunk_hi\);$/ { w = NR; p = 0 }
                 on && w && NR == w + 1 && /bar.sync\(ncclCoopCta\(\), cuda::memory_order_acq_rel\);$/ { n++; w = 0 }
                 END { print n + 0 }' "$cu")
    pushes=$(grep -c '^            coco_lsa_push_chunk<' "$cu")
    guards=$(grep -c '^    if constexpr (PUSH) if (ck.count == 1) { /\* the reduce-scatter' "$cu")
    kernels=$(awk '/^__global__ void .*_f[0-9]+\(/ { n++ } END { print n + 0 }' "$cu")
    joins=$(grep -c 'cudaStreamWaitEvent(st, ev\[1\], 0));$' "$cu")
    whole=$(awk '/chunk by chunk, overlapped/ { on = 1 } on && /^        } else {$/ { e = NR }
                 on && e && NR == e + 1 && /= MatMul \*\/$/ { n++; on = 0; e = 0 } END { print n + 0 }' "$cu")
    if [ "$blocks" -gt 0 ] && [ "$batched" -eq "$blocks" ] && [ "$sides" -eq "$blocks" ] &&
        [ "$by_push" -eq "$blocks" ] && [ "$side_chunks" -eq "$blocks" ] && [ "$tails" -eq "$blocks" ] &&
        [ "$signals" -eq "$blocks" ] && [ "$waits" -eq "$kernels" ] && [ "$loops" -eq "$kernels" ] &&
        [ "$pushes" -eq "$kernels" ] && [ "$guards" -eq "$kernels" ] && [ "$joins" -eq "$blocks" ] &&
        [ "$whole" -eq "$blocks" ] && [ "$clears" -eq "$blocks" ]; then ok
    else bad "$f: $blocks chunked MatMuls, $clears clearing their flags on the stream, $batched batched chunks, $sides kernels on the side stream ($by_push by push only when asked, $side_chunks with the chunks but the tail's), $tails tail launches, $signals signals, $waits of $kernels kernels waiting for each chunk ($loops over their launch's chunks), $pushes pushing each chunk, $guards pushing all at once only without chunks, $joins joins, $whole one-stream paths"; fi
    rm -rf "$TMP/ovl"
done
want=$(grep -v '^#' tests/gen/overlap.expect)
if [ "$(printf '%s' "$got" | sed '/^$/d')" = "$want" ]; then ok
else bad "chunked MatMuls (tests/gen/overlap.expect): got $(printf '%s' "$got" | paste -sd, -)"; fi

# overlap(AllGather, MatMul) and overlap(MatMul, ReduceScatter), the MatMul
# by the collective's blocks (src/gen/emit_overlap_blocks.c): the variants
# and their kinds (tests/gen/overlap_blocks.expect: gather, gather+alias
# where on one rank the gathered workspace value is its operand's buffer,
# scatter). In each chunked path every NCCL call is on the side stream (a
# broadcast from, or a reduce to, each chunk's block's rank), the MatMul's
# chunks are cuBLASLt calls over rows on the main stream taking the whole
# product's algorithm (its mM rows), each after its block's event (gather)
# or before it (scatter), and the main stream joins the side stream at the
# end; beside it, the two in order (the collective's own block first).
block_kinds() { # NAME CU: "NAME VARIANT KIND" per overlap by blocks
    awk -v n="$1" '/^\/\/ =+ .*: .* =+$/ { v = $4 }
        / by its blocks as they arrive \*\/$/ { k = "gather"; w = v }
        /, each reduced as it is written \*\/$/ { k = "scatter"; w = v }
        k && /^        } else \{$/ { e = NR }
        k && e && NR == e + 1 { if (k == "gather" && /one rank: the value is the operand/) k = "gather+alias"
                                print n, w, k; k = ""; e = 0 }' "$2"
}
got=""
for f in examples/self_attention.coco examples/mlp.coco examples/pipeline_linear.coco \
         tests/gpu/overlap_blocks.coco tests/gpu/overlap_blocks_t.coco; do
    name=$(basename "$f" .coco)
    rm -rf "$TMP/ovb"
    coco gen "$f" -o "$TMP/ovb" --all-schedules
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen $f: ${why:-exit status $rc}: $(err1)"; continue; fi
    cu=$(ls "$TMP"/ovb/*.cu | head -n 1)
    got="$got$(block_kinds "$name" "$cu")
"
    gathers=$(grep -c ' by its blocks as they arrive \*/$' "$cu")
    scatters=$(grep -c ', each reduced as it is written \*/$' "$cu")
    paths=$(grep -c '^        if (sub > 0) {$' "$cu")
    bcasts=$(grep -c 'ncclBroadcast(own, (char \*)b[0-9]* + lo \* mK \* [0-9]*, (size_t)((hi - lo) \* mK), coco_nccl_type(COCO_[A-Z0-9]*), (int)q, comm, side), "ncclBroadcast");$' "$cu")
    reduces=$(grep -c 'ncclReduce((const char \*)src + lo \* mN \* ns, out, (size_t)n, nt, coco_nccl_op([0-9]), (int)q, comm, side), "ncclReduce");$' "$cu")
    rows=$(grep -c 'coco_matmul_rows(ctx, [0-9]*, COCO_[A-Z0-9]*, .*, hi - lo, mN, mK, mM, align, sms, st))$' "$cu")
    arrived=$(awk '/cudaEventRecord\(ev\[1 \+ q \* sub \+ c\], side\)\);$/ { r++ }
                   /cudaStreamWaitEvent\(st, ev\[1 \+ q \* sub \+ c\], 0\)\);$/ { w++ }
                   END { print (r < w ? r : w) + 0 }' "$cu")
    written=$(awk '/cudaEventRecord\(ev\[k\], st\)\);$/ { r++ } /cudaStreamWaitEvent\(side, ev\[k\], 0\)\);$/ { w++ }
                   END { print (r < w ? r : w) + 0 }' "$cu")
    joins=$(grep -c 'cudaStreamWaitEvent(st, ev\[last\], 0));$' "$cu")
    on_main=$(awk '/^        if \(sub > 0\) \{$/ { on = 1 } /^        } else \{$/ { on = 0 }
                   on && /nccl(Broadcast|Reduce|AllGather|ReduceScatter|AllReduce)\(/ && !/, comm, side\), "nccl/ { n++ }
                   END { print n + 0 }' "$cu")
    if [ "$paths" -eq $((gathers + scatters)) ] && [ "$bcasts" -eq "$gathers" ] && [ "$reduces" -eq "$scatters" ] &&
        [ "$rows" -eq "$paths" ] && [ "$arrived" -eq "$gathers" ] && [ "$written" -eq "$scatters" ] &&
        [ "$joins" -eq "$paths" ] && [ "$on_main" -eq 0 ]; then ok
    else bad "$f: $gathers gathers and $scatters scatters by blocks, $paths chunked paths, $bcasts broadcasts and $reduces reduces on the side stream, $rows MatMul chunks over rows, $arrived chunks after their block's event, $written events after their chunk, $joins joins, $on_main NCCL calls on the main stream"; fi
done
rm -rf "$TMP/ovb"
want=$(grep -v '^#' tests/gen/overlap_blocks.expect)
if [ "$(printf '%s' "$got" | sed '/^$/d')" = "$want" ]; then ok
else bad "MatMuls by a collective's blocks (tests/gen/overlap_blocks.expect): got $(printf '%s' "$got" | paste -sd, -)"; fi
# overlap(MatMul, FusedAllReduce) whose computation reduces within each
# row (tests/gpu/rows_overlap.coco's ol_rows): the fusion is a row kernel
# over the peers' memory (src/gen/emit_rows.c) whose rows are the MatMul's
# (the reductions along its last dimension), so the MatMul runs chunk by
# chunk and the row kernel takes each chunk's rows after its flag.
rm -rf "$TMP/rows"
coco gen tests/gpu/rows_overlap.coco -o "$TMP/rows" --all-schedules
if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen tests/gpu/rows_overlap.coco: ${why:-exit status $rc}: $(err1)"
else
    cu=$TMP/rows/ol_rows.cu
    awk '/^\/\/ =+ .*: .* =+$/ { on = $4 == "ol_rows" } on' "$TMP/rows/rows_overlap.cu" >"$cu"
    chunked=$(grep -c 'chunk by chunk, overlapped \*/$' "$cu")
    rowk=$(grep -c '^// FusedAllReduce f as a row kernel (emit_rows.c) over the peers' "$cu")
    rows=$(grep -c '^            CocoChunks ck = {chunks, mP, mN, flag, 0, chunks - tail};$' "$cu")
    if [ "$chunked" -eq 1 ] && [ "$rowk" -eq 1 ] && [ "$rows" -eq 1 ]; then ok
    else bad "tests/gpu/rows_overlap.coco: $chunked chunked MatMuls, $rowk row kernels, $rows chunks of MatMul rows (expected 1 each)"; fi
fi
rm -rf "$TMP/rows"

# Linear indices (emit_cuda.h, e->lin): every elementwise kernel that needs
# its elements' coordinates has an instance without them (LIN), launched
# when coco_lin_bcast / coco_lin_global allow, and every fused kernel that
# needs them takes LIN as a template parameter too, its vector instances
# launched with LIN = 1 under the same choice (`lin`), and so does each
# one-rank elementwise form (<v>_f<f>_one, launched where FORM allows); one
# rank's bare AllReduce into a workspace value is its operand's buffer (no
# kernel).
for f in examples/self_attention.coco examples/mlp.coco examples/lamb.coco; do
    rm -rf "$TMP/lin"
    coco gen "$f" -o "$TMP/lin" --ranks 1 --all-schedules
    if [ -n "$why" ] || [ "$rc" -ne 0 ]; then bad "gen $f: ${why:-exit status $rc}: $(err1)"; continue; fi
    cu=$(ls "$TMP"/lin/*.cu | head -n 1)
    coords=$(awk '/^template <int V, int LIN>$/ { t = 1; next } t && /^__global__ void v[0-9]+_k[0-9]+\(/ { k = 1 }
                  { t = 0 } k && /coco_coords\(it, i0, c\)/ { n++; k = 0 }
                  /^}$/ { k = 0 } END { print n + 0 }' "$cu")
    guarded=$(grep -c '^        if (!LIN)$' "$cu")
    lin_launches=$(grep -c '^            v[0-9]*_k[0-9]*<[0-9]*, 1><<<' "$cu")
    fused_coords=$(awk '/^__global__ void __launch_bounds__\(512, COCO_LSA_MIN_BLOCKS\(P\)\) v[0-9]+_f[0-9]+(_b)?\(/ { k = 1 }
                        k && /coco_coords\(it, i0, c\)/ { n++; k = 0 } /^}$/ { k = 0 } END { print n + 0 }' "$cu")
    fused_lin=$(grep -c '^template <int V, int P, int ONESHOT, int U, int PUSH, int LIN>$' "$cu")
    fused_lin_launches=$(grep -c '^ *v[0-9]*_f[0-9]*\(_b\)\{0,1\}<[0-9]*, [0-9]*, [01], [01], [01], 1><<<' "$cu")
    forms=$(grep -c '^__global__ void __launch_bounds__(256) v[0-9]*_f[0-9]*_one(' "$cu")
    form_coords=$(awk '/^__global__ void __launch_bounds__\(256\) v[0-9]+_f[0-9]+_one\(/ { k = 1 }
                       k && /coco_coords\(it, i0, c\)/ { n++; k = 0 } /^}$/ { k = 0 } END { print n + 0 }' "$cu")
    form_lin=$(awk '/^template <int V, int LIN>$/ { t = 1; next }
                    t && /^__global__ void __launch_bounds__\(256\) v[0-9]+_f[0-9]+_one\(/ { n++ }
                    { t = 0 } END { print n + 0 }' "$cu")
    form_launches=$(grep -c '^    if (FORM && V == [0-9]* && P == 1 && ck.count == 1 && !ck.flag) {$' "$cu")
    form_lin_launches=$(grep -c '^ *v[0-9]*_f[0-9]*_one<[0-9]*, 1><<<coco_grid_vec(nall, [0-9]*), 256, 0, st>>>(' "$cu")
    if [ "$coords" -gt 0 ] && [ "$guarded" -ge "$coords" ] && [ "$lin_launches" -eq "$coords" ] &&
        [ "$fused_lin" -eq "$fused_coords" ] &&
        { [ "$fused_coords" -eq 0 ] || [ "$fused_lin_launches" -gt 0 ]; } &&
        [ "$forms" -gt 0 ] && [ "$form_launches" -ge "$forms" ] && [ "$form_lin" -eq "$form_coords" ] &&
        { [ "$form_coords" -eq 0 ] || [ "$form_lin_launches" -gt 0 ]; }; then ok
    else bad "$f: $coords elementwise kernels with coordinates, $guarded guarded by LIN, $lin_launches LIN launches; $fused_coords fused kernels with coordinates, $fused_lin with LIN, $fused_lin_launches LIN = 1 launches; $forms one-rank forms, $form_launches of their launches, $form_coords with coordinates, $form_lin with LIN, $form_lin_launches LIN = 1 launches"; fi
done
rm -rf "$TMP/lin"
coco gen examples/self_attention.coco -o "$TMP/lin" --ranks 1 --all-schedules
cu=$(ls "$TMP"/lin/*.cu | head -n 1)
aliases=$(awk '/^\/\/ =+ .*: .* =+$/ { v = $4 }
               /^        if \(G_WORLD == 1\) \{$/ { getline l; if (l ~ /^            b[0-9]+ = b[0-9]+;$/) print v }' "$cu" |
          paste -sd, -)
want=program,MM_AR_C,MM_RS_AG_C,MM_AR_AG_C,MM_fuse_RS_AG_C,MM_ol_RS_AG_C,MM_AR_C_AG
if [ "$aliases" = "$want" ]; then ok; else bad "one-rank AllReduce aliases in self_attention: got '$aliases', expected '$want'"; fi
group_end
