"""Run a benchmark script with the cores the compiled core's workers leave to the stage threads set to N
(``sluice.pipeline.pool.STAGE_CORES``; 0: every core for the workers), to compare both in one lease.

    python benchmarks/diag/stage_cores.py N SCRIPT ARGS...
    python benchmarks/diag/stage_cores.py 0 benchmarks/speech_side_by_side.py sluice /tmp/sbs/speech --epochs 4
"""
import runpy
import sys

import sluice.pipeline.pool as pool


def main() -> None:
    pool.STAGE_CORES = int(sys.argv[1])
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
