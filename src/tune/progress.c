/* progress.c: the tuner's progress bar on stderr: candidates done (timed,
 * pruned or failed) of all, the seconds elapsed and an estimate of those
 * left (elapsed / done x left). Drawn in place (a carriage return) only
 * when stderr is a terminal; otherwise nothing, so that logs and tests see
 * no bar. */
#include "tune/tune.h"

#include <string.h>
#include <time.h>

double tune_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_text(char *buf, size_t len, int done, int total, double elapsed_s)
{
    enum { WIDTH = 20 };
    char bar[WIDTH + 1];
    int filled = total > 0 ? (int)((long)done * WIDTH / total) : WIDTH;
    for (int i = 0; i < WIDTH; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[WIDTH] = 0;
    if (done > 0 && done < total)
        snprintf(buf, len, "[%s] %d/%d candidates, %.1f s, about %.0f s left", bar, done, total,
                 elapsed_s, elapsed_s / done * (total - done));
    else
        snprintf(buf, len, "[%s] %d/%d candidates, %.1f s", bar, done, total, elapsed_s);
}

void progress_start(Progress *p, int total, int enabled)
{
    p->total = total;
    p->done = 0;
    p->enabled = enabled;
    p->start_s = tune_now_s();
}

void progress_show(Progress *p, int done, const char *what)
{
    p->done = done;
    if (!p->enabled)
        return;
    char line[256];
    progress_text(line, sizeof line, done, p->total, tune_now_s() - p->start_s);
    fprintf(stderr, "\rtune: %s %-32.32s", line, what ? what : "");
    fflush(stderr);
}

void progress_end(Progress *p)
{
    if (p->enabled)
        fprintf(stderr, "\n");
}
