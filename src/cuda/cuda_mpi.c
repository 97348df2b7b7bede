/* cuda_mpi.c: the CUDA backend under an MPI launcher (`mpirun -np P coconet
 * run FILE --backend cuda`), which is how it spans several hosts. Compiled
 * with MPI only when the Makefile finds mpicc (-DCOCO_HAVE_MPI); otherwise
 * the functions below say "not under MPI" and the launcher forks.
 *
 * Each MPI process is one rank: no fork. It computes the CPU reference
 * itself (every process simulates all ranks: the same data everywhere, at
 * the price of P times the CPU work), rank 0 makes the NCCL unique id and
 * broadcasts it, each process picks its GPU by its rank on its host
 * (MPI_COMM_TYPE_SHARED), runs cuda_rank_work collecting its report lines,
 * and rank 0 gathers every rank's lines and prints the table. A rank that
 * fails prints why and calls MPI_Abort, so no other rank waits forever; the
 * watchdog of cuda_rank.c bounds every blocking call. */
#include "cuda/cuda.h"

#ifdef COCO_HAVE_MPI

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "coconet_rt.h"

static int active, world_rank, local_rank, local_size = 1;

/* mpirun sets these in the processes it starts (Open MPI, MPICH/Hydra,
 * PMIx launchers, MVAPICH). */
static int under_launcher(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                 "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i]))
            return 1;
    return 0;
}

int cuda_mpi_init(int *nranks)
{
    if (active)
        return 1;
    if (!under_launcher())
        return 0;
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS)
        return 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, nranks);
    MPI_Comm host;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &host);
    MPI_Comm_rank(host, &local_rank);
    MPI_Comm_size(host, &local_size);
    MPI_Comm_free(&host);
    active = 1;
    return 1;
}

int cuda_mpi_active(void)
{
    return active;
}

int cuda_mpi_rank(void)
{
    return world_rank;
}

int cuda_mpi_local_rank(void)
{
    return local_rank;
}

int cuda_mpi_local_size(void)
{
    return local_size;
}

int cuda_mpi_all_ok(int ok)
{
    int all = ok;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

void cuda_mpi_finish(void)
{
    if (active)
        MPI_Finalize();
    active = 0;
}

static _Noreturn void fail(const char *msg)
{
    fprintf(stderr, "coconet: %s\n", msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* A rank's report lines, gathered in one buffer. */
typedef struct {
    char *text;
    size_t len, cap;
} Lines;

static void emit_lines(void *ctx, const char *line)
{
    Lines *l = ctx;
    size_t n = strlen(line);
    if (l->len + n + 2 > l->cap) {
        l->cap = (l->len + n + 2) * 2;
        char *grown = xmalloc(l->cap);
        if (l->len)
            memcpy(grown, l->text, l->len);
        free(l->text);
        l->text = grown;
    }
    memcpy(l->text + l->len, line, n);
    l->len += n;
    l->text[l->len++] = '\n';
    l->text[l->len] = 0;
    if (!strncmp(line, "ERR ", 4))
        fail(line + 4);
}

/* Rank 0 gathers every rank's lines into the report. */
static void gather(const Lines *mine, Report *rep, int nranks)
{
    int len = (int)mine->len, *lens = NULL, *offs = NULL;
    char *all = NULL;
    if (world_rank == 0) {
        lens = xcalloc((size_t)nranks, sizeof *lens);
        offs = xcalloc((size_t)nranks, sizeof *offs);
    }
    MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (world_rank == 0) {
        long total = 0;
        for (int r = 0; r < nranks; r++) {
            offs[r] = (int)total;
            total += lens[r];
        }
        all = xmalloc((size_t)total + 1);
    }
    MPI_Gatherv(mine->text, len, MPI_CHAR, all, lens, offs, MPI_CHAR, 0, MPI_COMM_WORLD);
    for (int r = 0; world_rank == 0 && r < nranks; r++) {
        char *s = all + offs[r], *end = s + lens[r];
        while (s < end) {
            char *nl = memchr(s, '\n', (size_t)(end - s));
            if (!nl)
                break;
            *nl = 0;
            report_line(rep, r, s);
            s = nl + 1;
        }
    }
    free(all);
    free(lens);
    free(offs);
}

int cuda_mpi_run(const CudaJob *job, FILE *out)
{
    int nranks;
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != job->base->nranks)
        fail("the MPI job's size differs from the program's ranks");
    char err[4096];
    unsigned char id[COCO_RT_ID_BYTES];
    const CocoRtApi *api = cuda_load_runtime(job->runtime, err, sizeof err);
    if (!api || (world_rank == 0 && cuda_unique_id(api, id, err, sizeof err)))
        fail(err);
    cuda_watchdog(world_rank, job->timeout_s + 60, "receiving the NCCL id");
    MPI_Bcast(id, COCO_RT_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
    Lines mine = {NULL, 0, 0};
    CudaRankPlace at = {.rank = world_rank, .local_rank = local_rank, .sharing = 1};
    cuda_rank_work(job, api, &at, id, emit_lines, &mine);
    cuda_watchdog(world_rank, job->timeout_s + 60, "gathering the reports");
    Report rep;
    report_init(&rep, nranks, job->nv);
    gather(&mine, &rep, nranks);
    cuda_watchdog(world_rank, 0, NULL);
    int bad = world_rank == 0 ? report_print(job, &rep, out) : 0;
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    report_free(&rep);
    free(mine.text);
    return bad;
}

#else /* no MPI in this build */

int cuda_mpi_init(int *nranks)
{
    (void)nranks;
    return 0;
}

int cuda_mpi_active(void)
{
    return 0;
}

int cuda_mpi_rank(void)
{
    return 0;
}

int cuda_mpi_local_rank(void)
{
    return 0;
}

int cuda_mpi_local_size(void)
{
    return 1;
}

int cuda_mpi_all_ok(int ok)
{
    return ok;
}

void cuda_mpi_finish(void)
{
}

int cuda_mpi_run(const CudaJob *job, FILE *out)
{
    (void)job;
    (void)out;
    BUG("cuda_mpi_run without MPI");
}

#endif

int coco_cuda_mpi_init(int *nranks)
{
    return cuda_mpi_init(nranks);
}
