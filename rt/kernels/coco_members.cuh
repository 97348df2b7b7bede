// coco_members.cuh: Norm(x, Members) (doc/language.md 8.6), included by
// the sources whose programs use it (src/gen/emit_scatter.c). x is 1-D,
// partitioned by the members of a scattered tensor; every element of the
// result is the norm of its member. x holds the flat elements
// [lo, lo + n): a rank's block of a Sliced x, or the whole of it. The
// members' first flat indices come from the scattered tensor's layout
// table (coco_scatter.cuh: start[m], start[nm] the total), built once.
//
//   coco_member_sumsq_kernel  a block per member (grid-stride over
//                             members): the sum of the squares of its
//                             elements in [lo, lo + n), in double, by a
//                             fixed tree (the same bits at every run); 0
//                             where the range holds none of it;
//   the ranks' sums added     over a Sliced x, an NCCL AllReduce of the nm
//                             doubles (the collective inside the operation);
//   coco_member_spread_kernel each element the root of its member's sum
//                             (found by bisection of start[]), rounded once.
//
// The CPU reference adds each member's squares in index order; here a
// block's tree adds them in another order, so the last bits of a sum may
// differ (a rounding difference of the result at most).
#pragma once

enum { COCO_MEMBER_THREADS = 256, COCO_MEMBER_BLOCKS = 4096 };

static __global__ void coco_member_sumsq_kernel(const void *x, int tx, long lo, long n,
                                                const long *start, long nm, double *sum)
{
    __shared__ double part[COCO_MEMBER_THREADS];
    for (long m = blockIdx.x; m < nm; m += gridDim.x) {
        long a = start[m] > lo ? start[m] : lo;
        long b = start[m + 1] < lo + n ? start[m + 1] : lo + n;
        double acc = 0;
        for (long i = a + threadIdx.x; i < b; i += blockDim.x) {
            double v = coco_ld(x, i - lo, tx);
            acc += v * v;
        }
        part[threadIdx.x] = acc;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if ((int)threadIdx.x < s)
                part[threadIdx.x] += part[threadIdx.x + s];
            __syncthreads();
        }
        if (threadIdx.x == 0)
            sum[m] = part[0];
        __syncthreads();
    }
}

static __global__ void coco_member_spread_kernel(const double *sum, const long *start, long nm,
                                                 long lo, long n, void *y, int ty)
{
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n;
         e += (long)gridDim.x * blockDim.x) {
        long f = lo + e, a = 0, b = nm; // start[a] <= f < start[b]
        while (b - a > 1) {
            long mid = a + (b - a) / 2;
            if (start[mid] <= f)
                a = mid;
            else
                b = mid;
        }
        coco_st(y, e, ty, sqrt(sum[a]));
    }
}

// y = Norm(x, Members) for this rank's [lo, lo + n) of x; size: the nm
// member sizes; comm: the group's communicator when x is Sliced (the
// ranks' sums are added), else NULL; sum: nm doubles of workspace.
static int coco_member_norm(coco_cuda_ctx *ctx, int line, const void *x, int tx, void *y, int ty,
                            long lo, long n, const long *size, long nm, ncclComm_t comm,
                            double *sum)
{
    CocoScatLayout *l;
    if (coco_scat_layout(ctx, line, size, nm, &l))
        return 1;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    int blocks = nm < COCO_MEMBER_BLOCKS ? (int)nm : COCO_MEMBER_BLOCKS;
    coco_member_sumsq_kernel<<<blocks, COCO_MEMBER_THREADS, 0, st>>>(x, tx, lo, n, l->start, nm,
                                                                     sum);
    COCO_LAUNCHED(ctx, "Norm", line);
    if (comm)
        COCO_NCCL(ctx, "Norm", line, ncclAllReduce(sum, sum, nm, ncclFloat64, ncclSum, comm, st));
    if (n > 0) {
        coco_member_spread_kernel<<<coco_grid(n), 256, 0, st>>>(sum, l->start, nm, lo, n, y, ty);
        COCO_LAUNCHED(ctx, "Norm", line);
    }
    return 0;
}
