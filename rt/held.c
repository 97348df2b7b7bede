/* held.c: device memory a rank holds from one variant to the next. The
 * launcher runs many variants of one program in one process (coconet tune,
 * run --all-schedules), and making each one's slab anew (ncclMemAlloc and a
 * window registered, a collective step; freed after it) and uploading its
 * inputs again cost more than its runs at small sizes (doc/design.md, The
 * CUDA backend). So:
 *   - the slab is held while the next variant's fits in it; before it is
 *     laid out again the ranks are lined up (none still reads the last
 *     variant's buffers through the window) and it is zeroed; a larger one
 *     replaces it (every rank decides alike: the sizes are agreed first);
 *   - an input's pristine copy is held while the next variant's input has
 *     the same id (CocoRtVariant.input_id) and size; the copies it does not
 *     take are freed before new ones are made. After a variant whose checks
 *     found a fault (a write past a buffer) none is held: its kernels may
 *     have written into them, and the next variant starts from the host's.
 * held_free gives everything back (rt_close). */
#include "rt_internal.h"

#include <string.h>

/* Input i's held pristine copy, or -1 */
static int held_copy(const Held *h, const CocoRtVariant *v, int i)
{
    unsigned long long id = v->input_id ? v->input_id[i] : 0;
    for (int k = 0; id && k < h->npristine; k++)
        if (h->pristine_id[k] == id && h->pristine_bytes[k] == v->input_bytes[i])
            return k;
    return -1;
}

static void drop_slab(Held *h)
{
    if (!h->slab)
        return;
    if (h->window) {
        ncclCommWindowDeregister(h->window_comm, h->window);
        ncclMemFree(h->slab);
    } else {
        cudaFree(h->slab);
    }
    h->slab = NULL;
    h->window = NULL;
    h->window_comm = NULL;
    h->slab_bytes = 0;
}

size_t held_bytes(const CocoRt *rt)
{
    size_t n = rt->held.slab_bytes;
    for (int k = 0; k < rt->held.npristine; k++)
        n += rt->held.pristine_bytes[k];
    return n;
}

/* A new slab of `bytes`, a window when the ranks reach each other's memory */
static int new_slab(CocoRt *rt, size_t bytes)
{
    Held *h = &rt->held;
    void *slab = NULL;
    if (!rt->lsa) {
        CUDA_OK(rt, cudaMalloc(&slab, bytes));
        h->slab = slab;
        h->slab_bytes = bytes;
        return 0;
    }
    NCCL_OK(rt, ncclMemAlloc(&slab, bytes));
    ncclWindow_t window;
    ncclResult_t r = ncclCommWindowRegister(rt->world_window, slab, bytes, &window,
                                            NCCL_WIN_COLL_SYMMETRIC);
    if (r != ncclSuccess) {
        char why[512];
        ncclMemFree(slab);
        return rt_fail(rt, "ncclCommWindowRegister", __FILE__, __LINE__,
                       nccl_why(r, why, sizeof why));
    }
    h->slab = slab;
    h->slab_bytes = bytes;
    h->window = window;
    h->window_comm = rt->world_window;
    return 0;
}

int held_slab(CocoRt *rt, size_t bytes, Buffers *b)
{
    Held *h = &rt->held;
    if (h->slab && bytes <= h->slab_bytes) {
        NCCL_OK(rt, ncclAllReduce(rt->barrier, rt->barrier, 1, ncclFloat, ncclSum, rt->world,
                                  rt->stream));
        CUDA_OK(rt, cudaMemsetAsync(h->slab, 0, h->slab_bytes, rt->stream));
        if (wait_gpu(rt, rt->stream, NULL, "lining the ranks up before reusing the buffers"))
            return -1;
    } else {
        drop_slab(h);
        if (new_slab(rt, bytes))
            return -1;
    }
    b->slab = h->slab;
    b->slab_bytes = h->slab_bytes;
    b->window = h->window;
    return 0;
}

/* Keeps the held copies in use[] (by index), frees the others */
static void keep_only(Held *h, const int *use, int *moved_to)
{
    int n = 0;
    for (int k = 0; k < h->npristine; k++) {
        moved_to[k] = -1;
        if (!use[k]) {
            cudaFree(h->pristine[k]);
            continue;
        }
        h->pristine[n] = h->pristine[k];
        h->pristine_bytes[n] = h->pristine_bytes[k];
        h->pristine_id[n] = h->pristine_id[k];
        moved_to[k] = n++;
    }
    h->npristine = n;
}

int held_pristine(CocoRt *rt, const CocoRtVariant *v, Buffers *b)
{
    Held *h = &rt->held;
    int take[MAXARGS], use[MAXARGS], moved_to[MAXARGS];
    memset(use, 0, sizeof use);
    for (int i = 0; i < v->ninputs; i++) {
        take[i] = v->input[i] ? held_copy(h, v, i) : -1;
        if (take[i] >= 0)
            use[take[i]] = 1;
    }
    keep_only(h, use, moved_to);
    for (int i = 0; i < v->ninputs; i++) {
        if (!v->input[i])
            continue; /* a Scalar */
        if (take[i] >= 0) {
            b->pristine[i] = h->pristine[moved_to[take[i]]];
            continue;
        }
        void *p = NULL;
        CUDA_OK(rt, cudaMalloc(&p, v->input_bytes[i] ? v->input_bytes[i] : 256));
        cudaError_t e = cudaMemcpy(p, v->input[i], v->input_bytes[i], cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            cudaFree(p);
            return rt_fail(rt, "cudaMemcpy", __FILE__, __LINE__, cudaGetErrorString(e));
        }
        int k = h->npristine++; /* held once uploaded: its id then names its bytes */
        h->pristine[k] = p;
        h->pristine_bytes[k] = v->input_bytes[i];
        h->pristine_id[k] = v->input_id ? v->input_id[i] : 0;
        b->pristine[i] = p;
    }
    return 0;
}

void held_drop_inputs(CocoRt *rt)
{
    Held *h = &rt->held;
    for (int k = 0; k < h->npristine; k++)
        cudaFree(h->pristine[k]);
    h->npristine = 0;
}

void held_free(CocoRt *rt)
{
    drop_slab(&rt->held);
    held_drop_inputs(rt);
}
