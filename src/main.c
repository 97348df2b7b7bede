/* main.c: the coconet command. Parses the command line, then calls the
 * public API (coconet.h) for each subcommand: check, print, run. Exit
 * status: 0 success, 1 the program (or a run) failed, 2 bad command line. */
#define _DEFAULT_SOURCE
#include "coconet.h"
#include "coconet_cuda.h" /* COCO_RUN_PREFIX, COCO_WORKSPACE_PREFIX */

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { MAXDEFINES = 256, MAXSIZES = 8 };

typedef struct {
    const char *cmd;
    const char *file;
    const char *defines[MAXDEFINES];
    int ndefines;
    int nranks;
    long group_size;
    uint64_t seed;
    int threads;
    const char *backend;
    const char *dump;
    const char *schedule;      /* --schedule NAME */
    const char *sched_file;    /* --schedule-file F */
    const char *outdir;        /* gen: -o DIR */
    int all_schedules;         /* --all-schedules */
    int ranks_given;           /* --ranks was written */
    int iters;                 /* cuda: timed runs */
    int timeout;               /* cuda: seconds any wait may take */
    const char *cuda_source;   /* cuda: --cuda-source F */
    int reference;             /* cuda: --reference each|program|none */
    int build_only;            /* cuda: --build-only */
    int breakdown;             /* cuda: --breakdown */
    int remeasure;             /* cuda: --remeasure */
    const char *sizes[MAXSIZES]; /* tune: --sizes NAME=v1,v2,... */
    int nsizes;
    const char *check_size;    /* tune: --check-size NAME=v,... */
    double prune;              /* tune: --prune F */
    double launch_cost;        /* tune: --launch-cost S (default 0: none weighed) */
    int confirm;               /* tune: --confirm N (default COCO_TUNE_CONFIRM) */
    int exhaustive, show, plan; /* tune: --exhaustive, --show, --plan */
    const char *log;           /* tune: --log FILE */
    const char *tune_option;   /* the first option given that goes with tune alone */
    int program_only;          /* --schedule program, or tuned chose the program */
    int build_all;             /* --schedule tuned on GPUs: build every variant, as
                                  tune did, so that tune's object serves */
} Options;

static const char usage[] =
    "usage: coconet COMMAND FILE [options]\n"
    "\n"
    "commands:\n"
    "  help            print this help (as --help)\n"
    "  check FILE      parse and check the program (types, shapes, layouts) and\n"
    "                  apply each of its schedules\n"
    "  print FILE      print the checked program with each value's type, shape, layout\n"
    "  run FILE        run the program and print a summary of each output, then\n"
    "                  run each schedule and compare its outputs with the program's\n"
    "  schedules FILE  list every distinct valid schedule of the program\n"
    "  gen FILE -o DIR write CUDA source for the program and its schedules\n"
    "  tune FILE       check and time every schedule x knob set on the GPUs at each\n"
    "                  size; keep the fastest in the tuning record (doc/cli.md)\n"
    "\n"
    "options:\n"
    "  -D NAME=VALUE   bind a size (an integer or 2^k, 1 to 10^13) or a scalar\n"
    "                  (a number)\n"
    "  --ranks P       number of ranks (default 4)\n"
    "  --group-size G  ranks in each GROUP (default: the file's 'Group GROUP(n);')\n"
    "  --backend B     where to run: cpu (the reference executor, simulated ranks),\n"
    "                  cuda (one process per GPU), or auto (default: cuda when the\n"
    "                  CUDA runtime is built and P GPUs are visible; COCONET_BACKEND)\n"
    "  --seed S        seed of the input data and of Dropout (default 1)\n"
    "  --threads T     CPU threads of the reference executor (default: all cores)\n"
    "  --dump DIR      run: write every input and output of every rank to DIR\n"
    "  --schedule NAME print/run: apply the schedule NAME (run: only that one);\n"
    "                  program: the program alone; run, gen: tuned takes the\n"
    "                  tuning record's choice\n"
    "  --schedule-file F  add the schedules written in F\n"
    "  --all-schedules run, gen: also every enumerated schedule\n"
    "  -o DIR          gen: the directory to write to\n"
    "  --build-only    cuda: build the code into the cache (as run would), run nothing\n"
    "  --iters N       cuda: timed runs of each variant, after 3 warm-up runs (default 20)\n"
    "  --timeout S     cuda: the longest any wait may take, in seconds (default 300)\n"
    "  --reference R   cuda: check each schedule against its own CPU run (each, the\n"
    "                  default), against the program's (program: faster), or compute\n"
    "                  no CPU reference (none: times only, for sizes whose reference\n"
    "                  the host cannot hold; rows say 'unchecked', nothing is proved\n"
    "                  about the values beyond guard bytes, repeat runs and the ranks'\n"
    "                  agreement on Replicated values)\n"
    "  --cuda-source F cuda: build and run this CUDA file instead of generated code\n"
    "  --breakdown     cuda: also time each kernel and library call of each variant\n"
    "                  (as many more runs as --iters), in a second table\n"
    "  --remeasure     cuda: measure the machine's limits (copy, peer copy, FP16 GEMM)\n"
    "                  again instead of reading them from the cache\n"
    "  --sizes NAME=v1,v2,...  tune: the sizes to tune at (as -D's); repeated\n"
    "                  for more names: every combination (default: the -D sizes)\n"
    "  --check-size NAME=v,...  tune: where variants too large to check in place are\n"
    "                  checked against the CPU reference (default: the file's sizes)\n"
    "  --prune F       tune: skip a candidate the cost model says is more than F\n"
    "                  times slower than the best measured (default 1.5)\n"
    "  --launch-cost S tune: weigh another launch of the ranks at S seconds: the first\n"
    "                  round times every candidate when the ones beyond the model's\n"
    "                  reach cost less (default 0: the ranks stay up between rounds,\n"
    "                  pruning as F says)\n"
    "  --confirm N     tune: time the candidates within 5 % (or 0.002 ms) of a point's\n"
    "                  best N more times each (at most 6 of them, timed alone),\n"
    "                  keeping each one's median (default 2; 0: none)\n"
    "  --exhaustive    tune: time every candidate (and say what pruning would pick)\n"
    "  --plan          tune: list the candidates and the model's predictions only\n"
    "  --show          tune: print the program's tuning record on this machine\n"
    "  --log FILE      tune: append the report of every launch of the ranks to FILE\n"
    "  --help, --version\n";

static _Noreturn void bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "coconet: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(coconet --help lists the commands and options)\n");
    exit(2);
}

static long parse_count(const char *flag, const char *s, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s ? s : "", &end, 10);
    if (!s || !*s || *end || errno || v < min || v > max) {
        fprintf(stderr, "coconet: %s expects an integer from %ld to %ld, not '%s'\n", flag, min,
                max, s ? s : "");
        exit(2);
    }
    return v;
}

/* A number in [min, max], else bad_usage(refusal, s): refusal names the
 * option and what it expects */
static double parse_real(const char *s, double min, double max, const char *refusal)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= min && v <= max))
        bad_usage(refusal, s);
    return v;
}

static const char *option_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc)
        bad_usage("%s needs a value", argv[*i]);
    return argv[++*i];
}

static void check_backend(const char *b)
{
    if (strcmp(b, "auto") && strcmp(b, "cpu") && strcmp(b, "cuda"))
        bad_usage("unknown backend '%s' (auto, cpu or cuda)", b);
}

static void parse_option(Options *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (!strcmp(a, "-D")) {
        if (o->ndefines == MAXDEFINES)
            bad_usage("too many -D options%s", "");
        o->defines[o->ndefines++] = option_value(argc, argv, i);
    } else if (!strncmp(a, "-D", 2)) {
        if (o->ndefines == MAXDEFINES)
            bad_usage("too many -D options%s", "");
        o->defines[o->ndefines++] = a + 2;
    } else if (!strcmp(a, "--ranks")) {
        o->nranks = (int)parse_count(a, option_value(argc, argv, i), 1, 4096);
        o->ranks_given = 1;
    } else if (!strcmp(a, "--group-size")) {
        o->group_size = parse_count(a, option_value(argc, argv, i), 1, 4096);
    } else if (!strcmp(a, "--seed")) {
        o->seed = (uint64_t)parse_count(a, option_value(argc, argv, i), 0, 1L << 62);
    } else if (!strcmp(a, "--threads")) {
        o->threads = (int)parse_count(a, option_value(argc, argv, i), 1, 1024);
    } else if (!strcmp(a, "--backend")) {
        o->backend = option_value(argc, argv, i);
        check_backend(o->backend);
    } else if (!strcmp(a, "--dump")) {
        o->dump = option_value(argc, argv, i);
    } else if (!strcmp(a, "-o")) {
        o->outdir = option_value(argc, argv, i);
    } else if (!strcmp(a, "--build-only")) {
        o->build_only = 1;
    } else if (!strcmp(a, "--breakdown")) {
        o->breakdown = 1;
    } else if (!strcmp(a, "--remeasure")) {
        o->remeasure = 1;
    } else if (!strcmp(a, "--iters")) {
        o->iters = (int)parse_count(a, option_value(argc, argv, i), 0, 100000);
    } else if (!strcmp(a, "--timeout")) {
        o->timeout = (int)parse_count(a, option_value(argc, argv, i), 1, 86400);
    } else if (!strcmp(a, "--cuda-source")) {
        o->cuda_source = option_value(argc, argv, i);
    } else if (!strcmp(a, "--reference")) {
        const char *r = option_value(argc, argv, i);
        if (strcmp(r, "each") && strcmp(r, "program") && strcmp(r, "none"))
            bad_usage("--reference expects 'each', 'program' or 'none', not '%s'", r);
        o->reference = !strcmp(r, "none")      ? COCO_REFERENCE_NONE
                       : !strcmp(r, "program") ? COCO_REFERENCE_PROGRAM
                                               : COCO_REFERENCE_EACH;
    } else if (!strcmp(a, "--all-schedules")) {
        o->all_schedules = 1;
    } else if (!strcmp(a, "--schedule")) {
        o->schedule = option_value(argc, argv, i);
    } else if (!strcmp(a, "--schedule-file")) {
        o->sched_file = option_value(argc, argv, i);
    } else if (!strcmp(a, "--sizes")) {
        o->tune_option = o->tune_option ? o->tune_option : a;
        if (o->nsizes == MAXSIZES)
            bad_usage("at most 8 --sizes options%s", "");
        o->sizes[o->nsizes++] = option_value(argc, argv, i);
    } else if (!strcmp(a, "--check-size")) {
        o->tune_option = o->tune_option ? o->tune_option : a;
        o->check_size = option_value(argc, argv, i);
    } else if (!strcmp(a, "--prune")) {
        o->tune_option = o->tune_option ? o->tune_option : a;
        o->prune = parse_real(option_value(argc, argv, i), 1, 1e6,
                              "--prune expects a factor of at least 1, not '%s'");
    } else if (!strcmp(a, "--launch-cost")) {
        o->tune_option = o->tune_option ? o->tune_option : a;
        o->launch_cost = parse_real(option_value(argc, argv, i), 0, 3600,
                                    "--launch-cost expects seconds from 0 to 3600, not '%s'");
    } else if (!strcmp(a, "--confirm")) {
        o->tune_option = o->tune_option ? o->tune_option : a;
        o->confirm = (int)parse_count(a, option_value(argc, argv, i), 0, 10);
    } else if (!strcmp(a, "--exhaustive")) {
        o->tune_option = o->tune_option ? o->tune_option : a;
        o->exhaustive = 1;
    } else if (!strcmp(a, "--show")) {
        o->tune_option = o->tune_option ? o->tune_option : a;
        o->show = 1;
    } else if (!strcmp(a, "--plan")) {
        o->tune_option = o->tune_option ? o->tune_option : a;
        o->plan = 1;
    } else if (!strcmp(a, "--log")) {
        o->tune_option = o->tune_option ? o->tune_option : a;
        o->log = option_value(argc, argv, i);
    } else {
        bad_usage("unknown option '%s'", a);
    }
}

static void parse_args(Options *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->nranks = 4;
    o->seed = 1;
    o->iters = 20;
    o->timeout = 300;
    o->confirm = COCO_TUNE_CONFIRM;
    o->backend = getenv("COCONET_BACKEND") && *getenv("COCONET_BACKEND")
                     ? getenv("COCONET_BACKEND") : "auto";
    check_backend(o->backend);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cores > 0 ? (int)cores : 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h") || (!o->cmd && !strcmp(a, "help"))) {
            fputs(usage, stdout);
            exit(0);
        }
        if (!strcmp(a, "--version")) {
            printf("coconet %s\n", COCONET_VERSION);
            exit(0);
        }
        if (a[0] == '-' && a[1])
            parse_option(o, argc, argv, &i);
        else if (!o->cmd)
            o->cmd = a;
        else if (!o->file)
            o->file = a;
        else
            bad_usage("unexpected argument '%s'", a);
    }
    if (!o->cmd)
        bad_usage("no command given%s", "");
    if (strcmp(o->cmd, "check") && strcmp(o->cmd, "print") && strcmp(o->cmd, "run") &&
        strcmp(o->cmd, "schedules") && strcmp(o->cmd, "gen") && strcmp(o->cmd, "tune"))
        bad_usage("unknown command '%s'", o->cmd);
    if (!o->file)
        bad_usage("%s needs a FILE", o->cmd);
    if (strcmp(o->cmd, "tune") && o->tune_option)
        bad_usage("--sizes, --check-size, --prune, --launch-cost, --confirm, --exhaustive, "
                  "--plan, --show and --log go with `coconet tune`%s", "");
    if (!strcmp(o->cmd, "tune") && (o->schedule || o->all_schedules || o->dump || o->outdir))
        bad_usage("tune explores every schedule itself: no --schedule, --all-schedules, --dump "
                  "or -o%s", "");
    if (o->schedule && !strcmp(o->schedule, "tuned") && strcmp(o->cmd, "run") &&
        strcmp(o->cmd, "gen"))
        bad_usage("--schedule tuned goes with `coconet run` and `coconet gen`%s", "");
}

/* The program as the options load it; a bad -D is the command line's
 * error (exit status 2), the rest the program's (1) */
static coco_program *load(const Options *o)
{
    coco_config cfg = {.defines = o->defines, .ndefines = o->ndefines, .nranks = o->nranks,
                       .group_size = o->group_size};
    char err[4096];
    int status;
    coco_program *p = coco_load_file_status(o->file, &cfg, &status, err, sizeof err);
    if (!p && status == COCO_LOAD_BAD_CONFIG) {
        fputs(err, stderr);
        fputs("(coconet --help lists the commands and options)\n", stderr);
        exit(2);
    }
    if (!p || (o->sched_file && coco_add_schedules(p, o->sched_file, err, sizeof err))) {
        fputs(err, stderr);
        coco_program_free(p);
        exit(1);
    }
    return p;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void shape_text(char *buf, size_t len, const coco_tensor *t)
{
    size_t u = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%ld", i ? "," : "", t->global_shape[i]);
    if (u < len)
        snprintf(buf + u, len - u, "]");
}

static int print_output(coco_run *r, const char *name)
{
    coco_tensor t;
    coco_summary s;
    if (coco_run_tensor(r, name, 0, &t) || coco_run_summary(r, name, &s)) {
        fprintf(stderr, "coconet: internal error: output %s has no value\n", name);
        return 1;
    }
    char shape[128];
    shape_text(shape, sizeof shape, &t);
    printf("%-12s %-5s %-18s %-12s %016llx %14.6g %14.6g%s\n", name, t.type, shape, t.layout,
           (unsigned long long)s.hash, s.sum, s.norm,
           s.replicas_agree ? "" : "  REPLICAS DIFFER");
    return !s.replicas_agree;
}

/* Writes path through path.tmp, renamed once whole: a file that could not
 * be written whole is removed, never left looking complete. */
static int write_whole(const char *path, const void *data, size_t size, size_t count)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int bad = !f || fwrite(data, size, count, f) != count;
    if (f && fclose(f))
        bad = 1;
    if (!bad && rename(tmp, path))
        bad = 1;
    if (bad) {
        fprintf(stderr, "coconet: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
    }
    return bad;
}

static int write_rank_file(const char *dir, const coco_tensor *t, int rank, FILE *manifest,
                           const char *role)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.r%d.f64", dir, t->name, rank);
    if (write_whole(path, t->data, sizeof(double), (size_t)t->count))
        return 1;
    fprintf(manifest, "%s %s %d %s %s %d", role, t->name, rank, t->type, t->layout, t->ndim);
    for (int i = 0; i < t->ndim; i++)
        fprintf(manifest, " %ld", t->global_shape[i]);
    for (int i = 0; i < t->ndim; i++)
        fprintf(manifest, " %ld", t->local_shape[i]);
    fputc('\n', manifest);
    return 0;
}

/* Makes DIR if needed and opens DIR/manifest.txt.tmp (its name in tmp) for
 * writing, after removing an old manifest: only a dump written whole has
 * one. NULL, with a message, when that cannot be done. */
static FILE *open_manifest(const char *dir, char *tmp, size_t len)
{
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "coconet: --dump %s: cannot create the directory: %s\n", dir,
                strerror(errno));
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    snprintf(tmp, len, "%s.tmp", path);
    if (unlink(path) && errno != ENOENT) {
        fprintf(stderr, "coconet: --dump %s: cannot remove %s: %s\n", dir, path, strerror(errno));
        return NULL;
    }
    FILE *m = fopen(tmp, "w");
    if (!m)
        fprintf(stderr, "coconet: --dump %s: cannot write %s: %s\n", dir, tmp, strerror(errno));
    return m;
}

/* --dump DIR is checked before the run: a place that cannot be written is
 * refused at once, not after the whole run. */
static void check_dump_dir(const char *dir)
{
    char tmp[4200];
    FILE *m = open_manifest(dir, tmp, sizeof tmp);
    if (!m)
        exit(1);
    fclose(m);
    unlink(tmp);
}

/* Writes each rank's data of every input and output as raw float64, then
 * manifest.txt, which lists them: only a dump written whole has one. */
static int dump(coco_program *p, coco_run *r, const char *dir)
{
    char tmp[4200], path[4096];
    FILE *m = open_manifest(dir, tmp, sizeof tmp);
    if (!m)
        return 1;
    int bad = 0;
    for (int k = 0; k < 2; k++) {
        int n = k ? coco_num_outputs(p) : coco_num_inputs(p);
        for (int i = 0; i < n; i++) {
            const char *name = k ? coco_output_name(p, i) : coco_input_name(p, i);
            for (int rank = 0; rank < coco_num_ranks(p); rank++) {
                coco_tensor t;
                if (!bad && !coco_run_tensor(r, name, rank, &t))
                    bad = write_rank_file(dir, &t, rank, m, k ? "output" : "input");
            }
        }
    }
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    if (fclose(m) || (!bad && rename(tmp, path))) {
        fprintf(stderr, "coconet: cannot write %s: %s\n", path, strerror(errno));
        bad = 1;
    }
    if (bad)
        unlink(tmp);
    return bad;
}

/* The FP64 evaluation that rounding differences are judged against, made
 * the first time a schedule's bits differ from the program's. */
typedef struct {
    coco_program *prog;
    coco_run *run;
} Exact;

static coco_run *exact_run(const Options *o, coco_program *p, Exact *x)
{
    if (!x->run) {
        char err[1024];
        if (!x->prog)
            x->prog = coco_program_exact(p);
        x->run = coco_run_create(x->prog, o->seed, o->threads, err, sizeof err);
        if (x->run && coco_run_execute(x->run, err, sizeof err)) {
            coco_run_free(x->run);
            x->run = NULL;
        }
        if (!x->run)
            fprintf(stderr, "%s(in the FP64 evaluation of the program)\n", err);
    }
    return x->run;
}

/* Runs schedule `name` and prints its row of the comparison table. */
static int run_schedule(const Options *o, coco_program *p, coco_run *ref, const char *name,
                        const char *note, Exact *x)
{
    char err[4096];
    coco_program *s = coco_schedule(p, name, err, sizeof err);
    if (!s) {
        fputs(err, stderr);
        return 1;
    }
    coco_run *r = coco_run_create(s, o->seed, o->threads, err, sizeof err);
    if (!r) {
        fprintf(stderr, "%s(in schedule %s)\n", err, name);
        coco_program_free(s);
        return 1;
    }
    double t0 = now_ms();
    int rc = coco_run_execute(r, err, sizeof err);
    double ms = now_ms() - t0;
    coco_comparison c;
    if (rc)
        fprintf(stderr, "%s(in schedule %s)\n", err, name);
    if (!rc)
        rc = coco_run_compare(ref, r, NULL, &c) ? 1 : 0;
    coco_run *exact = !rc && c.differing ? exact_run(o, p, x) : NULL;
    if (!rc && c.differing)
        rc = !exact || coco_run_compare(ref, r, exact, &c) ? 1 : 0;
    if (rc) {
        fprintf(stderr, "coconet: schedule %s could not be run or compared\n", name);
    } else {
        const char *verdict = !c.differing ? "bitwise" : !c.outside ? "rounding" : "WRONG";
        rc = c.outside != 0;
        printf("%-24s %-8s %12.3g %12.3g %10ld/%-10ld %10.1f ms  %s\n", name, verdict,
               c.max_abs, c.max_rel, c.differing, c.elements, ms, note ? note : "");
    }
    coco_run_free(r);
    coco_program_free(s);
    return rc;
}

static int run_schedules(const Options *o, coco_program *p, coco_run *ref)
{
    int n = coco_num_schedules(p), bad = 0;
    if (!n && !o->schedule)
        return 0;
    printf("\n%-24s %-8s %12s %12s %21s %13s\n", "schedule", "outputs", "max-abs", "max-rel",
           "differing/elements", "time");
    Exact x = {NULL, NULL};
    for (int i = 0; i < n; i++)
        if (!o->schedule || !strcmp(o->schedule, coco_schedule_name(p, i)))
            bad |= run_schedule(o, p, ref, coco_schedule_name(p, i), coco_schedule_note(p, i), &x);
    coco_run_free(x.run);
    coco_program_free(x.prog);
    return bad;
}

/* The schedules run and gen take: all, the one --schedule names, or none
 * (--schedule program). */
static int chosen_schedules(const Options *o, coco_program *p, const char **names)
{
    int n = 0;
    for (int i = 0; i < coco_num_schedules(p) && !o->program_only; i++)
        if (!o->schedule || !strcmp(o->schedule, coco_schedule_name(p, i)))
            names[n++] = coco_schedule_name(p, i);
    return n;
}

/* Will the program's run and the schedules' fit in memory, all told? */
static int run_fits(const Options *o, coco_program *p, char *err, size_t errlen)
{
    const char **names = calloc((size_t)coco_num_schedules(p) + 1, sizeof *names);
    if (!names) {
        snprintf(err, errlen, "coconet: out of memory\n");
        return -1;
    }
    int rc = coco_run_all_fits(p, names, chosen_schedules(o, p, names), err, errlen);
    free(names);
    return rc;
}

static int run(const Options *o, coco_program *p)
{
    char err[1024];
    if (run_fits(o, p, err, sizeof err)) {
        fputs(err, stderr);
        return 1;
    }
    coco_run *r = coco_run_create(p, o->seed, o->threads, err, sizeof err);
    if (!r) {
        fputs(err, stderr);
        return 1;
    }
    double t0 = now_ms();
    int rc = coco_run_execute(r, err, sizeof err);
    double ms = now_ms() - t0;
    if (rc) {
        fputs(err, stderr);
        coco_run_free(r);
        return 1;
    }
    printf("%s: %d simulated rank%s, cpu backend, seed %llu\n", coco_program_name(p),
           coco_num_ranks(p), coco_num_ranks(p) == 1 ? "" : "s", (unsigned long long)o->seed);
    printf("%-12s %-5s %-18s %-12s %-16s %14s %14s\n", "output", "type", "shape", "layout",
           "fnv-1a", "sum", "norm");
    int bad = 0;
    for (int i = 0; i < coco_num_outputs(p); i++)
        bad |= print_output(r, coco_output_name(p, i));
    printf("time %.1f ms\n", ms);
    if (o->dump)
        bad |= dump(p, r, o->dump);
    if (!o->program_only)
        bad |= run_schedules(o, p, r);
    coco_run_free(r);
    return bad;
}

/* check: every schedule written in the file must apply. */
static int check_schedules(coco_program *p)
{
    int bad = 0;
    for (int i = 0; i < coco_num_schedules(p); i++) {
        char err[4096];
        coco_program *s = coco_schedule(p, coco_schedule_name(p, i), err, sizeof err);
        if (!s)
            fputs(err, stderr);
        bad |= !s;
        coco_program_free(s);
    }
    return bad;
}

/* Copies coconet's file `rel` (under its home) into dir. */
static int copy_home_file(const char *rel, const char *dir)
{
    const char *home = coco_home();
    char from[4096], to[4096];
    if (!home) {
        fprintf(stderr, "coconet: cannot find %s: set COCONET_HOME to coconet's directory\n", rel);
        return 1;
    }
    snprintf(from, sizeof from, "%s/%s", home, rel);
    const char *base = strrchr(rel, '/');
    snprintf(to, sizeof to, "%s/%s", dir, base ? base + 1 : rel);
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    int c, bad = !in || !out;
    while (!bad && (c = fgetc(in)) != EOF)
        fputc(c, out);
    if (in)
        fclose(in);
    if (out && fclose(out))
        bad = 1;
    if (bad)
        fprintf(stderr, "coconet: cannot copy %s to %s: %s\n", from, to, strerror(errno));
    return bad;
}

/* Copies the device headers that generated code includes (rt/kernels). */
static int copy_kernel_headers(const char *dir)
{
    const char *home = coco_home();
    char path[4096];
    snprintf(path, sizeof path, "%s/rt/kernels", home ? home : ".");
    DIR *d = home ? opendir(path) : NULL;
    if (!d)
        return copy_home_file("rt/kernels/coco_device.cuh", dir); /* says what is missing */
    int bad = 0;
    for (struct dirent *f; !bad && (f = readdir(d));) {
        size_t len = strlen(f->d_name);
        if (len > 4 && !strcmp(f->d_name + len - 4, ".cuh")) {
            snprintf(path, sizeof path, "rt/kernels/%s", f->d_name);
            bad = copy_home_file(path, dir);
        }
    }
    closedir(d);
    return bad;
}

static void write_header(FILE *h, coco_program *p, const char *const *names, int n)
{
    fprintf(h, "/* Entry points of the CUDA code coconet generated for program '%s'. */\n"
               "#include \"coconet_cuda.h\"\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
               "extern int coco_nccl_version;\nextern const char *const coco_schedule_names[];\n",
            coco_program_name(p));
    for (int i = -1; i < n; i++) {
        const char *s = i < 0 ? "program" : names[i];
        fprintf(h, "int " COCO_RUN_PREFIX "%s(coco_cuda_ctx *ctx, const coco_cuda_args *args);\n"
                   "size_t " COCO_WORKSPACE_PREFIX "%s(const coco_cuda_ctx *ctx, "
                   "const long *size);\n", s, s);
    }
    fprintf(h, "#ifdef __cplusplus\n}\n#endif\n");
}

/* mkdir -p */
static int make_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *c = buf + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            if (mkdir(buf, 0777) && errno != EEXIST)
                return -1;
            *c = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

/* "coconet: cannot write PATH: REASON" when f (PATH, open for writing) was
 * not written whole; closes f either way. 0, or 1. */
static int close_written(FILE *f, const char *path)
{
    int bad = ferror(f), saved = errno, closed = fclose(f);
    if (bad || closed)
        fprintf(stderr, "coconet: cannot write %s: %s\n", path, strerror(bad ? saved : errno));
    return bad || closed;
}

/* DIR/<program>.cu, the program's and the named schedules' CUDA source;
 * no half-written source is left behind */
static int write_cu(const char *dir, coco_program *p, const char *const *names, int n)
{
    char path[4096], err[4096];
    snprintf(path, sizeof path, "%s/%s.cu", dir, coco_program_name(p));
    FILE *cu = fopen(path, "w");
    if (!cu) {
        fprintf(stderr, "coconet: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    int rc = coco_gen_cuda(p, names, n, cu, err, sizeof err);
    if (rc)
        fputs(err, stderr);
    rc |= close_written(cu, path);
    if (rc)
        remove(path);
    return rc;
}

/* DIR/<program>.h, the entry points' declarations */
static int write_h(const char *dir, coco_program *p, const char *const *names, int n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.h", dir, coco_program_name(p));
    FILE *h = fopen(path, "w");
    if (!h) {
        fprintf(stderr, "coconet: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    write_header(h, p, names, n);
    return close_written(h, path);
}

/* gen: DIR/<program>.cu and .h, with the headers they include. */
static int gen(const Options *o, coco_program *p)
{
    if (!o->outdir)
        bad_usage("gen needs -o DIR%s", "");
    if (make_dirs(o->outdir)) {
        fprintf(stderr, "coconet: cannot create %s: %s\n", o->outdir, strerror(errno));
        return 1;
    }
    const char **names = calloc((size_t)coco_num_schedules(p) + 1, sizeof *names);
    int n = chosen_schedules(o, p, names);
    int rc = write_cu(o->outdir, p, names, n) || write_h(o->outdir, p, names, n) ||
             copy_home_file("include/coconet_cuda.h", o->outdir) ||
             copy_kernel_headers(o->outdir);
    if (!rc)
        printf("%s/%s.cu: %d entry point%s\n", o->outdir, coco_program_name(p), n + 1,
               n ? "s" : "");
    free(names);
    return rc;
}

static int list_schedules(const Options *o, coco_program *p)
{
    int before = coco_num_schedules(p);
    double t0 = now_ms();
    int n = coco_enumerate_schedules(p);
    double ms = now_ms() - t0;
    printf("// %d schedules of %s for %d ranks, found in %.1f ms\n", n, coco_program_name(p),
           coco_num_ranks(p), ms);
    for (int i = before; i < before + n; i++)
        coco_print_schedule(p, i, stdout);
    (void)o;
    return 0;
}

/* Does this run go to the CUDA backend? Under mpirun (in a build with MPI)
 * it does, with the MPI job's size as the ranks; with auto, when the CUDA
 * runtime is built, P GPUs are visible and no --dump is asked. With cuda,
 * a machine where that is not so is refused before anything is built
 * (--build-only needs the runtime's toolchain, not the GPUs). */
static int use_cuda(Options *o)
{
    if (o->build_only && (strcmp(o->cmd, "run") || strcmp(o->backend, "cuda")))
        bad_usage("--build-only goes with `run --backend cuda`%s", "");
    if (strcmp(o->cmd, "run") || !strcmp(o->backend, "cpu"))
        return 0;
    int n;
    if (coco_cuda_mpi_init(&n)) {
        if (o->ranks_given && n != o->nranks) {
            fprintf(stderr, "coconet: --ranks %d, but the MPI job has %d processes\n", o->nranks,
                    n);
            exit(2);
        }
        o->nranks = n;
    } else {
        char why[1024];
        int usable = coco_cuda_usable(o->nranks, why, sizeof why);
        if (!strcmp(o->backend, "auto"))
            return usable == 1 && !o->dump;
        if (usable != 1 && !(o->build_only && usable < 0)) {
            fprintf(stderr, "coconet: --backend cuda: %s; --backend cpu runs the program on "
                    "simulated ranks\n", why);
            exit(1);
        }
    }
    if (o->dump)
        bad_usage("--dump runs on the cpu backend only (--backend cpu)%s", "");
    return 1;
}

/* --reference none anywhere but on the cuda backend */
static _Noreturn void refuse_no_reference(const Options *o)
{
    char why[256];
    if (strcmp(o->cmd, "run"))
        snprintf(why, sizeof why, "not with `coconet %s`", o->cmd);
    else if (!strcmp(o->backend, "cpu"))
        snprintf(why, sizeof why, "not on --backend cpu, which always computes the program "
                 "and checks every schedule against it");
    else
        snprintf(why, sizeof why, "but --backend auto chose the cpu backend (no CUDA runtime "
                 "built, or fewer GPUs than ranks)");
    bad_usage("--reference none goes with `run --backend cuda`, %s", why);
}

static int run_cuda(const Options *o, coco_program *p)
{
    coco_cuda_options co = {.seed = o->seed,
                            .threads = o->threads,
                            .iters = o->iters,
                            .timeout_s = o->timeout,
                            .schedule = o->schedule,
                            .cuda_source = o->cuda_source,
                            .reference = o->reference,
                            .build_only = o->build_only,
                            .breakdown = o->breakdown,
                            .remeasure = o->remeasure,
                            .build_all = o->build_all};
    char err[16384];
    int rc = coco_run_cuda(p, &co, stdout, err, sizeof err);
    fflush(stdout);
    if (err[0])
        fputs(err, stderr);
    return rc;
}

/* --schedule NAME names the program itself ("program": no schedule) or one
 * of p's schedules, the enumerated ones too with --all-schedules (run, gen):
 * refused before anything runs or is written. */
static void choose_schedule(Options *o, coco_program *p)
{
    if (o->all_schedules && (!strcmp(o->cmd, "run") || !strcmp(o->cmd, "gen")))
        coco_enumerate_schedules(p);
    if (!o->schedule)
        return;
    char err[4096];
    o->program_only = !strcmp(o->schedule, "program");
    if (!o->program_only && coco_find_schedule(p, o->schedule, err, sizeof err) < 0) {
        fputs(err, stderr);
        coco_program_free(p);
        exit(1);
    }
}

/* tune: time every variant on the GPUs and keep the best (coco_tune) */
static int tune(const Options *o)
{
    coco_tune_options t = {.defines = o->defines,
                           .ndefines = o->ndefines,
                           .nranks = o->nranks,
                           .group_size = o->group_size,
                           .sched_file = o->sched_file,
                           .sizes = o->sizes,
                           .nsizes = o->nsizes,
                           .check_size = o->check_size,
                           .prune = o->prune,
                           .exhaustive = o->exhaustive,
                           .plan = o->plan,
                           .iters = o->iters,
                           .timeout_s = o->timeout,
                           .threads = o->threads,
                           .seed = o->seed,
                           .log = o->log,
                           .launch_s = o->launch_cost,
                           .confirm = o->confirm};
    char err[8192];
    int rc = o->show ? coco_tune_show(o->file, &t, stdout, err, sizeof err)
                     : coco_tune(o->file, &t, stdout, err, sizeof err);
    fflush(stdout);
    if (rc)
        fputs(err, stderr);
    if (rc == 2)
        fputs("(coconet --help lists the commands and options)\n", stderr);
    return rc;
}

/* --schedule tuned: the tuning record's choice for p at its sizes, as the
 * schedule to run or generate; on GPUs its knob set goes to the ranks'
 * environment. Says on stderr what it chose and from which sizes. */
static void apply_tuned(Options *o, coco_program *p, int cuda)
{
    static char name[128];
    char knobs[128], note[1024], err[4096];
    if (coco_tuned(p, name, sizeof name, knobs, sizeof knobs, note, sizeof note, err,
                   sizeof err)) {
        fputs(err, stderr);
        coco_program_free(p);
        exit(1);
    }
    if (note[0])
        fprintf(stderr, "coconet: note: %s\n", note);
    fprintf(stderr, "coconet: tuned: schedule %s, knobs %s\n", name, knobs[0] ? knobs : "default");
    o->schedule = name;
    o->build_all = cuda; /* the object tune built holds every variant */
    if (!knobs[0])
        return;
    if (!strcmp(o->cmd, "gen")) {
        fprintf(stderr, "coconet: tuned: run its ranks with %s (the runtime reads it)\n", knobs);
        return;
    }
    if (!cuda) {
        fprintf(stderr, "coconet: tuned: %s matters on GPUs only (the cpu backend)\n", knobs);
        return;
    }
    char *eq = strchr(knobs, '=');
    *eq = 0;
    setenv(knobs, eq + 1, 1);
    fprintf(stderr, "coconet: tuned: setting %s=%s for the ranks\n", knobs, eq + 1);
}

int main(int argc, char **argv)
{
    Options o;
    parse_args(&o, argc, argv);
    if (!strcmp(o.cmd, "tune"))
        return tune(&o);
    int cuda = use_cuda(&o);
    if (o.reference == COCO_REFERENCE_NONE && !cuda)
        refuse_no_reference(&o);
    if ((o.breakdown || o.remeasure) && !cuda)
        bad_usage("%s goes with `run --backend cuda` (and a CUDA runtime and GPUs for "
                  "--backend auto)", o.breakdown ? "--breakdown" : "--remeasure");
    if (o.dump && !strcmp(o.cmd, "run"))
        check_dump_dir(o.dump);
    coco_program *p = load(&o);
    int rc = 0;
    if (o.schedule && !strcmp(o.schedule, "tuned"))
        apply_tuned(&o, p, cuda);
    choose_schedule(&o, p);
    if (!strcmp(o.cmd, "print") && o.schedule && !o.program_only) {
        char err[4096];
        coco_program *s = coco_schedule(p, o.schedule, err, sizeof err);
        if (!s) {
            fputs(err, stderr);
            rc = 1;
        } else {
            coco_print(s, stdout);
            coco_program_free(s);
        }
    } else if (!strcmp(o.cmd, "print")) {
        coco_print(p, stdout);
    } else if (!strcmp(o.cmd, "schedules")) {
        rc = list_schedules(&o, p);
    } else if (!strcmp(o.cmd, "gen")) {
        rc = gen(&o, p);
    } else if (!strcmp(o.cmd, "run")) {
        rc = cuda ? run_cuda(&o, p) : run(&o, p);
    }
    else {
        rc = check_schedules(p);
        if (!rc)
            printf("%s: ok (%d rank%s, %d schedule%s)\n", o.file, coco_num_ranks(p),
                   coco_num_ranks(p) == 1 ? "" : "s", coco_num_schedules(p),
                   coco_num_schedules(p) == 1 ? "" : "s");
    }
    coco_program_free(p);
    return rc;
}
