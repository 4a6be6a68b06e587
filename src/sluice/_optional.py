"""Optional dependencies: which pip package and which of sluice's extras bring each module that a codec or a tool
needs, and the one error raised when it is missing.

``pip install sluice`` brings numpy and torch only; that imports, builds pipelines and runs every operator whose
backend needs nothing more. Codecs come with extras (``sluice[image]``, ``[audio]``, ``[video]``, ``[gpu]``).
An operator declares the modules it needs per device in its schema (``OpSchema(..., requires=...)``) and the
pipeline checks them when it is built; the command line checks its own. Example::

    require("av", "sluice probe")       # the module, or MissingDependencyError:
    # sluice probe needs PyAV (module 'av'), which is not installed: pip install 'sluice[video]'
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable
from types import ModuleType

from sluice.errors import MissingDependencyError

__all__ = ["EXTRAS", "MissingDependencyError", "available", "check", "from_import_error", "install_hint",
           "require"]

#: import name -> (the pip package that provides it, the sluice extra that lists that package)
EXTRAS: dict[str, tuple[str, str]] = {
    "simplejpeg": ("simplejpeg", "image"),
    "cv2": ("opencv-python-headless", "image"),
    "PIL": ("pillow", "image"),
    "soundfile": ("soundfile", "audio"),
    "soxr": ("soxr", "audio"),
    "av": ("av", "video"),
    "tqdm": ("tqdm", "cli"),
    "torchvision": ("torchvision", "gpu"),
    "triton": ("triton", "gpu"),
    "PyNvVideoCodec": ("PyNvVideoCodec", "gpu"),
    "nvidia.nvimgcodec": ("nvidia-nvimgcodec-cu13", "gpu"),
    "jax": ("jax", "jax"),
    "scipy.ndimage": ("scipy", "segmentation"),
    "lmdb": ("lmdb", "lmdb"),
    "lz4.block": ("lz4", "lz4"),
}

_NAMES = {"scipy.ndimage": "SciPy", "lz4.block": "lz4", "av": "PyAV", "cv2": "OpenCV", "PIL": "Pillow", "nvidia.nvimgcodec": "nvImageCodec"}

_lock = threading.Lock()
_imported: dict[str, ModuleType | BaseException] = {}


def install_hint(module: str) -> str:
    """``pip install 'sluice[image]'`` for ``cv2``; the package itself for a module no extra lists."""
    package, extra = EXTRAS.get(module, (module.split(".")[0], ""))
    return f"pip install 'sluice[{extra}]'" if extra else f"pip install {package}"


def _message(module: str, what: str, cause: BaseException | None) -> str:
    name = _NAMES.get(module, module)
    label = f"{name} (module '{module}')" if name != module else f"'{module}'"
    if isinstance(cause, ModuleNotFoundError) and cause.name and module.startswith(cause.name):
        state = "which is not installed"
    else:  # installed but failing to import (a missing system library, a broken wheel)
        state = f"which failed to import ({type(cause).__name__}: {cause})"
    return f"{what} needs {label}, {state}: {install_hint(module)}"


def _load(module: str) -> ModuleType | BaseException:
    with _lock:
        found = _imported.get(module)
        if found is None:
            try:
                found = importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001 - ImportError, or an OSError of a codec's shared library
                found = exc
            _imported[module] = found
        return found


def available(module: str) -> bool:
    """Whether ``module`` imports (tried once per process)."""
    return isinstance(_load(module), ModuleType)


def require(module: str, what: str) -> ModuleType:
    """``module`` imported, or :class:`MissingDependencyError` saying that ``what`` (an operator, a command)
    needs it and which extra installs it."""
    found = _load(module)
    if isinstance(found, ModuleType):
        return found
    raise MissingDependencyError(_message(module, what, found)) from found


def check(modules: Iterable[str], what: str) -> None:
    """Raise :class:`MissingDependencyError` for the first of ``modules`` that does not import."""
    for module in modules:
        require(module, what)


def from_import_error(exc: ImportError, what: str) -> MissingDependencyError | None:
    """The error to report for an ``ImportError`` of a module that an extra brings (None for any other module):
    for code paths that import a codec on first use rather than through :func:`require`."""
    name = getattr(exc, "name", None) or ""
    for module in EXTRAS:
        if name and (name == module or name.startswith(module + ".") or module.startswith(name + ".")):
            return MissingDependencyError(_message(module, what, exc))
    return None
