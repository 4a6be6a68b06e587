"""sluice's compiled core (:mod:`sluice._core`) and its pure-Python twins.

The per-sample host work of a batch (reading its files, parsing headers, drawing crop windows, decoding JPEGs and
WAVs, resizing on the CPU) is done by a small C++ core with the GIL released, one call per batch or per chunk of a
batch, so that the pipeline's threads work in parallel and the thread that launches GPU work never waits for the
GIL. pip builds the core on install; where it could not be built (no compiler), or inside :func:`fallback`, each
function here runs its pure-Python twin instead, which gives identical results (tests/native compares the two),
more slowly.

Each module of this package wraps one part of the core: :mod:`.io`, :mod:`.image`, :mod:`.jpeg`, :mod:`.resize`,
:mod:`.audio`, :mod:`.signal`. Example::

    from sluice import native
    native.core()          # the compiled module, or None when the fallbacks run
"""

from __future__ import annotations

import contextlib
import logging
from types import ModuleType

__all__ = ["core", "available", "fallback"]

logger = logging.getLogger(__name__)

#: The core's interface this Python side was written for (module.cpp's VERSION).
CORE_VERSION = 9

try:
    from sluice import _core as _compiled
except ImportError as exc:  # not built: the pure-Python twins run
    _compiled = None
    _why = str(exc)
else:
    _why = ""
    if getattr(_compiled, "VERSION", None) != CORE_VERSION:  # built from other sources: rebuild it
        _why = (f"the built core is version {getattr(_compiled, 'VERSION', 'unknown')}, this sluice needs "
                f"{CORE_VERSION}")
        _compiled = None

_enabled = True  # False inside fallback()
_warned = False


def core() -> ModuleType | None:
    """The compiled core, or None when the pure-Python fallbacks are to run (not built, or inside :func:`fallback`)."""
    global _warned
    if _enabled and _compiled is not None:
        return _compiled
    if not _warned and _enabled:
        _warned = True
        logger.warning("sluice's compiled core is not built (%s); the pure-Python fallbacks run, with the same "
                       "results but more slowly. Reinstall sluice where a C++ compiler is available.", _why)
    return None


def available() -> bool:
    """Whether the compiled core is built and enabled."""
    return _enabled and _compiled is not None


@contextlib.contextmanager
def fallback():
    """Run the pure-Python twins inside the block (tests compare them with the core)."""
    global _enabled
    before, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = before
