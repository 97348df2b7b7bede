// bench/probe/probe_util.cuh: what the probes share: CK (a CUDA call that
// must succeed, else main returns 1) and probe_shape (a whole tensor's
// CocoShape of nd dimensions d).
#pragma once

#include <string.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_) {                                                                                  \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                                        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static CocoShape probe_shape(int nd, const long *d)
{
    CocoShape s;
    memset(&s, 0, sizeof s);
    s.nd = nd;
    for (int k = 0; k < nd; k++)
        s.dim[k] = s.gdim[k] = d[k];
    return s;
}
