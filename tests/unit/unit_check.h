/* unit_check.h: the pass/fail counting shared by the C unit tests: check()
 * records one check, group_end() prints a group's line "NAME: N passed, N
 * failed", and total_fail decides the exit status. */
#ifndef UNIT_CHECK_H
#define UNIT_CHECK_H

#include <stdio.h>

static int npass, nfail, total_fail;

static void check(int ok, const char *what)
{
    if (ok) {
        npass++;
    } else {
        nfail++;
        printf("  FAILED: %s\n", what);
    }
}

static void group_end(const char *group)
{
    printf("%s: %d passed, %d failed\n", group, npass, nfail);
    total_fail += nfail;
    npass = nfail = 0;
}

#endif
