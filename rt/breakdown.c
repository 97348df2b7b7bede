/* breakdown.c: the events of `coconet run --backend cuda --breakdown`. In a
 * breakdown run the generated code calls rt_mark (ctx->mark) after each
 * kernel launch and library call it enqueues; each mark records an event on
 * the rank's stream, so that the time between two events is the work the
 * call between them enqueued (run.c reads them after the run). The calls
 * between ncclGroupStart and ncclGroupEnd enqueue nothing until the end of
 * the group: they make one step, marked at ncclGroupEnd. */
#include "rt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void marks_begin(Marks *m, CocoRt *rt)
{
    m->rt = rt;
    m->n = 0;
    m->depth = 0;
    m->why[0] = 0;
    memset(&m->group, 0, sizeof m->group);
}

void marks_free(Marks *m)
{
    for (int i = 0; i < m->cap; i++)
        cudaEventDestroy(m->event[i]);
    free(m->event);
    free(m->step);
    memset(m, 0, sizeof *m);
}

static void fail(Marks *m, const char *what, cudaError_t e)
{
    if (!m->why[0])
        snprintf(m->why, sizeof m->why, "%s: %s", what, cudaGetErrorString(e));
}

static int grow(Marks *m)
{
    int cap = m->cap ? 2 * m->cap : 64;
    cudaEvent_t *ev = realloc(m->event, (size_t)cap * sizeof *ev);
    if (ev)
        m->event = ev;
    CocoRtStep *st = realloc(m->step, (size_t)cap * sizeof *st);
    if (st)
        m->step = st;
    if (!ev || !st) {
        snprintf(m->why, sizeof m->why, "out of memory for the breakdown's events");
        return -1;
    }
    for (int i = m->cap; i < cap; i++) {
        cudaError_t e = cudaEventCreate(&m->event[i]);
        if (e != cudaSuccess) {
            fail(m, "cudaEventCreate", e);
            return -1;
        }
        m->cap = i + 1;
    }
    return 0;
}

static void record(Marks *m, const CocoRtStep *s)
{
    if (m->why[0] || (m->n == m->cap && grow(m)))
        return;
    cudaError_t e = cudaEventRecord(m->event[m->n], m->rt->stream);
    if (e != cudaSuccess) {
        fail(m, "cudaEventRecord", e);
        return;
    }
    m->step[m->n++] = *s;
}

/* "ncclAllReduce(src, dst, ...)" -> "ncclAllReduce" */
static void call_name(const char *call, char *out, size_t len)
{
    size_t n = strcspn(call, "( ");
    if (n >= len)
        n = len - 1;
    memcpy(out, call, n);
    out[n] = 0;
}

void rt_mark(void *marks, int kind, const char *op, int line, const char *call)
{
    Marks *m = marks;
    CocoRtStep s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    s.line = line;
    s.calls = 1;
    snprintf(s.op, sizeof s.op, "%s", op);
    call_name(call, s.call, sizeof s.call);
    if (kind == COCO_MARK_NCCL && !strcmp(s.call, "ncclGroupStart")) {
        if (m->depth++ == 0)
            memset(&m->group, 0, sizeof m->group);
        return;
    }
    if (kind == COCO_MARK_NCCL && !strcmp(s.call, "ncclGroupEnd")) {
        if (m->depth > 0 && --m->depth == 0)
            record(m, m->group.calls ? &m->group : &s);
        return;
    }
    if (kind == COCO_MARK_NCCL && m->depth > 0) { /* enqueued at ncclGroupEnd */
        if (!m->group.calls)
            m->group = s;
        else
            m->group.calls++;
        return;
    }
    record(m, &s);
}
