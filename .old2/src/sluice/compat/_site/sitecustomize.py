"""Put first on ``PYTHONPATH`` by ``python -m sluice.compat``, so that the program's child processes
(multiprocessing ``spawn``, DataLoader workers, parallel external sources) resolve ``nvidia.dali`` as the
parent does. It loads the import hook's own file without importing sluice (cheap: sluice is imported only when
``nvidia.dali`` is), then runs the ``sitecustomize`` it shadows, if there is one.
"""

import importlib.util
import os
import sys


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _install_hook() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    _load("_sluice_dali_hook", os.path.join(os.path.dirname(here), "_importer.py")).install()


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or os.curdir) == here:
            continue
        candidate = os.path.join(entry or os.curdir, "sitecustomize.py")
        if os.path.isfile(candidate):
            _load("_sitecustomize_shadowed", candidate)
            return


_install_hook()
_chain()
