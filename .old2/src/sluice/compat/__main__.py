"""Run an unchanged DALI program on sluice: ``python -m sluice.compat train.py [args...]`` (or
``python -m sluice.compat -m package.module [args...]``) installs the ``nvidia.dali`` import hook, then runs
the program as ``python`` would. Child processes get the hook too (``_site/sitecustomize.py`` goes first on
their ``PYTHONPATH``), so ``spawn`` workers that re-import the program resolve ``nvidia.dali`` as well.

Example::

    python -m sluice.compat examples/dali_resnet50.py --batch-size 64
"""

from __future__ import annotations

import os
import runpy
import sys

from sluice.compat._importer import install

USAGE = "usage: python -m sluice.compat SCRIPT [ARGS...] | python -m sluice.compat -m MODULE [ARGS...]"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        sys.stderr.write(USAGE + "\n")
        return 0 if argv else 2
    install()
    # Child processes (spawn) re-import the program: give them the hook too, through a sitecustomize.
    site_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (site_dir, os.environ.get("PYTHONPATH")) if p)
    if argv[0] == "-m":
        if len(argv) < 2:
            sys.stderr.write(USAGE + "\n")
            return 2
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
