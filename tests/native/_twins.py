"""The compiled core's audio decoding against its pure-Python twin and soundfile: the CPU decoder's calls made on
encoded files (:func:`run`), both ways (:func:`core_and_twin`), and soundfile's own decode (:func:`reference`)."""

from __future__ import annotations

import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import soundfile

from sluice import native
from sluice.backends.audio import plan_windows
from sluice.native.audio import OK, open_files


def core_and_twin(run: Callable, *args, **kw):
    """``run(*args, **kw)`` with the twin (``native.fallback()``) and, where the core is built, with the core:
    ``run`` returns ``(samples, errors)``; the errors must be equal and each sample of identical dtype, shape and
    values (None where the other is None). Returns the core's result, or the twin's without a core."""
    with native.fallback():
        twin = run(*args, **kw)
    if not native.available():
        return twin
    core = run(*args, **kw)
    assert core[1] == twin[1]
    for a, b in zip(core[0], twin[0]):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
    return core


def run(files: list[bytes], *, dtype="float32", downmix=False, start=0.0, duration=0.0, policy="error",
        finite=True, region=False, parts=1, suffix=".bin"):
    """Decode ``files`` as the CPU decoder does (open, plan, decode in ``parts`` chunks in threads): the samples
    (None for a failed file) and the error message of each failed file. The output starts filled with 7s, not
    zeros, so that a sample left unwritten shows."""
    n = len(files)
    sources = [f"f{i}{suffix}" for i in range(n)]
    if region:
        sizes = [len(f) for f in files]
        kw = {"data": np.frombuffer(b"".join(files) or b"\0", np.uint8), "offsets": np.cumsum([0] + sizes[:-1]),
              "sizes": sizes}
    else:
        kw = {"data": [np.frombuffer(f, np.uint8) for f in files]}
    with open_files(**kw, sources=sources) as fl:
        st, nr, no, errs = plan_windows(fl.rate, fl.frames, [start] * n, [duration] * n, policy, sources,
                                        valid=fl.status == OK)
        errors = {i: str(e) for i, e in {**fl.failures, **errs}.items()}
        if errs:                                              # as the operator: no decoding past a bad window
            return [None] * n, errors
        width = np.ones(n, np.int64) if downmix else fl.channels
        counts = np.where(np.isin(np.arange(n), list(errors)), 0, no * width)
        flat = np.full(int(counts.sum()), 7, dtype)
        offsets = (np.cumsum(counts) - counts) * flat.itemsize
        bounds = np.linspace(0, n, parts + 1).astype(int)
        with ThreadPoolExecutor(parts) as pool:
            done = pool.map(lambda lo_hi: fl.decode(lo_hi[0], lo_hi[1], flat, offsets, st, nr, no, dtype, downmix,
                                                    finite), zip(bounds[:-1], bounds[1:]))
            for failed in done:
                errors.update({i: str(e) for i, e in failed.items()})
    shape = [(int(no[i]),) if downmix else (int(no[i]), int(fl.channels[i])) for i in range(n)]
    out = [None if i in errors else flat[offsets[i] // flat.itemsize:][: counts[i]].reshape(shape[i])
           for i in range(n)]
    return out, errors


def reference(data: bytes, dtype: str, downmix: bool) -> np.ndarray:
    """soundfile's full decode (downmixed as read_into does: float64 mean, rint for integers)."""
    ref, _ = soundfile.read(io.BytesIO(data), dtype=dtype, always_2d=True)
    if not downmix:
        return ref
    mean = ref.astype(np.float64).mean(axis=1)
    return (np.rint(mean) if dtype != "float32" else mean).astype(dtype)
