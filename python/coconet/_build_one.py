"""python -m coconet._build_one PATH SCHEDULE SIZES RANKS [NCCL_HOME]:
builds one program (the .coco file PATH at SIZES, a JSON object, for RANKS
ranks, under SCHEDULE) into the cache, as coconet.torch's first call of it
would. Exit status 0, or 1 with the error on stderr. A child of
coconet.torch._build.build_parallel, which runs several at once (nvcc
compiles one program on one core); it needs neither torch nor a GPU."""
import json
import sys

from . import load
from . import _session as S


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    path, schedule, sizes, ranks = argv[:4]
    nccl_home = argv[4] if len(argv) == 5 and argv[4] else None
    try:
        S.build(load(path, sizes=json.loads(sizes), ranks=int(ranks)), schedule,
                nccl_home=nccl_home)
    except Exception as e:  # the child's whole report is this line
        print("%s (%s): %s" % (path, schedule, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
