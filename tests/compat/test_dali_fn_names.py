"""Every public ``nvidia.dali.fn`` name of DALI 2.4 (``dali_fn_names.txt``, taken from the wheel's stubs) resolves
through ``sluice.compat.dali.fn`` to something callable, except the names of :data:`NOT_YET`, which lists what
sluice still lacks. The list only shrinks: a name of it that resolves fails the test until it is taken off, and a
name off it that stops resolving fails it too."""

from __future__ import annotations

from pathlib import Path

from sluice.compat._missing import NotSupportedError

NAMES = [line.strip() for line in (Path(__file__).parent / "dali_fn_names.txt").read_text().splitlines()
         if line.strip() and not line.startswith("#")]

# Grouped as issue 39 groups them; take a name off when sluice provides it.
NOT_YET: set[str] = set()


def _resolve(name: str):
    import sluice.compat.dali.fn as fn

    obj = fn
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _resolves(name: str) -> bool:
    try:
        obj = _resolve(name)
    except NotSupportedError:
        return False
    return callable(obj) and not (obj.__doc__ or "").startswith("Not provided by sluice")


def test_name_list_is_dali_24():
    assert len(NAMES) == len(set(NAMES)) == 144
    assert NAMES == sorted(NAMES)
    assert {"readers.file", "decoders.image", "python_function", "reductions.mean"} <= set(NAMES)
    assert NOT_YET <= set(NAMES), sorted(NOT_YET - set(NAMES))


def test_every_dali_fn_name_resolves():
    resolved = [n for n in NAMES if _resolves(n)]
    print(f"\n{len(resolved)} of {len(NAMES)} DALI 2.4 fn names resolve through sluice.compat.dali.fn")
    lost = sorted(set(NAMES) - set(resolved) - NOT_YET)
    assert not lost, f"these DALI names no longer resolve (or were never listed as missing): {lost}"
    done = sorted(NOT_YET & set(resolved))
    assert not done, f"these names resolve now: take them off NOT_YET: {done}"

