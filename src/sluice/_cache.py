"""The one folder sluice writes to: ``$SLUICE_CACHE``, else ``$XDG_CACHE_HOME/sluice``, else ``~/.cache/sluice``.

Everything sluice keeps between runs lives below it: the video frame indexes (``video_index/``, which
``$SLUICE_VIDEO_INDEX_DIR`` may move elsewhere), the JPEGs of ``sluice demo`` and ``sluice bench``
(``demo_images/``) and the data the examples make (``examples/``). The variables are read by :mod:`sluice.env`.
Example::

    sluice.cache_dir("demo_images")     # PosixPath('/home/me/.cache/sluice/demo_images')
"""

from __future__ import annotations

from sluice.env import cache_dir

__all__ = ["cache_dir"]
