"""The mixed decoder operator with its scan check deferred to the batch's hand-out, waited for in the call, on
the CPU, and off, in one run on the same files.

    python benchmarks/decode_check_modes.py /tmp/imagenet_like
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_images import batches, load, sluice_mixed_pass
from decode_profile import rate

from sluice.backends.image.scan_check import BatchScanCheck


def main() -> None:
    files, _ = load(Path(sys.argv[1]), 4096)
    bb = batches(files, 256)
    for label, defer, where in [("deferred, gpu", True, "gpu"), ("in the call, gpu", False, "gpu"),
                                ("deferred, cpu", True, "cpu"), ("off", True, None),
                                ("deferred, gpu (again)", True, "gpu")]:
        run, op = sluice_mixed_pass(bb, 16, 0, 0.9, defer_checks=defer)
        run()
        dec = op._decoder
        dec.validate_scans = where is not None
        if where == "cpu":
            dec._scan_check = BatchScanCheck(dec.device, "cpu")
        print(f"MODES scan check {label:24s} {rate(run, len(files)):9,.0f} img/s", flush=True)
        op.close()


if __name__ == "__main__":
    main()
