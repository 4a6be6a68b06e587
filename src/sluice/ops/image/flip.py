"""``fn.flip``: mirror images horizontally and/or vertically (and volumes depthwise), per sample.

On the GPU a batch of equal shapes is flipped with one gather per group of samples sharing the same flags (at most
eight whatever the batch size); a ragged batch (the mixed decoders' packed output) with one gather over its buffer
(:func:`flip_packed`), whose index a fixed number of launches makes, whatever the batch size; volumes flipped
depthwise, and samples whose elements after W differ in count, sample by sample.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.ops.image._geometry import flip_dims, flip_image, spatial_dims
from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch
from sluice.pipeline.ragged import host_to_device
from sluice.schema import Arg, OpSchema

__all__ = ["SCHEMA", "flip_packed"]

SCHEMA = OpSchema(
    "flip",
    sequences="axis",
    doc="""Flip images along the width (``horizontal``) and/or the height (``vertical``), volumes (layouts with
    ``D``) also along the depth (``depthwise``).

    Example::

        images = fn.flip(images, horizontal=fn.random.coin_flip(), vertical=0)
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("horizontal", int, 1, "Flip along the width (0 or 1).", per_sample=True),
        Arg("vertical", int, 0, "Flip along the height (0 or 1).", per_sample=True),
        Arg("depthwise", int, 0, "Flip along the depth (D) of volumes (0 or 1; images have none).", per_sample=True),
    ],
)


def _layout(layout: str, x: torch.Tensor) -> str:
    return layout or ("HWC" if x.dim() == 3 else "HW")


@SCHEMA.sample_kernel("cpu")
def flip_cpu(ctx, image: torch.Tensor, *, horizontal=1, vertical=0, depthwise=0, **_) -> torch.Tensor:
    """One sample; returns a new tensor (the input is never modified)."""
    flags = bool(horizontal), bool(vertical), bool(depthwise)
    return flip_image(image, _layout(ctx.layout, image), *flags).contiguous()


@SCHEMA.batch_kernel("gpu")
def flip_gpu(ctx, images: Batch, *, args) -> Batch:
    """Dense batches: one flip per distinct (horizontal, vertical, depthwise) flags; ragged: per sample."""
    layout = ctx.layout_of(images)
    n = len(images)
    flags = list(zip(*([bool(v) for v in args[name]] for name in ("horizontal", "vertical", "depthwise"))))
    # equal shapes held packed (a slice's patches after .gpu()) are viewed as one tensor too, without a copy
    dense = images.as_tensor() if n and images.is_dense_tensor() else None
    if dense is None:
        out = flip_packed(images, layout, flags) if n else None
        if out is not None:
            return out
        return Batch([flip_image(s, _layout(layout, s), *flags[i]).contiguous()
                      for i, s in enumerate(images.samples)], layout)
    out = torch.empty_like(dense)
    for key in set(flags):
        idx = host_to_device(np.array([i for i in range(n) if flags[i] == key], np.int64), dense.device)
        dims = [d + 1 for d in flip_dims(_layout(layout, dense[0]), dense.dim() - 1, *key)]
        part = dense.index_select(0, idx)
        out.index_copy_(0, idx, part.flip(dims) if dims else part)
    return Batch.from_dense(out, layout)


#: flip_packed's index arithmetic is int32 below this many units (values stay under 2 ** 31), else int64
_INT32_UNITS = 2 ** 30


def flip_packed(images: Batch, layout: str, flags: list[tuple[bool, bool, bool]]) -> Batch | None:
    """A ragged batch flipped with one gather over its packed buffer, into a new packed batch: each sample is
    ``outer x H x W x inner`` elements (H just before W in ``layout``; ``outer`` the dims before H, such as a
    sequence's frames or CHW's channels; ``inner`` those after W, one count for the whole batch); the buffer is
    gathered in units of ``inner`` elements at ``src = offset + local + h * (W - 1 - 2x) + v * W * (H - 1 - 2y)``.
    The per-sample table goes to the device in one asynchronous copy; no value is read back. ``flags`` holds
    ``(horizontal, vertical, depthwise)`` per sample. None where this does not apply (a depthwise flip of a volume,
    H not just before W, samples of other ranks than the layout's, or of several ``inner`` counts, or types):
    the caller flips sample by sample.

    Example::

        out = flip_packed(Batch.from_packed(flat, shapes, "HWC"), "HWC", [(True, False, False)] * len(shapes))
    """
    shapes = images.shapes_array()
    n = len(shapes)
    layout = layout or {3: "HWC", 2: "HW"}.get(shapes.shape[1] if shapes.ndim == 2 else -1, "")
    if not layout or shapes.ndim != 2 or shapes.shape[1] != len(layout):
        return None
    if "D" in layout and any(f[2] for f in flags):
        return None
    hd, wd, _ = spatial_dims(layout, len(layout))
    if wd != hd + 1:
        return None
    inner = np.prod(shapes[:, wd + 1:], axis=1, dtype=np.int64) if wd + 1 < shapes.shape[1] else np.ones(n, np.int64)
    if n == 0 or (inner != inner[0]).any() or inner[0] == 0:
        return None
    if images.storage == "samples" and any(s.dtype != images.samples[0].dtype for s in images.samples):
        return None
    flat, shapes, offsets = images.packed_form()
    k = int(inner[0])
    h, w = shapes[:, hd], shapes[:, wd]
    units = np.prod(shapes[:, :wd + 1], axis=1, dtype=np.int64)          # outer * H * W
    total = int(units.sum())
    out = flat.new_empty(total * k)
    if total == 0:
        return Batch.from_packed(out, shapes, layout, images.source_info)
    if offsets is not None and (offsets % k).any():
        return None
    starts = np.concatenate([[0], np.cumsum(units)[:-1]]).astype(np.int64)
    f = np.asarray(flags, dtype=np.int64).reshape(n, 3)
    # per sample: units, then what each unit needs: W, H * W, horizontal, vertical, its sample's first unit in
    # the output, and the source offset minus that (in units)
    # int32 index arithmetic where every value fits (|values| < 2 * units), half the memory traffic of int64
    small = max(total, flat.numel() // k) < _INT32_UNITS
    idx = np.int32 if small else np.int64
    table = np.stack([units, w, h * w, f[:, 0], f[:, 1], starts, offsets // k - starts], 1).astype(idx)
    t = ragged.host_to_device(table, flat.device)
    seg = torch.repeat_interleave(torch.arange(n, dtype=t.dtype, device=flat.device), t[:, 0], output_size=total)
    dst = torch.arange(total, dtype=t.dtype, device=flat.device)
    row = t[:, 1:].index_select(0, seg)                  # (total, 6): every unit's sample's values, one gather
    ww, hw_, hf, vf, start, shift = row.unbind(1)
    local = dst - start
    x = local % ww
    y = (local % hw_) // ww
    src = dst + shift + hf * (ww - 1 - 2 * x) + vf * (hw_ - ww - 2 * y * ww)
    units_view = flat.view(-1, k) if flat.numel() % k == 0 else flat[: flat.numel() // k * k].view(-1, k)
    torch.index_select(units_view, 0, src, out=out.view(total, k))
    return Batch.from_packed(out, shapes, layout, images.source_info)
