/* test_check.c: unit tests of the library-call checks' generator
 * (rt/kernels/coco_check.cuh), over a stand-in library kind, so that no
 * CUDA is needed: each form runs the call once, leaves a success alone, and
 * on a failure reports the call as written (macros in it unexpanded), this
 * file and line and the library's words, then returns the report's value
 * (COCO_CHECK_RET), goes to the label (COCO_CHECK_GOTO) or goes on
 * (COCO_CHECK_CALL); and coco_check_failed's message for the ABI's context.
 * Exits non-zero when any check fails. */
#include <stdio.h>
#include <string.h>

#include "../../rt/kernels/coco_check.cuh"

#include "unit_check.h"

/* the stand-in library: 0 is success, its words name the code */
#define COCO_CHECK_FAKE_T int
#define COCO_CHECK_FAKE_OK 0
#define COCO_CHECK_FAKE_WHY(e, buf, len) (snprintf(buf, len, "fake code %d", e), (buf))
#define FAKE_BAD 7 /* a macro inside a call: the message keeps its name */

static int calls;
static int fake_call(int code)
{
    calls++;
    return code;
}

static char msg[1024];
static int report(int value, const char *call, const char *file, int line, const char *why)
{
    snprintf(msg, sizeof msg, "%s at %s:%d: %s", call, file, line, why);
    return value;
}

#define FAKE_OK(call) COCO_CHECK_RET(FAKE, call, #call, report, -1)
#define FAKE_CALL(call) COCO_CHECK_CALL(FAKE, call, #call, report, 0)

static int checked_ret(int code, int *line)
{
    *line = __LINE__ + 1;
    FAKE_OK(fake_call(code));
    return 0;
}

static int checked_goto(int code, int *line)
{
    *line = __LINE__ + 1;
    COCO_CHECK_GOTO(FAKE, fake_call(code), "fake_call(code)", out, report, 0);
    return 0;
out:
    return -2;
}

static void test_forms(void)
{
    char want[1024];
    int line;
    calls = 0;
    msg[0] = 0;
    check(checked_ret(0, &line) == 0 && calls == 1 && !msg[0], "a success: no report");
    check(checked_ret(FAKE_BAD, &line) == -1 && calls == 2, "RET: the report's value, one call");
    snprintf(want, sizeof want, "fake_call(code) at %s:%d: fake code 7", __FILE__, line);
    check(!strcmp(msg, want), "RET: the call, this file and line, the library's words");
    check(checked_goto(3, &line) == -2 && calls == 3, "GOTO: to the label, one call");
    snprintf(want, sizeof want, "fake_call(code) at %s:%d: fake code 3", __FILE__, line);
    check(!strcmp(msg, want), "GOTO: the call, this file and line, the library's words");
    FAKE_CALL(fake_call(FAKE_BAD));
    check(calls == 4 && strstr(msg, "fake_call(FAKE_BAD) at ") != NULL,
          "CALL: reports the call as written, then goes on");
    group_end("check forms");
}

static void test_ctx_report(void)
{
    char err[128];
    coco_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.rank = 3;
    ctx.err = err;
    ctx.errlen = sizeof err;
    check(coco_check_failed(&ctx, "ncclAllReduce(x)", "f.cu", 12, "unhandled") == 1 &&
              !strcmp(err, "rank 3: ncclAllReduce(x) failed at f.cu:12: unhandled"),
          "coco_check_failed: rank, call, file and line, words; 1");
    group_end("check context report");
}

int main(void)
{
    test_forms();
    test_ctx_report();
    return total_fail != 0;
}
