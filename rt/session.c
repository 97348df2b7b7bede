/* session.c: generated code called on the caller's device memory and
 * stream (include/coconet_session.h), for processes that own their data on
 * the GPU (python/coconet/torch). Opening makes what the launcher's rank
 * makes (cuda_child.c: communicators, cuBLASLt, knobs) once; the arena is
 * one block of device memory, a symmetric NCCL window when there are peers,
 * handed out by a bump allocator whose every step the ranks check agree
 * (same size, same offset); a call looks its entry points and workspace up
 * in small tables and enqueues the variant on the caller's stream. */
#include "rt_internal.h"

#include "coconet_session.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ARENA_ALIGN = 512, DEFAULT_ARENA = 1 << 30, MAXGROUPS = 8 };

/* A variant's workspace for one list of sizes; nccl: sized for the NCCL
 * paths of its fused collectives too (a call with buffers outside the
 * arena takes them: their buffers come from the workspace's end). */
typedef struct Workspace {
    long *size;
    int nsize;
    int nccl;
    void *ws;
    size_t bytes;
    struct Workspace *next;
} Workspace;

/* A variant's entry points, and its workspaces. */
typedef struct Entry {
    int module;
    char name[128];
    RtEntry sym;
    Workspace *ws;
    struct Entry *next;
} Entry;

struct coco_session {
    CocoRt rt;              /* communicators, handles and knobs, as a launcher's rank */
    void **so;              /* the generated objects loaded, in load order */
    int nmodules, so_cap;
    char *arena;            /* base, size and bytes handed out */
    size_t arena_bytes, used;
    int nccl_mem;           /* the arena came from ncclMemAlloc */
    ncclWindow_t window;    /* over rt.world_window, or NULL */
    int world_adopted;      /* rt.world is the caller's (cfg->world): never destroyed here */
    long long *agree;       /* 3 on the device: what alloc's ranks compare */
    Entry *entries;
    int group_sizes[MAXGROUPS];     /* GROUP communicators, by group size */
    ncclComm_t groups[MAXGROUPS];
    int ngroups;
    char msg[2048];         /* the generated code's message */
};

int coco_session_abi(void)
{
    return COCO_SESSION_ABI;
}

int coco_session_nccl(char *path, size_t len)
{
    int version = 0;
    ncclResult_t r = ncclGetVersion(&version);
    if (r != ncclSuccess) {
        snprintf(path, len, "ncclGetVersion: %s", ncclGetErrorString(r));
        return -1;
    }
    rt_nccl_library_path(path, len);
    return version;
}

int coco_session_unique_id(unsigned char id[COCO_SESSION_ID_BYTES], char *err, size_t errlen)
{
    _Static_assert(COCO_SESSION_ID_BYTES == COCO_RT_ID_BYTES, "one NCCL id size");
    return rt_unique_id(id, err, errlen);
}

static void set_err(coco_session *s, char *err, size_t errlen)
{
    s->rt.err = err;
    s->rt.errlen = errlen;
    if (errlen)
        err[0] = 0;
}

/* ---- opening ---- */

/* The caller's communicator as WORLD, once it is checked to be over this
 * run's ranks, with this process as cfg->rank, on this rank's device. */
static int adopt_world(coco_session *s, const coco_session_config *cfg)
{
    CocoRt *rt = &s->rt;
    ncclComm_t comm = (ncclComm_t)cfg->world;
    int count = -1, rank = -1, device = -1;
    NCCL_OK(rt, ncclCommCount(comm, &count));
    NCCL_OK(rt, ncclCommUserRank(comm, &rank));
    NCCL_OK(rt, ncclCommCuDevice(comm, &device));
    if (count != cfg->nranks || rank != cfg->rank || device != rt->device)
        return rt_error(rt, "the communicator given as WORLD is rank %d of %d on GPU %d, not "
                        "rank %d of %d on GPU %d", rank, count, device, cfg->rank,
                        cfg->nranks, rt->device);
    rt->world = comm;
    s->world_adopted = 1;
    return 0;
}

static int open_comms(coco_session *s, const coco_session_config *cfg)
{
    CocoRt *rt = &s->rt;
    if (cfg->world) {
        if (adopt_world(s, cfg))
            return -1;
    } else {
        ncclUniqueId id;
        memcpy(&id, cfg->nccl_id, sizeof id);
        NCCL_OK(rt, ncclCommInitRank(&rt->world, cfg->nranks, id, cfg->rank));
    }
    if (rt_split_group(rt, cfg->nranks, cfg->rank, cfg->group_size))
        return -1;
    if (cfg->group_size > 0) {
        s->group_sizes[0] = cfg->group_size;
        s->groups[0] = rt->group;
        s->ngroups = 1;
    }
    return 0;
}

/* The communicator over this rank's GROUP of `size` ranks (made at the
 * first call that asks for it: a collective step), or NULL for none. */
static int group_comm(coco_session *s, int size, ncclComm_t *comm)
{
    CocoRt *rt = &s->rt;
    *comm = NULL;
    if (size <= 0)
        return 0;
    for (int i = 0; i < s->ngroups; i++)
        if (s->group_sizes[i] == size) {
            *comm = s->groups[i];
            return 0;
        }
    if (rt->nranks % size)
        return rt_error(rt, "GROUP size %d does not divide the %d ranks", size, rt->nranks);
    if (s->ngroups == MAXGROUPS)
        return rt_error(rt, "more than %d GROUP sizes in one session", MAXGROUPS);
    NCCL_OK(rt, ncclCommSplit(rt->world, rt->rank / size, rt->rank, &s->groups[s->ngroups],
                              NULL));
    s->group_sizes[s->ngroups] = size;
    *comm = s->groups[s->ngroups++];
    return 0;
}

/* The arena: with peers (and the fused collectives not turned off), NCCL
 * memory registered as a symmetric window on WORLD's twin (as the
 * launcher's slab, cuda_child.c open_lsa); one rank: plain device memory,
 * which its fused kernels address directly (lsa_base stays NULL). */
static int open_arena(coco_session *s, size_t bytes)
{
    CocoRt *rt = &s->rt;
    s->arena_bytes = bytes ? (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN
                           : (size_t)DEFAULT_ARENA;
    CUDA_OK(rt, cudaMalloc((void **)&s->agree, 3 * sizeof *s->agree));
    if (rt->nranks > 1 && rt->fused_algo != COCO_FUSED_NCCL) {
        NCCL_OK(rt, ncclCommSplit(rt->world, 0, rt->rank, &rt->world_window, NULL));
        NCCL_OK(rt, ncclMemAlloc((void **)&s->arena, s->arena_bytes));
        s->nccl_mem = 1;
        NCCL_OK(rt, ncclCommWindowRegister(rt->world_window, s->arena, s->arena_bytes,
                                           &s->window, NCCL_WIN_COLL_SYMMETRIC));
    } else {
        CUDA_OK(rt, cudaMalloc((void **)&s->arena, s->arena_bytes));
    }
    CUDA_OK(rt, cudaMemset(s->arena, 0, s->arena_bytes));
    CUDA_OK(rt, cudaDeviceSynchronize());
    return 0;
}

static int open_handles(coco_session *s)
{
    CocoRt *rt = &s->rt;
    CUDA_OK(rt, cudaStreamCreateWithFlags(&rt->stream, cudaStreamNonBlocking));
    CUDA_OK(rt, cudaStreamCreateWithFlags(&rt->side, cudaStreamNonBlocking));
    LT_OK(rt, cublasLtCreate(&rt->lt));
    CUDA_OK(rt, cudaMalloc(&rt->lt_workspace, LT_WORKSPACE));
    return 0;
}

coco_session *coco_session_open(const coco_session_config *cfg, char *err, size_t errlen)
{
    coco_session *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "rank %d: out of memory", cfg->rank);
        return NULL;
    }
    CocoRt *rt = &s->rt;
    set_err(s, err, errlen);
    rt->rank = cfg->rank;
    rt->nranks = cfg->nranks;
    rt->group_size = cfg->group_size > 0 ? cfg->group_size : cfg->nranks;
    rt->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 300;
    if (cfg->nranks < 1 || cfg->rank < 0 || cfg->rank >= cfg->nranks) {
        rt_error(rt, "rank %d of %d ranks: not a rank of the run", cfg->rank, cfg->nranks);
        free(s);
        return NULL;
    }
    ncclGetVersion(&rt->nccl_loaded);
    if (rt_read_knobs(rt) || rt_select_device(rt, cfg->device) || open_handles(s) ||
        open_comms(s, cfg) || open_arena(s, cfg->arena_bytes)) {
        coco_session_close(s, 1);
        return NULL;
    }
    return s;
}

/* ---- modules ---- */

/* The device communicator over the window, made by the first module that
 * has fused collectives (NCCL's device API is C++: the generated code makes
 * it); any module's kernels take it, all being built against one NCCL. */
static int open_devcomm(coco_session *s, void *so)
{
    CocoRt *rt = &s->rt;
    coco_lsa_open_fn open = (coco_lsa_open_fn)(size_t)dlsym(so, "coco_lsa_open");
    if (rt->lsa || !open || !s->window)
        return 0;
    char why[512] = "";
    if (open(rt->world_window, LSA_BLOCKS, &rt->lsa, why, sizeof why))
        return rt_error(rt, "the device communicator of the fused collectives: %s", why);
    if (rt->lsa)
        rt->so = so; /* whose coco_lsa_close frees it */
    return 0;
}

int coco_session_load(coco_session *s, const char *so_path, char *err, size_t errlen)
{
    set_err(s, err, errlen);
    if (s->nmodules == s->so_cap) {
        int cap = s->so_cap ? 2 * s->so_cap : 16;
        void **grown = realloc(s->so, (size_t)cap * sizeof *grown);
        if (!grown)
            return rt_error(&s->rt, "out of host memory for the %d-th generated object",
                            s->nmodules + 1);
        s->so = grown;
        s->so_cap = cap;
    }
    void *so = NULL;
    if (rt_load_so(&s->rt, so_path, &so) || open_devcomm(s, so)) {
        if (so)
            dlclose(so);
        return -1;
    }
    s->so[s->nmodules] = so;
    return s->nmodules++;
}

int coco_session_output_alias(coco_session *s, int module, int output)
{
    if (module < 0 || module >= s->nmodules)
        return -2;
    const int *alias = (const int *)dlsym(s->so[module], "coco_output_alias");
    if (!alias)
        return -1;
    for (int i = 0; i <= output; i++)
        if (alias[i] == -2)
            return -2;
    return alias[output];
}

/* ---- the arena ---- */

/* Every rank's buffer starts at the same offset, and takes the largest
 * size any rank asks (uneven slices: the offsets of the buffers after it
 * stay the same on every rank): one AllReduce (max) of {bytes, offset,
 * -offset} on the session's stream; *bytes becomes the largest. */
static int agree(coco_session *s, size_t *bytes)
{
    CocoRt *rt = &s->rt;
    if (rt->nranks == 1)
        return 0;
    long long mine[3] = {(long long)*bytes, (long long)s->used, -(long long)s->used}, all[3];
    CUDA_OK(rt, cudaMemcpyAsync(s->agree, mine, sizeof mine, cudaMemcpyHostToDevice, rt->stream));
    NCCL_OK(rt, ncclAllReduce(s->agree, s->agree, 3, ncclInt64, ncclMax, rt->world, rt->stream));
    CUDA_OK(rt, cudaMemcpyAsync(all, s->agree, sizeof all, cudaMemcpyDeviceToHost, rt->stream));
    if (wait_gpu(rt, rt->stream, NULL, "agreeing on an arena buffer"))
        return -1;
    if (all[1] != -all[2])
        return rt_error(rt, "arena buffers out of step across ranks: this rank's next buffer "
                        "starts at offset %zu, another's at %lld; every rank must allocate its "
                        "buffers in the same order", s->used,
                        all[1] != (long long)s->used ? all[1] : -all[2]);
    *bytes = (size_t)all[0];
    return 0;
}

static void *arena_take(coco_session *s, size_t bytes)
{
    size_t want = (bytes ? bytes : 1) + ARENA_ALIGN - 1;
    want -= want % ARENA_ALIGN;
    if (agree(s, &want))
        return NULL;
    if (want > s->arena_bytes - s->used) {
        rt_error(&s->rt, "the arena is full: %zu of its %zu bytes are handed out and %zu more "
                 "are asked; make it larger (COCONET_ARENA_BYTES, or arena_bytes when the "
                 "session opens)", s->used, s->arena_bytes, want);
        return NULL;
    }
    void *p = s->arena + s->used;
    s->used += want;
    return p;
}

void *coco_session_alloc(coco_session *s, size_t bytes, char *err, size_t errlen)
{
    set_err(s, err, errlen);
    return arena_take(s, bytes);
}

void coco_session_arena(const coco_session *s, void **base, size_t *bytes, size_t *used)
{
    *base = s->arena;
    *bytes = s->arena_bytes;
    *used = s->used;
}

/* ---- calls ---- */

static void make_ctx(coco_session *s, const coco_session_call_args *a, coco_cuda_ctx *c)
{
    CocoRt *rt = &s->rt;
    memset(c, 0, sizeof *c);
    rt_setup_ctx(rt, c, s->msg, sizeof s->msg); /* the launcher's context (run.c) */
    c->stream = a->stream;                      /* the caller's stream and knobs */
    if (a->fused_algo >= 0)
        c->fused_algo = a->fused_algo;
    if (a->overlap_chunks >= 0)
        c->overlap_chunks = a->overlap_chunks;
    if (rt->lsa) { /* one rank: no window, lsa_base NULL (coco_lsa_usable) */
        c->world_window = rt->world_window;
        c->lsa_window = s->window;
        c->lsa_base = s->arena;
        c->lsa_bytes = s->arena_bytes;
    }
}

static Entry *find_entry(coco_session *s, int module, const char *name)
{
    for (Entry *e = s->entries; e; e = e->next)
        if (e->module == module && !strcmp(e->name, name))
            return e;
    if (module < 0 || module >= s->nmodules) {
        rt_error(&s->rt, "no module %d: %d generated objects are loaded", module, s->nmodules);
        return NULL;
    }
    if (strlen(name) >= sizeof ((Entry *)0)->name) {
        rt_error(&s->rt, "a variant's name is too long: '%.40s...'", name);
        return NULL;
    }
    RtEntry sym;
    if (rt_find_entry(&s->rt, s->so[module], name, &sym))
        return NULL;
    Entry *e = calloc(1, sizeof *e);
    if (!e) {
        rt_error(&s->rt, "out of host memory");
        return NULL;
    }
    e->module = module;
    snprintf(e->name, sizeof e->name, "%s", name);
    e->sym = sym;
    e->next = s->entries;
    s->entries = e;
    return e;
}

/* The variant's workspace for these sizes, made in the arena at the first
 * call with them (a collective step: every rank makes the same call) and
 * kept for later calls with the same sizes; with nccl, one that also holds
 * the NCCL paths' buffers (the dry run asked as COCONET_FUSED=nccl would). */
static int workspace(coco_session *s, Entry *e, const coco_session_call_args *a, int nccl,
                     coco_cuda_ctx *c)
{
    size_t n = (size_t)a->nsize * sizeof *a->size;
    for (Workspace *w = e->ws; w; w = w->next)
        if (w->nsize == a->nsize && (!n || !memcmp(w->size, a->size, n)) && w->nccl >= nccl) {
            c->workspace = w->ws;
            c->workspace_bytes = w->bytes;
            return 0;
        }
    coco_cuda_ctx dry = *c;
    if (nccl)
        dry.fused_algo = COCO_FUSED_NCCL;
    size_t bytes = e->sym.workspace(&dry, a->size);
    void *ws = bytes ? arena_take(s, bytes) : NULL;
    if (bytes && !ws)
        return -1;
    Workspace *w = calloc(1, sizeof *w);
    long *size = malloc(n + sizeof *size);
    if (!w || !size) {
        free(w);
        free(size);
        return rt_error(&s->rt, "out of host memory");
    }
    if (n)
        memcpy(size, a->size, n);
    *w = (Workspace){size, a->nsize, nccl, ws, bytes, e->ws};
    e->ws = w;
    c->workspace = ws;
    c->workspace_bytes = bytes;
    return 0;
}

static int in_arena(const coco_session *s, const void *p, size_t bytes)
{
    const char *b = (const char *)p;
    return b >= s->arena && bytes <= s->arena_bytes &&
           (size_t)(b - s->arena) <= s->arena_bytes - bytes;
}

/* Is argument i one the variant's one-kernel collectives reach in the
 * peers' windows (list: -1 ends; NULL: every argument is)? */
static int in_list(const int *list, int i)
{
    if (!list)
        return 1;
    for (int k = 0; list[k] >= 0; k++)
        if (list[k] == i)
            return 1;
    return 0;
}

/* How many of the call's buffers that the peers reach lie outside the
 * arena (their collectives take the NCCL path; operands read only here,
 * such as a MatMul's, may lie anywhere). */
static int count_outside(const coco_session *s, const Entry *e, const coco_session_call_args *a)
{
    int n = 0;
    for (int i = 0; i < a->ninputs; i++) {
        if (!in_list(e->sym.window_in, i))
            continue;
        if (a->nmembers && a->nmembers[i] > 0 && a->members && a->members[i]) {
            for (int m = 0; m < a->nmembers[i]; m++)
                n += !in_arena(s, a->members[i][m], a->member_bytes[i][m]);
        } else if (a->input[i]) {
            n += !in_arena(s, a->input[i], a->input_bytes ? a->input_bytes[i] : 0);
        }
    }
    for (int i = 0; i < a->noutputs; i++)
        if (a->output[i] && in_list(e->sym.window_out, i))
            n += !in_arena(s, a->output[i], a->output_bytes ? a->output_bytes[i] : 0);
    return n;
}

int coco_session_call(coco_session *s, coco_session_call_args *a, char *err, size_t errlen)
{
    set_err(s, err, errlen);
    Entry *e = find_entry(s, a->module, a->variant);
    if (!e)
        return -1;
    coco_cuda_ctx c;
    make_ctx(s, a, &c);
    ncclComm_t group;
    if (group_comm(s, a->group_size, &group))
        return -1;
    c.group = group;
    c.group_size = group ? a->group_size : s->rt.nranks;
    a->outside = count_outside(s, e, a);
    if (workspace(s, e, a, a->outside && s->rt.nranks > 1, &c))
        return -1;
    coco_cuda_args args = {a->input, a->scalar, a->output, a->size, a->seed, a->members};
    s->msg[0] = 0;
    if (e->sym.run(&c, &args))
        return rt_error(&s->rt, "%s: %s", a->variant, s->msg[0] ? s->msg : "failed (no message)");
    return 0;
}

int coco_session_wait(coco_session *s, void *stream, char *err, size_t errlen)
{
    set_err(s, err, errlen);
    return wait_gpu(&s->rt, stream ? (cudaStream_t)stream : s->rt.stream, NULL,
                    "waiting for the stream");
}

void coco_session_describe(const coco_session *s, char *buf, size_t len)
{
    const CocoRt *rt = &s->rt;
    snprintf(buf, len, "rank %d of %d, GPU %d, NCCL %d.%d.%d, WORLD: %s, arena %zu bytes (%s), "
             "fused collectives: %s", rt->rank, rt->nranks, rt->device, rt->nccl_loaded / 10000,
             rt->nccl_loaded / 100 % 100, rt->nccl_loaded % 100,
             s->world_adopted ? "the caller's communicator" : "the session's own communicator",
             s->arena_bytes,
             s->window ? "a symmetric NCCL window" : "device memory",
             rt->lsa              ? "one kernel over the peers' memory (arena buffers)"
             : rt->fused_algo == COCO_FUSED_NCCL ? "NCCL calls (COCONET_FUSED=nccl)"
             : rt->nranks == 1    ? "one kernel over local memory (one rank)"
                                  : "NCCL calls (no device communicator)");
}

void coco_session_close(coco_session *s, int abort)
{
    if (!s)
        return;
    CocoRt *rt = &s->rt;
    if (!abort && rt->lsa && rt->so) {
        coco_lsa_close_fn close = (coco_lsa_close_fn)(size_t)dlsym(rt->so, "coco_lsa_close");
        if (close)
            close(rt->world_window, rt->lsa);
    }
    if (s->window && !abort)
        ncclCommWindowDeregister(rt->world_window, s->window);
    for (int i = 0; i < s->ngroups; i++) /* rt->group is groups[0] */
        abort ? ncclCommAbort(s->groups[i]) : ncclCommDestroy(s->groups[i]);
    if (rt->world_window)
        abort ? ncclCommAbort(rt->world_window) : ncclCommDestroy(rt->world_window);
    if (rt->world && !s->world_adopted) /* an adopted one is its owner's to close */
        abort ? ncclCommAbort(rt->world) : ncclCommDestroy(rt->world);
    if (!abort) { /* after a failure the device may be unusable: leave it to exit */
        if (s->arena && s->nccl_mem)
            ncclMemFree(s->arena);
        else if (s->arena)
            cudaFree(s->arena);
        cudaFree(s->agree);
        if (rt->lt)
            cublasLtDestroy(rt->lt);
        cudaFree(rt->lt_workspace);
        if (rt->stream)
            cudaStreamDestroy(rt->stream);
        if (rt->side)
            cudaStreamDestroy(rt->side);
    }
    for (int i = 0; i < s->nmodules; i++)
        dlclose(s->so[i]);
    free(s->so);
    for (Entry *e = s->entries, *next; e; e = next) {
        next = e->next;
        for (Workspace *w = e->ws, *wn; w; w = wn) {
            wn = w->next;
            free(w->size);
            free(w);
        }
        free(e);
    }
    free(s);
}
