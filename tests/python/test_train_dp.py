"""examples/torch/train_dp.py's torch baselines on the CPU, at P = 1 and 2
as gloo processes (dp_ranks.py): ZeroRedundancyOptimizer and FSDP2 with
gradient accumulation give DDP + AdamW's losses and parameters; the script
refuses them outside torchrun. Skipped without torch."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import gloo_ranks  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "torch", "train_dp.py")


@pytest.mark.parametrize("P", [1, 2])
def test_zero_and_fsdp2_match_ddp(tmp_path, P):
    got = gloo_ranks.spawn("dp_ranks.py", "baselines", P, str(tmp_path))
    assert all(g.startswith("OK") for g in got), got


@pytest.mark.parametrize("optimizer", ["torch-zero", "torch-fsdp2"])
def test_refused_outside_torchrun(optimizer):
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    r = subprocess.run([sys.executable, SCRIPT, "--optimizer", optimizer], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "needs torchrun" in r.stderr, r.stderr
