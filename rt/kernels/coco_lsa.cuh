// coco_lsa.cuh: helpers for a FusedAllReduce generated as one kernel over
// the peers' memory (NCCL's device API: the ranks of one LSA team load and
// store each other's symmetric windows directly; no multimem).
//
// The runtime allocates every buffer a peer touches inside one symmetric
// window registered on WORLD (ctx->lsa_window, the same offsets on every
// rank) and makes an ncclDevComm with ctx->lsa_blocks barriers. Generated
// code checks coco_lsa_usable at run time and otherwise takes its NCCL
// ReduceScatter + kernel + AllGather path (several hosts, no window, a group
// size with no kernel instance).
//
// One rank (P = 1) is the same kernels' instance for one peer, itself: no
// device communicator, no window, no barrier (CocoLsaBarrier<1>); the runtime
// makes neither, and coco_lsa_usable gives each buffer's address as its
// "offset" (coco_lsa_ptr<1>), so a FusedAllReduce is its computation over
// the local input in one kernel, and a ReduceScatter or AllGather over
// scattered members a copy.
//
// Algorithms (ctx->fused_algo; COCO_FUSED_AUTO picks by size):
//   two-shot  each rank reduces its slice by loading it from every peer,
//             computes, and stores the gathered results into every peer;
//   push      two-shot whose reduce-scatter is made of stores: each rank
//             stores every peer's part of its input into that peer's
//             staging buffer (a slot per rank, in the window), a barrier,
//             then reduces its slice from its own staging slots, computes
//             and stores into every peer as two-shot does. NVLink carries
//             the same bytes, all of them as stores, which reach more
//             bandwidth than loads (doc/gpu.md, Fused-collective knobs);
//             it costs a staging buffer as large as the input and a
//             barrier: large sizes. With cross-rank reductions (two
//             kernels) kernel 0 has no gathered stores to overlap its
//             pushes with, and pushing everything first would serialise
//             its NVLink traffic and its local work (LAMB measured slower
//             so: doc/design.md, The CUDA backend): there it goes in
//             rounds (coco_lsa_rounds, ctx->fused_push_round steps a
//             thread), round r + 1's stores during round r's work. Over
//             scattered operands, coco_lsa_scat_push_parts
//             (coco_scatter.cuh), one-kernel fusions only;
//   one-shot  each rank reduces and computes every slice and stores only its
//             own copy (fewer steps, P times the loads: small sizes).
// Other instances of every kernel, for an autotuner: V = 1 (one element a
// step, ctx->fused_vec) and U = 1 (one peer's loads in flight when reducing,
// ctx->fused_peers); grid and block sizes come from ctx->fused_blocks and
// ctx->fused_threads.
// A fusion with cross-rank reductions (a Norm of the whole tensor) is two
// kernels on one grid (src/gen/emit_lsa.c): kernel 0 leaves each block's fold
// in a workspace array; kernel 1 folds them (coco_lsa_rank_fold), publishes
// the rank's value in the window, and after a barrier folds the ranks'
// values in rank order (coco_lsa_peer_fold). Every fold has a fixed order,
// so every block of every rank gets the same bits. Scattered operands:
// the helpers at the end of coco_scatter.cuh.
#pragma once

#include <nccl_device.h>
#include <type_traits>

// COCO_FUSED_*: include/coconet_cuda.h

// Are the kernel instances for p ranks built? The runtime builds the code
// of a run for its number of ranks alone (cuda_source defines COCO_ONLY_P:
// a third of the instances, a shorter build: doc/gpu.md, What a run does);
// without it, as `coconet gen` writes the source, for each of COCO_LSA_RANKS.
#ifdef COCO_ONLY_P
#define COCO_HAS_P(p) ((p) == COCO_ONLY_P)
#else
#define COCO_HAS_P(p) 1
#endif
enum { COCO_LSA_MAXBLOCKS = 1024 }; // the most blocks of a fused kernel (slots per reduction)

// The address of window offset off in peer q's memory. One rank has no
// window: its offsets are the buffers' addresses (coco_lsa_usable).
template <int P>
__device__ __forceinline__ void *coco_lsa_ptr(ncclWindow_t win, size_t off, int q)
{
    if constexpr (P == 1)
        return (void *)(uintptr_t)off;
    else
        return ncclGetLsaPointer(win, off, q);
}

// How long a kernel waits for another rank at a barrier before it reports
// and traps (the launch fails with an error, and the process can end)
// rather than spin forever on a peer that died. The build passes
// COCONET_TIMEOUT + 30 s where that is set (src/cuda/nvcc.c), so that the
// host's watchdog, which names the rank, reports first; 330 s otherwise.
#ifndef COCO_PEER_WAIT_S
#define COCO_PEER_WAIT_S 330
#endif

__device__ __forceinline__ unsigned long long coco_globaltimer_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// NCCL's LSA barrier session with a bounded wait: arrive(), the epoch the
// session keeps in NCCL's barrier buffer between launches and its store at
// the end are NCCL's; wait() polls this rank's inbox slot of each peer
// (ucInbox, the unicast layout that NCCL 2.28 and 2.29 share) for at most
// COCO_PEER_WAIT_S. A multicast session (never made: NVLink multicast stays
// off) and other NCCL versions keep NCCL's own wait, which has no bound.
#if NCCL_VERSION_CODE >= 22800 && NCCL_VERSION_CODE < 23000
#define COCO_BOUNDED_BARRIER 1
#endif
template <typename Coop> struct CocoBoundedBarrier : ncclLsaBarrierSession<Coop> {
    using ncclLsaBarrierSession<Coop>::ncclLsaBarrierSession;
#ifdef COCO_BOUNDED_BARRIER
    __device__ __forceinline__ void wait(Coop coop, cuda::memory_order order)
    {
        if (this->multimem) {
            ncclLsaBarrierSession<Coop>::wait(coop, order);
            return;
        }
        const uint32_t want = this->epoch + 1;
        const int me = this->team.rank;
        for (int i = coop.thread_rank(); i < this->team.nRanks - 1; i += coop.size()) {
            const int peer = i < me ? i : i + 1;
            cuda::atomic_ref<uint32_t> inbox(*this->ucInbox(me, peer));
            const unsigned long long t0 = coco_globaltimer_ns();
            // reached once the epoch, which wraps, is at most half the range behind
            for (unsigned polls = 1; (uint32_t)(inbox.load(cuda::memory_order_acquire) - want) >
                                     0x7fffffffu;
                 polls++) {
                if (polls % 1024 == 0 &&
                    coco_globaltimer_ns() - t0 > COCO_PEER_WAIT_S * 1000000000ull) {
                    printf("coconet: rank %d block %d waited %d s at a barrier for rank %d, "
                           "which did not arrive (dead or hung): trap\n",
                           me, this->index, COCO_PEER_WAIT_S, peer);
                    __trap();
                }
            }
        }
        this->epoch = want;
        coop.sync();
    }
    __device__ __forceinline__ void sync(Coop coop, cuda::memory_order order)
    {
        this->arrive(coop, order);
        wait(coop, order);
    }
#endif
};

// A fused kernel's LSA barrier over P ranks, one per block, made from the
// device communicator dc as NCCL's session is (kernels declare
// `CocoLsaBarrier<P> bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier,
// blockIdx.x};` and call bar.sync): that session with a bounded wait, or
// for one rank none (CocoNoBarrier: the stream orders the kernels; dc is
// zeros, never read).
struct CocoNoBarrier {
    __device__ __forceinline__ CocoNoBarrier(ncclCoopCta, const ncclDevComm &, ncclTeam,
                                             ncclLsaBarrierHandle, uint32_t)
    {
    }
    __device__ __forceinline__ void sync(ncclCoopCta, cuda::memory_order) {}
};

template <int P> struct CocoLsaBarrierOf {
    using type = CocoBoundedBarrier<ncclCoopCta>;
};

template <> struct CocoLsaBarrierOf<1> {
    using type = CocoNoBarrier;
};

template <int P> using CocoLsaBarrier = typename CocoLsaBarrierOf<P>::type;

// A reduction's accumulator (the generated code's l<id>[V]): a double, in
// which the P > 1 values are combined in rank order and rounded once; with one
// rank the value itself, in its own type: the same bits, without converting
// to double and back, which cost the one-rank kernels conversions an
// element, and without widening 16-bit values to floats before their use,
// which cost the one-rank elementwise form registers (coco_narrow takes
// every element type).
template <int P, int T>
using CocoLsaAcc = typename std::conditional<P == 1, CocoRaw<T>, double>::type;

// Element v of x as an accumulator of type A
template <class A, int T>
__device__ __forceinline__ A coco_lsa_value(const CocoRaw<T> *x, int v)
{
    if constexpr (std::is_same<A, CocoRaw<T>>::value)
        return x[v];
    else
        return coco_ld(x, v, T);
}

// acc[v] = the reduction of x[q][v] over q = 0..P-1, in rank order, in double
// (with one rank: x[0][v] in A, CocoLsaAcc).
template <int V, int T, int P, class A>
__device__ __forceinline__ void coco_lsa_fold(const CocoRaw<T> (*x)[V], int op, A *acc)
{
#pragma unroll
    for (int v = 0; v < V; v++) {
        if constexpr (P == 1) {
            acc[v] = coco_lsa_value<A, T>(x[0], v);
        } else {
            double a = coco_ld(x[0], v, T);
#pragma unroll
            for (int q = 1; q < P; q++)
                a = coco_red_step(op, a, coco_ld(x[q], v, T));
            acc[v] = a;
        }
    }
}

// Loads of V elements from buffers aligned for them (coco_ldv); the loads at
// any alignment are CocoLdAny (coco_scatter.cuh).
struct CocoLdAligned {
    template <int V, int T>
    __device__ static __forceinline__ void ld(const void *p, long i0, long n, CocoRaw<T> *raw)
    {
        coco_ldv<V, T>(p, i0, n, raw);
    }
};

// acc[v] = the reduction, over the P peers in rank order, of element
// base + i0 + v of the window buffer at offset off (type T), loaded by L.
// U = 0: all P loads are issued before the first sum; U = 1: one peer's at a
// time (fewer registers, fewer loads in flight: ctx->fused_peers). The same
// bits either way: the sums are made in the same order.
template <class L, int V, int T, int P, int U, class A>
__device__ __forceinline__ void coco_lsa_reduce_with(ncclWindow_t win, size_t off, long base,
                                                     long i0, long n, int op, A *acc)
{
    if constexpr (U == 0) {
        alignas(16) CocoRaw<T> x[P][V];
#pragma unroll
        for (int q = 0; q < P; q++)
            L::template ld<V, T>((const CocoRaw<T> *)coco_lsa_ptr<P>(win, off, q) + base, i0, n,
                                 x[q]);
        coco_lsa_fold<V, T, P>(x, op, acc);
    } else {
        alignas(16) CocoRaw<T> x[V];
#pragma unroll
        for (int q = 0; q < P; q++) {
            L::template ld<V, T>((const CocoRaw<T> *)coco_lsa_ptr<P>(win, off, q) + base, i0, n,
                                 x);
#pragma unroll
            for (int v = 0; v < V; v++)
                if constexpr (P == 1)
                    acc[v] = coco_lsa_value<A, T>(x, v);
                else
                    acc[v] = q ? coco_red_step(op, acc[v], coco_ld(x, v, T)) : coco_ld(x, v, T);
        }
    }
}

// The loads of coco_ldv_in<1> (the one-rank elementwise form)
struct CocoLdReadOnly {
    template <int V, int T>
    __device__ static __forceinline__ void ld(const void *p, long i0, long n, CocoRaw<T> *raw)
    {
        coco_ldv_in<1, V, T>(p, i0, n, raw);
    }
};

// RO: coco_ldv_in's
template <int V, int T, int P, int U, int RO = 0, class A>
__device__ __forceinline__ void coco_lsa_reduce(ncclWindow_t win, size_t off, long base, long i0,
                                                long n, int op, A *acc)
{
    using L = typename std::conditional<RO == 1, CocoLdReadOnly, CocoLdAligned>::type;
    coco_lsa_reduce_with<L, V, T, P, U>(win, off, base, i0, n, op, acc);
}

// A part's element loop, thread by thread: steps j0 from -coco_lsa_shift
// (not 0), V elements apart, so that base + j0, the index of every peer's
// and whole buffer, is a multiple of V whatever cs. A step covers the
// part-local elements [i0, lim) (coco_lsa_step): its V, or for the one step
// below 0 (the part's head) elements 0 up to j0 + V, which take the
// one-element paths (coco_ldv). Part-local arrays are then read at any
// alignment (coco_ldv_any).
template <int V>
__device__ __forceinline__ long coco_lsa_shift(long base)
{
    return base % V;
}

// A thread's first step over a part at base (the element loops and the
// push's stores start here and go coco_lsa_stride apart: they visit the
// same elements).
template <int V> __device__ __forceinline__ long coco_lsa_first(long base)
{
    return (blockIdx.x * (long)blockDim.x + threadIdx.x) * V - coco_lsa_shift<V>(base);
}

template <int V> __device__ __forceinline__ long coco_lsa_stride()
{
    return (long)gridDim.x * blockDim.x * V;
}

template <int V>
__device__ __forceinline__ void coco_lsa_step(long j0, long n, long &i0, long &lim)
{
    i0 = j0 < 0 ? 0 : j0;
    lim = j0 < 0 && j0 + V < n ? j0 + V : n;
}

// coco_lsa_step over elements [lo, hi) of a part (a chunk of it, which
// the loop's first step j0 = lo + coco_lsa_first(base + lo) aligns the same
// way): the head step, below lo, takes elements lo up to j0 + V.
template <int V>
__device__ __forceinline__ void coco_lsa_span(long j0, long lo, long hi, long &i0, long &lim)
{
    i0 = j0 < lo ? lo : j0;
    lim = j0 < lo && j0 + V < hi ? j0 + V : hi;
}

// A thread's steps over any part of at most cs elements, at any shift
// (its first step >= 1 - V): the same on every rank (cs and the grid are).
template <int V> __device__ __forceinline__ long coco_lsa_steps(long cs)
{
    const long all = (cs + V - 1 + coco_lsa_stride<V>() - 1) / coco_lsa_stride<V>();
    return all > 0 ? all : 1;
}

// The push algorithm's rounds in kernel 0 of a two-kernel fusion: a
// thread's steps `want` at a time (0: all in one round). Round r + 1's
// stores (coco_lsa_push_parts) go while round r's elements are computed,
// and a barrier between (src/gen/emit_lsa.c, emit_rounds), so that the
// stores drain during local work instead of before a barrier. The count is
// the same on every rank (coco_lsa_steps), so every rank syncs each
// block's barrier equally often.
template <int V>
__device__ __forceinline__ void coco_lsa_rounds(long cs, long want, long &steps, long &rounds)
{
    const long all = coco_lsa_steps<V>(cs);
    steps = want > 0 && want < all ? want : all;
    rounds = (all + steps - 1) / steps;
}

// A thread's steps j0 of round r over a part at base of n elements:
// [jb, je), coco_lsa_stride apart.
template <int V>
__device__ __forceinline__ void coco_lsa_round_span(long base, long n, long r, long steps,
                                                    long &jb, long &je)
{
    jb = coco_lsa_first<V>(base) + r * steps * coco_lsa_stride<V>();
    je = jb + steps * coco_lsa_stride<V>();
    if (je > n)
        je = n;
}

// Elements of part q (of cs elements each; the last ones may be shorter or
// empty) of a tensor of nall elements.
__device__ __forceinline__ long coco_lsa_part_n(int q, long cs, long nall)
{
    const long base = q * cs;
    return base >= nall ? 0 : nall - base < cs ? nall - base : cs;
}

// The push algorithm's staging buffer: P slots, one per rank, each holding
// a part (cs elements of es bytes) at a shift: element i of part q at slot
// index i + coco_lsa_slot_shift(q * cs, es), the same offset within a
// 256-byte line as its flat index. So a slot's lines and vectors fall where
// the input's do (where the input's part does not start a line: a
// scattered tensor's members, or a contiguous input with cs not a whole
// line), and a warp's 512 bytes of stores fill four lines, not five. Each
// slot is whole lines; with cs a whole line, no shift and cs elements (the
// buffer is 256-byte aligned: coco_ws).
__host__ __device__ __forceinline__ long coco_lsa_line_elems(long es)
{
    return es < 256 ? 256 / es : 1;
}

__host__ __device__ __forceinline__ long coco_lsa_slot_shift(long base, long es)
{
    return base % coco_lsa_line_elems(es);
}

__host__ __device__ __forceinline__ long coco_lsa_slot_elems(long cs, long es)
{
    const long a = coco_lsa_line_elems(es);
    return cs % a ? (cs + 2 * a - 2) / a * a : cs; /* room for the largest shift */
}

// Bytes of the staging buffer of a value of shape s over g ranks.
static inline size_t coco_lsa_stage_bytes(const CocoShape &s, long g, size_t es)
{
    return (size_t)(g * coco_lsa_slot_elems(coco_padded_count(s, 0, g) / g, (long)es)) * es;
}

// Slot `from` of the staging buffer at window offset stage of rank `owner`,
// as a part-local array of part `part`: element i at [i].
template <int T>
__device__ __forceinline__ CocoRaw<T> *coco_lsa_slot(ncclWindow_t win, size_t stage, int owner,
                                                    int from, int part, long cs)
{
    const long es = (long)sizeof(CocoRaw<T>);
    return (CocoRaw<T> *)ncclGetLsaPointer(win, stage, owner) +
           from * coco_lsa_slot_elems(cs, es) + coco_lsa_slot_shift(part * cs, es);
}

// The push algorithm's reduce-scatter stores: elements [lo, hi) of each
// peer q's part of this rank's input (type T, at window offset off) into
// slot `rank` of q's staging buffer (window offset stage; coco_lsa_slot),
// round r of them (this thread's steps r * steps to (r + 1) * steps over
// the range: coco_lsa_rounds). Each thread visits the same indices as the
// element loop over that range and round on the peer (coco_lsa_span, the
// same steps), which a barrier after these stores precedes, so block b's
// barrier orders exactly the stores that block b of the peer reads.
template <int V, int T, int P>
__device__ __forceinline__ void coco_lsa_push_range(ncclWindow_t win, size_t off, size_t stage,
                                                    int rank, long cs, long nall, long lo, long hi,
                                                    long r, long steps)
{
    const CocoRaw<T> *in = (const CocoRaw<T> *)ncclGetLsaPointer(win, off, rank);
    const long stride = coco_lsa_stride<V>();
#pragma unroll 1
    for (int k = 1; k < P; k++) {
        const int q = (rank + k) % P; /* each rank starts with its next peer */
        const long n = coco_lsa_part_n(q, cs, nall), end = n < hi ? n : hi;
        CocoRaw<T> *slot = coco_lsa_slot<T>(win, stage, q, rank, q, cs);
        const long jb = lo + coco_lsa_first<V>(q * cs + lo) + r * steps * stride;
        const long je = jb + steps * stride < end ? jb + steps * stride : end;
        for (long j0 = jb; j0 < je; j0 += stride) {
            long i0, lim;
            coco_lsa_span<V>(j0, lo, end, i0, lim);
            alignas(16) CocoRaw<T> x[V];
            coco_ldv<V, T>(in + q * cs, i0, lim, x);
            coco_stv<V, T>(slot, i0, lim, x);
        }
    }
}

// Round r of the whole parts (coco_lsa_round_span's steps; r = 0 and
// steps = coco_lsa_steps: all of them)
template <int V, int T, int P>
__device__ __forceinline__ void coco_lsa_push_parts(ncclWindow_t win, size_t off, size_t stage,
                                                    int rank, long cs, long nall, long r,
                                                    long steps)
{
    coco_lsa_push_range<V, T, P>(win, off, stage, rank, cs, nall, 0, cs, r, steps);
}

// Elements [lo, hi) of every part, all at once (chunk lo..hi of the
// overlapped MatMul, emit_overlap.c): every step of the chunk's loop
template <int V, int T, int P>
__device__ __forceinline__ void coco_lsa_push_chunk(ncclWindow_t win, size_t off, size_t stage,
                                                    int rank, long cs, long nall, long lo, long hi)
{
    coco_lsa_push_range<V, T, P>(win, off, stage, rank, cs, nall, lo, hi, 0, coco_lsa_steps<V>(cs));
}

// acc[v] = the reduction over the ranks, in rank order, of element
// base + i0 + v: this rank's own from its input, the others' from its
// staging slots (all local loads). The same bits as coco_lsa_reduce.
template <int V, int T, int P>
__device__ __forceinline__ void coco_lsa_reduce_staged(ncclWindow_t win, size_t off, size_t stage,
                                                       int rank, long base, long cs, long i0,
                                                       long n, int op, double *acc)
{
    alignas(16) CocoRaw<T> x[P][V];
    const CocoRaw<T> *in = (const CocoRaw<T> *)ncclGetLsaPointer(win, off, rank) + base;
#pragma unroll
    for (int q = 0; q < P; q++)
        coco_ldv<V, T>(q == rank ? in : coco_lsa_slot<T>(win, stage, rank, q, rank, cs), i0, n,
                       x[q]);
    coco_lsa_fold<V, T, P>(x, op, acc);
}

// Stores raw[V] at base + i0 of the window buffer at offset off, in the
// peers first..last.
template <int V, int T, int P>
__device__ __forceinline__ void coco_lsa_store(ncclWindow_t win, size_t off, long base, long i0,
                                               long n, int first, int last, const CocoRaw<T> *raw)
{
#pragma unroll
    for (int q = 0; q < P; q++)
        if (q >= first && q <= last)
            coco_stv<V, T>((CocoRaw<T> *)coco_lsa_ptr<P>(win, off, q) + base, i0, n, raw);
}

// The fold (operation op of coco_red_step) of every thread's acc, in a
// fixed tree over the thread indices (any block size up to 512); every
// thread gets it. Every thread of the block calls it.
__device__ __forceinline__ double coco_lsa_block_fold(int op, double acc)
{
    __shared__ double tree[512];
    tree[threadIdx.x] = acc;
    __syncthreads();
    unsigned top = 1;
    while (top < blockDim.x)
        top *= 2;
    for (unsigned s = top / 2; s > 0; s /= 2) {
        if (threadIdx.x < s && threadIdx.x + s < blockDim.x)
            tree[threadIdx.x] = coco_red_step(op, tree[threadIdx.x], tree[threadIdx.x + s]);
        __syncthreads();
    }
    double r = tree[0];
    __syncthreads();
    return r;
}

// The fold of part[0..n) (one value per block of kernel 0), in an order that
// depends only on n and the block size: the same bits in every block.
__device__ __forceinline__ double coco_lsa_rank_fold(int op, const double *part, int n)
{
    double a = coco_red_identity(op);
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        a = coco_red_step(op, a, part[j]);
    return coco_lsa_block_fold(op, a);
}

// The fold, in rank order from rank 0's (the CPU executor's order), of the
// double at offset off of the window in every peer (after a barrier).
template <int P>
__device__ __forceinline__ double coco_lsa_peer_fold(ncclWindow_t win, size_t off, int op)
{
    double x[P];
#pragma unroll
    for (int q = 0; q < P; q++)
        x[q] = *(const volatile double *)coco_lsa_ptr<P>(win, off, q);
    double a = x[0];
#pragma unroll
    for (int q = 1; q < P; q++)
        a = coco_red_step(op, a, x[q]);
    return a;
}

// One rank with no window: its own memory, every buffer's offset its
// address (coco_lsa_ptr<1>; ctx->lsa_base is then NULL, as the runtime
// leaves it).
static inline int coco_lsa_one_rank(const coco_cuda_ctx *ctx, long nranks)
{
    return nranks == 1 && ctx->nranks == 1 && !ctx->lsa_base;
}

// Are the peers (`nranks` of them) load/store reachable, the NCCL path not
// asked for? (What coco_lsa_usable asks before its buffers.)
static inline int coco_lsa_reachable(const coco_cuda_ctx *ctx, long nranks)
{
    return ctx->fused_algo != COCO_FUSED_NCCL &&
           (coco_lsa_one_rank(ctx, nranks) || (ctx->lsa_comm && nranks == ctx->nranks));
}

// Are the peers reachable (coco_lsa_reachable) and do the buffers lie
// inside the window? Offsets of the buffers go to off[]; one rank's are
// their addresses (coco_lsa_one_rank).
static inline int coco_lsa_usable(const coco_cuda_ctx *ctx, long nranks, const void *const *buf,
                                  const size_t *bytes, size_t *off, int n)
{
    if (!coco_lsa_reachable(ctx, nranks))
        return 0;
    if (coco_lsa_one_rank(ctx, nranks)) {
        for (int k = 0; k < n; k++)
            off[k] = (size_t)(uintptr_t)buf[k];
        return 1;
    }
    const char *base = (const char *)ctx->lsa_base;
    for (int k = 0; k < n; k++) {
        const char *b = (const char *)buf[k];
        if (!bytes[k]) { /* nothing there (a staging buffer not taken, an empty workspace) */
            off[k] = 0;
            continue;
        }
        if (b < base || b + bytes[k] > base + ctx->lsa_bytes)
            return 0;
        off[k] = (size_t)(b - base);
    }
    return 1;
}

// Can a FusedAllReduce's kernels run at all, every buffer being in the
// window? Reachable peers and a kernel instance for their number (the
// generated launch's own condition): what a variant's workspace dry run
// knows.
static inline int coco_lsa_possible(const coco_cuda_ctx *ctx, long nranks)
{
    return coco_lsa_reachable(ctx, nranks) && coco_lsa_has_instance(nranks);
}

// The workspace a variant asks: its buffers from the start (used), and the
// NCCL paths' from the end (tail) where those paths can run. A caller whose
// buffers are not all in the window asks with fused_algo COCO_FUSED_NCCL
// (rt/session.c).
static inline size_t coco_ws_need(const coco_cuda_ctx *ctx, long nranks, size_t used, size_t tail)
{
    return coco_lsa_possible(ctx, nranks) ? used : coco_ws_total(used, tail);
}

// One-shot or two-shot, for a fused collective whose input takes `bytes`
// on each rank (one-shot only where the kernel allows it).
static inline int coco_lsa_oneshot(const coco_cuda_ctx *ctx, int allowed, size_t bytes)
{
    if (!allowed || ctx->fused_algo == COCO_FUSED_TWOSHOT || ctx->fused_algo == COCO_FUSED_PUSH)
        return 0;
    return ctx->fused_algo == COCO_FUSED_ONESHOT || bytes <= ctx->fused_oneshot_bytes;
}

// Does a two-shot fused collective whose input takes `bytes` on each rank
// take the push algorithm (where the kernel has it: `allowed`)? Also
// decides the staging buffer's size, so the workspace's dry run asks it
// too, with the same arguments.
static inline int coco_lsa_pushes(const coco_cuda_ctx *ctx, int allowed, int oneshot_allowed,
                                  size_t bytes)
{
    if (!allowed || !ctx->lsa_comm || ctx->nranks == 1 || ctx->fused_algo == COCO_FUSED_TWOSHOT ||
        coco_lsa_oneshot(ctx, oneshot_allowed, bytes))
        return 0;
    return ctx->fused_algo == COCO_FUSED_PUSH || bytes >= ctx->fused_push_bytes;
}

// The push's steps a round (coco_lsa_rounds) in kernel 0 of two:
// ctx->fused_push_round where set, else 16 (measured faster than one round,
// though slower than loads, which auto takes: doc/design.md, The CUDA
// backend).
static inline long coco_lsa_push_round(const coco_cuda_ctx *ctx)
{
    return ctx->fused_push_round >= 0 ? ctx->fused_push_round : 16;
}

// Blocks of 512 threads a fused kernel is built to keep on one SM
// (__launch_bounds__(512, COCO_LSA_MIN_BLOCKS(P))): over several ranks 2, as
// many as the LSA barriers take (the runtime's lsa_blocks: 2 an SM); with one
// rank no barrier limits them, and COCO_ONE_RANK_BLOCKS may ask for more: 4
// leaves 32 registers a thread where the layers' one-rank kernel takes 64 at
// 2. More blocks raised the occupancy but not the speed (doc/gpu.md, One
// rank): the kernel is bound by the instructions it issues, not by the
// loads in flight. So 2.
#ifndef COCO_ONE_RANK_BLOCKS
#define COCO_ONE_RANK_BLOCKS 2
#endif
#define COCO_LSA_MIN_BLOCKS(P) ((P) == 1 ? COCO_ONE_RANK_BLOCKS : 2)

// Blocks and threads of a fused collective over n elements, V a thread: at
// most lsa_blocks (or its share of COCO_ONE_RANK_BLOCKS with one rank), or
// the knob's fewer.
static inline void coco_lsa_grid(const coco_cuda_ctx *ctx, long n, int v, dim3 *grid,
                                 dim3 *block)
{
    long threads = ctx->fused_threads > 0 && ctx->fused_threads <= 512 ? ctx->fused_threads : 512;
    long want = (n + v * threads - 1) / (v * threads);
    long cap = ctx->nranks == 1 ? (long)ctx->lsa_blocks * COCO_ONE_RANK_BLOCKS / 2
                                : (long)ctx->lsa_blocks;
    long most = ctx->fused_blocks > 0 ? ctx->fused_blocks : cap;
    if (most > cap)
        most = cap;
    if (most > COCO_LSA_MAXBLOCKS)
        most = COCO_LSA_MAXBLOCKS;
    *grid = dim3((unsigned)(want < 1 ? 1 : want > most ? most : want));
    *block = dim3((unsigned)threads);
}

// The device communicator a fused kernel takes: the runtime's, or zeros
// where there is none (one rank: the kernel never reads it, CocoNoBarrier).
static inline ncclDevComm coco_lsa_devcomm(const coco_cuda_ctx *ctx)
{
    ncclDevComm dc;
    memset(&dc, 0, sizeof dc);
    if (ctx->lsa_comm)
        dc = *(const ncclDevComm *)ctx->lsa_comm;
    return dc;
}

// Once a shared object: the part compiled with the tables (build_parts.c
// defines COCO_PART_NO_TABLES in the others).
#ifndef COCO_PART_NO_TABLES
// ---- the device communicator, for the runtime (include/coconet_cuda.h) ----
extern "C" int coco_lsa_open(void *world, int blocks, void **devcomm, char *err, size_t errlen)
{
    ncclComm_t comm = (ncclComm_t)world;
    int nranks = 0, rank = 0;
    *devcomm = NULL;
    if (ncclCommCount(comm, &nranks) != ncclSuccess || ncclCommUserRank(comm, &rank) != ncclSuccess)
        return snprintf(err, errlen, "cannot read WORLD's size"), 1;
    if (nranks == 1)
        return 0; /* one rank: its kernels need no device communicator (coco_lsa_usable) */
    ncclTeam_t team = ncclTeamLsa(comm);
    if (team.nRanks != nranks || team.rank != rank)
        return 0; /* several hosts: the NCCL path */
    ncclDevComm *dc = (ncclDevComm *)calloc(1, sizeof *dc);
    ncclDevCommRequirements reqs;
    memset(&reqs, 0, sizeof reqs);
    reqs.lsaBarrierCount = blocks;
    ncclResult_t r = dc ? ncclDevCommCreate(comm, &reqs, dc) : ncclSystemError;
    if (r != ncclSuccess) {
        snprintf(err, errlen, "ncclDevCommCreate: %s", ncclGetErrorString(r));
        free(dc);
        return 1;
    }
    *devcomm = dc;
    return 0;
}

extern "C" void coco_lsa_close(void *world, void *devcomm)
{
    ncclDevCommDestroy((ncclComm_t)world, (const ncclDevComm *)devcomm);
    free(devcomm);
}
#endif
