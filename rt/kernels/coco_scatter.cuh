// coco_scatter.cuh: scattered tensors on the GPU. A scattered tensor is a
// list of member buffers (each its own allocation) whose value is their 1-D
// concatenation. The host splits the members once into buckets of at most
// COCO_BUCKET elements (ctx->scatter_bucket, COCONET_SCATTER_BUCKET, decides
// instead), each inside one member; a bucket is 12 bytes: the
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
//
// A FusedAllReduce over the peers' memory (src/gen/emit_lsa.c) addresses
// scattered operands through the same table: the helpers at the end of
// this file (after coco_lsa.cuh's, which coco_device.cuh includes first),
// and so do the ReduceScatter and AllGather over members that follow them.
#pragma once

enum { COCO_BUCKET = 1024 };

struct __align__(4) CocoBucket {
    unsigned flat_lo, flat_hi; // flat index of the first element
    unsigned member;
};

struct CocoScatLayout;

// One scattered tensor as kernels see it (passed by value; the last two
// fields are for the host).
struct CocoScat {
    const CocoBucket *bucket; // nbucket + 1 entries (device)
    long nbucket;
    const long *start;        // flat index of each member's first element (device)
    void *const *member;      // each member's buffer (device array of device pointers)
    const CocoScatLayout *layout; // host: the member sizes and starts
    void *const *host_member; // host: the member pointers
};

__device__ __forceinline__ long coco_bflat(const CocoBucket &b)
{
    return (long)(((unsigned long long)b.flat_hi << 32) | b.flat_lo);
}

// ---- host: the tables, built once ----
struct CocoScatLayout {
    long nm, *size;           // the member sizes this layout is for
    long per;                 // elements a bucket holds at most
    CocoBucket *bucket;       // device
    long nbucket;
    long *start;              // device
    long *hstart, *hbucket;   // host: each member's first flat index and first bucket (nm + 1)
    CocoScatLayout *next;
};
struct CocoScatPtrs {
    long nm;
    void **host, **dev;       // the member pointers, and their device copy
    CocoScatPtrs *next;
};
static CocoScatLayout *coco_scat_layouts;
static CocoScatPtrs *coco_scat_ptrs;

// Elements a bucket holds at most: ctx's knob (a multiple of 64 elements,
// so that a bucket starts at a member's start plus whole 16-byte vectors),
// else COCO_BUCKET.
static inline long coco_scat_per(const coco_cuda_ctx *ctx)
{
    return ctx->scatter_bucket > 0 ? ctx->scatter_bucket : COCO_BUCKET;
}

static int coco_scat_layout(coco_cuda_ctx *ctx, int line, const long *size, long nm,
                            CocoScatLayout **out)
{
    const long per = coco_scat_per(ctx);
    for (CocoScatLayout *l = coco_scat_layouts; l; l = l->next)
        if (l->nm == nm && l->per == per && !memcmp(l->size, size, (size_t)nm * sizeof *size)) {
            *out = l;
            return 0;
        }
    long nb = 0;
    for (long m = 0; m < nm; m++)
        nb += (size[m] + per - 1) / per;
    CocoBucket *hb = (CocoBucket *)malloc((size_t)(nb + 1) * sizeof *hb);
    long *hs = (long *)malloc((size_t)(nm + 1) * sizeof *hs);
    long *hk = (long *)malloc((size_t)(nm + 1) * sizeof *hk);
    CocoScatLayout *l = (CocoScatLayout *)calloc(1, sizeof *l);
    long *sz = (long *)malloc((size_t)nm * sizeof *sz);
    if (!hb || !hs || !hk || !l || !sz) {
        free(hb), free(hs), free(hk), free(l), free(sz);
        COCO_FAIL(ctx, "scattered tensor", line, "out of host memory for %ld buckets", nb);
    }
    long b = 0, flat = 0;
    for (long m = 0; m < nm; m++) {
        hs[m] = flat;
        hk[m] = b;
        for (long o = 0; o < size[m]; o += per, b++) {
            unsigned long long f = (unsigned long long)(flat + o);
            hb[b].flat_lo = (unsigned)f;
            hb[b].flat_hi = (unsigned)(f >> 32);
            hb[b].member = (unsigned)m;
        }
        flat += size[m];
    }
    hs[nm] = flat;
    hk[nm] = nb;
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
    if (e != cudaSuccess) {
        cudaFree(l->bucket), cudaFree(l->start), free(hs), free(hk), free(l), free(sz);
        COCO_FAIL(ctx, "scattered tensor", line, "bucket table: %s", cudaGetErrorString(e));
    }
    memcpy(sz, size, (size_t)nm * sizeof *sz);
    l->nm = nm;
    l->per = per;
    l->size = sz;
    l->hstart = hs;
    l->hbucket = hk;
    l->nbucket = nb;
    l->next = coco_scat_layouts;
    coco_scat_layouts = l;
    *out = l;
    return 0;
}

static int coco_scat_ptrs_of(coco_cuda_ctx *ctx, int line, void *const *ptr, long nm,
                             CocoScatPtrs **out)
{
    for (CocoScatPtrs *q = coco_scat_ptrs; q; q = q->next)
        if (q->nm == nm && !memcmp(q->host, ptr, (size_t)nm * sizeof *ptr)) {
            *out = q;
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
    *out = q;
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
    CocoScatPtrs *q;
    if (coco_scat_layout(ctx, line, size, nm, &l) || coco_scat_ptrs_of(ctx, line, ptr, nm, &q))
        return 1;
    d->bucket = l->bucket;
    d->nbucket = l->nbucket;
    d->start = l->start;
    d->member = q->dev;
    d->layout = l;
    d->host_member = q->host;
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

// dst[dlo + i] (type td) = src[slo + i] (type ts) for i in [0, n), by the
// lanes of a warp, 4 elements a lane at a time: the 4 loads are issued
// before the first store, so a warp has 4 in flight rather than 1 (the
// buffers never overlap). Through double: exact for every type.
__device__ __forceinline__ void coco_warp_move(void *dst, long dlo, int td, const void *src,
                                               long slo, int ts, long n, int lane)
{
    enum { U = 4 };
    for (long i = lane; i < n; i += 32 * U) {
        double v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            v[u] = i + 32 * u < n ? coco_ld(src, slo + i + 32 * u, ts) : 0.0;
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i + 32 * u < n)
                coco_st(dst, dlo + i + 32 * u, td, v[u]);
    }
}

// Copies flat elements [lo, hi) between a scattered tensor and a contiguous
// buffer holding them from index 0 (to_members: into the members).
static __global__ void coco_scat_copy_kernel(CocoScat d, void *flat, int t, long lo, long hi,
                                             int to_members)
{
    const int lane = threadIdx.x & 31;
    const long nwarp = ((long)gridDim.x * blockDim.x) >> 5;
    for (long b = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5; b < d.nbucket; b += nwarp) {
        const CocoBucket bk = d.bucket[b];
        const long f0 = coco_bflat(bk), f1 = coco_bflat(d.bucket[b + 1]);
        const long first = f0 > lo ? f0 : lo, end = f1 < hi ? f1 : hi;
        if (first >= end)
            continue;
        char *mem = (char *)d.member[bk.member];
        const long ms = d.start[bk.member];
        if (to_members)
            coco_warp_move(mem, first - ms, t, flat, first - lo, t, end - first, lane);
        else
            coco_warp_move(flat, first - lo, t, mem, first - ms, t, end - first, lane);
    }
}

// dst[i] (type td, contiguous) = element i of scattered tensor d (type ts):
// the widening before an FP16/BF16 reduction, read from the members.
static __global__ void coco_scat_convert_kernel(CocoScat d, int ts, void *dst, int td)
{
    const int lane = threadIdx.x & 31;
    const long nwarp = ((long)gridDim.x * blockDim.x) >> 5;
    for (long b = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5; b < d.nbucket; b += nwarp) {
        const CocoBucket bk = d.bucket[b];
        const long f0 = coco_bflat(bk), f1 = coco_bflat(d.bucket[b + 1]);
        const char *mem = (const char *)d.member[bk.member];
        const long ms = d.start[bk.member];
        coco_warp_move(dst, f0, td, mem, f0 - ms, ts, f1 - f0, lane);
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

// ---- scattered operands of a FusedAllReduce over the peers' memory ----
// The kernels (src/gen/emit_lsa.c) take, a warp each, the buckets of one
// scattered operand that intersect a part (part q: flat elements
// [q*cs, min(n, (q+1)*cs)), language.md 6), clipped to the part, so a bucket
// straddling two parts is computed half by each rank. Warp w takes buckets
// first + w, first + w + nwarp, ... (first: the bucket holding the part's
// first element, found on the host), one at a time (coco_lsa_scat_walk,
// below). Every other scattered
// operand has the same members, so the bucket's member and offset serve it
// too. A member of a peer is addressed at the member's offset in the local
// window (its address minus ctx->lsa_base): the runtime lays each variant's
// slab out alike on every rank and members have the same sizes on every
// rank, so the offsets agree. One rank has no window (lsa_base NULL): a
// member's offset is its address (coco_lsa_ptr<1>).

// The first bucket of each part (P <= 8), computed on the host.
struct CocoLsaParts {
    long first[8];
};

// The bucket holding flat element f of d (d.nbucket at or past the end): a
// binary search over the member starts kept on the host with the layout.
static long coco_scat_bucket_of(const CocoScat &d, long f)
{
    const CocoScatLayout *l = d.layout;
    if (f >= l->hstart[l->nm])
        return l->nbucket;
    long lo = 0, hi = l->nm - 1; /* the last member starting at or before f */
    while (lo < hi) {
        long mid = (lo + hi + 1) / 2;
        if (l->hstart[mid] <= f)
            lo = mid;
        else
            hi = mid - 1;
    }
    return l->hbucket[lo] + (f - l->hstart[lo]) / l->per;
}

static CocoLsaParts coco_lsa_parts(const CocoScat &d, long cs, long nparts)
{
    CocoLsaParts p;
    for (long q = 0; q < 8; q++)
        p.first[q] = q < nparts ? coco_scat_bucket_of(d, q * cs) : d.nbucket;
    return p;
}

// Blocks and threads of a fused kernel over buckets: a warp for each bucket
// of an average part, in whole warps (COCONET_FUSED_THREADS rounded down to
// a multiple of 32); the same on every rank (it syncs a barrier per block).
static inline void coco_lsa_scat_grid(const coco_cuda_ctx *ctx, const CocoScat &d, long nparts,
                                      dim3 *grid, dim3 *block)
{
    coco_cuda_ctx c = *ctx;
    c.fused_threads = c.fused_threads >= 32 && c.fused_threads <= 512 ? c.fused_threads / 32 * 32
                                                                       : 512;
    coco_lsa_grid(&c, (d.nbucket + nparts - 1) / nparts * 32, 1, grid, block);
}

// Do the members of d (elements of esize bytes) lie in the window? A C
// caller's may lie anywhere: then the NCCL path. One rank's anywhere.
static inline int coco_lsa_members_usable(const coco_cuda_ctx *ctx, const CocoScat &d,
                                          size_t esize)
{
    const char *base = (const char *)ctx->lsa_base;
    if (ctx->nranks == 1 && !base && d.layout && d.host_member)
        return 1;
    if (!ctx->lsa_comm || !d.layout || !d.host_member)
        return 0;
    for (long m = 0; m < d.layout->nm; m++) {
        const char *b = (const char *)d.host_member[m];
        if (b < base || b + (size_t)d.layout->size[m] * esize > base + ctx->lsa_bytes)
            return 0;
    }
    return 1;
}

// The offset in the window of member m (of a member table, device).
__device__ __forceinline__ size_t coco_lsa_member_off(void *const *member, unsigned m,
                                                      const char *lbase)
{
    return (size_t)((uintptr_t)member[m] - (uintptr_t)lbase);
}

// Bucket b as a fused kernel takes it for a part starting at flat element
// base with n elements: part-local [lo, lim) (clipped to the part), its
// member and the member's first element (part-local, maybe negative).
// Past the table or the part: lo = n.
struct CocoLsaBucket {
    long lo, lim, ms;
    unsigned member;
};

__device__ __forceinline__ CocoLsaBucket coco_lsa_bucket(const CocoScat &sc, long b, long base,
                                                         long n)
{
    CocoLsaBucket d = {n, n, 0, 0};
    if (b < sc.nbucket) {
        const CocoBucket bk = sc.bucket[b];
        const long f0 = coco_bflat(bk) - base, f1 = coco_bflat(sc.bucket[b + 1]) - base;
        d.lo = f0 > 0 ? f0 : 0;
        d.lim = f1 < n ? f1 : n;
        d.member = bk.member;
        d.ms = sc.start[bk.member] - base;
    }
    return d;
}

// Warp w's walk over the buckets of a part (flat elements base.. base+n,
// first: the bucket holding its first element), as every kernel over
// scattered operands takes them, the generated fused ones included
// (src/gen/emit_lsa.c), so that the push's stores and the element loop that
// reads them agree: buckets first + w, first + w + W, ... (W warps in the
// grid), one at a time, every lane reading the same 12-byte entry and
// member (broadcast loads); body(i0, lim, ms, a) for each V elements i0 of
// the bucket, part-local, ms the member's first element (part-local) and
// a = at(member), the member's addresses in each operand. One bucket at a
// time rather than 32 described by the lanes and shuffled: that took more
// registers (doc/design.md, The CUDA backend); this way fits two blocks per
// SM with little spilling.
template <int V, class At, class Body>
__device__ __forceinline__ void coco_lsa_scat_walk(const CocoScat &sc, long first, long base,
                                                   long n, At at, Body body)
{
    const int lane = threadIdx.x & 31;
    const long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5;
    const long nwarp = ((long)gridDim.x * blockDim.x) >> 5;
    for (long b = first + warp; n > 0 && b < sc.nbucket; b += nwarp) {
        const CocoLsaBucket d = coco_lsa_bucket(sc, b, base, n);
        if (d.lo >= n) /* past the part: so are all later buckets */
            break;
        const auto a = at(d.member);
        for (long i0 = d.lo + lane * V; i0 < d.lim; i0 += 32 * V)
            body(i0, d.lim, d.ms, a);
    }
}

// coco_lsa_reduce and coco_lsa_store at any alignment (coco_ldv_any,
// coco_stv_any: vector operations where the address allows).
struct CocoLdAny {
    template <int V, int T>
    __device__ static __forceinline__ void ld(const void *p, long i0, long n, CocoRaw<T> *raw)
    {
        coco_ldv_any<V, T>(p, i0, n, raw);
    }
};

template <int V, int T, int P, int U, class A>
__device__ __forceinline__ void coco_lsa_reduce_any(ncclWindow_t win, size_t off, long base,
                                                    long i0, long n, int op, A *acc)
{
    coco_lsa_reduce_with<CocoLdAny, V, T, P, U>(win, off, base, i0, n, op, acc);
}

template <int V, int T, int P>
__device__ __forceinline__ void coco_lsa_store_any(ncclWindow_t win, size_t off, long base,
                                                   long i0, long n, int first, int last,
                                                   const CocoRaw<T> *raw)
{
#pragma unroll
    for (int q = 0; q < P; q++)
        if (q >= first && q <= last)
            coco_stv_any<V, T>((CocoRaw<T> *)coco_lsa_ptr<P>(win, off, q) + base, i0, n, raw);
}

// The push algorithm over a scattered input (member table mb, type T):
// its reduce-scatter's stores, each peer q's part of this rank's members
// into slot `rank` of q's staging buffer (window offset stage;
// coco_lsa_slot: the slot's lines and vectors fall where the members' do
// where a member starts a 256-byte line). Warp w takes the buckets of part q
// that the element loop of q's kernel gives its warp w (the same walk), so
// block b's barrier orders exactly the stores that block b of q reads.
template <int V, int T, int P>
__device__ __forceinline__ void coco_lsa_scat_push_parts(ncclWindow_t win, const CocoScat &sc,
                                                         const CocoLsaParts &pb,
                                                         void *const *mb, size_t stage,
                                                         int rank, long cs, long nall)
{
#pragma unroll 1
    for (int k = 1; k < P; k++) {
        const int q = (rank + k) % P; /* each rank starts with its next peer */
        CocoRaw<T> *slot = coco_lsa_slot<T>(win, stage, q, rank, q, cs);
        coco_lsa_scat_walk<V>(
            sc, pb.first[q], q * cs, coco_lsa_part_n(q, cs, nall),
            [&](unsigned m) { return (long)(uintptr_t)mb[m]; },
            [&](long i0, long lim, long ms, long own) {
                alignas(16) CocoRaw<T> x[V];
                coco_ldv_any<V, T>((const void *)(uintptr_t)own, i0 - ms, lim - ms, x);
                coco_stv_any<V, T>(slot, i0, lim, x);
            });
    }
}

// acc[v] = the reduction over the ranks, in rank order, of element i0 + v
// of this rank's part: its own from its member (window offset off,
// member-local index m0, bound mlim), the others' from its staging slots
// (part-local index i0, bound lim). The same bits as coco_lsa_reduce_any.
template <int V, int T, int P>
__device__ __forceinline__ void coco_lsa_reduce_staged_any(ncclWindow_t win, size_t off, long m0,
                                                           long mlim, size_t stage, int rank,
                                                           long cs, long i0, long lim, int op,
                                                           double *acc)
{
    alignas(16) CocoRaw<T> x[P][V];
#pragma unroll
    for (int q = 0; q < P; q++)
        if (q == rank)
            coco_ldv_any<V, T>(ncclGetLsaPointer(win, off, rank), m0, mlim, x[q]);
        else
            coco_ldv_any<V, T>(coco_lsa_slot<T>(win, stage, rank, q, rank, cs), i0, lim, x[q]);
    coco_lsa_fold<V, T, P>(x, op, acc);
}

// ---- a ReduceScatter or AllGather over the members, one kernel ----
// A ReduceScatter of a scattered value, or an AllGather into one, outside
// any fusion (src/gen/emit_scatter.c: emit_scat_lsa), where the peers reach
// each other's memory: each rank takes the buckets of its own part, a warp a
// bucket, as the fused kernels do. The ReduceScatter (RS = 1) loads the
// part from every peer's members, reduces in double in rank order (the CPU
// executor's order and rounding, as the FusedAllReduce does) and stores it
// into `local`, this rank's contiguous part; the AllGather (RS = 0) loads
// the part from `local` and stores it into every peer's members. No copy
// into a contiguous buffer. An LSA barrier before (the peers' earlier work
// on the members is done) and after (no peer goes on while they are read
// or written). One rank (P = 1): a copy between its members and `local`,
// no barrier.
template <int V, int TI, int TO, int P, int RS>
__global__ void __launch_bounds__(512) coco_lsa_scat_collective(ncclDevComm dc, ncclWindow_t win,
                                                                CocoScat sc, CocoLsaParts pb,
                                                                const char *lbase, long cs,
                                                                long nall, int rank, int op,
                                                                void *local)
{
    CocoLsaBarrier<P> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x};
    bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
    coco_lsa_scat_walk<V>(
        sc, pb.first[rank], rank * cs, coco_lsa_part_n(rank, cs, nall),
        [&](unsigned m) { return (long)coco_lsa_member_off(sc.member, m, lbase); },
        [&](long i0, long lim, long ms, long w) {
            alignas(16) CocoRaw<TO> part[V];
            if constexpr (RS) {
                double acc[V];
                coco_lsa_reduce_any<V, TI, P, 0>(win, (size_t)w, 0, i0 - ms, lim - ms, op, acc);
#pragma unroll
                for (int v = 0; v < V; v++)
                    coco_st(part, v, TO, coco_round(acc[v], TO));
                coco_stv_any<V, TO>(local, i0, lim, part);
            } else {
                coco_ldv_any<V, TO>(local, i0, lim, part);
                coco_lsa_store_any<V, TO, P>(win, (size_t)w, 0, i0 - ms, lim - ms, 0, P - 1,
                                             part);
            }
        });
    bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

// Does this run take coco_lsa_scat_collective for the members of d
// (elements of esize bytes) on a group of nranks: what coco_lsa_usable asks
// of any kernel over the peers' memory, a rank count with kernel instances
// (coco_lsa_has_instance), the members in the window? Otherwise the
// generated NCCL path.
static inline int coco_lsa_scat_usable(const coco_cuda_ctx *ctx, long nranks, const CocoScat &d,
                                       size_t esize)
{
    return coco_lsa_usable(ctx, nranks, NULL, NULL, NULL, 0) && coco_lsa_has_instance(nranks) &&
           coco_lsa_members_usable(ctx, d, esize);
}

// Launches coco_lsa_scat_collective over the members of d for P ranks;
// non-zero: that instance is not built (COCO_HAS_P).
template <int V, int TI, int TO, int P, int RS>
static int coco_lsa_scat_go_p(const coco_cuda_ctx *ctx, const CocoScat &d, long cs, long nall,
                              int op, void *local, cudaStream_t st)
{
    if constexpr (!COCO_HAS_P(P)) {
        return 1;
    } else {
        dim3 grid, block;
        coco_lsa_scat_grid(ctx, d, P, &grid, &block);
        coco_lsa_scat_collective<V, TI, TO, P, RS><<<grid, block, 0, st>>>(
            coco_lsa_devcomm(ctx), (ncclWindow_t)ctx->lsa_window, d,
            coco_lsa_parts(d, cs, P), (const char *)ctx->lsa_base, cs, nall, ctx->rank, op,
            local);
        return 0;
    }
}

// The same for the number of ranks; non-zero: no instance for it.
template <int V, int TI, int TO, int RS>
static int coco_lsa_scat_go(const coco_cuda_ctx *ctx, const CocoScat &d, long cs, long nall,
                            int op, void *local, cudaStream_t st)
{
    switch (ctx->nranks) {
#define COCO_SCAT_GO_CASE(p)                                                                \
    case p:                                                                                 \
        return coco_lsa_scat_go_p<V, TI, TO, p, RS>(ctx, d, cs, nall, op, local, st);
        COCO_LSA_RANKS(COCO_SCAT_GO_CASE)
#undef COCO_SCAT_GO_CASE
    default:
        return 1;
    }
}

// The ReduceScatter (RS = 1) or AllGather (RS = 0) over the members of d:
// parts of cs elements of a tensor of nall, reduction op, `local` this
// rank's part; V from 16 bytes of the narrower type, or 1 (ctx->fused_vec).
template <int TI, int TO, int RS>
static int coco_lsa_scat_launch(const coco_cuda_ctx *ctx, const CocoScat &d, long cs, long nall,
                                int op, void *local, cudaStream_t st)
{
    constexpr int size = sizeof(CocoRaw<TI>) < sizeof(CocoRaw<TO>) ? sizeof(CocoRaw<TI>)
                                                                     : sizeof(CocoRaw<TO>);
    if (ctx->fused_vec)
        return coco_lsa_scat_go<1, TI, TO, RS>(ctx, d, cs, nall, op, local, st);
    return coco_lsa_scat_go<16 / size, TI, TO, RS>(ctx, d, cs, nall, op, local, st);
}
