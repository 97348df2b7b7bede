/* cuda_report.c: what the ranks of a CUDA run say and the table made of it.
 *
 * A rank sends one line per event (through a pipe to the parent, or
 * gathered over MPI):
 *   GPU <description>                      the GPU and NCCL it runs on
 *   ROW v differing elements outside max-abs max-rel median-ms min-ms max-ms
 *       worst n hash1 .. hashn             variant v checked and timed
 *   LIMITS measured|cached copy peer gemm key   rank 0's GPU's limits (or
 *   LIMITS none <why>                      why they are unknown): cuda_limits.c
 *   STEPS v n differ                       --breakdown: v made n steps (differ:
 *                                          runs with other steps, left out)
 *   STEP v i line kind calls ms call op    one of them: its median time
 *   FAULT v GUARD|REPEAT <message>         the runtime's own checks of v failed:
 *                                          a write outside a buffer, or a
 *                                          repeat run with other bits
 *   ERR <message>                          it failed (and will exit non-zero)
 *   DONE                                   every variant ran
 * The table: the program's CPU reference summarised as the CPU backend
 * does, then one row per variant (the program first) over all ranks:
 * bitwise / rounding (within tolerance) / WRONG / REPLICAS (a Replicated
 * value whose bits differ between the ranks of a group) / GUARD (a guard
 * byte around a buffer was written) / REPEAT (a second run on the same
 * inputs gave other bits) / FAILED (a rank did not report it), the largest
 * differences from the CPU values, the differing and out-of-tolerance
 * element counts, and the GPU time (the slowest rank's median).
 * Unchecked (--reference none): no CPU reference to summarise (a line says
 * so) and none to compare with: a row that passes the other checks says
 * "unchecked", with "-" for the differences and counts. */
#include "cuda/cuda.h"

#include <inttypes.h>

#include "coconet_rt.h" /* COCO_RT_FAULT_* */
#include <stdlib.h>
#include <string.h>

void report_init(Report *r, int nranks, int nv)
{
    memset(r, 0, sizeof *r);
    r->nranks = nranks;
    r->nv = nv;
    r->rows = xcalloc((size_t)(nranks * nv + 1), sizeof *r->rows);
    r->error = xcalloc((size_t)nranks, sizeof *r->error);
    r->done = xcalloc((size_t)nranks, sizeof *r->done);
    r->at = xcalloc((size_t)nranks, sizeof *r->at);
    r->steps_differ = xcalloc((size_t)nv + 1, sizeof *r->steps_differ);
    for (int i = 0; i < nranks; i++)
        r->at[i] = REPORT_AT_OPEN;
    r->first_failure = -1;
}

void report_free(Report *r)
{
    for (int i = 0; i < r->nranks; i++)
        free(r->error[i]);
    free(r->error);
    free(r->done);
    free(r->at);
    free(r->rows);
    free(r->step);
    free(r->steps_differ);
    memset(r, 0, sizeof *r);
}

void rank_row_line(char *buf, size_t len, int v, const RankRow *row, int nhash)
{
    int cap = (int)(sizeof row->hash / sizeof *row->hash);
    nhash = nhash < cap ? nhash : cap;
    size_t u = (size_t)snprintf(buf, len, "ROW %d %ld %ld %ld %.17g %.17g %.17g %.17g %.17g %s %d",
                                v, row->differing, row->elements, row->outside, row->max_abs,
                                row->max_rel, row->median_ms, row->min_ms, row->max_ms,
                                row->worst[0] ? row->worst : "-", nhash);
    for (int i = 0; i < nhash && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, " %016" PRIx64, row->hash[i]);
}

void report_error(Report *r, int rank, const char *msg)
{
    if (r->error[rank])
        return; /* the first reason is the one that counts */
    if (r->first_failure < 0)
        r->first_failure = rank;
    r->error[rank] = xmalloc(strlen(msg) + 1);
    strcpy(r->error[rank], msg);
}

static void parse_row(Report *r, int rank, const char *line)
{
    RankRow row;
    memset(&row, 0, sizeof row);
    int v, nhash, used = 0;
    char worst[MAXNAME];
    if (sscanf(line, "ROW %d %ld %ld %ld %lg %lg %lg %lg %lg %63s %d%n", &v, &row.differing,
               &row.elements, &row.outside, &row.max_abs, &row.max_rel, &row.median_ms,
               &row.min_ms, &row.max_ms, worst, &nhash, &used) != 11 ||
        v < 0 || v >= r->nv || nhash < 0 || nhash > (int)(sizeof row.hash / sizeof *row.hash)) {
        report_error(r, rank, "sent a malformed report line");
        return;
    }
    snprintf(row.worst, sizeof row.worst, "%s", strcmp(worst, "-") ? worst : "");
    const char *s = line + used;
    for (int i = 0; i < nhash; i++) {
        char *end;
        row.hash[i] = strtoull(s, &end, 16);
        if (end == s) {
            report_error(r, rank, "sent a malformed report line");
            return;
        }
        s = end;
    }
    row.seen = 1;
    r->rows[v * r->nranks + rank] = row;
}

static void parse_fault(Report *r, int rank, const char *line)
{
    int v, used = 0;
    char kind[16];
    if (sscanf(line, "FAULT %d %15s %n", &v, kind, &used) != 2 || v < 0 || v >= r->nv ||
        (strcmp(kind, "GUARD") && strcmp(kind, "REPEAT"))) {
        report_error(r, rank, "sent a malformed report line");
        return;
    }
    RankRow *row = &r->rows[v * r->nranks + rank];
    row->fault = strcmp(kind, "GUARD") ? COCO_RT_FAULT_REPEAT : COCO_RT_FAULT_GUARD;
    snprintf(row->fault_msg, sizeof row->fault_msg, "%s", line + used);
}

static void parse_limits(Report *r, const char *line)
{
    ReportLimits *l = &r->limits;
    int used = 0;
    memset(l, 0, sizeof *l);
    if (!strncmp(line, "LIMITS none ", 12)) {
        snprintf(l->key, sizeof l->key, "%s", line + 12);
        return;
    }
    if (sscanf(line, "LIMITS %23s %lg %lg %lg %n", l->how, &l->copy_gbs, &l->peer_gbs,
               &l->gemm_tflops, &used) != 4 || l->copy_gbs <= 0 || l->gemm_tflops <= 0) {
        snprintf(l->key, sizeof l->key, "rank 0 sent a malformed LIMITS line");
        return;
    }
    snprintf(l->key, sizeof l->key, "%s", line + used);
    l->known = 1;
}

static void parse_steps(Report *r, int rank, const char *line)
{
    int v, n, differ;
    if (sscanf(line, "STEPS %d %d %d", &v, &n, &differ) != 3 || v < 0 || v >= r->nv) {
        report_error(r, rank, "sent a malformed report line");
        return;
    }
    r->steps_differ[v] += differ;
}

/* The step (v, index) of the report, made when new. */
static ReportStep *step_at(Report *r, int v, int index)
{
    for (int i = r->nstep - 1; i >= 0; i--)
        if (r->step[i].v == v && r->step[i].index == index)
            return &r->step[i];
    r->step = xgrow(r->step, r->nstep, &r->capstep, 64, sizeof *r->step);
    ReportStep *s = &r->step[r->nstep++];
    memset(s, 0, sizeof *s);
    s->v = v;
    s->index = index;
    return s;
}

static void parse_step(Report *r, int rank, const char *line)
{
    ReportStep x;
    int used = 0;
    memset(&x, 0, sizeof x);
    if (sscanf(line, "STEP %d %d %d %d %d %lg %47s %n", &x.v, &x.index, &x.line, &x.kind,
               &x.calls, &x.ms, x.call, &used) != 7 || x.v < 0 || x.v >= r->nv ||
        x.index < 0 || !line[used]) {
        report_error(r, rank, "sent a malformed report line");
        return;
    }
    snprintf(x.op, sizeof x.op, "%s", line + used);
    ReportStep *s = step_at(r, x.v, x.index);
    if (!s->ranks) {
        x.ranks = 1;
        *s = x;
        return;
    }
    s->mixed |= s->line != x.line || strcmp(s->call, x.call) || strcmp(s->op, x.op);
    s->ms = x.ms > s->ms ? x.ms : s->ms;
    s->ranks++;
}

void report_line(Report *r, int rank, const char *line)
{
    if (rank < 0 || rank >= r->nranks)
        return;
    if (!strncmp(line, "LIMITS ", 7)) {
        if (rank == 0)
            parse_limits(r, line);
    } else if (!strncmp(line, "STEPS ", 6)) {
        parse_steps(r, rank, line);
    } else if (!strncmp(line, "STEP ", 5)) {
        parse_step(r, rank, line);
    } else if (!strncmp(line, "GPU ", 4)) {
        if (rank == 0 || !r->gpu[0])
            snprintf(r->gpu, sizeof r->gpu, "%s", line + 4);
    } else if (!strncmp(line, "ROW ", 4)) {
        parse_row(r, rank, line);
    } else if (!strncmp(line, "FAULT ", 6)) {
        parse_fault(r, rank, line);
    } else if (!strncmp(line, "ERR ", 4)) {
        report_error(r, rank, line + 4);
    } else if (!strncmp(line, "AT ", 3)) {
        int step = atoi(line + 3);
        if (step >= REPORT_AT_CLOSE && step < r->nv)
            r->at[rank] = step;
    } else if (!strcmp(line, "DONE")) {
        r->done[rank] = 1;
    }
}

void report_where(const CudaJob *job, const Report *r, int rank, char *buf, size_t len)
{
    int at = rank >= 0 && rank < r->nranks ? r->at[rank] : REPORT_AT_OPEN;
    if (at == REPORT_AT_OPEN)
        snprintf(buf, len, "starting (loading the runtime, joining the NCCL communicators)");
    else if (at == REPORT_AT_CLOSE)
        snprintf(buf, len, "closing the communicators, after its last variant");
    else
        snprintf(buf, len, "in variant '%s'", job->v[at].name);
}

/* ---- the table ---- */

static void print_summary(const CudaJob *job, FILE *out)
{
    if (job->unchecked) {
        fprintf(out, "cpu reference: not computed (--reference none): no value below is checked; "
                "only times, guard bytes, repeat runs and the ranks' agreement on Replicated "
                "values (inputs drawn in %.1f ms)\n", job->cpu_ms);
        return;
    }
    struct coco_run run = {.prog = job->base, .exec = job->data};
    fprintf(out, "%-12s %-5s %-18s %-12s %-16s %14s %14s\n", "output", "type", "shape",
            "layout", "fnv-1a (cpu)", "sum", "norm");
    for (int i = 0; i < job->base->nexec_out; i++) {
        Node *n = node_of(job->base, job->base->exec_out[i]);
        coco_summary s;
        if (coco_run_summary(&run, n->name, &s))
            continue;
        char shape[128];
        size_t u = (size_t)snprintf(shape, sizeof shape, "[");
        for (int d = 0; d < n->ndim && u < sizeof shape; d++)
            u += (size_t)snprintf(shape + u, sizeof shape - u, "%s%ld", d ? "," : "", n->dim[d].n);
        if (u < sizeof shape)
            snprintf(shape + u, sizeof shape - u, "]");
        fprintf(out, "%-12s %-5s %-18s %-12s %016" PRIx64 " %14.6g %14.6g\n", n->name,
                type_name(n->type), shape, layout_str(job->base->arena, n->layout), s.hash,
                s.sum, s.norm);
    }
    fprintf(out, "cpu reference %.1f ms%s\n", job->cpu_ms,
                job->nv > 1 && !job->v[1].own ? " (every schedule checked against the program's)"
                                              : "");
}

/* The first Replicated value whose bits differ between two ranks of a
 * group: its check's index, with the ranks in *rank and *first (the
 * group's first); -1 when every group's ranks agree on every one. */
static int replicas_differ(const CudaVariant *v, const RankRow *rows, int nranks, int *rank,
                           int *first)
{
    int cap = (int)(sizeof rows->hash / sizeof *rows->hash);
    for (int k = 0; k < v->ncheck && k < cap; k++) {
        if (!v->check[k].replicated)
            continue;
        GroupKind g = node_of(v->prog, v->check[k].node)->group;
        for (*rank = 0; *rank < nranks; ++*rank) {
            *first = rank_of(v->prog, g, group_index(v->prog, g, *rank), 0);
            if (rows[*rank].hash[k] != rows[*first].hash[k])
                return k;
        }
    }
    return -1;
}

static int replicas_agree(const CudaVariant *v, const RankRow *rows, int nranks)
{
    int rank, first;
    return replicas_differ(v, rows, nranks, &rank, &first) < 0;
}

/* Variant vi over all ranks: its figures summed (the largest max-abs,
 * max-rel and median time: the slowest rank's) into *all, and its verdict. */
const char *report_verdict(const CudaJob *job, const Report *r, int vi, RankRow *all)
{
    const RankRow *rows = &r->rows[vi * r->nranks];
    memset(all, 0, sizeof *all);
    int seen = 0, guard = 0, repeat = 0;
    for (int rank = 0; rank < r->nranks; rank++) {
        const RankRow *x = &rows[rank];
        guard |= x->fault == COCO_RT_FAULT_GUARD;
        repeat |= x->fault == COCO_RT_FAULT_REPEAT;
        if (!x->seen)
            continue;
        seen++;
        all->differing += x->differing;
        all->elements += x->elements;
        all->outside += x->outside;
        all->max_abs = x->max_abs > all->max_abs ? x->max_abs : all->max_abs;
        all->max_rel = x->max_rel > all->max_rel ? x->max_rel : all->max_rel;
        all->median_ms = x->median_ms > all->median_ms ? x->median_ms : all->median_ms;
    }
    int agree = seen == r->nranks && replicas_agree(&job->v[vi], rows, r->nranks);
    return seen < r->nranks ? "FAILED"
           : guard          ? "GUARD"
           : all->outside   ? "WRONG"
           : repeat         ? "REPEAT"
           : !agree         ? "REPLICAS"
           : job->unchecked ? "unchecked"
           : all->differing ? "rounding"
                            : "bitwise";
}

int report_passed(const char *verdict)
{
    return !strcmp(verdict, "bitwise") || !strcmp(verdict, "rounding") ||
           !strcmp(verdict, "unchecked");
}

/* One variant's row; 0 when it passed. */
static int print_row(const CudaJob *job, const Report *r, int vi, FILE *out)
{
    RankRow all;
    const char *verdict = report_verdict(job, r, vi, &all);
    const CudaVariant *v = &job->v[vi];
    if (job->unchecked)
        fprintf(out, "%-24s %-9s %11s %12s %21s %9s %10.3f ms  %s\n", v->name, verdict, "-", "-",
                "-", "-", all.median_ms, v->note ? v->note : "");
    else
        fprintf(out, "%-24s %-8s %12.3g %12.3g %10ld/%-10ld %9ld %10.3f ms  %s\n", v->name,
                verdict, all.max_abs, all.max_rel, all.differing, all.elements, all.outside,
                all.median_ms, v->note ? v->note : "");
    return !report_passed(verdict);
}

/* Variants whose every rank reported with no fault. */
static int variants_clean(const CudaJob *job, const Report *r)
{
    int clean = 0;
    for (int vi = 0; vi < job->nv; vi++) {
        int ok = 1;
        for (int rank = 0; rank < r->nranks; rank++) {
            const RankRow *x = &r->rows[vi * r->nranks + rank];
            ok &= x->seen && x->fault == COCO_RT_FAULT_NONE;
        }
        clean += ok;
    }
    return clean;
}

/* The reasons of GUARD and REPEAT rows, rank by rank, and of REPLICAS. */
static void print_faults(const CudaJob *job, const Report *r)
{
    for (int vi = 0; vi < job->nv; vi++) {
        const RankRow *rows = &r->rows[vi * r->nranks];
        for (int rank = 0; rank < r->nranks; rank++)
            if (rows[rank].fault != COCO_RT_FAULT_NONE)
                fprintf(stderr, "coconet: rank %d: %s: %s\n", rank, job->v[vi].name,
                        rows[rank].fault_msg);
        int seen = 0, rank, first, k;
        for (rank = 0; rank < r->nranks; rank++)
            seen += rows[rank].seen;
        if (seen == r->nranks &&
            (k = replicas_differ(&job->v[vi], rows, r->nranks, &rank, &first)) >= 0)
            fprintf(stderr, "coconet: %s: the Replicated value '%s' has other bits on rank %d "
                    "than on rank %d\n", job->v[vi].name, job->v[vi].check[k].name, rank, first);
    }
}

/* ---- the roofline table ---- */

/* The slowest rank's median time of variant vi, or -1 when a rank did not
 * report it. */
static double slowest_ms(const Report *r, int vi)
{
    double ms = 0;
    for (int rank = 0; rank < r->nranks; rank++) {
        const RankRow *x = &r->rows[vi * r->nranks + rank];
        if (!x->seen)
            return -1;
        ms = x->median_ms > ms ? x->median_ms : ms;
    }
    return ms;
}

/* x with an SI prefix: "16 kB", "2.15 GFLOP" */
static const char *si(double x, const char *unit, char *buf, size_t len)
{
    static const char *prefix[] = {"", "k", "M", "G", "T", "P"};
    int i = 0;
    while (x >= 999.5 && i < 5) {
        x /= 1000;
        i++;
    }
    snprintf(buf, len, "%.3g %s%s", x, prefix[i], unit);
    return buf;
}

/* Which limit gives the longest time for rf, and that time in seconds. */
static const char *bound_of(const Roofline *rf, const ReportLimits *l, double *seconds)
{
    double mem = (rf->read_bytes + rf->write_bytes) / (l->copy_gbs * 1e9);
    double link = l->peer_gbs > 0 ? rf->link_bytes / (l->peer_gbs * 1e9) : 0;
    double gemm = rf->flops / (l->gemm_tflops * 1e12);
    *seconds = mem;
    const char *name = "memory";
    if (link > *seconds) {
        *seconds = link;
        name = "link";
    }
    if (gemm > *seconds) {
        *seconds = gemm;
        name = "gemm";
    }
    return *seconds > 0 ? name : "-";
}

static void print_roofline_row(const CudaJob *job, const Report *r, int vi, FILE *out)
{
    Roofline rf;
    roofline_busiest(job->v[vi].prog, &rf);
    char mem[32], link[32], flops[32], rate[32] = "-", tflops[32] = "-", pct[32] = "-";
    double ms = slowest_ms(r, vi), bound_s = 0;
    const char *bound = r->limits.known ? bound_of(&rf, &r->limits, &bound_s) : "-";
    if (ms > 0) {
        snprintf(rate, sizeof rate, "%.4g", (rf.read_bytes + rf.write_bytes) / (ms * 1e-3) / 1e9);
        snprintf(tflops, sizeof tflops, "%.4g", rf.flops / (ms * 1e-3) / 1e12);
        if (strcmp(bound, "-"))
            snprintf(pct, sizeof pct, "%.1f %%", 100 * bound_s / (ms * 1e-3));
    }
    fprintf(out, "%-24s %10s %10s %12s %10s %10s  %-7s %9s\n", job->v[vi].name,
            si(rf.read_bytes + rf.write_bytes, "B", mem, sizeof mem),
            si(rf.link_bytes, "B", link, sizeof link), si(rf.flops, "FLOP", flops, sizeof flops),
            rate, tflops, bound, pct);
}

static void print_limits(const Report *r, FILE *out)
{
    const ReportLimits *l = &r->limits;
    if (!l->known) {
        fprintf(out, "limits: unknown%s%s: no bound and no %% of it\n", l->key[0] ? ": " : "",
                l->key);
        return;
    }
    char peer[48] = "no peer copy (one GPU)";
    if (l->peer_gbs > 0)
        snprintf(peer, sizeof peer, "peer copy %.4g GB/s", l->peer_gbs);
    fprintf(out, "limits: device copy %.4g GB/s (read + written), %s, FP16 GEMM %.4g TFLOP/s; "
            "%s (--remeasure measures again)\nlimits: of %s\n", l->copy_gbs, peer,
            l->gemm_tflops, strcmp(l->how, "cached") ? "measured now" : "from the cache", l->key);
}

static void print_roofline(const CudaJob *job, const Report *r, FILE *out)
{
    fprintf(out, "\n%-24s %10s %10s %12s %10s %10s  %-7s %9s\n", "roofline", "memory", "link",
            "flops", "GB/s", "TFLOP/s", "bound", "of-bound");
    for (int vi = 0; vi < job->nv; vi++)
        print_roofline_row(job, r, vi, out);
    fprintf(out, "roofline: the busiest rank's bytes read and written (inputs once; outputs "
            "and updated tensors once), bytes sent to other ranks, FLOPs, from the program\n"
            "roofline: GB/s and TFLOP/s over gpu-time; bound: the limit that gives the longest "
            "time; of-bound: that time over gpu-time\n");
    print_limits(r, out);
}

/* ---- the breakdown table ---- */

static void print_step(const CudaJob *job, const Report *r, const ReportStep *s, FILE *out)
{
    char call[64], note[64] = "";
    if (s->calls > 1)
        snprintf(call, sizeof call, "%s x%d", s->call, s->calls);
    else
        snprintf(call, sizeof call, "%s", s->call);
    if (s->mixed)
        snprintf(note, sizeof note, "  (the ranks differ here)");
    else if (s->ranks < r->nranks)
        snprintf(note, sizeof note, "  (%d of %d ranks)", s->ranks, r->nranks);
    fprintf(out, "%-24s %5d  %-22s %-22s %10.4f ms%s\n", job->v[s->v].name, s->line, s->op, call,
            s->ms, note);
}

static void print_breakdown(const CudaJob *job, const Report *r, FILE *out)
{
    fprintf(out, "\n%-24s %5s  %-22s %-22s %13s\n", "breakdown", "line", "operation", "call",
            "time");
    for (int vi = 0; vi < job->nv; vi++) {
        double sum = 0;
        int n = 0;
        for (int i = 0; i < r->nstep; i++)
            if (r->step[i].v == vi) {
                print_step(job, r, &r->step[i], out);
                sum += r->step[i].ms;
                n++;
            }
        if (n)
            fprintf(out, "%-24s %5s  %-22s %-22s %10.4f ms\n", job->v[vi].name, "", "(sum)", "",
                    sum);
        if (r->steps_differ[vi])
            fprintf(out, "breakdown: %s: %d run%s left out: %s calls differed from the first "
                    "run's\n", job->v[vi].name, r->steps_differ[vi],
                    r->steps_differ[vi] == 1 ? "" : "s", r->steps_differ[vi] == 1 ? "its" : "their");
    }
    fprintf(out, "breakdown: each kernel launch and library call (an NCCL group: its calls "
            "together), from the event before it\nbreakdown: to its own; the median of %d runs "
            "after the timed runs with an event after each call, the slowest rank's\n",
            job->breakdown_runs);
}

int report_print(const CudaJob *job, const Report *r, FILE *out)
{
    Program *p = job->base;
    fprintf(out, "%s: %d rank%s on %s, cuda backend, seed %llu\n", p->exec_name, r->nranks,
            r->nranks == 1 ? "" : "s", r->gpu[0] ? r->gpu : "(no GPU reported)",
            (unsigned long long)job->seed);
    print_summary(job, out);
    fprintf(out, "\n%-24s %-8s %12s %12s %21s %9s %13s\n", "schedule", "outputs", "max-abs",
            "max-rel", "differing/elements", "outside", "gpu-time");
    int bad = 0;
    for (int vi = 0; vi < job->nv; vi++)
        bad |= print_row(job, r, vi, out);
    if (job->iters > 0)
        fprintf(out, "gpu-time: median of %d runs after %d warm-up runs, the slowest rank's\n",
                job->iters, job->warmup);
    fprintf(out, "gpu-checks: guard bytes intact and the repeat run bit for bit the checked "
            "run's in %d of %d variants, on every rank\n", variants_clean(job, r), job->nv);
    if (job->iters > 0)
        print_roofline(job, r, out);
    if (job->breakdown_runs > 0)
        print_breakdown(job, r, out);
    fflush(out);
    print_faults(job, r);
    for (int rank = 0; rank < r->nranks; rank++) {
        if (r->error[rank])
            fprintf(stderr, "coconet: %s\n", r->error[rank]);
        bad |= r->error[rank] != NULL || !r->done[rank];
    }
    if (r->first_failure >= 0 && r->nranks > 1)
        fprintf(stderr, "coconet: rank %d failed first\n", r->first_failure);
    return bad;
}
