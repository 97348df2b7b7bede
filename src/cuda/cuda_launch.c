/* cuda_launch.c: the launcher, the ranks' processes forked and watched
 * (plain C and POSIX: no CUDA header, no CUDA call, ever, in this process:
 * a process that has touched CUDA cannot give it to the children it forks).
 *
 * One process per rank (coco_run_cuda, cuda_run.c, starts a run here):
 * forked here (cuda_launch), or this process itself under mpirun
 * (cuda_mpi.c). Each rank's process runs cuda_rank_work.
 *
 * The fork protocol, over two pipes per child: rank 0 makes the NCCL unique
 * id and sends "ID <hex>" up; the parent sends it down to every other rank;
 * then every rank sends its lines (cuda_report.c) up and exits. The parent
 * watches all of them with poll(): a rank that exits before DONE, or
 * silence longer than the time limit, stops every other rank (SIGTERM,
 * then SIGKILL) and says which rank failed and where it was (each rank
 * says "AT step" as it begins a variant); a rank killed by a signal counts
 * as the first failure, before a peer's error about it. So does SIGINT, SIGTERM or SIGHUP
 * sent to this process: the ranks are stopped and the table printed with
 * what they had reported. A child dies with the parent (PR_SET_PDEATHSIG).
 *
 * The tuner's ranks (cuda_ranks_*) are forked the same way but kept: the
 * parent passes the NCCL id at once and goes on while they open; each round
 * sends "RUN ..." down (cuda_rank_serve) and is watched until every rank
 * says END; "EXIT" (or the pipe's end) closes them. A rank that fails in a
 * round stops them all, as in a launch. */
#define _DEFAULT_SOURCE
#include "cuda/cuda.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "coconet_rt.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the child ---- */

static void write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the parent is gone: nothing left to tell */
        s += w;
        n -= (size_t)w;
    }
}

static void emit_fd(void *ctx, const char *line)
{
    int fd = *(int *)ctx;
    write_all(fd, line, strlen(line));
    write_all(fd, "\n", 1);
}

/* One line from fd within the time limit (the NCCL id from the parent). */
static int read_line(int fd, char *buf, size_t len, double timeout_s)
{
    size_t used = 0;
    double deadline = now_s() + timeout_s;
    while (used + 1 < len) {
        struct pollfd p = {fd, POLLIN, 0};
        double left = deadline - now_s();
        if (left <= 0)
            return -1;
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR)
            return -1;
        if (r <= 0)
            continue;
        ssize_t n = read(fd, buf + used, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        if (buf[used] == '\n')
            break;
        used++;
    }
    buf[used] = 0;
    return 0;
}

static void hex_encode(const unsigned char *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static int hex_decode(const char *s, unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        b[i] = (unsigned char)v;
    }
    return 0;
}

static int child_get_id(const CocoRtApi *api, int rank, int up, int down, double timeout_s,
                        unsigned char *id, char *err, size_t errlen)
{
    char line[2 * COCO_RT_ID_BYTES + 16];
    if (rank == 0) {
        if (cuda_unique_id(api, id, err, errlen))
            return -1;
        strcpy(line, "ID ");
        hex_encode(id, COCO_RT_ID_BYTES, line + 3);
        emit_fd(&up, line);
        return 0;
    }
    if (read_line(down, line, sizeof line, timeout_s) || strncmp(line, "ID ", 3) ||
        hex_decode(line + 3, id, COCO_RT_ID_BYTES)) {
        snprintf(err, errlen, "rank %d: no NCCL id came from rank 0 in %.0f s", rank, timeout_s);
        return -1;
    }
    return 0;
}

static void default_stop_signals(void);

static _Noreturn void child_main(const CudaJob *job, pid_t launcher, int rank, int up, int down,
                                 int serve)
{
    default_stop_signals(); /* the launcher's handlers are not the rank's */
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* no rank outlives the launcher, holding its GPU */
    if (getppid() != launcher)
        _exit(1); /* the launcher died before that */
#else
    (void)launcher;
#endif
    dup2(2, 1); /* whatever a library prints must not mix with the table */
    char err[4096];
    unsigned char id[COCO_RT_ID_BYTES];
    double t0 = now_s();
    const CocoRtApi *api = cuda_load_runtime(job->runtime, err, sizeof err);
    if (!api || child_get_id(api, rank, up, down, job->timeout_s, id, err, sizeof err)) {
        cuda_emit_error(emit_fd, &up, rank, err);
        _exit(1);
    }
    if (getenv("COCONET_TRACE"))
        fprintf(stderr, "coconet trace: rank %d: launch: the runtime loaded and the NCCL id "
                        "%.3f s\n", rank, now_s() - t0);
    CudaRankPlace at = {.rank = rank, .local_rank = rank, .sharing = job->base->nranks};
    _exit(serve ? cuda_rank_serve(job, api, &at, id, down, emit_fd, &up)
                : cuda_rank_work(job, api, &at, id, emit_fd, &up));
}

/* ---- the parent ---- */

typedef struct {
    pid_t pid;
    int up, down;    /* read end from the child, write end to it */
    char buf[16384]; /* a partial line */
    size_t used;
    int eof, reaped, status;
    int ended;       /* said END: done with the round (cuda_ranks_run) */
} Child;

/* Waits for c's end until `deadline` (now_s), then kills it. */
static void reap(Child *c, double deadline)
{
    while (!c->reaped) {
        pid_t r = waitpid(c->pid, &c->status, WNOHANG);
        if (r == c->pid || (r < 0 && errno != EINTR)) {
            c->reaped = 1;
            break;
        }
        if (now_s() > deadline) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &c->status, 0);
            c->reaped = 1;
            break;
        }
        sleep_ms(10);
    }
}

/* Stops every rank still running: SIGTERM, then SIGKILL to those left
 * after 3 s. */
static void stop_all(Child *c, int n)
{
    for (int i = 0; i < n; i++)
        if (!c[i].reaped)
            kill(c[i].pid, SIGTERM);
    double deadline = now_s() + 3;
    for (int i = 0; i < n; i++)
        reap(&c[i], deadline);
}

static void exit_reason(const CudaJob *job, const Child *c, int rank, const Report *rep,
                        char *buf, size_t len)
{
    char where[256];
    report_where(job, rep, rank, where, sizeof where);
    if (WIFSIGNALED(c->status))
        snprintf(buf, len, "rank %d was killed by signal %d (%s) %s", rank,
                 WTERMSIG(c->status), strsignal(WTERMSIG(c->status)), where);
    else if (WEXITSTATUS(c->status))
        snprintf(buf, len, "rank %d exited with status %d %s", rank, WEXITSTATUS(c->status),
                 where);
    else
        snprintf(buf, len, "rank %d exited %s%s", rank, where,
                 rep->done[rank] ? "" : " (no DONE)");
}

/* A complete line from rank: the NCCL id goes down to the others; END
 * ends its round. */
static void on_line(Child *c, int n, int rank, const char *line, Report *rep)
{
    if (!strcmp(line, "END")) {
        c[rank].ended = 1;
        return;
    }
    if (!strncmp(line, "ID ", 3)) {
        for (int i = 1; i < n; i++) {
            write_all(c[i].down, line, strlen(line));
            write_all(c[i].down, "\n", 1);
        }
        return;
    }
    report_line(rep, rank, line);
}

/* The complete lines of rank's buffer; 0 */
static int on_buffered(Child *c, int n, int rank, Report *rep)
{
    Child *ch = &c[rank];
    char *start = ch->buf, *nl;
    while ((nl = strchr(start, '\n'))) {
        *nl = 0;
        on_line(c, n, rank, start, rep);
        start = nl + 1;
    }
    ch->used = strlen(start);
    memmove(ch->buf, start, ch->used + 1);
    if (ch->used == sizeof ch->buf - 1) { /* an overlong line: drop it */
        report_error(rep, rank, "sent a line too long to read");
        ch->used = 0;
    }
    return 0;
}

/* Appends what ch's pipe has to its buffer: 1, 0 at end of file, -1 when
 * interrupted */
static int read_more(Child *ch)
{
    ssize_t got = read(ch->up, ch->buf + ch->used, sizeof ch->buf - 1 - ch->used);
    if (got < 0 && errno == EINTR)
        return -1;
    if (got <= 0)
        return 0;
    ch->used += (size_t)got;
    ch->buf[ch->used] = 0;
    return 1;
}

/* Reads what rank's pipe has; 1 at end of file. */
static int on_readable(Child *c, int n, int rank, Report *rep)
{
    int got = read_more(&c[rank]);
    return got < 0 ? 0 : !got ? 1 : on_buffered(c, n, rank, rep);
}

/* Did a rank other than `rank` end by a signal while watched? */
static int other_killed(const Child *c, int n, int rank)
{
    for (int i = 0; i < n; i++)
        if (i != rank && c[i].eof && c[i].reaped && WIFSIGNALED(c[i].status))
            return 1;
    return 0;
}

/* A rank whose pipe closed: failed unless it said DONE and exited 0. One
 * killed by a signal (not ours: the others are stopped after the watch) is
 * the first failure, even when a peer's error about it came before. */
static int on_eof(const CudaJob *job, Child *c, int n, int rank, Report *rep)
{
    c[rank].eof = 1;
    close(c[rank].up);
    reap(&c[rank], now_s() + 10);
    int ok = rep->done[rank] && WIFEXITED(c[rank].status) && !WEXITSTATUS(c[rank].status);
    if (!ok) {
        char why[512];
        exit_reason(job, &c[rank], rank, rep, why, sizeof why);
        report_error(rep, rank, why);
        if (WIFSIGNALED(c[rank].status) && !other_killed(c, n, rank))
            rep->first_failure = rank;
    }
    return ok;
}

/* Every rank still running fails with "rank R BEFORE <where it was>AFTER". */
static void fail_unfinished(const CudaJob *job, const Child *c, int n, Report *rep,
                            const char *before, const char *after)
{
    for (int i = 0; i < n; i++) {
        if (c[i].eof)
            continue;
        char why[512], where[256];
        report_where(job, rep, i, where, sizeof where);
        snprintf(why, sizeof why, "rank %d %s %s%s", i, before, where, after);
        report_error(rep, i, why);
    }
}

static void on_silence(const CudaJob *job, Child *c, int n, Report *rep, double seconds)
{
    char before[64];
    snprintf(before, sizeof before, "said nothing for %.0f s,", seconds);
    fail_unfinished(job, c, n, rep, before, ": stopped (--timeout sets the limit)");
}

/* ---- a signal to the launcher: stop the ranks, print what they said ---- */

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
enum { NSTOP = (int)(sizeof stop_signals / sizeof *stop_signals) };

/* While watching: the first such signal interrupts poll() (no SA_RESTART);
 * a second one acts as if none was caught (SA_RESETHAND). */
static void catch_stop_signals(struct sigaction *old)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = (int)SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    for (int i = 0; i < NSTOP; i++)
        sigaction(stop_signals[i], &sa, &old[i]);
}

static void default_stop_signals(void)
{
    for (int i = 0; i < NSTOP; i++)
        signal(stop_signals[i], SIG_DFL);
}

static void restore_stop_signals(const struct sigaction *old)
{
    for (int i = 0; i < NSTOP; i++)
        sigaction(stop_signals[i], &old[i], NULL);
}

static void on_stop(const CudaJob *job, Child *c, int n, Report *rep)
{
    char after[128];
    snprintf(after, sizeof after, ": coconet received signal %d (%s)", (int)stop_signal,
             strsignal((int)stop_signal));
    fail_unfinished(job, c, n, rep, "stopped", after);
}

/* The parent's loop: until every pipe is closed (or, serving rounds, every
 * rank said END), a rank fails, silence, or a signal. */
static void watch(const CudaJob *job, Child *c, int n, Report *rep, double limit_s)
{
    struct pollfd *p = xcalloc((size_t)n, sizeof *p);
    int *who = xcalloc((size_t)n, sizeof *who);
    double last = now_s();
    for (;;) {
        int np = 0;
        for (int i = 0; i < n; i++)
            if (!c[i].eof && !c[i].ended) {
                p[np] = (struct pollfd){c[i].up, POLLIN, 0};
                who[np++] = i;
            }
        if (!np)
            break;
        if (stop_signal) {
            on_stop(job, c, n, rep);
            break;
        }
        double left = last + limit_s - now_s();
        if (left <= 0) {
            on_silence(job, c, n, rep, limit_s);
            break;
        }
        /* at most a second: a signal caught just before poll() is not left waiting */
        int r = poll(p, (nfds_t)np, left < 1 ? (int)(left * 1000) + 1 : 1000);
        if (r < 0 && errno != EINTR)
            BUG("poll: %s", strerror(errno));
        int failed = 0;
        for (int k = 0; r > 0 && k < np; k++) {
            if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            last = now_s();
            if (on_readable(c, n, who[k], rep))
                failed |= !on_eof(job, c, n, who[k], rep);
        }
        if (failed)
            break;
    }
    free(p);
    free(who);
}

static int fork_ranks(const CudaJob *job, Child *c, int n, int serve)
{
    pid_t launcher = getpid();
    for (int r = 0; r < n; r++) {
        int up[2], down[2];
        if (pipe(up))
            return -1;
        if (pipe(down)) {
            close(up[0]);
            close(up[1]);
            return -1;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            for (int i = 0; i < r; i++) { /* the other ranks' pipes are not ours */
                close(c[i].up);
                close(c[i].down);
            }
            close(up[0]);
            close(down[1]);
            child_main(job, launcher, r, up[1], down[0], serve);
        }
        close(up[1]);
        close(down[0]);
        c[r] = (Child){.pid = pid, .up = up[0], .down = down[1]};
    }
    return 0;
}

int cuda_launch(const CudaJob *job, Report *rep)
{
    int n = job->base->nranks;
    Child *c = xcalloc((size_t)n, sizeof *c);
    void (*old)(int) = signal(SIGPIPE, SIG_IGN); /* a dead child's pipe must not kill us */
    struct sigaction old_stop[NSTOP];
    catch_stop_signals(old_stop);
    double t0 = now_s();
    int rc = fork_ranks(job, c, n, 0);
    int started = 0;
    while (started < n && c[started].pid > 0)
        started++;
    if (rc)
        for (int i = started; i < n; i++)
            report_error(rep, i, "could not be started (fork or pipe failed)");
    else
        watch(job, c, started, rep, job->timeout_s * 1.5 + 5); /* after the ranks' own limits */
    stop_all(c, started);
    if (getenv("COCONET_TRACE"))
        fprintf(stderr, "coconet trace: launch: %d ranks, %d variants: %.3f s from the first "
                        "fork to the last exit\n", started, job->nv, now_s() - t0);
    restore_stop_signals(old_stop);
    for (int i = 0; i < started; i++) {
        if (!c[i].eof)
            close(c[i].up);
        close(c[i].down);
    }
    signal(SIGPIPE, old);
    free(c);
    return rc;
}

/* ---- ranks kept from one round to the next (the tuner's) ---- */

struct CudaRanks {
    const CudaJob *job; /* the job they were forked with: its variants, data, checks
                           (not used once they leave) */
    Child *c;
    int n, started;
    int alive;          /* every rank started, none failed */
    int leaving;        /* told to exit (cuda_ranks_leave) */
    double left_at, timeout_s;
    ReportLimits limits; /* rank 0's, said before the first round */
    char gpu[512];
};

/* Reads rank 0's pipe into its buffer until a complete line begins with
 * `prefix` (or ERR), rank 0 ends, or `seconds` pass */
static void read_until(CudaRanks *r, const char *prefix, double seconds)
{
    Child *c0 = &r->c[0];
    double deadline = now_s() + seconds;
    for (;;) {
        for (char *at = c0->buf; *at; at = strchr(at, '\n') + 1) {
            if (!strchr(at, '\n'))
                break; /* a partial line */
            if (!strncmp(at, prefix, strlen(prefix)) || !strncmp(at, "ERR ", 4))
                return;
        }
        if (now_s() >= deadline || c0->used == sizeof c0->buf - 1)
            return;
        struct pollfd p = {c0->up, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        if (!read_more(c0))
            return; /* rank 0 ended: the first round says why */
    }
}

/* Rank 0's NCCL id down to the others at once, so that the ranks open while
 * the launcher goes on; then, when the job times, rank 0's LIMITS line
 * awaited: measuring the machine's limits (a first time on a machine) must
 * not share the GPUs with another slot's round. Other lines stay buffered
 * for the first round. */
static void pass_id(CudaRanks *r)
{
    Child *c0 = &r->c[0];
    read_until(r, "ID ", r->job->timeout_s);
    char *nl = strchr(c0->buf, '\n');
    if (!nl || strncmp(c0->buf, "ID ", 3))
        return;
    *nl = 0;
    on_line(r->c, r->n, 0, c0->buf, NULL); /* an ID line needs no report */
    c0->used = strlen(nl + 1);
    memmove(c0->buf, nl + 1, c0->used + 1);
    if (r->job->iters > 0) /* cuda_rank_work's limits step: its own watchdog's time */
        read_until(r, "LIMITS ", r->job->timeout_s + 60);
}

CudaRanks *cuda_ranks_start(const CudaJob *job)
{
    CudaRanks *r = xcalloc(1, sizeof *r);
    r->job = job;
    r->timeout_s = job->timeout_s;
    r->n = job->base->nranks;
    r->c = xcalloc((size_t)r->n, sizeof *r->c);
    int rc = fork_ranks(job, r->c, r->n, 1);
    while (r->started < r->n && r->c[r->started].pid > 0)
        r->started++;
    r->alive = !rc;
    if (r->alive) {
        void (*old)(int) = signal(SIGPIPE, SIG_IGN); /* a rank dead already */
        pass_id(r);
        signal(SIGPIPE, old);
    }
    return r;
}

int cuda_ranks_alive(const CudaRanks *r)
{
    return r && r->alive && !r->leaving;
}

/* "RUN n i algo chunks name ..." for view's variants (index: theirs in the
 * ranks' job); "TIME n ..." when the view's variants are timed alone */
static char *round_command(const CudaJob *view, const int *index)
{
    size_t cap = 64, len;
    for (int k = 0; k < view->nv; k++)
        cap += strlen(view->v[k].name) + 48;
    char *cmd = xmalloc(cap);
    len = (size_t)snprintf(cmd, cap, "%s %d", view->time_only ? "TIME" : "RUN", view->nv);
    for (int k = 0; k < view->nv; k++)
        len += (size_t)snprintf(cmd + len, cap - len, " %d %d %d %s", index[k],
                                view->v[k].fused_algo, view->v[k].overlap_chunks,
                                view->v[k].name);
    snprintf(cmd + len, cap - len, "\n");
    return cmd;
}

int cuda_ranks_run(CudaRanks *r, const CudaJob *view, const int *index, Report *rep)
{
    ASSERT(!r->leaving);
    for (int k = 0; k < view->nv; k++)
        ASSERT(!strchr(view->v[k].name, ' ') && index[k] >= 0 && index[k] < r->job->nv);
    if (!r->alive) {
        for (int i = 0; i < r->n; i++)
            report_error(rep, i, i < r->started ? "stopped after an earlier round failed"
                                                : "could not be started (fork or pipe failed)");
        return -1;
    }
    if (r->limits.known)
        rep->limits = r->limits;
    snprintf(rep->gpu, sizeof rep->gpu, "%s", r->gpu);
    void (*old)(int) = signal(SIGPIPE, SIG_IGN); /* a dead rank's pipe must not kill us */
    struct sigaction old_stop[NSTOP];
    catch_stop_signals(old_stop);
    char *cmd = round_command(view, index);
    for (int i = 0; i < r->n; i++) {
        r->c[i].ended = 0;
        write_all(r->c[i].down, cmd, strlen(cmd));
    }
    free(cmd);
    for (int i = 0; i < r->n; i++)
        on_buffered(r->c, r->n, i, rep); /* what came before the round */
    watch(view, r->c, r->n, rep, view->timeout_s * 1.5 + 5);
    int ok = 1;
    for (int i = 0; i < r->n; i++)
        ok &= r->c[i].ended && !r->c[i].eof;
    if (!ok) { /* a rank failed: the others stop; a later round starts them again */
        stop_all(r->c, r->n);
        r->alive = 0;
    }
    restore_stop_signals(old_stop);
    signal(SIGPIPE, old);
    r->limits = rep->limits;
    snprintf(r->gpu, sizeof r->gpu, "%s", rep->gpu);
    return ok ? 0 : -1;
}

void cuda_ranks_leave(CudaRanks *r)
{
    if (!r || r->leaving)
        return;
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < r->started; i++) {
        if (r->alive)
            write_all(r->c[i].down, "EXIT\n", 5);
        close(r->c[i].down); /* a rank waiting for a round reads its end */
    }
    signal(SIGPIPE, old);
    r->leaving = 1;
    r->left_at = now_s();
}

void cuda_ranks_stop(CudaRanks *r)
{
    if (!r)
        return;
    cuda_ranks_leave(r);
    double deadline = now_s() + r->timeout_s + 10; /* closing the communicators */
    for (int i = 0; i < r->started; i++) {
        reap(&r->c[i], deadline);
        if (!r->c[i].eof)
            close(r->c[i].up);
    }
    if (getenv("COCONET_TRACE"))
        fprintf(stderr, "coconet trace: launch: %d ranks closed and gone %.3f s after told "
                        "to\n", r->started, now_s() - r->left_at);
    free(r->c);
    free(r);
}
