"""``nvidia.dali.fn`` on sluice: every operator under its DALI name, plus DALI's deprecated names
(``fn.file_reader``, ``fn.image_decoder``, ``fn.coin_flip``, ...), which warn and call their replacement. Old
argument spellings (``output_dtype``, ``image_type``) are translated.

Example::

    import nvidia.dali.fn as fn          # after sluice.compat.install()
    jpegs, labels = fn.readers.file(file_root=root)
    images = fn.decoders.image(jpegs, device="mixed")
"""

import sys as _sys

import sluice.fn as _sluice_fn

from sluice.compat._build import build_tree as _build_tree
from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names

__path__: list[str] = []  # a package: `import nvidia.dali.fn.readers` works

_build_tree(_sys.modules[__name__], "fn")
_conditional = _sluice_fn._conditional  # DALI's fn._conditional.split / merge / not_
__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
