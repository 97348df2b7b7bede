// hog.cu: another process that holds a GPU's memory, for the fault tests
// (tests/gpu/run.sh, part faults: a run on a GPU whose memory is taken).
//   nvcc -o hog tests/gpu/hog.cu && ./hog LEAVE_MIB
// On the first visible GPU, allocates all its free memory but LEAVE_MIB,
// prints "held X MiB, Y MiB free of Z MiB", then sleeps until killed.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const size_t mib = 1 << 20;
    size_t leave = (argc > 1 ? (size_t)atol(argv[1]) : 1024) * mib, held = 0, free_b, total;
    if (cudaSetDevice(0) != cudaSuccess || cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        fprintf(stderr, "hog: no usable GPU\n");
        return 1;
    }
    // in shrinking pieces, as long as more than `leave` is free
    for (size_t piece = 1024 * mib; piece >= mib;) {
        void *p;
        cudaMemGetInfo(&free_b, &total);
        if (free_b < leave + piece || cudaMalloc(&p, piece) != cudaSuccess) {
            cudaGetLastError();
            piece /= 2;
            continue;
        }
        held += piece;
    }
    cudaMemGetInfo(&free_b, &total);
    printf("held %zu MiB, %zu MiB free of %zu MiB\n", held / mib, free_b / mib, total / mib);
    fflush(stdout);
    for (;;)
        pause();
}
