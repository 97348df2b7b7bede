// coco_send.cuh: helpers for a fused Send generated as one kernel
// (src/gen/emit_send.c): the kernel computes the fused elementwise values
// and stores the Send's value straight into the receiving rank's buffer
// through NCCL's device API.
//
// The runtime allocates every buffer of a variant inside one symmetric window
// registered on WORLD, at the same offset on every rank (coco_lsa.cuh), so the
// receiver's buffer is at the sender's own offset of that buffer in the
// receiver's copy of the window (ncclGetLsaPointer(win, offset, receiver)).
//
// Ordering, per block index b (every rank launches the kernel with the same
// grid, so every rank syncs LSA barrier b equally often):
//   start barrier (acquire)  every rank's block b has started the kernel, so
//                            whatever its stream ran before (a previous run's
//                            readers of the receive buffer) is complete: the
//                            sender may overwrite that buffer;
//   end barrier (acq_rel)    the sender's stores are released before it
//                            arrives and acquired by the receiver; a rank's
//                            kernel ends only when each of its blocks has seen
//                            the same block of every sender arrive, so the
//                            kernels after it read complete data.
// Every rank of WORLD takes part (each is a sender and a receiver of a Send
// between GROUPs). A Send to the rank itself (one group) needs neither.
#pragma once

#include <nccl_device.h>

// The kernel's two barriers and where the Send's value goes. In a kernel:
//   CocoSendSync<PEER> xfer(dc);                 (PEER: the start barrier)
//   void *out = xfer.target(win, off, to, local);
//   ... stores into out ...
//   xfer.finish();                               (PEER: the end barrier)
// PEER: out is the receiver's buffer (the window at off, in rank `to`);
// otherwise (a Send to the rank itself) the local buffer, with no barrier.
template <int PEER> struct CocoSendSync {
    __device__ __forceinline__ explicit CocoSendSync(const ncclDevComm &) {}
    __device__ __forceinline__ void *target(ncclWindow_t, size_t, int, void *local)
    {
        return local;
    }
    __device__ __forceinline__ void finish() {}
};

template <> struct CocoSendSync<1> {
    ncclLsaBarrierSession<ncclCoopCta> bar;
    __device__ __forceinline__ explicit CocoSendSync(const ncclDevComm &dc)
        : bar{ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier, blockIdx.x}
    {
        bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
    }
    __device__ __forceinline__ void *target(ncclWindow_t win, size_t off, int to, void *)
    {
        return ncclGetLsaPointer(win, off, to);
    }
    __device__ __forceinline__ void finish() { bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel); }
};

// The first element of a rank's slice along dimension 0 (shape s: its local
// dims and offsets) of a whole row-major tensor: a contiguous range.
static inline const void *coco_send_slice(const void *whole, const CocoShape &s, size_t esize)
{
    long inner = 1;
    for (int k = 1; k < s.nd; k++)
        inner *= s.dim[k];
    return (const char *)whole + (size_t)(s.off[0] * inner) * esize;
}

// The device communicator for the kernel: the runtime's (PEER), else zeros
// (the kernel then never reads it).
static inline ncclDevComm coco_send_devcomm(const coco_cuda_ctx *ctx, int peer)
{
    ncclDevComm dc;
    memset(&dc, 0, sizeof dc);
    if (peer)
        dc = *(const ncclDevComm *)ctx->lsa_comm;
    return dc;
}
