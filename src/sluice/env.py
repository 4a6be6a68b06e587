"""The environment variables sluice reads, each parsed here and nowhere else (docs/environment.md says why each is
one).

Nine remain: where sluice keeps files between runs (``SLUICE_CACHE``, ``SLUICE_VIDEO_INDEX_DIR``), how it talks to
S3 (``SLUICE_S3_*``, beside AWS's own ``AWS_*`` variables), the decoders' safety limit on image size
(``SLUICE_MAX_IMAGE_PIXELS``) and one debug switch (``SLUICE_EAGER``). How fast paths are tuned is not among them:
that is an operator's or a pipeline's argument, or a module constant with the measured default.

Each accessor reads the environment when it is called and raises ValueError naming the variable on a value it
cannot parse. This module imports nothing from sluice (nor anything outside the standard library): the CPU video
worker processes load it by its path without importing sluice (see ``sluice.backends.video.index``). Example::

    from sluice import env
    env.cache_dir("demo_images")      # PosixPath('/home/me/.cache/sluice/demo_images')
    env.s3().timeout                  # 30.0 unless SLUICE_S3_TIMEOUT says otherwise
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

__all__ = ["VARIABLES", "cache_dir", "video_index_dir", "max_image_pixels", "S3Env", "s3", "eager"]

#: Every variable sluice reads, with its default as written in docs/environment.md.
VARIABLES: dict[str, str] = {
    "SLUICE_CACHE": "~/.cache/sluice",
    "SLUICE_VIDEO_INDEX_DIR": "$SLUICE_CACHE/video_index",
    "SLUICE_MAX_IMAGE_PIXELS": "268435456",
    "SLUICE_S3_TIMEOUT": "30",
    "SLUICE_S3_CONNECT_TIMEOUT": "5",
    "SLUICE_S3_RETRIES": "5",
    "SLUICE_S3_RETRY_TIMEOUT": "60",
    "SLUICE_S3_CONCURRENCY": "64",
    "SLUICE_EAGER": "0",
}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _raw(name: str) -> str | None:
    """The variable's value with surrounding blanks removed; None when unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or None


def _number(name: str, default: float, *, kind: type = float, least: float = 0.0,
            strictly: bool = False) -> float:
    value = _raw(name)
    if value is None:
        return default
    what = "a whole number" if kind is int else "a number"
    bound = f"{'>' if strictly else '>='} {least:g}"
    try:
        number = kind(value)
    except ValueError:
        raise ValueError(f"Invalid {name} ({value!r}): expected {what} {bound}.") from None
    if number < least or (strictly and number == least):
        raise ValueError(f"Invalid {name} ({value!r}): expected {what} {bound}.")
    return number


def _flag(name: str) -> bool:
    value = _raw(name)
    if value is None:
        return False
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"Invalid {name} ({value!r}): expected 1 or 0 (also true/false, yes/no, on/off).")


def cache_dir(*parts: str) -> Path:
    """sluice's cache folder (``$SLUICE_CACHE``, else ``$XDG_CACHE_HOME/sluice``, else ``~/.cache/sluice``), or a
    path below it. Nothing is created here: the caller makes the folders it writes to."""
    root = _raw("SLUICE_CACHE")
    if root is None:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "sluice") if xdg else os.path.join(Path.home(), ".cache", "sluice")
    return Path(root).expanduser().joinpath(*parts)


def video_index_dir() -> Path:
    """Where video frame indexes are kept: ``$SLUICE_VIDEO_INDEX_DIR`` (e.g. a folder several machines share),
    else ``video_index`` in :func:`cache_dir`."""
    moved = _raw("SLUICE_VIDEO_INDEX_DIR")
    return Path(moved).expanduser() if moved is not None else cache_dir("video_index")


def max_image_pixels(default: int) -> int:
    """``$SLUICE_MAX_IMAGE_PIXELS`` (a whole number > 0), else ``default``: the largest image (height x width) the
    decoders accept, read once when the image backends load."""
    return _number("SLUICE_MAX_IMAGE_PIXELS", default, kind=int, least=0, strictly=True)


class S3Env(NamedTuple):
    """sluice's own S3 settings (the AWS ones are read by :class:`sluice.backends.storage.S3Settings`)."""

    timeout: float          #: seconds a request may take (SLUICE_S3_TIMEOUT)
    connect_timeout: float  #: seconds connecting may take (SLUICE_S3_CONNECT_TIMEOUT)
    retries: int            #: retries of a failed request (SLUICE_S3_RETRIES)
    retry_timeout: float    #: seconds a request may take, retries included (SLUICE_S3_RETRY_TIMEOUT)
    concurrency: int        #: requests in flight at once (SLUICE_S3_CONCURRENCY)


def s3() -> S3Env:
    """The ``SLUICE_S3_*`` settings the environment gives now."""
    return S3Env(timeout=_number("SLUICE_S3_TIMEOUT", 30.0, strictly=True),
                 connect_timeout=_number("SLUICE_S3_CONNECT_TIMEOUT", 5.0, strictly=True),
                 retries=_number("SLUICE_S3_RETRIES", 5, kind=int),
                 retry_timeout=_number("SLUICE_S3_RETRY_TIMEOUT", 60.0),
                 concurrency=_number("SLUICE_S3_CONCURRENCY", 64, kind=int, least=1))


def eager() -> bool:
    """``SLUICE_EAGER=1``: the pipeline runs as written, to tell a bug of a fast path from one of the graph: no
    graph rewrites (the fusions of :mod:`sluice.pipeline.passes.fusion`, the audio decoder moved to the device),
    no CUDA graphs (every GPU operator launched from Python), and the per-sample torch kernels instead of the
    Triton ones."""
    return _flag("SLUICE_EAGER")
