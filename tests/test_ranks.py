"""Several ranks on one host, on the CPU (issue 25): two ranks under ``torchrun --standalone --nproc_per_node=2``
with gloo (tests/ranks_job.py), pinned to two cores so that each rank's share is one core whatever the machine.

* every sample is seen exactly once per epoch across the ranks, for 2 epochs, with sluice's torch.distributed
  defaults and with DALI's explicit shard_id / num_shards (random_shuffle and pad_last_batch; stick_to_shard);
* the threads and worker processes that sluice starts in all ranks together, counted during the run, never
  exceed the cores the job was given (num_threads unset takes the rank's share);
* a rank killed mid-epoch (SIGKILL) ends the job with torchrun's error naming it, within a timeout, and leaves no
  rank, worker process or /dev/shm entry behind.

The 8-GPU figures of the issue are benchmarks/multi_gpu.sh's."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

import sluice
from sluice import Pipeline
from sluice._workers import cores_per_rank

SCRIPT = os.path.join(os.path.dirname(__file__), "ranks_job.py")
RANKS = 2


def _have_torchrun() -> bool:
    return (torch.distributed.is_available() and torch.distributed.is_gloo_available()
            and importlib.util.find_spec("torch.distributed.run") is not None)


def _two_cores() -> set[int]:
    try:
        return set(sorted(os.sched_getaffinity(0))[:RANKS])
    except AttributeError:  # not Linux
        return set()


needs_torchrun = pytest.mark.skipif(not _have_torchrun() or len(_two_cores()) < RANKS or sys.platform != "linux",
                                    reason="needs torch.distributed with gloo, torchrun, Linux and 2 cores")


def _torchrun(mode: str, root) -> subprocess.Popen:
    """torchrun running ranks_job.py ``mode`` on 2 ranks, all of it pinned to 2 cores (so each rank's share is 1).
    Its output goes to ``root/torchrun.log``, not a pipe, which a process left behind would hold open."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={RANKS}", SCRIPT, mode,
           "--root", str(root)]
    src = os.path.dirname(os.path.dirname(sluice.__file__))  # the sluice under test, not an installed one
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    env.pop("OMP_NUM_THREADS", None)  # torchrun sets 1 for several ranks
    cores = _two_cores()
    with open(os.path.join(root, "torchrun.log"), "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env,
                                preexec_fn=lambda: os.sched_setaffinity(0, cores), start_new_session=True)
    proc.log = os.path.join(root, "torchrun.log")
    return proc


def _output(proc: subprocess.Popen) -> str:
    with open(proc.log) as f:
        return f.read()


def _finish(proc: subprocess.Popen, timeout: float) -> str:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"torchrun did not end within {timeout} s:\n{_output(proc)[-4000:]}")
    return _output(proc)


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie waiting for init to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_num_threads_unset_takes_the_ranks_share_of_the_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert cores_per_rank() == 2
    assert Pipeline(batch_size=1, device_id=None).num_threads == 2
    assert Pipeline(batch_size=1, device_id=None, num_threads=16).num_threads == 16  # DALI's: per pipeline, as given
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    assert cores_per_rank() == 1 and Pipeline(batch_size=1, device_id=None).num_threads == 1
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert cores_per_rank() == 16 and Pipeline(batch_size=1, device_id=None).num_threads == 4  # at most 4 unset


def test_ranks_bound_to_other_cores_do_not_share_this_ones(monkeypatch):
    """torchrun --numa-binding=exclusive (or numactl per rank): a rank's cores are its own, not to divide again."""
    from sluice import _workers

    cores = {0: set(range(16)), 101: set(range(16, 32)), 102: set(range(8, 24)), 103: set(range(32, 48))}

    def affinity(pid):
        if pid == 104:
            raise ProcessLookupError(pid)  # gone, or not ours to see: counted as sharing
        return cores[pid]

    monkeypatch.setattr(os, "sched_getaffinity", affinity)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "5")
    monkeypatch.setattr(_workers, "_sibling_ranks", lambda: [101, 102, 103, 104])
    assert cores_per_rank() == 16 // 3  # 101 and 103 are bound elsewhere; 102 overlaps, 104 is unknown
    monkeypatch.setattr(_workers, "_sibling_ranks", lambda: [])  # ranks not seen (not started yet) share
    assert cores_per_rank() == 16 // 5


@needs_torchrun
def test_two_ranks_see_every_sample_once_and_stay_within_the_cores(tmp_path):
    out = _finish(_torchrun("shards", tmp_path), timeout=120)
    oks = [line.split(":")[0] for line in out.splitlines() if line.startswith("OK")]
    assert oks == [f"OK {way} epoch {e}" for way in ("defaults", "explicit", "stick") for e in (0, 1)], out[-4000:]
    ranks = [dict(kv.split("=") for kv in line.split(": ", 1)[1].split())
             for line in out.splitlines() if line.startswith("CORES rank")]
    assert len(ranks) == RANKS, out[-4000:]
    for r in ranks:  # each rank sees the other among torchrun's children, on the same cores
        assert (r["share"], r["num_threads"], r["affinity"], r["siblings"]) == ("1", "1", str(RANKS), "1"), r
    total = sum(int(r["working"]) for r in ranks)
    assert 0 < total <= RANKS, f"the ranks ran {total} threads and worker processes on {RANKS} cores: {ranks}"


def _shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@needs_torchrun
def test_a_killed_rank_ends_the_job_and_leaves_nothing_behind(tmp_path):
    shm_before = _shm()
    proc = _torchrun("kill", tmp_path)
    ready = [tmp_path / f"ready_{r}.json" for r in range(RANKS)]
    deadline = time.monotonic() + 90
    while not all(p.exists() for p in ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"the ranks did not reach their second epoch:\n{_output(proc)[-4000:]}")
        time.sleep(0.1)
    states = [json.loads(p.read_text()) for p in ready]
    assert all(s["children"] for s in states), states  # each rank has its external_source worker
    killed = states[1]["pid"]
    os.kill(killed, signal.SIGKILL)
    start = time.monotonic()
    out = _finish(proc, timeout=60)
    took = time.monotonic() - start
    assert proc.returncode != 0, out[-4000:]
    # torchrun names the rank that failed and how
    assert re.search(rf"exitcode\s*:\s*-9 \(pid: {killed}\)", out) and "SIGKILL" in out, out[-4000:]
    pids = [p for s in states for p in [s["pid"], *s["children"]]]
    deadline = time.monotonic() + 5
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [p for p in pids if not _gone(p)]
    for pid in alive:  # not to leave them to the next tests
        os.kill(pid, signal.SIGKILL)
    assert alive == [], f"left running after the job ended ({took:.1f} s after the kill); all: {pids}"
    left = {n for n in _shm() - shm_before if "sluice" in n or any(str(p) in n for p in pids)}
    assert left == set(), left


BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "multi_gpu.sh")


@needs_torchrun
@pytest.mark.skipif(not os.path.exists(BENCH) or importlib.util.find_spec("skimage") is None,
                    reason="needs benchmarks/multi_gpu.sh and scikit-image (its data generator)")
def test_the_multi_gpu_benchmark_runs_on_two_cpu_ranks(tmp_path):
    """benchmarks/multi_gpu.sh's dry run (CPU=1): the train and audio programs, adapted to ranks, on 2 CPU ranks."""
    src = os.path.dirname(os.path.dirname(sluice.__file__))
    env = dict(os.environ, CPU="1", NS="2", IMPLS="sluice", DATA=str(tmp_path / "data"), OUT=str(tmp_path / "out"),
               PYTHON=sys.executable, SITE=src, COMMIT="test")
    cores = _two_cores()
    done = subprocess.run(["bash", BENCH, "train", "audio"], env=env, capture_output=True, text=True, timeout=180,
                          preexec_fn=lambda: os.sched_setaffinity(0, cores))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "out" / "multi_gpu.jsonl").read_text().splitlines()]
    assert sorted((r["workload"], r["ranks"]) for r in rows) == [("audio", 2), ("train", 2)], done.stdout[-3000:]
    for r in rows:
        assert r["cpu_dry_run"] and len(r["rates"]) == 2 and min(r["rates"]) > 0, r
        assert r["share"] == [1, 1] and r["host_cores"] >= 2, r
