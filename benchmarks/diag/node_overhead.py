"""The executor's cost per operator node, without a GPU: a pipeline of N cheap nodes over a small dense batch,
timed against the same pipeline with no nodes, so that what is left is the engine's work around each kernel
(context, arguments, output checks) plus the kernel's own small arithmetic.

    python benchmarks/diag/node_overhead.py [--nodes 64] [--batch 64] [--iterations 100] [--profile 25] [--cpu]

Each node is one of: ``x * 1.0``, ``x + 0.0``, ``fn.cast(x, dtype=FLOAT)``, ``fn.brightness(x, brightness=b)``
(a per-sample argument input from ``fn.random.uniform``, drawn once); the chain repeats them in that order. The
nodes are GPU nodes run on CPU tensors (aug_host.py's "fake GPU": the augmentation programs' nodes are GPU nodes),
or with ``--cpu`` CPU nodes (``fn.brightness`` is then a per-sample kernel: its own cost dominates).
Prints µs per node per batch (the chain's time minus the empty pipeline's, divided by N; CPU time of the calling
thread, best of several rounds), the kernels' own share measured by calling them outside the pipeline, and with
``--profile`` cProfile's top functions by own time.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from aug_host import fake_gpu, print_profile  # noqa: E402


def build(n_nodes: int, batch: int, shape: tuple[int, ...], gpu: bool, kinds: list[str]):
    from sluice import fn, pipeline_def, types

    data = np.random.default_rng(0).random((batch, *shape), dtype=np.float32)

    @pipeline_def(batch_size=batch, num_threads=1, device_id=0 if gpu else None, seed=7, exec_async=False, exec_pipelined=False)
    def pipe():
        x = fn.external_source(source=lambda: data, layout="HW", batch=True)
        x = x.gpu() if gpu else x
        factor = fn.random.uniform(range=[0.99, 1.01]) if n_nodes and "brightness" in kinds else None
        for k in range(n_nodes):
            kind = kinds[k % len(kinds)]
            if kind == "mul":
                x = x * 1.0
            elif kind == "add":
                x = x + 0.0
            elif kind == "cast":
                x = fn.cast(x, dtype=types.FLOAT)
            else:
                x = fn.brightness(x, brightness=factor)
        return x

    p = pipe()
    if gpu:
        with fake_gpu():
            p.build()
    else:
        p.build()
    return p


def per_batch(p, iterations: int, rounds: int) -> float:
    """The best of ``rounds`` rounds, in this thread's CPU seconds a batch: a 2-core machine shared with other
    jobs makes wall time swing by 2x, CPU time much less."""
    for _ in range(20):
        p.run()
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(iterations):
            p.run()
        best = min(best, (time.thread_time() - start) / iterations)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--shape", type=int, nargs="+", default=[8, 8])
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--kinds", default="mul,add,cast,brightness", help="the node kinds, repeated in this order")
    ap.add_argument("--cpu", action="store_true", help="CPU nodes instead of GPU nodes on CPU tensors")
    ap.add_argument("--profile", type=int, default=0, help="print the N functions of most own time (cProfile)")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    shape = tuple(a.shape)
    kinds = a.kinds.split(",")
    empty = build(0, a.batch, shape, not a.cpu, kinds)
    chain = build(a.nodes, a.batch, shape, not a.cpu, kinds)
    t0 = per_batch(empty, a.iterations, a.rounds)
    t1 = per_batch(chain, a.iterations, a.rounds)
    n_run = len(chain._executor.nodes) - len(empty._executor.nodes)  # the chain's nodes (plus the uniform)
    per_node = (t1 - t0) / n_run
    # The kernels' own arithmetic, outside the pipeline: the same torch calls on the dense batch.
    x = torch.from_numpy(np.random.default_rng(0).random((a.batch, *shape), dtype=np.float32))
    factor = torch.from_numpy(np.random.default_rng(1).random(a.batch, dtype=np.float32) * 0.02 + 0.99)
    calls = {"mul": lambda y: y * 1.0, "add": lambda y: y + 0.0, "cast": lambda y: y.to(torch.float32),
             "brightness": lambda y: y * factor.view(-1, 1, 1)}
    reps = 500
    kernel = float("inf")
    for _ in range(a.rounds):
        start = time.thread_time()
        for _ in range(reps):
            y = x
            for kind in kinds:
                y = calls[kind](y)
        kernel = min(kernel, (time.thread_time() - start) / reps / len(kinds))
    print(f"{'CPU' if a.cpu else 'GPU (on CPU tensors)'} nodes, batch {a.batch} x {shape} float32, {n_run} nodes ({a.kinds}): "
          f"{t0 * 1e6:.0f} µs a batch without nodes, {t1 * 1e6:.0f} µs with them")
    print(f"  {per_node * 1e6:.1f} µs per node per batch; the bare torch arithmetic is ~{kernel * 1e6:.1f} µs of it")
    if a.profile:
        print_profile(chain, a.iterations, a.profile)
    empty.close()
    chain.close()


if __name__ == "__main__":
    main()
