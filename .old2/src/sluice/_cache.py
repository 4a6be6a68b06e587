"""The one folder sluice writes to: ``$SLUICE_CACHE``, else ``$XDG_CACHE_HOME/sluice``, else ``~/.cache/sluice``.

Everything sluice keeps between runs lives below it: the video frame indexes (``video_index/``, which
``$SLUICE_VIDEO_INDEX_DIR`` may move elsewhere), the JPEGs of ``sluice demo`` and ``sluice bench``
(``demo_images/``) and the data the examples make (``examples/``). Example::

    sluice.cache_dir("demo_images")     # PosixPath('/home/me/.cache/sluice/demo_images')
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir(*parts: str) -> Path:
    """sluice's cache folder (``$SLUICE_CACHE``, else ``$XDG_CACHE_HOME/sluice``, else ``~/.cache/sluice``), or a
    path below it. Nothing is created here: the caller makes the folders it writes to."""
    root = os.environ.get("SLUICE_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "sluice") if xdg else os.path.join(Path.home(), ".cache", "sluice")
    return Path(root).joinpath(*parts)
