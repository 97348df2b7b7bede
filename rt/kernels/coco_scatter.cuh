// coco_scatter.cuh: scattered tensors on the GPU. A scattered tensor is a
// list of member buffers (each its own allocation) whose value is their 1-D
// concatenation. The host splits the members once into buckets of at most
// COCO_BUCKET elements, each inside one member; a bucket is 12 bytes: the
// flat index of its first element (two 32-bit halves) and its member. The
// table has one more entry, whose flat index is the total (so bucket b
// holds flat [flat(b), flat(b + 1))). Kernels give each warp a bucket
// (round robin): the warp reads its 12 bytes and the member's start, and
// addresses the member directly, with no search.
//
// Tables are built on the host at the first call with a given list of
// member sizes (and member pointers) and kept on the device for the
// process's lifetime: an optimizer calls the same entry point on the same
// tensors every step.
#pragma once

enum { COCO_BUCKET = 1024 };

struct __align__(4) CocoBucket {
    unsigned flat_lo, flat_hi; // flat index of the first element
    unsigned member;
};

// One scattered tensor as kernels see it (passed by value).
struct CocoScat {
    const CocoBucket *bucket; // nbucket + 1 entries (device)
    long nbucket;
    const long *start;        // flat index of each member's first element (device)
    void *const *member;      // each member's buffer (device array of device pointers)
};

__device__ __forceinline__ long coco_bflat(const CocoBucket &b)
{
    return (long)(((unsigned long long)b.flat_hi << 32) | b.flat_lo);
}

// ---- host: the tables, built once ----
struct CocoScatLayout {
    long nm, *size;           // the member sizes this layout is for
    CocoBucket *bucket;       // device
    long nbucket;
    long *start;              // device
    CocoScatLayout *next;
};
struct CocoScatPtrs {
    long nm;
    void **host, **dev;       // the member pointers, and their device copy
    CocoScatPtrs *next;
};
static CocoScatLayout *coco_scat_layouts;
static CocoScatPtrs *coco_scat_ptrs;

static int coco_scat_layout(coco_cuda_ctx *ctx, int line, const long *size, long nm,
                            CocoScatLayout **out)
{
    for (CocoScatLayout *l = coco_scat_layouts; l; l = l->next)
        if (l->nm == nm && !memcmp(l->size, size, (size_t)nm * sizeof *size)) {
            *out = l;
            return 0;
        }
    long nb = 0;
    for (long m = 0; m < nm; m++)
        nb += (size[m] + COCO_BUCKET - 1) / COCO_BUCKET;
    CocoBucket *hb = (CocoBucket *)malloc((size_t)(nb + 1) * sizeof *hb);
    long *hs = (long *)malloc((size_t)(nm + 1) * sizeof *hs);
    CocoScatLayout *l = (CocoScatLayout *)calloc(1, sizeof *l);
    long *sz = (long *)malloc((size_t)nm * sizeof *sz);
    if (!hb || !hs || !l || !sz) {
        free(hb), free(hs), free(l), free(sz);
        COCO_FAIL(ctx, "scattered tensor", line, "out of host memory for %ld buckets", nb);
    }
    long b = 0, flat = 0;
    for (long m = 0; m < nm; m++) {
        hs[m] = flat;
        for (long o = 0; o < size[m]; o += COCO_BUCKET, b++) {
            unsigned long long f = (unsigned long long)(flat + o);
            hb[b].flat_lo = (unsigned)f;
            hb[b].flat_hi = (unsigned)(f >> 32);
            hb[b].member = (unsigned)m;
        }
        flat += size[m];
    }
    hs[nm] = flat;
    hb[nb].flat_lo = (unsigned)(unsigned long long)flat;
    hb[nb].flat_hi = (unsigned)((unsigned long long)flat >> 32);
    hb[nb].member = (unsigned)nm;
    cudaError_t e = cudaMalloc((void **)&l->bucket, (size_t)(nb + 1) * sizeof *hb);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&l->start, (size_t)(nm + 1) * sizeof *hs);
    if (e == cudaSuccess)
        e = cudaMemcpy(l->bucket, hb, (size_t)(nb + 1) * sizeof *hb, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(l->start, hs, (size_t)(nm + 1) * sizeof *hs, cudaMemcpyHostToDevice);
    free(hb);
    free(hs);
    if (e != cudaSuccess) {
        cudaFree(l->bucket), cudaFree(l->start), free(l), free(sz);
        COCO_FAIL(ctx, "scattered tensor", line, "bucket table: %s", cudaGetErrorString(e));
    }
    memcpy(sz, size, (size_t)nm * sizeof *sz);
    l->nm = nm;
    l->size = sz;
    l->nbucket = nb;
    l->next = coco_scat_layouts;
    coco_scat_layouts = l;
    *out = l;
    return 0;
}

static int coco_scat_ptrs_of(coco_cuda_ctx *ctx, int line, void *const *ptr, long nm,
                             void *const **out)
{
    for (CocoScatPtrs *q = coco_scat_ptrs; q; q = q->next)
        if (q->nm == nm && !memcmp(q->host, ptr, (size_t)nm * sizeof *ptr)) {
            *out = q->dev;
            return 0;
        }
    CocoScatPtrs *q = (CocoScatPtrs *)calloc(1, sizeof *q);
    void **h = (void **)malloc((size_t)nm * sizeof *h);
    if (!q || !h) {
        free(q), free(h);
        COCO_FAIL(ctx, "scattered tensor", line, "out of host memory");
    }
    memcpy(h, ptr, (size_t)nm * sizeof *h);
    cudaError_t e = cudaMalloc((void **)&q->dev, (size_t)nm * sizeof *h);
    if (e == cudaSuccess)
        e = cudaMemcpy(q->dev, h, (size_t)nm * sizeof *h, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        cudaFree(q->dev), free(q), free(h);
        COCO_FAIL(ctx, "scattered tensor", line, "member table: %s", cudaGetErrorString(e));
    }
    q->nm = nm;
    q->host = h;
    q->next = coco_scat_ptrs;
    coco_scat_ptrs = q;
    *out = q->dev;
    return 0;
}

// The descriptor of a scattered tensor whose members have sizes size[0..nm)
// and lie at ptr[0..nm) (this rank's device buffers, from args->members).
static int coco_scat(coco_cuda_ctx *ctx, int line, const char *name, const long *size, long nm,
                     void *const *ptr, CocoScat *d)
{
    if (!ptr)
        COCO_FAIL(ctx, "scattered tensor", line, "no member buffers given for '%s' "
                  "(coco_cuda_args.members)", name);
    for (long m = 0; m < nm; m++)
        if (!ptr[m])
            COCO_FAIL(ctx, "scattered tensor", line, "member %ld of '%s' is NULL", m, name);
    CocoScatLayout *l;
    if (coco_scat_layout(ctx, line, size, nm, &l) || coco_scat_ptrs_of(ctx, line, ptr, nm, &d->member))
        return 1;
    d->bucket = l->bucket;
    d->nbucket = l->nbucket;
    d->start = l->start;
    return 0;
}

// Blocks of 256 threads (8 warps) for a kernel taking one bucket per warp.
static inline dim3 coco_scat_grid(long nbucket)
{
    long blocks = (nbucket + 7) / 8;
    if (blocks > 132 * 16)
        blocks = 132 * 16;
    return dim3((unsigned)(blocks > 0 ? blocks : 1));
}

// ---- device: V-element loads and stores at any alignment ----
// coco_ldv/coco_stv with the vector path taken only where the address is
// aligned for it (bucket starts of members whose sizes are not multiples of
// V are not): the test is uniform across a warp's bucket.
template <int V, int T>
__device__ __forceinline__ void coco_ldv_any(const void *p, long i0, long n, CocoRaw<T> *raw)
{
    const int b = V * (int)sizeof(CocoRaw<T>);
    if (V > 1 && (uintptr_t)((const CocoRaw<T> *)p + i0) % (uintptr_t)(b < 16 ? b : 16) == 0) {
        coco_ldv<V, T>(p, i0, n, raw);
    } else {
        const CocoRaw<T> *q = (const CocoRaw<T> *)p + i0;
#pragma unroll
        for (int v = 0; v < V; v++)
            raw[v] = i0 + v < n ? q[v] : CocoRaw<T>();
    }
}

template <int V, int T>
__device__ __forceinline__ void coco_stv_any(void *p, long i0, long n, const CocoRaw<T> *raw)
{
    const int b = V * (int)sizeof(CocoRaw<T>);
    if (V > 1 && (uintptr_t)((CocoRaw<T> *)p + i0) % (uintptr_t)(b < 16 ? b : 16) == 0) {
        coco_stv<V, T>(p, i0, n, raw);
    } else {
        CocoRaw<T> *q = (CocoRaw<T> *)p + i0;
#pragma unroll
        for (int v = 0; v < V; v++)
            if (i0 + v < n)
                q[v] = raw[v];
    }
}

// Copies flat elements [lo, hi) between a scattered tensor and a contiguous
// buffer holding them from index 0 (to_members: into the members).
__global__ void coco_scat_copy_kernel(CocoScat d, void *flat, int t, long lo, long hi,
                                      int to_members)
{
    const int lane = threadIdx.x & 31;
    const long nwarp = ((long)gridDim.x * blockDim.x) >> 5;
    for (long b = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5; b < d.nbucket; b += nwarp) {
        const CocoBucket bk = d.bucket[b];
        long f0 = coco_bflat(bk), f1 = coco_bflat(d.bucket[b + 1]);
        if (f1 <= lo || f0 >= hi)
            continue;
        char *mem = (char *)d.member[bk.member];
        const long ms = d.start[bk.member];
        for (long i = (f0 > lo ? f0 : lo) + lane; i < f1 && i < hi; i += 32) {
            if (to_members)
                coco_st(mem, i - ms, t, coco_ld(flat, i - lo, t));
            else
                coco_st(flat, i - lo, t, coco_ld(mem, i - ms, t));
        }
    }
}

// dst[i] (type td, contiguous) = element i of scattered tensor d (type ts):
// the widening before an FP16/BF16 reduction, read from the members.
__global__ void coco_scat_convert_kernel(CocoScat d, int ts, void *dst, int td)
{
    const int lane = threadIdx.x & 31;
    const long nwarp = ((long)gridDim.x * blockDim.x) >> 5;
    for (long b = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5; b < d.nbucket; b += nwarp) {
        const CocoBucket bk = d.bucket[b];
        const long f0 = coco_bflat(bk), f1 = coco_bflat(d.bucket[b + 1]);
        const char *mem = (const char *)d.member[bk.member];
        const long ms = d.start[bk.member];
        for (long i = f0 + lane; i < f1; i += 32)
            coco_st(dst, i, td, coco_ld(mem, i - ms, ts));
    }
}

// Launches coco_scat_copy_kernel over [lo, hi).
static int coco_scat_copy(coco_cuda_ctx *ctx, int line, const CocoScat &d, void *flat, int t,
                          long lo, long hi, int to_members)
{
    cudaStream_t st = (cudaStream_t)ctx->stream;
    if (hi > lo)
        coco_scat_copy_kernel<<<coco_scat_grid(d.nbucket), 256, 0, st>>>(d, flat, t, lo, hi,
                                                                          to_members);
    COCO_LAUNCHED(ctx, to_members ? "scatter into members" : "gather from members", line);
    return 0;
}
