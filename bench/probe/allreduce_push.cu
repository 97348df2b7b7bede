// bench/probe/allreduce_push.cu: an experiment, not generated code. coconet's
// generated CUDA for bench/allreduce_fused.coco plus a two-shot kernel whose
// reduce-scatter pushes (stores) into the peers' staging slots instead of
// loading from the peers (PROBE_PUSH=1; 2: also the gather's peers rotated).
// Run with --cuda-source; it answers whether stores reach more NVLink
// bandwidth than loads at large N.
#include <stdlib.h>
#include <string.h>
#include "coco_device.cuh"
#include "coco_scatter.cuh"
#include "coco_send.cuh"

extern "C" {
int coco_nccl_version = NCCL_VERSION_CODE;
}

// ================= allreduce: program =================

static int v0_body(coco_cuda_ctx *ctx, const coco_cuda_args *args, const long *size,
                   size_t *need)
{
    const int dry = args == NULL;
    const int rank = ctx->rank;
    (void)rank;
    const long G_WORLD = ctx->nranks, R_WORLD = rank;
    const long G_GROUP = ctx->group_size, R_GROUP = rank % ctx->group_size;
    (void)G_WORLD; (void)R_WORLD; (void)G_GROUP; (void)R_GROUP;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    (void)st;
    size_t ws = 0;
    const long S_N = size[0];
    (void)S_N;
    CocoShape h0;
    memset(&h0, 0, sizeof h0);
    h0.nd = 1;
    h0.gdim[0] = (S_N);
    h0.dim[0] = h0.gdim[0];
    void *b0 = dry ? NULL : args->input[0];
    CocoShape h1;
    memset(&h1, 0, sizeof h1);
    h1.nd = 1;
    h1.gdim[0] = (S_N);
    h1.dim[0] = h1.gdim[0];
    void *b1 = dry ? NULL : args->output[0];
    if (dry) {
        *need = ws;
        return 0;
    }
    if (ws > ctx->workspace_bytes)
        COCO_FAIL(ctx, "workspace", 0, "%zu bytes needed, %zu given", ws, ctx->workspace_bytes);
    { /* line 8: s = AllReduce */
        const void *src = b0;
        void *dst = b1;
        ncclDataType_t nt = coco_nccl_type(COCO_FP32);
        COCO_NCCL(ctx, "AllReduce", 8, ncclAllReduce(src, dst, coco_count(h1), nt, coco_nccl_op(0), (ncclComm_t)ctx->world, st));
    }
    return 0;
}

extern "C" int coco_run__program(coco_cuda_ctx *ctx, const coco_cuda_args *args)
{
    return v0_body(ctx, args, args->size, NULL);
}

extern "C" size_t coco_workspace__program(const coco_cuda_ctx *ctx, const long *size)
{
    size_t need = 0;
    coco_cuda_ctx c = *ctx;
    char msg[256];
    c.err = msg;
    c.errlen = sizeof msg;
    return v0_body(&c, NULL, size, &need) ? 0 : need;
}

// ================= allreduce: fused =================

// FusedAllReduce f as one kernel over the peers' memory: rs (line 8) ag (line 8)
template <int V, int P, int ONESHOT, int U>
__global__ void __launch_bounds__(512) v1_f0(ncclDevComm dc, ncclWindow_t win, long cs, long nall, CocoShape it, unsigned long long seed, int rank, size_t o0, size_t o2)
{
    ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};
    (void)seed;
    (void)it;
    bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
    for (int part = ONESHOT ? 0 : rank; part < (ONESHOT ? P : rank + 1); part++) {
        const long base = part * cs;
        const long n = base >= nall ? 0 : nall - base < cs ? nall - base : cs;
        it.dim[0] = coco_part_len(it.gdim[0], P, part);
        it.off[0] = coco_part_lo(it.gdim[0], P, part);
        const long lim = n;
        for (long i0 = (blockIdx.x * (long)blockDim.x + threadIdx.x) * V; i0 < lim;
             i0 += (long)gridDim.x * blockDim.x * V) {
            double l1[V];
            coco_lsa_reduce<V, COCO_FP32, P, U>(win, o0, base, i0, lim, 0, l1);
            alignas(16) CocoRaw<COCO_FP32> g2[V];
#pragma unroll
            for (int v = 0; v < V; v++) {
                const long i = i0 + v;
                (void)i;
                double r1 = coco_round(l1[v], COCO_FP32);
                coco_st(g2, v, COCO_FP32, r1);
            }
            coco_lsa_store<V, COCO_FP32, P>(win, o2, base, i0, lim, ONESHOT ? rank : 0, ONESHOT ? rank : P - 1, g2);
        }
    }
    bar.sync(ncclCoopCta(), cuda::memory_order_release);
}


// PROBE: a two-shot FusedAllReduce whose reduce-scatter is done by stores
// (each rank pushes peer q's part of its input into q's staging slot), then
// a local reduce of the slots in rank order, then the gather by stores.
template <int V, int P>
__global__ void __launch_bounds__(512) push_f0(ncclDevComm dc, ncclWindow_t win, long cs, long nall, int rank, size_t o0, size_t o2, size_t os, int rot)
{
    ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};
    bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
    const long first = (blockIdx.x * (long)blockDim.x + threadIdx.x) * V;
    const long stride = (long)gridDim.x * blockDim.x * V;
    const float *in = (const float *)ncclGetLsaPointer(win, o0, rank);
    for (int k = 1; k < P; k++) {
        const int q = (rank + k) % P;
        const long base = q * cs;
        const long n = base >= nall ? 0 : nall - base < cs ? nall - base : cs;
        float *slot = (float *)ncclGetLsaPointer(win, os, q) + rank * cs;
        for (long i0 = first; i0 < n; i0 += stride) {
            alignas(16) float x[V];
            coco_ldv<V, COCO_FP32>(in + base, i0, n, x);
            coco_stv<V, COCO_FP32>(slot, i0, n, x);
        }
    }
    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
    const long base = rank * cs;
    const long n = base >= nall ? 0 : nall - base < cs ? nall - base : cs;
    const float *stage = (const float *)ncclGetLsaPointer(win, os, rank);
    for (long i0 = first; i0 < n; i0 += stride) {
        alignas(16) float x[P][V];
#pragma unroll
        for (int q = 0; q < P; q++)
            coco_ldv<V, COCO_FP32>(q == rank ? in + base : stage + q * cs, i0, n, x[q]);
        double acc[V];
        coco_lsa_fold<V, COCO_FP32, P>(x, 0, acc);
        alignas(16) float g[V];
#pragma unroll
        for (int v = 0; v < V; v++)
            coco_st(g, v, COCO_FP32, coco_round(acc[v], COCO_FP32));
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int q = rot ? (rank + 1 + k) % P : k;
            coco_stv<V, COCO_FP32>((float *)ncclGetLsaPointer(win, o2, q) + base, i0, n, g);
        }
    }
    bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

static int v1_f0_go(int V, int P, int ONESHOT, int U, dim3 grid, dim3 block, cudaStream_t st, ncclDevComm dc, ncclWindow_t win, long cs, long nall, CocoShape it, unsigned long long seed, int rank, size_t o0, size_t o2)
{
    if (V == 4 && P == 2 && ONESHOT == 0 && U == 0) {
        v1_f0<4, 2, 0, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 2 && ONESHOT == 0 && U == 1) {
        v1_f0<4, 2, 0, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 2 && ONESHOT == 1 && U == 0) {
        v1_f0<4, 2, 1, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 2 && ONESHOT == 1 && U == 1) {
        v1_f0<4, 2, 1, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 4 && ONESHOT == 0 && U == 0) {
        v1_f0<4, 4, 0, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 4 && ONESHOT == 0 && U == 1) {
        v1_f0<4, 4, 0, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 4 && ONESHOT == 1 && U == 0) {
        v1_f0<4, 4, 1, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 4 && ONESHOT == 1 && U == 1) {
        v1_f0<4, 4, 1, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 8 && ONESHOT == 0 && U == 0) {
        v1_f0<4, 8, 0, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 8 && ONESHOT == 0 && U == 1) {
        v1_f0<4, 8, 0, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 8 && ONESHOT == 1 && U == 0) {
        v1_f0<4, 8, 1, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 4 && P == 8 && ONESHOT == 1 && U == 1) {
        v1_f0<4, 8, 1, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 2 && ONESHOT == 0 && U == 0) {
        v1_f0<1, 2, 0, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 2 && ONESHOT == 0 && U == 1) {
        v1_f0<1, 2, 0, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 2 && ONESHOT == 1 && U == 0) {
        v1_f0<1, 2, 1, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 2 && ONESHOT == 1 && U == 1) {
        v1_f0<1, 2, 1, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 4 && ONESHOT == 0 && U == 0) {
        v1_f0<1, 4, 0, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 4 && ONESHOT == 0 && U == 1) {
        v1_f0<1, 4, 0, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 4 && ONESHOT == 1 && U == 0) {
        v1_f0<1, 4, 1, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 4 && ONESHOT == 1 && U == 1) {
        v1_f0<1, 4, 1, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 8 && ONESHOT == 0 && U == 0) {
        v1_f0<1, 8, 0, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 8 && ONESHOT == 0 && U == 1) {
        v1_f0<1, 8, 0, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 8 && ONESHOT == 1 && U == 0) {
        v1_f0<1, 8, 1, 0><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
    if (V == 1 && P == 8 && ONESHOT == 1 && U == 1) {
        v1_f0<1, 8, 1, 1><<<grid, block, 0, st>>>(dc, win, cs, nall, it, seed, rank, o0, o2);
    } else
        return 1;
    return 0;
}

static int v1_body(coco_cuda_ctx *ctx, const coco_cuda_args *args, const long *size,
                   size_t *need)
{
    const int dry = args == NULL;
    const int rank = ctx->rank;
    (void)rank;
    const long G_WORLD = ctx->nranks, R_WORLD = rank;
    const long G_GROUP = ctx->group_size, R_GROUP = rank % ctx->group_size;
    (void)G_WORLD; (void)R_WORLD; (void)G_GROUP; (void)R_GROUP;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    (void)st;
    size_t ws = 0;
    const long S_N = size[0];
    (void)S_N;
    CocoShape h0;
    memset(&h0, 0, sizeof h0);
    h0.nd = 1;
    h0.gdim[0] = (S_N);
    h0.dim[0] = h0.gdim[0];
    void *b0 = dry ? NULL : args->input[0];
    CocoShape h1;
    memset(&h1, 0, sizeof h1);
    h1.nd = 1;
    h1.gdim[0] = (S_N);
    h1.dim[0] = coco_part_len(h1.gdim[0], G_WORLD, R_WORLD);
    h1.off[0] = coco_part_lo(h1.gdim[0], G_WORLD, R_WORLD);
    void *b1 = coco_ws(&ws, ctx, (coco_padded_count(h1, 0, G_WORLD) / G_WORLD) * 4);
    const int push = getenv("PROBE_PUSH") && atoi(getenv("PROBE_PUSH")) > 0;
    const int rot = getenv("PROBE_PUSH") && atoi(getenv("PROBE_PUSH")) == 2;
    void *b3 = coco_ws(&ws, ctx, push ? coco_padded_count(h1, 0, G_WORLD) * 4 : 0);
    CocoShape h2;
    memset(&h2, 0, sizeof h2);
    h2.nd = 1;
    h2.gdim[0] = (S_N);
    h2.dim[0] = h2.gdim[0];
    void *b2 = dry ? NULL : args->output[0];
    if (dry) {
        *need = ws;
        return 0;
    }
    if (ws > ctx->workspace_bytes)
        COCO_FAIL(ctx, "workspace", 0, "%zu bytes needed, %zu given", ws, ctx->workspace_bytes);
    { /* line 8: FusedAllReduce f */
        const void *lb[] = {b0, b2, b3};
        const size_t lbytes[] = {(size_t)coco_count(h0) * 4, (size_t)coco_count(h2) * 4, push ? (size_t)coco_padded_count(h1, 0, G_WORLD) * 4 : 0};
        size_t lo[3];
        if (coco_lsa_usable(ctx, G_WORLD, lb, lbytes, lo, push ? 3 : 2) && (G_WORLD == 2 || G_WORLD == 4 || G_WORLD == 8)) {
        CocoShape it = h1;
        const long cs = coco_padded_count(it, 0, G_WORLD) / G_WORLD, nall = coco_count(h0);
        const void *vp[] = {(const char *)b0 + cs * 4, (const char *)b2 + cs * 4};
        const int vs[] = {4, 4};
        int V = !ctx->fused_vec && coco_pick_vec(4, vp, vs, 2) == 4 ? 4 : 1;
        int one = coco_lsa_oneshot(ctx, 1, (size_t)nall * 4);
        dim3 grid, block;
        coco_lsa_grid(ctx, cs, 4, &grid, &block);
        ncclDevComm dc = *(const ncclDevComm *)ctx->lsa_comm;
        ncclWindow_t win = (ncclWindow_t)ctx->lsa_window;
        if (push && V == 4 && !one) {
            if (G_WORLD == 2)
                push_f0<4, 2><<<grid, block, 0, st>>>(dc, win, cs, nall, rank, lo[0], lo[1], lo[2], rot);
            else if (G_WORLD == 4)
                push_f0<4, 4><<<grid, block, 0, st>>>(dc, win, cs, nall, rank, lo[0], lo[1], lo[2], rot);
            else
                COCO_FAIL(ctx, "FusedAllReduce", 8, "probe: no push instance for %ld ranks", G_WORLD);
        } else
        if (v1_f0_go(V, (int)G_WORLD, one, ctx->fused_peers, grid, block, st, dc, win, cs, nall, it, args->seed, rank, lo[0], lo[1]))
            COCO_FAIL(ctx, "FusedAllReduce", 8, "no kernel instance for %ld ranks", G_WORLD);
        COCO_LAUNCHED(ctx, "FusedAllReduce", 8);
        } else {
    { /* line 8: rs = ReduceScatter */
        const long cs = coco_padded_count(h1, 0, G_WORLD) / G_WORLD;
        const long inner = cs / coco_chunk(h1.gdim[0], G_WORLD);
        const int direct = coco_nccl_direct(h1, 0, G_WORLD, 4);
        const void *src = b0;
        void *dst = b1;
        ncclDataType_t nt = coco_nccl_type(COCO_FP32);
        if (direct) {
            COCO_NCCL(ctx, "ReduceScatter", 8, ncclReduceScatter(src, dst, coco_count(h1), nt, coco_nccl_op(0), (ncclComm_t)ctx->world, st));
        } else {
            COCO_NCCL(ctx, "ReduceScatter", 8, ncclGroupStart());
            for (int q = 0; q < G_WORLD; q++) {
                const long len = coco_part_len(h1.gdim[0], G_WORLD, q) * inner;
                if (len > 0)
                    COCO_NCCL(ctx, "ReduceScatter", 8, ncclReduce((const char *)src + q * cs * 4, dst, len, nt, coco_nccl_op(0), q, (ncclComm_t)ctx->world, st));
            }
            COCO_NCCL(ctx, "ReduceScatter", 8, ncclGroupEnd());
        }
    }
    { /* line 8: ag = AllGather */
        const long cs = coco_padded_count(h1, 0, G_WORLD) / G_WORLD;
        const long inner = cs / coco_chunk(h1.gdim[0], G_WORLD);
        const int direct = coco_nccl_direct(h1, 0, G_WORLD, 4);
        char *out = (char *)b2;
        if (direct) {
            COCO_NCCL(ctx, "AllGather", 8, ncclAllGather(b1, out, cs, coco_nccl_type(COCO_FP32), (ncclComm_t)ctx->world, st));
        } else {
            COCO_NCCL(ctx, "AllGather", 8, ncclGroupStart());
            for (int q = 0; q < G_WORLD; q++) {
                const long len = coco_part_len(h1.gdim[0], G_WORLD, q) * inner;
                if (len > 0)
                    COCO_NCCL(ctx, "AllGather", 8, ncclBroadcast(b1, out + q * cs * 4, len, coco_nccl_type(COCO_FP32), q, (ncclComm_t)ctx->world, st));
            }
            COCO_NCCL(ctx, "AllGather", 8, ncclGroupEnd());
        }
    }
        }
    }
    return 0;
}

extern "C" int coco_run__fused(coco_cuda_ctx *ctx, const coco_cuda_args *args)
{
    return v1_body(ctx, args, args->size, NULL);
}

extern "C" size_t coco_workspace__fused(const coco_cuda_ctx *ctx, const long *size)
{
    size_t need = 0;
    coco_cuda_ctx c = *ctx;
    char msg[256];
    c.err = msg;
    c.errlen = sizeof msg;
    return v1_body(&c, NULL, size, &need) ? 0 : need;
}

extern "C" {
extern const int coco_output_alias[];
const int coco_output_alias[] = {-1, -2};
}

extern "C" {
extern const char *const coco_schedule_names[];
const char *const coco_schedule_names[] = {"program", "fused", NULL};
}
