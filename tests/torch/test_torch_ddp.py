"""Two processes under torchrun train a DDP model for 3 epochs on a sluice pipeline (tests/torch/ddp_train.py):
each sample is seen exactly once per epoch across the ranks, and every rank gets the same number of batches.
On the CPU with gloo; on 2 GPUs with NCCL."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

SCRIPT = os.path.join(os.path.dirname(__file__), "ddp_train.py")


def _torchrun(device: str, timeout: int, root) -> str:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", SCRIPT,
           "--device", device, "--epochs", "3", "--root", str(root)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in {timeout} s: {e.stdout}\n{e.stderr}")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    return done.stdout


@pytest.mark.slow
def test_ddp_two_processes_cpu_gloo(tmp_path):
    out = _torchrun("cpu", timeout=300, root=tmp_path)
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("OK")] == \
        ["OK epoch 0", "OK epoch 1", "OK epoch 2"], out


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_ddp_two_gpus_nccl(tmp_path):
    out = _torchrun("cuda", timeout=300, root=tmp_path)
    assert out.count("OK epoch") == 3, out
