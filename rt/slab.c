/* slab.c: the device buffers of one variant on one rank, in one block of
 * device memory, its slab (the compiler's host memory pools are the other,
 * unrelated "arenas" of src/core/util.c). The slab (a symmetric NCCL window
 * when the fused collectives reach the peers' memory) holds every input's
 * working copy, every output and the workspace, at the same offsets on every
 * rank, each between guard bytes; pristine copies of the inputs restore them
 * before each run. Also the guard bytes' checks and the comparison of a
 * repeat run with the checked run. */
#include "rt_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void free_buffers(Buffers *b)
{
    for (int i = 0; i < b->nin; i++)
        free(b->member[i]);
    if (b->start)
        cudaEventDestroy(b->start);
    if (b->stop)
        cudaEventDestroy(b->stop);
    free(b->guarded);
    free(b->guard_want);
    free(b->guard_got);
}

static size_t aligned(size_t bytes)
{
    return (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

/* A buffer's place in the slab: itself and the guard after it. */
static size_t slot(size_t bytes)
{
    return aligned(bytes + GUARD);
}

/* Every rank lays the slab out with the largest size any rank needs for
 * each buffer, so that offsets agree. */
static int agree_sizes(CocoRt *rt, unsigned long long *size, int n)
{
    unsigned long long *d = NULL;
    CUDA_OK(rt, cudaMalloc((void **)&d, (size_t)n * sizeof *d));
    CUDA_OK(rt, cudaMemcpy(d, size, (size_t)n * sizeof *d, cudaMemcpyHostToDevice));
    NCCL_OK(rt, ncclAllReduce(d, d, (size_t)n, ncclUint64, ncclMax, rt->world, rt->stream));
    if (wait_gpu(rt, rt->stream, NULL, "agreeing on buffer sizes"))
        return -1;
    CUDA_OK(rt, cudaMemcpy(size, d, (size_t)n * sizeof *d, cudaMemcpyDeviceToHost));
    CUDA_OK(rt, cudaFree(d));
    return 0;
}

static int scattered(const CocoRtVariant *v, int i)
{
    return v->nmembers && v->nmembers[i] > 0;
}

/* Which outputs are given an input's buffer (coco_output_alias): those need
 * no place of their own in the slab. A scattered input's new value is
 * given no buffer at all (NULL): it is read back from the members. */
static void find_aliases(CocoRt *rt, const CocoRtVariant *v, Buffers *b)
{
    const int *alias = (const int *)dlsym(rt->so, "coco_output_alias");
    for (int i = 0; i < v->noutputs; i++) {
        int j = alias ? alias[i] : -1;
        b->aliased[i] = j >= 0 && j < v->ninputs && v->input[j] && !rt->no_alias &&
                        v->input_bytes[j] == v->output_bytes[i];
        b->alias_of[i] = b->aliased[i] ? j : -1;
    }
}

static void guard(Buffers *b, void *at, size_t bytes, int output, int input)
{
    b->guarded[b->nguarded++] = (Guarded){(char *)at, bytes, output, input};
}

/* The slab bytes of input i: a scattered tensor's members each in its
 * guarded slot, with ALIGN bytes between them (no kernel can take them for one buffer). */
static size_t input_span(const CocoRtVariant *v, int i)
{
    if (!v->input[i])
        return 0;
    if (!scattered(v, i))
        return slot(v->input_bytes[i]);
    size_t n = 0;
    for (int m = 0; m < v->nmembers[i]; m++)
        n += slot(v->member_bytes[i][m]) + ALIGN;
    return n;
}

/* The members of scattered input i, laid out from `at`. */
static int place_members(CocoRt *rt, const CocoRtVariant *v, int i, char *at, Buffers *b)
{
    b->member[i] = calloc((size_t)v->nmembers[i], sizeof(void *));
    if (!b->member[i])
        return rt_error(rt, "out of host memory");
    for (int m = 0; m < v->nmembers[i]; m++) {
        b->member[i][m] = at;
        guard(b, at, v->member_bytes[i][m], -1, i);
        at += slot(v->member_bytes[i][m]) + ALIGN;
    }
    return 0;
}

/* Refuses, with the figures, a variant whose buffers (the slab and the
 * inputs' pristine copies) exceed the GPU's free memory and what the rank
 * holds from the variant before (held.c, which they may take or free): a
 * program too large for the GPU, or a GPU whose memory another process
 * holds. */
static int check_fits(CocoRt *rt, const CocoRtVariant *v, size_t slab, size_t workspace)
{
    size_t need = slab, free_bytes = 0, total = 0;
    for (int i = 0; i < v->ninputs; i++)
        if (v->input[i])
            need += v->input_bytes[i];
    CUDA_OK(rt, cudaMemGetInfo(&free_bytes, &total));
    free_bytes += held_bytes(rt);
    if (need <= free_bytes)
        return 0;
    const double gib = 1024.0 * 1024 * 1024;
    return rt_error(rt, "%s needs %.2f GiB of GPU memory for its buffers (its inputs, their "
                    "pristine copies, its outputs and %.2f GiB of workspace), but GPU %d has "
                    "%.2f GiB free of %.2f GiB: a smaller size, or a GPU that no "
                    "other process holds (nvidia-smi lists them)", v->name, (double)need / gib,
                    (double)workspace / gib, rt->device, (double)free_bytes / gib,
                    (double)total / gib);
}

/* The slab: a lead, inputs, outputs, then `workspace` bytes. */
static int make_slab(CocoRt *rt, const CocoRtVariant *v, size_t workspace, Buffers *b)
{
    int n = v->ninputs + v->noutputs + 1;
    unsigned long long size[2 * MAXARGS + 1];
    find_aliases(rt, v, b);
    for (int i = 0; i < v->ninputs; i++)
        size[i] = input_span(v, i);
    for (int i = 0; i < v->noutputs; i++)
        size[v->ninputs + i] = b->aliased[i] ? 0 : slot(v->output_bytes[i]);
    size[n - 1] = workspace ? slot(workspace) : 0;
    if (agree_sizes(rt, size, n))
        return -1;
    size_t bytes = ALIGN; /* the lead: the guard before the first buffer */
    for (int k = 0; k < n; k++)
        bytes += size[k];
    if (check_fits(rt, v, bytes, workspace) || held_slab(rt, bytes, b))
        return -1;
    size_t nguard = (size_t)v->noutputs + 1;
    for (int i = 0; i < v->ninputs; i++)
        nguard += scattered(v, i) ? (size_t)v->nmembers[i] : 1;
    b->guarded = calloc(nguard, sizeof *b->guarded);
    if (!b->guarded)
        return rt_error(rt, "out of host memory");
    char *at = (char *)b->slab + ALIGN;
    for (int i = 0; i < v->ninputs; i++, at += size[i - 1]) {
        b->in[i] = v->input[i] ? at : NULL;
        if (v->input[i] && scattered(v, i) && place_members(rt, v, i, at, b))
            return -1;
        if (v->input[i] && !scattered(v, i))
            guard(b, at, v->input_bytes[i], -1, i);
    }
    for (int i = 0; i < v->noutputs; i++, at += size[v->ninputs + i - 1]) {
        b->out[i] = !b->aliased[i]                   ? at
                    : scattered(v, b->alias_of[i]) ? NULL
                                                   : b->in[b->alias_of[i]];
        if (!b->aliased[i])
            guard(b, at, v->output_bytes[i], i, -1);
    }
    b->workspace = workspace ? at : NULL;
    if (workspace)
        guard(b, at, workspace, -1, -1);
    return 0;
}

/* ---- guard bytes ---- */

/* The pattern at each byte of the slab's guards: it changes from byte to
 * byte, so that no plain fill (zeros, NaNs, a repeated value) matches it. */
static unsigned char guard_byte(const Buffers *b, const char *p)
{
    return (unsigned char)(0xa5 ^ ((size_t)(p - (const char *)b->slab) & 0xff));
}

/* The guard before (side 0) or after (side 1) guarded buffer k. */
static char *guard_at(const Buffers *b, int k, int side)
{
    const Guarded *g = &b->guarded[k];
    return side ? g->at + g->bytes : g->at - GUARD;
}

/* Writes the pattern into every guard (before the checked run). */
static int fill_guards(CocoRt *rt, Buffers *b)
{
    size_t n = (size_t)b->nguarded * 2 * GUARD;
    b->guard_want = malloc(n ? n : 1);
    b->guard_got = malloc(n ? n : 1);
    if (!b->guard_want || !b->guard_got)
        return rt_error(rt, "out of memory");
    for (int k = 0; k < b->nguarded; k++)
        for (int side = 0; side < 2; side++) {
            unsigned char *want = b->guard_want + (2 * k + side) * GUARD;
            char *at = guard_at(b, k, side);
            for (int i = 0; i < GUARD; i++)
                want[i] = guard_byte(b, at + i);
            CUDA_OK(rt, cudaMemcpyAsync(at, want, GUARD, cudaMemcpyHostToDevice, rt->stream));
        }
    return wait_gpu(rt, rt->stream, NULL, "writing the guard bytes");
}

/* Reads every guard back; the first damaged one goes to *f. */
int check_guards(CocoRt *rt, Buffers *b, int late, CocoRtFault *f)
{
    for (int k = 0; k < b->nguarded; k++)
        for (int side = 0; side < 2; side++)
            CUDA_OK(rt, cudaMemcpyAsync(b->guard_got + (2 * k + side) * GUARD,
                                        guard_at(b, k, side), GUARD, cudaMemcpyDeviceToHost,
                                        rt->stream));
    if (wait_gpu(rt, rt->stream, NULL, "reading the guard bytes back"))
        return -1;
    for (int k = 0; k < b->nguarded; k++)
        for (int side = 0; side < 2; side++) {
            size_t o = (size_t)(2 * k + side) * GUARD;
            int i = 0;
            while (i < GUARD && b->guard_got[o + i] == b->guard_want[o + i])
                i++;
            if (i == GUARD)
                continue;
            const Guarded *g = &b->guarded[k];
            *f = (CocoRtFault){COCO_RT_FAULT_GUARD, g->output, g->input, side, late,
                               side ? (long long)(g->bytes + (size_t)i) : (long long)i - GUARD,
                               (long long)g->bytes, b->guard_got[o + i], b->guard_want[o + i]};
            return 0;
        }
    return 0;
}

/* ---- the repeat run's comparison ---- */

/* Device bytes `dev` against the host copy of the checked run, in chunks
 * through the pinned stage's two halves: the next chunk's copy runs while
 * this one is compared; the first difference goes to *f. */
static int compare_back(CocoRt *rt, const void *dev, const void *host, size_t bytes, int output,
                        int input, CocoRtFault *f)
{
    const size_t half = STAGE / 2;
    unsigned char *buf[2] = {rt->stage, rt->stage + half};
    size_t first = bytes < half ? bytes : half;
    if (first && f->kind == COCO_RT_FAULT_NONE)
        CUDA_OK(rt, cudaMemcpyAsync(buf[0], dev, first, cudaMemcpyDeviceToHost, rt->stream));
    for (size_t done = 0, k = 0; done < bytes && f->kind == COCO_RT_FAULT_NONE; k ^= 1) {
        size_t n = bytes - done < half ? bytes - done : half, next = done + n;
        if (wait_gpu(rt, rt->stream, NULL, "copying the repeat run's results back"))
            return -1; /* chunk k is in buf[k]; nothing else in flight */
        size_t m = bytes - next < half ? bytes - next : half;
        if (m)
            CUDA_OK(rt, cudaMemcpyAsync(buf[k ^ 1], (const char *)dev + next, m,
                                        cudaMemcpyDeviceToHost, rt->stream));
        const unsigned char *got = buf[k], *want = (const unsigned char *)host + done;
        if (memcmp(got, want, n)) {
            size_t i = 0;
            while (got[i] == want[i])
                i++;
            *f = (CocoRtFault){COCO_RT_FAULT_REPEAT, output, input, 0, 0, (long long)(done + i),
                               (long long)bytes, got[i], want[i]};
        }
        done = next;
    }
    /* a copy still in flight (a difference stopped the loop) ends here */
    return wait_gpu(rt, rt->stream, NULL, "copying the repeat run's results back");
}

/* Input i's value (member by member when scattered) against the checked
 * run's `host`, reported as output `output` (-1: as input i's new value). */
static int compare_input(CocoRt *rt, const CocoRtVariant *v, Buffers *b, int i,
                         const void *host, int output, CocoRtFault *f)
{
    int input = output < 0 ? i : -1;
    if (!scattered(v, i))
        return compare_back(rt, b->in[i], host, v->input_bytes[i], output, input, f);
    size_t off = 0;
    for (int m = 0; m < v->nmembers[i]; m++) {
        if (compare_back(rt, b->member[i][m], (const char *)host + off, v->member_bytes[i][m],
                         output, input, f))
            return -1;
        off += v->member_bytes[i][m];
    }
    return 0;
}

/* Every output and new value of the repeat run against the checked run's
 * (an output in an input's buffer is compared once, as that new value). */
int compare_repeat(CocoRt *rt, const CocoRtVariant *v, Buffers *b, CocoRtFault *f)
{
    for (int i = 0; i < v->noutputs; i++)
        if (!b->aliased[i] &&
            compare_back(rt, b->out[i], v->output[i], v->output_bytes[i], i, -1, f))
            return -1;
    for (int i = 0; i < v->ninputs; i++)
        if (v->updated && v->updated[i] && b->in[i] &&
            compare_input(rt, v, b, i, v->updated[i], -1, f))
            return -1;
    for (int i = 0; i < v->noutputs; i++) /* aliased, but not given back as a new value */
        if (b->aliased[i] && !(v->updated && v->updated[b->alias_of[i]]) &&
            compare_input(rt, v, b, b->alias_of[i], v->output[i], i, f))
            return -1;
    return 0;
}

/* Inputs: a pristine copy from the host, and the working copy the program
 * reads (and writes, for an Updated tensor). Outputs start as all-ones bytes
 * (NaN in every float type), so an output never written shows. */
int make_buffers(CocoRt *rt, const CocoRtVariant *v, size_t workspace, Buffers *b)
{
    b->nin = v->ninputs; /* each input's members (make_slab): freed by free_buffers */
    if (make_slab(rt, v, workspace, b) || held_pristine(rt, v, b))
        return -1;
    for (int i = 0; i < v->noutputs; i++, b->nout++)
        if (!b->aliased[i]) /* else the buffer of an input (coco_output_alias) */
            CUDA_OK(rt, cudaMemset(b->out[i], 0xff, v->output_bytes[i]));
    CUDA_OK(rt, cudaEventCreate(&b->start));
    CUDA_OK(rt, cudaEventCreate(&b->stop));
    return fill_guards(rt, b);
}

/* Copies input i between its working buffer (or members) and `flat` (the
 * pristine device copy, or the host buffer of its new value). */
int copy_input(CocoRt *rt, const CocoRtVariant *v, Buffers *b, int i, void *flat,
                      int to_input, enum cudaMemcpyKind kind)
{
    int nm = scattered(v, i) ? v->nmembers[i] : 1;
    size_t off = 0;
    for (int m = 0; m < nm; m++) {
        void *buf = scattered(v, i) ? b->member[i][m] : b->in[i];
        size_t bytes = scattered(v, i) ? v->member_bytes[i][m] : v->input_bytes[i];
        char *f = (char *)flat + off;
        CUDA_OK(rt, cudaMemcpyAsync(to_input ? buf : f, to_input ? f : buf, bytes, kind,
                                    rt->stream));
        off += bytes;
    }
    return 0;
}

int restore_inputs(CocoRt *rt, const CocoRtVariant *v, Buffers *b)
{
    for (int i = 0; i < v->ninputs; i++)
        if (b->in[i] && copy_input(rt, v, b, i, b->pristine[i], 1, cudaMemcpyDeviceToDevice))
            return -1;
    return 0;
}
