// tests/gen/overlap_chunks.cu: the chunk count of overlap(MatMul,
// FusedAllReduce) (coco_overlap_chunks, rt/kernels/coco_overlap.cuh), on
// the host: the default by the MatMul's FLOPs per collective byte, the knob
// over it, and the shapes that are never chunked. Built by
// tests/groups/74-cuda-gen.sh against a generated folder's headers; prints
// one line per failed case and exits 1 if any failed. No GPU is needed.
#include "coco_device.cuh"

static int failed;

static void expect(const char *what, int got, int want)
{
    if (got != want) {
        printf("overlap chunks, %s: %d, expected %d\n", what, got, want);
        failed = 1;
    }
}

// M rows of N, K deep, es-byte elements, over P ranks, parts of whole rows
static int chunks(long knob, long M, long N, long K, long es, long P)
{
    coco_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.overlap_chunks = (int)knob;
    return coco_overlap_chunks(&ctx, M, N, K, es, P, M / P * N, M * N);
}

int main(void)
{
    // the paper's layers at B = 8, S = 1024, H = 3072 (K: a rank's depth)
    expect("MLP, P = 4, FP16 (2048 FLOP/B)", chunks(0, 8192, 3072, 3072, 2, 4), 4);
    expect("MLP, P = 2, FP16 (6144 FLOP/B)", chunks(0, 8192, 3072, 6144, 2, 2), 1);
    expect("self-attention, P = 4, FP16 (512 FLOP/B)", chunks(0, 8192, 3072, 768, 2, 4), 1);
    expect("self-attention, P = 2, FP16 (1536 FLOP/B)", chunks(0, 8192, 3072, 1536, 2, 2), 1);
    expect("MLP, P = 4, FP32 (1024 FLOP/B)", chunks(0, 8192, 3072, 3072, 4, 4), 1);
    expect("just below 4096 FLOP/B", chunks(0, 8192, 3072, 3071, 1, 4), 4);
    expect("4096 FLOP/B", chunks(0, 8192, 3072, 4096, 2, 2), 1);
    expect("one rank", chunks(0, 8192, 3072, 3072, 2, 1), 1);
    // fewer than 512 rows of a part a chunk: none (B = 8, above, has 512)
    expect("MLP, P = 4, B = 4 (256 rows a chunk)", chunks(0, 4096, 3072, 3072, 2, 4), 1);
    expect("MLP, P = 4, B = 1 (64 rows a chunk)", chunks(0, 1024, 3072, 3072, 2, 4), 1);
    expect("MLP, P = 4, B = 16", chunks(0, 16384, 3072, 3072, 2, 4), 4);
    // the knob wins over the default, both ways, bounded by the part's rows
    expect("knob 1 where the default chunks", chunks(1, 8192, 3072, 3072, 2, 4), 1);
    expect("knob 8 where the default does not", chunks(8, 8192, 3072, 768, 2, 4), 8);
    expect("knob 64 over 8 rows a part", chunks(64, 32, 16, 3072, 2, 4), 8);
    // rows that do not part the tensor as the kernels do: never chunked
    expect("M not a multiple of P", chunks(4, 8190, 3072, 3072, 2, 4), 1);
    coco_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    expect("parts not whole rows", coco_overlap_chunks(&ctx, 8192, 3072, 3072, 2, 4, 100, 8192L * 3072), 1);
    if (!failed)
        printf("overlap chunks: every case as expected\n");
    return failed;
}
