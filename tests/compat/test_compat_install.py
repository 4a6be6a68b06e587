# ruff: noqa: PLR0402 - `import nvidia.dali.fn as fn` is the DALI idiom under test
"""sluice.compat.install(): `import nvidia.dali...` resolves to sluice.compat.dali (the same module objects) only
while no real DALI is importable, without shadowing other `nvidia.*` packages; uninstall() undoes it."""

from __future__ import annotations

import importlib
import sys

import pytest

import sluice.compat
import sluice.compat.dali as compat_dali
from sluice.compat._importer import installed_finder


@pytest.fixture
def isolated_imports():
    """Restore sys.path, sys.meta_path and the nvidia.* modules after the test (and re-install the hook)."""
    path, meta_path = list(sys.path), list(sys.meta_path)
    saved = {k: v for k, v in sys.modules.items() if k == "nvidia" or k.startswith("nvidia.")}
    sluice.compat.uninstall()
    yield
    sluice.compat.uninstall()
    for k in [k for k in sys.modules if k == "nvidia" or k.startswith("nvidia.")]:
        del sys.modules[k]
    sys.modules.update(saved)
    sys.path[:], sys.meta_path[:] = path, meta_path
    importlib.invalidate_caches()


def test_install_is_idempotent_and_import_forms_work(isolated_imports):
    assert sluice.compat.install() is True
    assert sluice.compat.install() is True
    assert sum(getattr(f, 'sluice_dali_finder', False) for f in sys.meta_path) == 1

    import nvidia.dali
    import nvidia.dali.fn as fn
    import nvidia.dali.fn.readers
    import nvidia.dali.plugin.pytorch.experimental.proxy
    from nvidia.dali import pipeline_def, types
    from nvidia.dali.ops import readers as ops_readers
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    assert nvidia.dali is compat_dali and fn is compat_dali.fn
    assert nvidia.dali.fn.readers is compat_dali.fn.readers and ops_readers is compat_dali.ops.readers
    assert pipeline_def is compat_dali.pipeline_def and types.FLOAT is compat_dali.types.FLOAT
    assert DALIGenericIterator is compat_dali.plugin.pytorch.DALIGenericIterator
    assert nvidia.dali.plugin.pytorch.experimental.proxy is compat_dali.plugin.pytorch.experimental.proxy
    # the sluice modules keep their own identity
    assert compat_dali.__spec__.name == "sluice.compat.dali" and compat_dali.fn.__name__ == "sluice.compat.dali.fn"
    assert compat_dali.fn.readers.__spec__ is None or compat_dali.fn.readers.__spec__.name.startswith("sluice")


def test_auto_aug_resolves_to_sluice_auto_aug(isolated_imports):
    sluice.compat.install()
    import nvidia.dali.auto_aug.core.policy
    from nvidia.dali.auto_aug import augmentations, auto_augment, rand_augment, trivial_augment
    from nvidia.dali.auto_aug.core import Policy, augmentation, select, signed_bin

    from sluice import auto_aug as sluice_auto_aug

    core = sluice_auto_aug.core
    assert auto_augment is sluice_auto_aug.auto_augment and rand_augment is sluice_auto_aug.rand_augment
    assert trivial_augment is sluice_auto_aug.trivial_augment and augmentations is sluice_auto_aug.augmentations
    assert Policy is nvidia.dali.auto_aug.core.policy.Policy is core.Policy
    assert (augmentation, select, signed_bin) == (core.augmentation, core.select, core.signed_bin)
    assert auto_augment.__spec__.name == "sluice.auto_aug.auto_augment"  # its own identity kept


def test_missing_submodule_is_a_clear_import_error(isolated_imports):
    sluice.compat.install()
    with pytest.raises(ModuleNotFoundError, match="nvidia.dali.plugin.tf is not provided by sluice"):
        import nvidia.dali.plugin.tf  # noqa: F401


def test_uninstall_removes_the_modules(isolated_imports, tmp_path):
    sys.path.insert(0, str(tmp_path))  # an empty directory: no real nvidia package anywhere new
    sluice.compat.install()
    import nvidia.dali

    sluice.compat.uninstall()
    assert not any(k == "nvidia.dali" or k.startswith("nvidia.dali.") for k in sys.modules)
    assert installed_finder() is None
    if not sluice.compat.real_dali_available():
        with pytest.raises(ModuleNotFoundError):
            import nvidia.dali  # noqa: F401
    assert compat_dali.fn.readers.file is not None  # sluice's own names still work


def _package(root, dotted, source=""):
    d = root
    for part in dotted.split("."):
        d = d / part
        d.mkdir(exist_ok=True)
    (d / "__init__.py").write_text(source)


def test_other_nvidia_packages_are_not_shadowed(isolated_imports, tmp_path):
    _package(tmp_path, "nvidia.fakecodec", "NAME = 'fake codec'\n")
    (tmp_path / "nvidia" / "fakecodec" / "__init__.py").touch()
    sys.path.insert(0, str(tmp_path))
    for k in [k for k in sys.modules if k == "nvidia" or k.startswith("nvidia.")]:
        del sys.modules[k]
    importlib.invalidate_caches()
    assert sluice.compat.install() is True
    import nvidia.dali
    import nvidia.fakecodec

    assert nvidia.fakecodec.NAME == "fake codec"
    assert nvidia.dali is compat_dali
    assert str(tmp_path / "nvidia") in list(sys.modules["nvidia"].__path__)


def test_a_real_dali_wins(isolated_imports, tmp_path):
    _package(tmp_path, "nvidia.dali", "REAL = True\n")
    sys.path.insert(0, str(tmp_path))
    for k in [k for k in sys.modules if k == "nvidia" or k.startswith("nvidia.")]:
        del sys.modules[k]
    importlib.invalidate_caches()
    assert sluice.compat.real_dali_available()
    assert sluice.compat.install() is False
    import nvidia.dali

    assert nvidia.dali.REAL is True


def test_a_real_dali_installed_later_still_wins(isolated_imports, tmp_path):
    sys.path.insert(0, str(tmp_path))
    for k in [k for k in sys.modules if k == "nvidia" or k.startswith("nvidia.")]:
        del sys.modules[k]
    assert sluice.compat.install() is True
    _package(tmp_path, "nvidia.dali", "REAL = True\n")
    importlib.invalidate_caches()
    import nvidia.dali

    assert getattr(nvidia.dali, "REAL", False) is True
