/* fake_rt.c: a stand-in for the CUDA runtime (build/fake/libfake_rt.so),
 * with the interface of rt/cuda_child.h but no CUDA: it loads the
 * "generated" object and calls its entry points on host memory. Only for
 * host-only objects such as tests/gpu/host.cu: it lets the launcher's tests
 * (tests/unit/test_cuda_launch.c) run the whole path (build, cache, fork,
 * NCCL id exchange, reports, table, failures) on machines without a GPU.
 *
 * FAKE_RT_MODE makes rank FAKE_RT_RANK (default 1) misbehave:
 *   wrong  changes one output element      crash  dies of SIGSEGV in run
 *   hang   never returns from run          error  returns an error from run
 *   abi    reports another ABI version */
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../rt/cuda_child.h"
#include "coconet_cuda.h"

struct CocoRt {
    int rank, nranks, group_size;
    void *so;
};

static int misbehaves(int rank, const char *mode)
{
    const char *m = getenv("FAKE_RT_MODE"), *r = getenv("FAKE_RT_RANK");
    return m && !strcmp(m, mode) && rank == (r ? atoi(r) : 1);
}

static int unique_id(unsigned char id[COCO_RT_ID_BYTES], char *err, size_t errlen)
{
    for (int i = 0; i < COCO_RT_ID_BYTES; i++)
        id[i] = (unsigned char)(i * 7 + 3);
    return 0;
}

static CocoRt *rt_open(const CocoRtConfig *cfg, char *err, size_t errlen)
{
    for (int i = 0; i < COCO_RT_ID_BYTES; i++)
        if (cfg->nccl_id[i] != (unsigned char)(i * 7 + 3)) {
            snprintf(err, errlen, "rank %d: the NCCL id did not arrive intact", cfg->rank);
            return NULL;
        }
    CocoRt *rt = calloc(1, sizeof *rt);
    rt->rank = cfg->rank;
    rt->nranks = cfg->nranks;
    rt->group_size = cfg->group_size > 0 ? cfg->group_size : cfg->nranks;
    rt->so = dlopen(cfg->so_path, RTLD_NOW | RTLD_LOCAL);
    if (!rt->so) {
        snprintf(err, errlen, "rank %d: cannot load the generated code: %s", cfg->rank,
                 dlerror());
        free(rt);
        return NULL;
    }
    return rt;
}

static void copy_in(const CocoRtVariant *v, void **in)
{
    for (int i = 0; i < v->ninputs; i++) {
        if (!v->input[i])
            continue;
        in[i] = malloc(v->input_bytes[i] + 1);
        memcpy(in[i], v->input[i], v->input_bytes[i]);
    }
}

static int rt_run(CocoRt *rt, const CocoRtVariant *v, CocoRtTiming *t, char *err,
                  size_t errlen)
{
    char sym[256];
    snprintf(sym, sizeof sym, "coco_run__%s", v->name);
    coco_cuda_run_fn run = (coco_cuda_run_fn)(size_t)dlsym(rt->so, sym);
    if (!run) {
        snprintf(err, errlen, "rank %d: the generated code has no entry point %s", rt->rank,
                 sym);
        return -1;
    }
    if (misbehaves(rt->rank, "crash"))
        raise(SIGSEGV);
    while (misbehaves(rt->rank, "hang"))
        sleep(1);
    if (misbehaves(rt->rank, "error")) {
        snprintf(err, errlen, "rank %d: fake failure in %s", rt->rank, v->name);
        return -1;
    }
    void *in[256] = {0};
    char msg[256] = "";
    coco_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.rank = rt->rank;
    ctx.nranks = rt->nranks;
    ctx.group_size = rt->group_size;
    ctx.err = msg;
    ctx.errlen = sizeof msg;
    coco_cuda_args args = {in, v->scalar, v->output, v->size, v->seed, NULL}; /* no scattered inputs */
    copy_in(v, in);
    int rc = run(&ctx, &args);
    for (int i = 0; i < v->ninputs; i++) {
        if (v->updated && v->updated[i])
            memcpy(v->updated[i], in[i], v->input_bytes[i]);
        free(in[i]);
    }
    if (misbehaves(rt->rank, "wrong") && v->noutputs && v->output_bytes[0])
        ((unsigned char *)v->output[0])[0] ^= 0x40;
    memset(t, 0, sizeof *t);
    t->median_ms = t->min_ms = t->max_ms = 0.001 * (rt->rank + 1);
    if (rc)
        snprintf(err, errlen, "rank %d: %s", rt->rank, msg);
    return rc ? -1 : 0;
}

static void rt_close(CocoRt *rt, int abort)
{
    if (rt && rt->so)
        dlclose(rt->so);
    free(rt);
}

static void describe(CocoRt *rt, char *buf, size_t len)
{
    snprintf(buf, len, "a stand-in runtime without GPU");
}

const CocoRtApi *coco_rt_api(void);

const CocoRtApi *coco_rt_api(void)
{
    static CocoRtApi api = {COCO_RT_ABI, unique_id, rt_open, rt_run, rt_close, describe};
    const char *m = getenv("FAKE_RT_MODE");
    if (m && !strcmp(m, "abi"))
        api.abi = COCO_RT_ABI + 100;
    return &api;
}
