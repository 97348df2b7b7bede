"""gloo_ranks.py: scenarios at several ranks on the CPU, as processes joined
by torch.distributed's gloo backend (optim_ranks.py, tp_ranks.py).

spawn(script, scenario, P, d, env) starts `python3 script SCENARIO RANK P
DIR` for each rank and returns each rank's result; serve(scenarios,
install) is such a script's main: it joins the group, installs the CPU
stand-ins (install(setattr)), runs scenarios[SCENARIO](rank, P, dir) and
writes DIR/result.RANK: "OK" and a detail, or "ERROR" and the exception
the scenario raised (some scenarios expect one)."""
import os
import subprocess
import sys
import traceback


def spawn(script, scenario, P, d, env=None):
    """Each rank's result line of `scenario` at P ranks of `script` (a file
    beside this one); results of an earlier run in d are removed first."""
    here = os.path.dirname(os.path.abspath(__file__))
    for f in os.listdir(d):
        if f.startswith("result."):
            os.remove(os.path.join(d, f))
    procs = [subprocess.Popen([sys.executable, os.path.join(here, script), scenario,
                               str(r), str(P), str(d)], env=env) for r in range(P)]
    for p in procs:
        p.wait(timeout=300)
    out = []
    for r in range(P):
        with open(os.path.join(d, "result.%d" % r)) as f:
            out.append(f.read())
    return out


def serve(scenarios, install):
    """A rank's main (module doc)"""
    import torch.distributed as dist
    scenario, rank, P, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "rdzv-" + scenario),
                            rank=rank, world_size=P)
    install(setattr)
    try:
        out = "OK " + str(scenarios[scenario](rank, P, d))
    except Exception as e:  # noqa: BLE001 - reported to the test
        out = "ERROR %s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())
    with open(os.path.join(d, "result.%d" % rank), "w") as f:
        f.write(out)
    os._exit(0)  # a scenario that failed or refused may leave a collective pending
