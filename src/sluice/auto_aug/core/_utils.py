"""Helpers of the three automatic augmentations: the translation augmentations for a ``shape`` or a fixed range,
the selection that explains a missing ``shape``, and the check that the pipeline can branch per sample."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.auto_aug import augmentations as a
from sluice.auto_aug.core._args import MissingArgException
from sluice.auto_aug.core._augmentation import Augmentation
from sluice.auto_aug.core._select import select
from sluice.pipeline.conditionals import condition_stack
from sluice.pipeline.graph import DataNode
from sluice.pipeline.pipeline import Pipeline

__all__ = ["warp_kwargs", "max_translate_hw", "parse_validate_offset", "get_translations", "pretty_select",
           "require_conditionals"]


def warp_kwargs(shape: Any, fill_value: Any, interp_type: Any) -> dict[str, Any]:
    """The keyword arguments the automatic augmentations pass to the suite's augmentations: ``fill_value`` and
    ``interp_type`` for the warps, and ``shape`` (for the relative translations) when given."""
    kwargs = {"fill_value": fill_value, "interp_type": interp_type}
    if shape is not None:
        kwargs["shape"] = shape
    return kwargs


def max_translate_hw(max_translate: Any) -> tuple[Any, Any]:
    """``(height, width)`` limits of a translation: a pair, or one value for both."""
    if isinstance(max_translate, (tuple, list)):
        if len(max_translate) != 2:
            raise ValueError(f"A translation limit is one value or a (height, width) pair, got {max_translate!r}.")
        return max_translate[0], max_translate[1]
    return max_translate, max_translate


def parse_validate_offset(use_shape: bool, max_translate_abs: Any = None, max_translate_rel: Any = None,
                          default_translate_abs: float = 250, default_translate_rel: float = 1.0) -> tuple[Any, Any]:
    """The ``(height, width)`` translation limits: relative to the image shape with ``use_shape`` (from
    ``max_translate_rel``), else in pixels (``max_translate_abs``); giving the other kind is an error."""
    if not isinstance(use_shape, bool):
        raise TypeError(f"use_shape is a flag (True or False), got {use_shape!r}.")
    if use_shape:
        if max_translate_abs is not None:
            raise ValueError("max_translate_abs cannot be used with image shapes (shape is given); use "
                             "max_translate_rel instead.")
        return max_translate_hw(default_translate_rel if max_translate_rel is None else max_translate_rel)
    if max_translate_rel is not None:
        raise ValueError("max_translate_rel needs image shapes (give shape); use max_translate_abs instead.")
    return max_translate_hw(default_translate_abs if max_translate_abs is None else max_translate_abs)


def get_translations(use_shape: bool, default_translate_abs: float, default_translate_rel: float,
                     max_translate_abs: Any = None, max_translate_rel: Any = None) -> list[Augmentation]:
    """``[translate_x, translate_y]`` with magnitudes up to the limits: relative ones (``shape`` needed) or, without
    ``use_shape``, ones in pixels."""
    height, width = parse_validate_offset(use_shape, max_translate_abs, max_translate_rel, default_translate_abs,
                                          default_translate_rel)
    x, y = (a.translate_x, a.translate_y) if use_shape else (a.translate_x_no_shape, a.translate_y_no_shape)
    return [x.augmentation((0, width), True), y.augmentation((0, height), True)]


def pretty_select(augmentations: Sequence[Augmentation], aug_ids: DataNode, op_kwargs: dict[str, Any],
                  auto_aug_name: str, ref_suite_name: str) -> DataNode:
    """:func:`select`, explaining what to do when a relative translation misses ``shape``."""
    try:
        return select(augmentations, aug_ids, **op_kwargs)
    except MissingArgException as e:
        if e.missing_args != ["shape"] or e.augmentation.op not in (a.translate_x.op, a.translate_y.op):
            raise
        raise ValueError(f"The augmentation `{e.augmentation.name}` needs the `shape` argument: the height and "
                         f"width of the images (HWC), given to `{auto_aug_name}`. fn.peek_image_shape gives it for "
                         f"encoded images. Or use translate_x_no_shape / translate_y_no_shape, whose offsets come "
                         f"from a fixed range (see `{ref_suite_name}` and its use_shape argument).") from e


def require_conditionals(call_name: str) -> None:
    """Raise unless a pipeline with ``enable_conditionals=True`` is being defined: the augmentations are chosen per
    sample by ``if`` statements on DataNodes."""
    if condition_stack() is None:
        where = "outside a pipeline definition" if Pipeline.current() is None else \
            "in a pipeline defined without enable_conditionals=True"
        raise RuntimeError(f"{call_name} chooses an augmentation per sample with `if` statements on DataNodes, so it "
                           f"runs only in a pipeline defined with @pipeline_def(enable_conditionals=True); it was "
                           f"called {where}.")
