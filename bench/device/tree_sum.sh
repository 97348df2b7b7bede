#!/bin/sh
# bench/device/tree_sum.sh: a short sum of the code's files (src, rt,
# include, python, tests/gpu, bench, examples, Makefile), the same on the
# lent machine's copy of the tree and here for the same code: lease_make
# prints it beside the COMMIT given by hand, and `sh bench/device/tree_sum.sh`
# here (or `git stash -u` of a commit's tree) says which commit it was.
cd "$(dirname "$0")/../.." || exit 2
find src rt include python tests/gpu bench examples Makefile -type f \
    ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path 'bench/results/*' -print |
    LC_ALL=C sort | xargs cat | cksum | cut -d ' ' -f 1
