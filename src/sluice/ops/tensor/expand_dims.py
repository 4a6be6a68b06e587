"""``fn.expand_dims`` and ``fn.squeeze``: add or remove dimensions of extent 1, as DALI's operators of those names.

Both only change the shape (and the layout): the output is a view of the input's memory, a dense or packed batch
staying one, on the CPU and the GPU alike.
"""

from __future__ import annotations

from typing import Any

from sluice.ops.tensor._views import viewed
from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["EXPAND_DIMS", "SQUEEZE", "expanded_shape", "squeezed_axes"]


# ------------------------------------------------------------------------------------------------------------
EXPAND_DIMS = OpSchema(
    "expand_dims",
    doc="""Inserts dimensions of extent 1 at the positions ``axes`` of the output shape.

    ``axes`` index the output (``axes=[0, 2]`` turns a (H, W) sample into (1, H, 1, W)). With ``new_axis_names``
    the new dimensions get those layout letters and the input's layout is kept around them; without it the output
    has no layout, as in DALI. No data is copied. Example::

        chw = fn.expand_dims(gray_hw, axes=[0], new_axis_names="C")
    """,
    devices=("cpu", "gpu"),
    input_names=["data"],
    args=[
        Arg("axes", "int_list", REQUIRED, "Positions (in the output) of the new dimensions; non-negative."),
        Arg("new_axis_names", str, "", "Layout letters of the new dimensions, one per axis; default: the output "
            "has no layout."),
    ],
    output_layout=lambda a, layouts: _expanded_layout(a, layouts[0] if layouts else "", None),
)


def _sorted_axes(args: dict[str, Any]) -> list[tuple[int, str]]:
    axes = list(args["axes"])
    names = args["new_axis_names"] or ""
    if any(a < 0 for a in axes):
        raise ValueError(f"expand_dims: axes must be non-negative (positions in the output), got {axes}")
    if names and len(names) != len(axes):
        raise ValueError(f"expand_dims: {len(axes)} axes but {len(names)} new_axis_names ({names!r})")
    if len(set(axes)) != len(axes):
        raise ValueError(f"expand_dims: axes {axes} repeat an axis")
    return sorted(zip(axes, names or [""] * len(axes)))


def _expanded_layout(args: dict[str, Any], layout: str, ndim: int | None) -> str:
    """The output layout: the input's with the new names inserted, when ``new_axis_names`` is given and the input
    has a layout (or is a scalar); else none."""
    pairs = _sorted_axes(args)
    if not args["new_axis_names"] or (not layout and ndim != 0):
        return ""
    out = list(layout)
    for axis, name in pairs:
        out.insert(min(axis, len(out)), name)
    return "".join(out)


def expanded_shape(shape: tuple[int, ...], axes: list[int]) -> tuple[int, ...]:
    """``shape`` with extent-1 dimensions at the output positions ``axes`` (sorted, distinct)."""
    out_ndim = len(shape) + len(axes)
    if axes and max(axes) >= out_ndim:
        raise ValueError(f"expand_dims: axis {max(axes)} is out of range for a {len(shape)}-D sample with "
                         f"{len(axes)} new axes (the output has {out_ndim} dimensions)")
    it = iter(shape)
    new = set(axes)
    return tuple(1 if i in new else next(it) for i in range(out_ndim))


@EXPAND_DIMS.batch_kernel("cpu")
@EXPAND_DIMS.batch_kernel("gpu")
def expand_dims(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    a = {"axes": args.const("axes"), "new_axis_names": args.const("new_axis_names")}
    axes = [axis for axis, _ in _sorted_axes(a)]
    shapes = data.shape()
    layout = ctx.layout_of(data)
    ndim = len(shapes[0]) if shapes else None
    if a["new_axis_names"] and not layout and ndim:
        raise ValueError("expand_dims: new_axis_names needs an input with a layout; the input has none")
    if layout and ndim is not None and len(layout) != ndim:
        raise ValueError(f"expand_dims: the input layout {layout!r} does not match its {ndim}-D samples")
    return viewed(data, [expanded_shape(s, axes) for s in shapes], _expanded_layout(a, layout, ndim))


# ------------------------------------------------------------------------------------------------------------
SQUEEZE = OpSchema(
    "squeeze",
    doc="""Removes the dimensions ``axes`` (or the layout letters ``axis_names``), which must have extent 1 (or
    leave a sample of 0 elements with 0 elements).

    The layout loses the removed letters. No data is copied. Example::

        hw = fn.squeeze(hw1, axis_names="C")
    """,
    devices=("cpu", "gpu"),
    input_names=["data"],
    args=[
        Arg("axes", "int_list", None, "Dimensions to remove (negative counts from the back).", per_sample=True),
        Arg("axis_names", str, None, "Layout letters of the dimensions to remove (instead of axes)."),
    ],
    output_layout=lambda a, layouts: _squeezed_layout(a, layouts[0] if layouts else ""),
)


def _squeezed_layout(args: dict[str, Any], layout: str) -> str:
    names = args.get("axis_names")
    if not layout or not names:
        return ""  # with axes, the kernel knows the dimensions and sets the layout itself
    return "".join(c for c in layout if c not in names)


def squeezed_axes(ndim: int, layout: str, axes: list[int] | None, axis_names: str | None) -> list[int]:
    """The dimensions ``squeeze`` removes from an ``ndim``-D sample (sorted, distinct, non-negative)."""
    if (axes is None) == (axis_names is None):
        raise ValueError("squeeze: give either axes or axis_names" + (" (not both)" if axes is not None else ""))
    if axis_names is not None:
        if not layout:
            raise ValueError(f"squeeze: axis_names={axis_names!r} needs an input with a layout; the input has none")
        missing = [c for c in axis_names if c not in layout]
        if missing:
            raise ValueError(f"squeeze: axis names {missing} are not in the input layout {layout!r}")
        out = [layout.index(c) for c in axis_names]
    else:
        out = []
        for a in axes:
            if not -ndim <= a < ndim:
                raise ValueError(f"squeeze: axis {a} is out of range for a {ndim}-D sample (valid: {-ndim}.."
                                 f"{ndim - 1})")
            out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"squeeze: the axes {axes if axis_names is None else axis_names!r} name a dimension twice")
    return sorted(out)


@SQUEEZE.batch_kernel("cpu")
@SQUEEZE.batch_kernel("gpu")
def squeeze(ctx: BatchContext, data: Batch, *, args: BatchArgs) -> Batch:
    layout = ctx.layout_of(data)
    names = args.const("axis_names")
    shapes = data.shape()
    out, kept = [], None
    for i, (shape, axes) in enumerate(zip(shapes, args["axes"])):
        drop = squeezed_axes(len(shape), layout, axes, names)
        new = tuple(d for k, d in enumerate(shape) if k not in drop)
        volume = 1
        for d in shape:
            volume *= d
        if any(shape[k] != 1 for k in drop) and not (volume == 0 and 0 in new):
            raise ValueError(f"squeeze: sample {i} of shape {shape} has dimensions {drop} not all of extent 1; "
                             "only extent-1 dimensions can be removed")
        if kept is not None and drop != kept:
            raise ValueError(f"squeeze: sample {i} removes dimensions {drop}, sample 0 removes {kept}; every sample "
                             "of a batch must remove the same dimensions")
        kept = drop
        out.append(new)
    new_layout = "".join(c for k, c in enumerate(layout) if k not in (kept or [])) if layout else ""
    return viewed(data, out, new_layout)
