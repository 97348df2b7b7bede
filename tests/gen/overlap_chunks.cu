// tests/gen/overlap_chunks.cu: the chunk count of overlap(MatMul,
// FusedAllReduce) (coco_overlap_chunks, rt/kernels/coco_overlap.cuh), on
// the host: the default by the MatMul's FLOPs per collective byte, the knob
// over it, and the shapes that are never chunked; and the chunks of the
// overlaps by a collective's blocks (coco_overlap_block_chunks,
// coco_block_rows): one a block over several ranks, none on one, the knob
// over it, whole rows that cover every block once. Built by
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

// the chunks of each block under knob `knob`, over P ranks, blocks of at
// most `most` rows
static int block_chunks(long knob, long P, long most, long M, long width)
{
    coco_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.overlap_chunks = (int)knob;
    return coco_overlap_block_chunks(&ctx, P, most, M, width);
}

// The chunks of every block of n indices over P ranks (rpi rows an index),
// sub a block, cover rows [0, n * rpi) once, in order, each of whole rows
// and within its block.
static void expect_cover(const char *what, long n, long P, long rpi, int sub)
{
    long next = 0;
    int ok = 1;
    for (long q = 0; q < P; q++)
        for (int c = 0; c < sub; c++) {
            long first, lo, hi;
            coco_block_rows(n, P, q, rpi, sub, c, &first, &lo, &hi);
            ok &= lo == next && hi >= lo && first == coco_part_lo(n, P, q) * rpi &&
                  hi <= first + coco_part_len(n, P, q) * rpi;
            next = hi;
        }
    expect(what, ok && next == n * rpi, 1);
}

static void block_cases(void)
{
    // by default: one chunk a block over P > 1 ranks, none on one rank
    expect("blocks, P = 4, default", block_chunks(0, 4, 2048, 8192, 3072), 1);
    expect("blocks, one rank, default (the MatMul alone)", block_chunks(0, 1, 8192, 8192, 3072), 0);
    // the knob: 1 none, more that many, on one rank too (its own block)
    expect("blocks, knob 1", block_chunks(1, 4, 2048, 8192, 3072), 0);
    expect("blocks, knob 4", block_chunks(4, 4, 2048, 8192, 3072), 4);
    expect("blocks, one rank, knob 3", block_chunks(3, 1, 8192, 8192, 3072), 3);
    // at most the largest block's rows and 256 chunks in all
    expect("blocks of 2 rows, knob 8", block_chunks(8, 8, 2, 12, 16), 2);
    expect("blocks, P = 8, knob 64", block_chunks(64, 8, 4096, 32768, 16), 32);
    // nothing to multiply or to move: none
    expect("blocks, no rows", block_chunks(0, 4, 0, 0, 16), 0);
    expect("blocks, empty rows", block_chunks(0, 4, 3, 10, 0), 0);
    // whole rows covering every block once: S = 10 over 4 (3, 3, 3, 1) and
    // 8 ranks (2, 2, 2, 2, 2, 0, 0, 0), 3 rows an index
    expect_cover("cover, S = 10, P = 4, 1 a block", 10, 4, 3, 1);
    expect_cover("cover, S = 10, P = 4, 3 a block", 10, 4, 3, 3);
    expect_cover("cover, S = 10, P = 8, 4 a block", 10, 8, 3, 4);
    expect_cover("cover, T = 13, P = 3, 2 a block", 13, 3, 1, 2);
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
    block_cases();
    if (!failed)
        printf("overlap chunks: every case as expected\n");
    return failed;
}
