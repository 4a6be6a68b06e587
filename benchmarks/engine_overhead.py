"""The engine's own overhead per iteration: external_source -> gpu -> two arithmetic operators on a dense
batch of 256 small tensors, against a plain PyTorch loop doing the same copy and arithmetic.

    python benchmarks/engine_overhead.py [--iterations 5000]

Target (foundation issue): under 0.3 ms per iteration above the plain loop, on the H200.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from common import report  # noqa: E402

from sluice.bench import engine_overhead  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    for shape in [(64,), (3, 32, 32)]:
        r = engine_overhead(args.iterations, args.batch_size, shape)
        report(f"engine overhead, batch {args.batch_size} x {shape}", "ms/iter", r["sluice_ms"],
               {"plain PyTorch loop": r["plain_ms"]}, higher_is_better=False)
        print(f"overhead above the plain loop: {r['overhead_ms']:.3f} ms per iteration (target < 0.3 ms)")
