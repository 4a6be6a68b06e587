"""``nvidia.dali.ops`` on sluice: the class form of every operator under its DALI name (``ops.Resize``,
``ops.readers.File``, ``ops.decoders.Image``), plus DALI's legacy class names (``ops.FileReader``,
``ops.nvJPEGDecoder``, ``ops.ImageDecoder``, ``ops.CoinFlip``, ``ops.VideoReader`` ...), which warn and make their
replacement. Old argument spellings (``output_dtype``, ``image_type``) are translated.

Example::

    from nvidia.dali import ops, types   # after sluice.compat.install()
    decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)
    cmnp = ops.CropMirrorNormalize(device="cpu", output_dtype=types.FLOAT, output_layout=types.NCHW,
                                   crop=(224, 224), mean=[128.0] * 3, std=[64.0] * 3)
"""

import sys as _sys

from sluice.compat._build import build_tree as _build_tree
from sluice.compat._missing import module_getattr as _module_getattr
from sluice.compat._missing import public_names as _public_names

__path__: list[str] = []  # a package: `import nvidia.dali.ops.readers` works

_build_tree(_sys.modules[__name__], "ops")
__getattr__ = _module_getattr(__name__, lambda: _public_names(_sys.modules[__name__]))
