/* api_mem.c: will a run fit in memory? The memory this process may still
 * use (the least of the memory available, the cgroup's limit less its
 * usage, and RLIMIT_AS / RLIMIT_DATA less what the process already maps;
 * of the first two a tenth is left to the rest of the machine, whose other
 * processes may grow meanwhile, for going past them wakes the OOM killer),
 * against the peak the CPU executor will hold (exec_footprint): for one
 * program (coco_run_fits), or for the command's whole run (coco_run_all_fits):
 * the program's run, each schedule's run beside the values kept from it
 * and from the FP64 evaluation, and that evaluation itself. */
#define _DEFAULT_SOURCE /* sysconf(_SC_AVPHYS_PAGES) */
#include "api_mem.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cpu/cpu.h"

/* ---- the limit ---- */

#define HEADROOM 0.9 /* of the memory available and the cgroup's room */

typedef struct {
    double bytes;
    const char *why;
} Limit;

static void consider(Limit *l, double bytes, const char *why)
{
    if (bytes < 0)
        bytes = 0;
    if (bytes < l->bytes) {
        l->bytes = bytes;
        l->why = why;
    }
}

/* The number after `key` in a file of "key value" lines, or -1. */
static double read_keyed(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    char line[256];
    double v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) {
            v = strtod(line + n, NULL);
            break;
        }
    if (f)
        fclose(f);
    return v;
}

/* The number a file holds, or -1 (missing, unreadable, "max"). */
static double read_number(const char *path)
{
    FILE *f = fopen(path, "r");
    char buf[64] = "";
    if (!f)
        return -1;
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    char *end;
    double v = ok ? strtod(buf, &end) : -1;
    return ok && end != buf ? v : -1;
}

static void available_memory(Limit *l)
{
    double kb = read_keyed("/proc/meminfo", "MemAvailable:");
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (kb >= 0)
        consider(l, HEADROOM * kb * 1024, "nine tenths of the memory available");
    else if (pages > 0 && page > 0)
        consider(l, HEADROOM * (double)pages * (double)page, "nine tenths of the memory free");
}

/* The cgroup at dir and each above it: limit - usage (v2 memory.max and
 * memory.current, v1 memory.limit_in_bytes and memory.usage_in_bytes). */
static void cgroup_limits(Limit *l, const char *root, const char *path, int v2)
{
    char dir[1024], file[1100];
    snprintf(dir, sizeof dir, "%s%s", root, path);
    for (;;) {
        snprintf(file, sizeof file, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        double max = read_number(file);
        snprintf(file, sizeof file, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
        double used = read_number(file);
        if (max >= 0 && max < 0x1p60) /* v1 writes "unlimited" as a huge number */
            consider(l, HEADROOM * (max - (used > 0 ? used : 0)),
                     v2 ? "nine tenths of what the cgroup's memory.max leaves"
                        : "nine tenths of what the cgroup's memory.limit_in_bytes leaves");
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < strlen(root))
            break;
        *slash = 0;
    }
}

/* /proc/self/cgroup: "0::PATH" (v2) or "N:...memory...:PATH" (v1). */
static void cgroup_memory(Limit *l)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        const char *path = strcmp(c2 + 1, "/") ? c2 + 1 : "";
        if (c1[1] == 0)
            cgroup_limits(l, "/sys/fs/cgroup", path, 1);
        else if (strstr(c1 + 1, "memory"))
            cgroup_limits(l, "/sys/fs/cgroup/memory", path, 0);
    }
    if (f)
        fclose(f);
}

/* RLIMIT_AS less the address space mapped, RLIMIT_DATA less the data. */
static void rlimits(Limit *l)
{
    long page = sysconf(_SC_PAGESIZE);
    double size = 0, resident, shared, text, lib, data = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%lf %lf %lf %lf %lf %lf", &size, &resident, &shared, &text, &lib,
                    &data) != 6)
        size = data = 0;
    if (f)
        fclose(f);
    struct rlimit r;
    if (!getrlimit(RLIMIT_AS, &r) && r.rlim_cur != RLIM_INFINITY)
        consider(l, (double)r.rlim_cur - size * (double)page,
                 "the address-space limit, RLIMIT_AS (ulimit -v)");
    if (!getrlimit(RLIMIT_DATA, &r) && r.rlim_cur != RLIM_INFINITY)
        consider(l, (double)r.rlim_cur - data * (double)page,
                 "the data-size limit, RLIMIT_DATA (ulimit -d)");
}

static double memory_cap; /* coco_set_memory_cap's; 0: none */

void coco_set_memory_cap(double bytes)
{
    memory_cap = bytes > 0 ? bytes : 0;
}

double memory_limit(const char **why)
{
    Limit l = {1e300, "no limit found"};
    if (memory_cap > 0)
        consider(&l, memory_cap, "the cap set by coco_set_memory_cap");
    available_memory(&l);
    cgroup_memory(&l);
    rlimits(&l);
    if (why)
        *why = l.why;
    return l.bytes;
}

/* ---- the message ---- */

static const char *bytes_text(char *buf, size_t len, double b)
{
    if (b >= 1 << 30)
        snprintf(buf, len, "%.1f GiB", b / (1 << 30));
    else if (b >= 1 << 20)
        snprintf(buf, len, "%.1f MiB", b / (1 << 20));
    else
        snprintf(buf, len, "%.1f KiB", b / (1 << 10));
    return buf;
}

/* One run of the whole: its program, what it is, what is held beside it. */
typedef struct {
    Program *prog;
    char what[96];      /* "", " in schedule NAME", " in the FP64 evaluation" */
    Footprint f;
    double beside;      /* bytes other runs keep while this one runs */
    const char *beside_what;
} Phase;

static double phase_total(const Phase *ph)
{
    return ph->f.peak + ph->beside;
}

static Pos phase_pos(const Phase *ph)
{
    const Program *p = ph->prog;
    Pos none = {0, 0};
    if (ph->f.at >= 0 && p->node[ph->f.at].pos.line > 0)
        return p->node[ph->f.at].pos;
    return ph->f.largest >= 0 ? p->node[ph->f.largest].pos : none;
}

/* The message names values as the user wrote them (value_text): the value
 * being computed at the peak (whose place the message starts with, when it
 * has one) and the largest value (with its place when it is a part of an
 * expression), never a generated temporary's name. */
static void refuse_run(const Phase *ph, double limit, const char *why, char *err, size_t errlen)
{
    Program *p = ph->prog;
    char need[32], rank[32], big[32], lim[32], kept[32], where[160] = "", beside[160] = "";
    Pos pos = phase_pos(ph);
    if (pos.line > 0)
        snprintf(where, sizeof where, "%d:%d:", pos.line, pos.col);
    if (ph->beside > 0)
        snprintf(beside, sizeof beside, ", beside %s kept from %s",
                 bytes_text(kept, sizeof kept, ph->beside), ph->beside_what);
    const char *at = ph->f.at >= 0 ? value_text(p, ph->f.at) : "drawing its inputs";
    snprintf(err, errlen, "%s:%s error: the run needs %s at its peak: %d value%s live at once on "
             "%d rank%s (%s on one rank) %s%s%s%s, the largest %s of %s%s; "
             "more than the %s this process may use (%s)\n",
             p->file, where, bytes_text(need, sizeof need, ph->f.peak + ph->beside),
             ph->f.values, ph->f.values == 1 ? "" : "s", p->nranks, p->nranks == 1 ? "" : "s",
             bytes_text(rank, sizeof rank, ph->f.rank_peak),
             ph->f.at >= 0 ? "while computing '" : "", at,
             ph->f.at >= 0 ? "'" : "", ph->what,
             ph->f.largest >= 0 ? value_desc(p, ph->f.largest) : "?",
             bytes_text(big, sizeof big, ph->f.largest_bytes), beside,
             bytes_text(lim, sizeof lim, limit), why);
}

/* ---- the checks ---- */

int coco_run_fits(coco_program *p, char *err, size_t errlen)
{
    const char *why;
    double limit = memory_limit(&why);
    Phase ph = {.prog = p};
    exec_footprint(p, 0, &ph.f);
    if (ph.f.peak <= limit)
        return 0;
    refuse_run(&ph, limit, why, err, errlen);
    return -1;
}

/* The program under schedule `name`, or NULL when it does not apply (as
 * coco_schedule, without its message: the run gives it). */
static Program *scheduled(Program *p, const char *name)
{
    const Schedule *s = schedule_find(p, name);
    return s ? schedule_applied(p, s, NULL, 0) : NULL;
}

/* worst becomes ph when ph needs more; the program not kept is freed
 * (neither p nor the FP64 one, which the caller frees). */
static void keep_worst(Phase *worst, Phase *ph, const Program *p, const Program *x64)
{
    Phase *drop = phase_total(ph) > phase_total(worst) ? worst : ph;
    Program *gone = drop->prog;
    if (drop == worst)
        *worst = *ph;
    if (gone != p && gone != x64)
        program_free(gone);
}

int coco_run_all_fits(coco_program *p, const char *const *schedules, int n, char *err,
                      size_t errlen)
{
    const char *why;
    double limit = memory_limit(&why);
    Phase worst = {.prog = p};
    exec_footprint(p, 0, &worst.f);
    double program_kept = worst.f.kept, kept_most = 0;
    Program *x64 = n > 0 ? program_exact(p) : NULL;
    Phase exact = {.prog = x64, .what = " in the FP64 evaluation",
                   .beside_what = "the program's run and a schedule's"};
    if (x64)
        exec_footprint(x64, 0, &exact.f);
    for (int i = 0; i < n; i++) {
        Program *s = scheduled(p, schedules[i]);
        if (!s)
            continue; /* the run says why */
        Phase ph = {.prog = s, .beside = program_kept + exact.f.kept,
                    .beside_what = "the program's run and its FP64 evaluation"};
        snprintf(ph.what, sizeof ph.what, " in schedule %s", schedules[i]);
        exec_footprint(s, 0, &ph.f);
        kept_most = ph.f.kept > kept_most ? ph.f.kept : kept_most;
        keep_worst(&worst, &ph, p, x64);
    }
    if (x64) {
        exact.beside = program_kept + kept_most;
        keep_worst(&worst, &exact, p, x64);
    }
    int fits = phase_total(&worst) <= limit;
    if (!fits)
        refuse_run(&worst, limit, why, err, errlen);
    if (worst.prog != p && worst.prog != x64)
        program_free(worst.prog);
    program_free(x64);
    return fits ? 0 : -1;
}
